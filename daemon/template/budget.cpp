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

void* operator new(std::size_t n) {
  if (RenderBudget* b = tokfeed::tmpl::tl_budget) {
    // Checked before the memory is taken: a render asking for 4 GB fails
    // here, with nothing allocated.
    if (b->live + static_cast<int64_t>(n) > static_cast<int64_t>(b->max_bytes)) throw tokfeed::tmpl::BudgetExceeded();
    if (b->steps && (*b->steps += n >> 12) > b->max_steps) {
      b->over_steps = true;
      throw tokfeed::tmpl::BudgetExceeded();
    }
  }
  void* p = std::malloc(n ? n : 1);
  if (!p) throw std::bad_alloc();
  if (RenderBudget* b = tokfeed::tmpl::tl_budget) {
    b->live += static_cast<int64_t>(malloc_usable_size(p));
    if (b->live > static_cast<int64_t>(b->peak)) b->peak = static_cast<uint64_t>(b->live);
  }
  return p;
}

void operator delete(void* p) noexcept {
  if (!p) return;
  if (RenderBudget* b = tokfeed::tmpl::tl_budget) b->live -= static_cast<int64_t>(malloc_usable_size(p));
  std::free(p);
}

void operator delete(void* p, std::size_t) noexcept { operator delete(p); }

#endif
