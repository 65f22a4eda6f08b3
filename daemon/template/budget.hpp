// What one render may spend: memory (every allocation its thread makes while
// it runs, checked before the allocation is made) and steps, weighted by the
// bytes they allocate, so a render is bounded in space and time whatever the
// template and the record do. Template::render installs a budget for its
// duration; a render that passes it fails with a tmpl::Error naming the
// limit, never std::bad_alloc or the node's OOM killer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>

// A thread-local read on every allocation or every value freed: in the
// initial-exec model (the engine is linked into executables, never into a
// module loaded later) it is an offset from %fs, not a call of
// __tls_get_addr, which also spares operator new and delete saving
// registers on their fast paths.
#define TOKFEED_TLS thread_local __attribute__((tls_model("initial-exec")))

namespace tokfeed::tmpl {

// Thrown by the allocator when a render passes its memory budget (a
// std::bad_alloc, as an allocation failure must be); Template::render turns
// it into a tmpl::Error.
class BudgetExceeded : public std::bad_alloc {
 public:
  const char* what() const noexcept override { return "the render passed its memory budget"; }
};

struct RenderBudget {
  int64_t live = 0;           // bytes allocated minus bytes freed by the render's thread
  uint64_t max_bytes = 0;     // live may not pass this
  uint64_t* steps = nullptr;  // the render's step counter: every 4 KiB allocated is one step
  uint64_t max_steps = 0;
  uint64_t peak = 0;
  bool over_steps = false;  // which limit tripped
};

// The budget of the render running on this thread (nullptr: none).
RenderBudget* current_budget() noexcept;

// Installs `b` for this thread while in scope (renders nest: a macro's
// capture is the same render, a render inside a render keeps the outer one).
class BudgetScope {
 public:
  explicit BudgetScope(RenderBudget* b) noexcept;
  ~BudgetScope();
  BudgetScope(const BudgetScope&) = delete;
  BudgetScope& operator=(const BudgetScope&) = delete;

 private:
  RenderBudget* prev_;
};

// Lifts the budget of the render running on this thread while in scope:
// what is made once for the process, and never freed, is no render's (its
// steps would depend on which render came first).
class OutsideBudget {
 public:
  OutsideBudget() noexcept;
  ~OutsideBudget();
  OutsideBudget(const OutsideBudget&) = delete;
  OutsideBudget& operator=(const OutsideBudget&) = delete;

 private:
  RenderBudget* saved_;
};

// While in scope, what the render running on this thread allocates costs
// no steps (its bytes still count): the tracker's records for the prefix
// renders (template/resume.hpp), which a render without them, or one
// resumed from them, does not make, so that both take the same steps.
class StepsUncounted {
 public:
  StepsUncounted() noexcept;
  ~StepsUncounted();
  StepsUncounted(const StepsUncounted&) = delete;
  StepsUncounted& operator=(const StepsUncounted&) = delete;

 private:
  uint64_t* saved_;
};

// While in scope on this thread (scopes nest), small blocks are reused as
// inside a render, budget or none: the work around a record's renders (its
// label rule, the resume points, the prefixes' texts) allocates and frees
// as the renders do, and shares their blocks (budget.cpp).
class ReuseScope {
 public:
  ReuseScope() noexcept;
  ~ReuseScope();
  ReuseScope(const ReuseScope&) = delete;
  ReuseScope& operator=(const ReuseScope&) = delete;
};

// Whether allocations are counted in this build (sanitizer builds keep
// their own allocator and count nothing).
bool budget_counts_allocations() noexcept;

}  // namespace tokfeed::tmpl
