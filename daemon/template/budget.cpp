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
TOKFEED_TLS RenderBudget* tl_budget = nullptr;
TOKFEED_TLS int tl_reuse = 0;  // ReuseScopes open on this thread
}  // namespace

ReuseScope::ReuseScope() noexcept { ++tl_reuse; }
ReuseScope::~ReuseScope() { --tl_reuse; }

RenderBudget* current_budget() noexcept { return tl_budget; }

BudgetScope::BudgetScope(RenderBudget* b) noexcept : prev_(tl_budget) {
  if (!prev_) tl_budget = b;
}

BudgetScope::~BudgetScope() {
  if (!prev_) tl_budget = nullptr;
}

OutsideBudget::OutsideBudget() noexcept : saved_(tl_budget) { tl_budget = nullptr; }

OutsideBudget::~OutsideBudget() { tl_budget = saved_; }

StepsUncounted::StepsUncounted() noexcept : saved_(tl_budget ? tl_budget->steps : nullptr) {
  if (tl_budget) tl_budget->steps = nullptr;
}

StepsUncounted::~StepsUncounted() {
  if (tl_budget) tl_budget->steps = saved_;
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
// allocated, by the same usable size, so its counts are those without the
// cache. Only used while a budget is
// installed or a ReuseScope open; a thread's blocks are freed when it exits.
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
TOKFEED_TLS Cache tl_cache;  // zero-initialized: no guard on the hot path

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

namespace {

[[gnu::noinline]] void* plain_malloc(std::size_t n) {
  void* p = std::malloc(n ? n : 1);
  if (!p) throw std::bad_alloc();
  return p;
}

void count(RenderBudget* b, std::size_t u) noexcept {
  b->live += static_cast<int64_t>(u);
  if (b->live > static_cast<int64_t>(b->peak)) b->peak = static_cast<uint64_t>(b->live);
}

// operator new past its fast path: no kept block of the class, or one
// that would pass the budget, or a big block.
[[gnu::noinline]] void* allocate(std::size_t n, RenderBudget* b) {
  if (b) {
    // Checked before the memory is taken: a render asking for 4 GB fails
    // here, with nothing allocated.
    if (b->live + static_cast<int64_t>(n) > static_cast<int64_t>(b->max_bytes)) throw tokfeed::tmpl::BudgetExceeded();
    if (b->steps && (*b->steps += n >> 12) > b->max_steps) {
      b->over_steps = true;
      throw tokfeed::tmpl::BudgetExceeded();
    }
  }
  const std::size_t c = class_of_request(n);
  void* p = nullptr;
  std::size_t u;
  if (c < kClasses && (p = tl_cache.head[c])) {
    tl_cache.head[c] = *static_cast<void**>(p);
    u = usable_of(c);
    tl_cache.bytes -= u;
  } else {
    p = plain_malloc(n);
    if (!b) return p;
    u = c < kClasses ? usable_of(c) : malloc_usable_size(p);
  }
  if (b) count(b, u);
  return p;
}

// operator delete past its fast path: a block counted or kept by its
// usable size `u`.
[[gnu::noinline]] void release(void* p, std::size_t u, RenderBudget* b) noexcept {
  if (b) b->live -= static_cast<int64_t>(u);
  if (!keep(p, u)) std::free(p);
}

}  // namespace

// A small block is counted as its class's usable size (what glibc gives a
// request of that size), when taken and when freed by the size C++ gives
// operator delete, so the counts agree without asking malloc. The fast
// paths call nothing but in their tail.
void* operator new(std::size_t n) {
  RenderBudget* b = tokfeed::tmpl::tl_budget;
  if (!b && !tokfeed::tmpl::tl_reuse) return plain_malloc(n);
  // A kept block of the class, within the budget (a block under 4 KiB
  // costs no step).
  const std::size_t c = class_of_request(n);
  if (c < kClasses) {
    void* p = tl_cache.head[c];
    const std::size_t u = usable_of(c);
    if (p && (!b || b->live + static_cast<int64_t>(n) <= static_cast<int64_t>(b->max_bytes))) {
      tl_cache.head[c] = *static_cast<void**>(p);
      tl_cache.bytes -= u;
      if (b) count(b, u);
      return p;
    }
  }
  return allocate(n, b);
}

void operator delete(void* p) noexcept {
  if (!p) return;
  RenderBudget* b = tokfeed::tmpl::tl_budget;
  if (!b && !tokfeed::tmpl::tl_reuse) return std::free(p);
  return release(p, malloc_usable_size(p), b);
}

void operator delete(void* p, std::size_t n) noexcept {
  if (!p) return;
  RenderBudget* b = tokfeed::tmpl::tl_budget;
  if (!b && !tokfeed::tmpl::tl_reuse) return std::free(p);
  const std::size_t c = class_of_request(n);
  if (c >= kClasses) return release(p, malloc_usable_size(p), b);
  const std::size_t u = usable_of(c);
  if (!tl_cache.armed || tl_cache.bytes + u > kCacheBytes) return release(p, u, b);
  if (b) b->live -= static_cast<int64_t>(u);
  *static_cast<void**>(p) = tl_cache.head[c];
  tl_cache.head[c] = p;
  tl_cache.bytes += u;
}

#endif
