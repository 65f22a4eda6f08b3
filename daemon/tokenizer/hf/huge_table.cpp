#include "tokenizer/hf/huge_table.hpp"

#include <sys/mman.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <new>

namespace tokfeed::text::hf {

namespace {

// -1: not decided yet (the environment decides at the first allocation).
std::atomic<int> g_on{-1};

// The live mapped blocks, by address, for huge_page_use().
std::mutex g_mutex;
std::map<uintptr_t, size_t>& blocks() {
  static std::map<uintptr_t, size_t> b;
  return b;
}

// Smaller blocks start on a cache line, so no slot of a power-of-two size
// up to 64 bytes straddles two.
constexpr std::align_val_t kLine{64};

size_t mapping_length(size_t bytes) { return (bytes + kHugePage - 1) / kHugePage * kHugePage; }

}  // namespace

void set_huge_pages(bool on) { g_on.store(on ? 1 : 0); }

bool huge_pages_on() {
  int on = g_on.load(std::memory_order_relaxed);
  if (on < 0) {
    const char* env = std::getenv("TOKFEED_HUGE_PAGES");
    on = env != nullptr && (std::strcmp(env, "off") == 0 || std::strcmp(env, "0") == 0) ? 0 : 1;
    int expected = -1;
    g_on.compare_exchange_strong(expected, on);
    on = g_on.load();
  }
  return on == 1;
}

void* huge_allocate(size_t bytes) {
  if (bytes < kHugeMin) return ::operator new(bytes, kLine);
  const size_t len = mapping_length(bytes);
  // Map a huge page more than needed and cut the ends off, so the block
  // starts on a 2 MiB boundary (the kernel only backs aligned 2 MiB ranges).
  void* raw = mmap(nullptr, len + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kHugePage - 1) & ~(kHugePage - 1);
  if (aligned > start) munmap(raw, aligned - start);
  if (const uintptr_t tail = start + len + kHugePage - (aligned + len); tail > 0)
    munmap(reinterpret_cast<void*>(aligned + len), tail);
  void* p = reinterpret_cast<void*>(aligned);
  // Before the first touch: faults then take whole huge pages. A failure
  // (a kernel without THP) leaves ordinary pages.
  (void)madvise(p, len, huge_pages_on() ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  std::lock_guard<std::mutex> lock(g_mutex);
  blocks()[aligned] = len;
  return p;
}

void huge_free(void* p, size_t bytes) noexcept {
  if (p == nullptr) return;
  if (bytes < kHugeMin) {
    ::operator delete(p, kLine);
    return;
  }
  const size_t len = mapping_length(bytes);
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    blocks().erase(reinterpret_cast<uintptr_t>(p));
  }
  munmap(p, len);
}

HugePageUse huge_page_use() {
  std::map<uintptr_t, size_t> live;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    live = blocks();
  }
  HugePageUse use;
  for (const auto& [at, len] : live) use.mapped += len;
  if (live.empty()) return use;
  // The kernel may join neighboring blocks into one mapping: each mapping
  // that overlaps a block counts once.
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool ours = false;
  while (std::getline(smaps, line)) {
    unsigned long lo = 0, hi = 0;
    size_t kb = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(':') > line.find(' ')) {
      auto it = live.upper_bound(uintptr_t(lo));
      ours = (it != live.end() && it->first < hi) ||
             (it != live.begin() && std::prev(it)->first + std::prev(it)->second > lo);
    } else if (ours && std::sscanf(line.c_str(), "AnonHugePages: %zu kB", &kb) == 1) {
      use.huge += kb * 1024;
    }
  }
  if (use.huge > use.mapped) use.huge = use.mapped;
  return use;
}

std::string describe_huge_page_use() {
  if (!huge_pages_on()) return "huge pages: off";
  const HugePageUse use = huge_page_use();
  const auto mib = [](size_t b) { return std::to_string((b + (size_t(1) << 19)) >> 20); };
  return "huge pages: " + mib(use.huge) + " of " + mib(use.mapped) + " MiB";
}

}  // namespace tokfeed::text::hf
