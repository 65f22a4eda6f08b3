// Memory for the tokenizer's large tables probed at random (the merge
// table, the vocabulary trie, the merge trees, the word cache's slots). On
// 4 KiB pages nearly every probe into several MiB misses the TLB as well as
// the caches; on 2 MiB pages the page walk mostly goes away.
//
// A block of at least kHugeMin bytes gets an anonymous mapping of its own,
// 2 MiB-aligned, its length rounded up to 2 MiB, and madvise(MADV_HUGEPAGE)
// before its first touch: where transparent huge pages are "always" or
// "madvise" (/sys/kernel/mm/transparent_hugepage/enabled) the kernel backs it
// with 2 MiB pages as it faults it in. Where the advice fails, the kernel has
// no 2 MiB page to give, or huge pages are turned off (TOKFEED_HUGE_PAGES=off
// in the environment, or set_huge_pages(false)), the block is ordinary
// memory. Contents are the same either way; only the speed differs. Smaller
// blocks come from operator new, aligned to a cache line.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace tokfeed::text::hf {

inline constexpr size_t kHugePage = size_t(2) << 20;
inline constexpr size_t kHugeMin = size_t(1) << 20;

// A block of `bytes`, as described above; throws std::bad_alloc if no memory.
void* huge_allocate(size_t bytes);
// Frees what huge_allocate(bytes) gave, with the same `bytes`.
void huge_free(void* p, size_t bytes) noexcept;

// Whether blocks from now on are advised (default: on, unless the environment
// says TOKFEED_HUGE_PAGES=off or =0 at the first allocation).
void set_huge_pages(bool on);
bool huge_pages_on();

// The mapped blocks alive now, and how much of them the kernel backs with
// huge pages (AnonHugePages of their mappings in /proc/self/smaps; 0 where it
// cannot be read).
struct HugePageUse {
  size_t mapped = 0;  // bytes of the blocks' mappings
  size_t huge = 0;    // of which backed by huge pages
};
HugePageUse huge_page_use();
// "huge pages: 14 of 16 MiB" or "huge pages: off" (for the load log).
std::string describe_huge_page_use();

template <class T>
struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() = default;
  template <class U>
  HugePageAllocator(const HugePageAllocator<U>&) noexcept {}
  T* allocate(size_t n) { return static_cast<T*>(huge_allocate(n * sizeof(T))); }
  void deallocate(T* p, size_t n) noexcept { huge_free(p, n * sizeof(T)); }
  template <class U>
  bool operator==(const HugePageAllocator<U>&) const noexcept {
    return true;
  }
};

// A table probed at random: a vector whose large buffers are huge-page blocks.
template <class T>
using HugeVector = std::vector<T, HugePageAllocator<T>>;

}  // namespace tokfeed::text::hf
