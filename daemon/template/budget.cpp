// The render budget's allocator hook: the global operator new/delete count
// the bytes a render's thread allocates while a budget is installed.
#include "template/budget.hpp"

#include <malloc.h>

#include <cstdlib>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TOKFEED_COUNT_ALLOCATIONS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define TOKFEED_COUNT_ALLOCATIONS 0
#endif
#endif
#ifndef TOKFEED_COUNT_ALLOCATIONS
#define TOKFEED_COUNT_ALLOCATIONS 1
#endif

namespace tokfeed::tmpl {

namespace {
thread_local RenderBudget* tl_budget = nullptr;
}

RenderBudget* current_budget() noexcept { return tl_budget; }

BudgetScope::BudgetScope(RenderBudget* b) noexcept : prev_(tl_budget) {
  if (!prev_) tl_budget = b;
}

BudgetScope::~BudgetScope() {
  if (!prev_) tl_budget = nullptr;
}

bool budget_counts_allocations() noexcept { return TOKFEED_COUNT_ALLOCATIONS; }

}  // namespace tokfeed::tmpl

#if TOKFEED_COUNT_ALLOCATIONS

using tokfeed::tmpl::RenderBudget;

namespace {

// Small blocks a render freed, kept on this thread for its next allocations
// of that size (a render allocates and frees small strings, lists and
// scopes by the thousand; malloc and free cost more than the rest of such
// an operation). A kept block is an ordinary malloc block whose usable size
// is that of its class, so whichever thread frees it later hands it to
// free(). The budget sees a kept block as freed and a reused one as
// allocated, by the same usable size malloc_usable_size gives, so its
// counts are those without the cache. Only used while a budget is
// installed; a thread's blocks are freed when it exits.
//
// Class c holds blocks of usable size 16c - 8 (glibc's chunks of 16c bytes).
constexpr std::size_t kClasses = 257;                      // chunks up to 4 KiB
constexpr std::size_t kCacheBytes = std::size_t{4} << 20;  // per thread
constexpr std::size_t usable_of(std::size_t c) { return 16 * c - 8; }
// The class whose blocks hold `n` bytes (glibc's request-to-chunk rounding).
constexpr std::size_t class_of_request(std::size_t n) { return n < 9 ? 2 : (n + 23) >> 4; }

struct Cache {
  void* head[kClasses];  // singly linked through each block's first word
  std::size_t bytes;
  bool armed;  // the thread's exit frees the blocks
};
thread_local Cache tl_cache;  // zero-initialized: no guard on the hot path

void free_cached() noexcept {
  for (void*& head : tl_cache.head)
    while (void* p = head) {
      head = *static_cast<void**>(p);
      std::free(p);
    }
  tl_cache.bytes = 0;
}

struct CacheRelease {
  bool armed = false;
  ~CacheRelease() { free_cached(); }
};
thread_local CacheRelease tl_release;

// Keeps `p` (usable size `u`, freed by a render) if it fits a class.
bool keep(void* p, std::size_t u) noexcept {
  if ((u + 8) % 16 != 0 || u > usable_of(kClasses - 1) || tl_cache.bytes + u > kCacheBytes) return false;
  if (!tl_cache.armed) {
    tl_release.armed = true;  // constructs it, so the thread's exit runs its destructor
    tl_cache.armed = true;
  }
  const std::size_t c = (u + 8) >> 4;
  *static_cast<void**>(p) = tl_cache.head[c];
  tl_cache.head[c] = p;
  tl_cache.bytes += u;
  return true;
}

}  // namespace

void* operator new(std::size_t n) {
  if (RenderBudget* b = tokfeed::tmpl::tl_budget) {
    // Checked before the memory is taken: a render asking for 4 GB fails
    // here, with nothing allocated.
    if (b->live + static_cast<int64_t>(n) > static_cast<int64_t>(b->max_bytes)) throw tokfeed::tmpl::BudgetExceeded();
    if (b->steps && (*b->steps += n >> 12) > b->max_steps) {
      b->over_steps = true;
      throw tokfeed::tmpl::BudgetExceeded();
    }
    std::size_t u;
    void* p = nullptr;
    if (const std::size_t c = class_of_request(n); c < kClasses && (p = tl_cache.head[c])) {
      tl_cache.head[c] = *static_cast<void**>(p);
      u = usable_of(c);
      tl_cache.bytes -= u;
    } else {
      p = std::malloc(n ? n : 1);
      if (!p) throw std::bad_alloc();
      u = malloc_usable_size(p);
    }
    b->live += static_cast<int64_t>(u);
    if (b->live > static_cast<int64_t>(b->peak)) b->peak = static_cast<uint64_t>(b->live);
    return p;
  }
  void* p = std::malloc(n ? n : 1);
  if (!p) throw std::bad_alloc();
  return p;
}

void operator delete(void* p) noexcept {
  if (!p) return;
  if (RenderBudget* b = tokfeed::tmpl::tl_budget) {
    const std::size_t u = malloc_usable_size(p);
    b->live -= static_cast<int64_t>(u);
    if (keep(p, u)) return;
  }
  std::free(p);
}

void operator delete(void* p, std::size_t) noexcept { operator delete(p); }

#endif
