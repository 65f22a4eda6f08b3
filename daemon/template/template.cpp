#include "template/template.hpp"

#include <algorithm>
#include <bit>
#include <cstdio>

#include "template/budget.hpp"
#include "template/interp.hpp"
#include "template/macro_memo.hpp"
#include "template/parser.hpp"
#include "template/resume.hpp"

namespace tokfeed::tmpl {

Template Template::parse(std::string_view source) {
  Template t;
  t.p_ = std::make_shared<const Parsed>(tmpl::parse(source));
  return t;
}

bool Template::has_generation() const noexcept { return p_ && p_->has_generation; }

namespace {
thread_local RecordScope* tl_record = nullptr;
}

RecordScope::RecordScope(uint64_t max_steps) noexcept : max_steps_(max_steps), active_(tl_record == nullptr) {
  if (active_) tl_record = this;
}

RecordScope::~RecordScope() {
  if (active_) tl_record = nullptr;
}

namespace {
thread_local MemoScope* tl_memo = nullptr;
// The entries the last scope on this thread left for the next one.
thread_local std::vector<MemoScope::Entry> tl_memo_kept;
// The pure macros' calls the last scope left, and the scopes' count.
thread_local std::unique_ptr<MacroMemo> tl_macros_kept;
thread_local uint64_t tl_memo_number = 0;
// The lists a scope's end works in, kept with their capacity on the thread
// from one scope to the next (one a record).
struct MemoScratch {
  std::vector<std::pair<const RefCounted*, std::size_t>> order;
  std::vector<char> held;
  std::vector<std::size_t> picked;
};
thread_local MemoScratch tl_memo_scratch;
constexpr std::size_t kMemoKept = 64;             // entries
constexpr std::size_t kMemoKeptBytes = 1u << 20;  // of their text
}  // namespace

MemoScope::MemoScope() noexcept : active_(tl_memo == nullptr) {
  if (!active_) return;
  tl_memo = this;
  entries.swap(tl_memo_kept);
  kept_ = entries.size();
  number = ++tl_memo_number;
  macros = std::move(tl_macros_kept);
  if (macros) macros->scope = number;
}

MemoScope::~MemoScope() {
  if (!active_) return;
  tl_memo = nullptr;
  tl_macros_kept = keep_macros(std::move(macros));
  // Kept, up to the limits: the entries kept before that this scope read,
  // then its own in the order written, then the others kept before (a
  // record's tools reused by records after the next). An entry whose
  // subject nothing but the memo holds any more is dropped: no value can
  // present that object again. The rest is freed here, outside any render's
  // budget.
  //
  // The memo holds a subject once per entry (per set of options): whether
  // anything else holds it is asked of one entry of those with that
  // subject while the others' references are set aside.
  const std::size_t n = entries.size();
  MemoScratch& scratch = tl_memo_scratch;
  auto& order = scratch.order;
  order.resize(n);
  for (std::size_t k = 0; k < n; ++k) order[k] = {entries[k].subject.s.raw(), k};
  std::sort(order.begin(), order.end());
  auto& held = scratch.held;
  held.assign(n, 0);
  for (std::size_t i = 0, j; i < n; i = j) {
    for (j = i + 1; j < n && order[j].first == order[i].first;) ++j;
    const Value& first = entries[order[i].second].subject;
    for (std::size_t k = i + 1; k < j; ++k) entries[order[k].second].subject = Value();
    const bool h = !first.s.raw()->unique();
    for (std::size_t k = i + 1; k < j; ++k) entries[order[k].second].subject = first;
    for (std::size_t k = i; k < j; ++k) held[order[k].second] = h;
  }
  // The entries kept are picked first, then moved to a list with the
  // capacity their push_backs one by one would leave it (the next scope
  // appends to it while rendering, where its growth is counted).
  auto& picked = scratch.picked;
  picked.clear();
  std::size_t bytes = 0;
  auto keep = [&](std::size_t k) {
    const Entry& e = entries[k];
    if (!held[k] || picked.size() >= kMemoKept || bytes + e.result.s->size() > kMemoKeptBytes) return;
    bytes += e.result.s->size();
    picked.push_back(k);
  };
  const std::size_t before = std::min(kept_, n);
  for (std::size_t k = 0; k < before; ++k)
    if (entries[k].used) keep(k);
  for (std::size_t k = kept_; k < n; ++k) keep(k);
  for (std::size_t k = 0; k < before; ++k)
    if (!entries[k].used) keep(k);
  std::vector<Entry> kept;
  if (!picked.empty()) kept.reserve(std::bit_ceil(picked.size()));
  for (std::size_t k : picked) {
    kept.push_back(std::move(entries[k]));
    kept.back().used = false;
  }
  entries.clear();
  tl_memo_kept.swap(kept);
}

MemoScope* current_memo() noexcept { return tl_memo; }

void cancel_renders() noexcept { render_cancel.store(true, std::memory_order_relaxed); }

const std::vector<std::string>& Template::warnings() const noexcept {
  static const std::vector<std::string> none;
  return p_ ? p_->warnings : none;
}

// One render: `prepare` sets the interpreter up (after the common setup,
// before the budget is installed), `run` executes the statements.
struct RenderRunner {
  // A failure is thrown, or put in `report` where given (the text then empty).
  template <typename Prepare, typename Run>
  static std::string run(const RenderLimits& limits, Spans* generation, Provenance* provenance, Prepare prepare,
                         Run run, RenderFailure* report = nullptr);
};

namespace {

// The end of a failed render: its failure thrown, or put in `report`.
std::string fail(RenderFailure* report, std::string message, bool limit) {
  if (!report) {
    if (limit) throw LimitError(message);
    throw Error(message);
  }
  report->failed = true;
  report->limit = limit;
  report->message = std::move(message);
  return {};
}

}  // namespace

template <typename Prepare, typename Run>
std::string RenderRunner::run(const RenderLimits& limits, Spans* generation, Provenance* provenance, Prepare prepare,
                              Run run, RenderFailure* report) {
  if (skeleton::tl_watch && skeleton::tl_watch->read)
    return fail(report, "a skeleton's render read a record's string", true);
  RecordScope* rec = tl_record;
  if (rec && rec->used_ >= rec->max_steps_)
    return fail(report,
                "the record's renders ran past their budget of " + std::to_string(rec->max_steps_) +
                    " steps (16 x [tokenizer] template_max_steps; a conversation this long is refused)",
                true);
  std::string out;
  out.reserve(kOutputReserve);
  Interp in;
  in.frames.reserve(16);
  in.frames.emplace_back();
  in.out = &out;
  in.root = &out;
  in.generation = generation;
  in.max_steps = limits.max_steps;
  bool record_bound = rec && rec->max_steps_ - rec->used_ < in.max_steps;
  if (record_bound) in.max_steps = rec->max_steps_ - rec->used_;
  in.max_output = limits.max_output;
  in.now = limits.now;
  if (generation) generation->clear();
  in.provenance = provenance;
  if (provenance) {
    provenance->pieces.clear();
    provenance->seen.assign(provenance->messages.size(), 0);
    // Built again only where `messages` changed since (the label rule's
    // renders of one record share them).
    auto& sorted = provenance->sorted;
    const auto& messages = provenance->messages;
    bool current = sorted.size() == messages.size();
    for (std::size_t i = 0; current && i < sorted.size(); ++i) current = messages[sorted[i].second] == sorted[i].first;
    if (!current) {
      sorted.clear();
      for (std::size_t k = 0; k < messages.size(); ++k) sorted.emplace_back(messages[k], static_cast<uint32_t>(k));
      std::sort(sorted.begin(), sorted.end());
      provenance->distinct = std::adjacent_find(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
                               return a.first && a.first == b.first;
                             }) == sorted.end();
    }
  }
  prepare(in);
  RenderBudget budget;
  budget.max_bytes = limits.max_bytes;
  budget.steps = &in.steps;
  budget.max_steps = in.max_steps;
  std::string failure;
  bool failed = false, limit = false;  // a failure's message may be empty: raise_exception('')
  {
    BudgetScope scope(&budget);
    // What fails the render is reported with the budget lifted: the message
    // itself must not fail.
    auto relax = [&budget] {
      budget.max_bytes = uint64_t{1} << 62;
      budget.steps = nullptr;
    };
    try {
      if (in.steps > in.max_steps) throw Error(in.step_error());
      run(in);
    } catch (const Error& e) {
      relax();
      failure = e.what();
      failed = true;
      limit = in.steps > in.max_steps || render_cancel.load(std::memory_order_relaxed);
    } catch (const BudgetExceeded&) {
      relax();
      failed = true;
      limit = true;
      failure = budget.over_steps ? ""
                                  : "the render needed more than " + std::to_string(limits.max_bytes) +
                                        " bytes of memory (the per-render budget)";
    } catch (const std::bad_alloc&) {
      relax();
      failed = true;
      limit = true;
      failure = "the render ran out of memory ([workers] max_memory)";
    } catch (const std::exception& e) {
      relax();
      failed = true;
      failure = std::string("the template failed: ") + e.what();
    }
    if (budget.over_steps) limit = failed = true;
    if (failure.empty() && budget.over_steps) failure = in.step_error();
    if (failed && failure.empty()) failure = "the template raised an error with an empty message";
    // Namespaces are the only values a template mutates, so every reference
    // cycle passes through one: emptying them frees whatever a render built
    // (a namespace that holds itself included). None outlives the render.
    in.release_namespaces();
  }
  if (skeleton::Watch* w = skeleton::tl_watch) {
    // A skeleton's renders stand for the record's, which are charged when
    // they run (their steps then differ by the strings' sizes).
    w->steps += in.steps;
    w->peak = std::max(w->peak, budget.peak);
    w->longest = std::max(w->longest, out.size());
  } else if (rec) {
    rec->used_ += in.steps;
  }
  if (failed) {
    if (record_bound && in.steps >= in.max_steps) {
      failure = "the record's renders ran past their budget of " + std::to_string(rec->max_steps_) +
                " steps (16 x [tokenizer] template_max_steps; a conversation this long is refused)";
      limit = true;
    }
    failure += " (at template " + where(in.pos) + ")";
    return fail(report, std::move(failure), limit);
  }
  return out;
}

namespace {

std::size_t var_index(const Vars& vars, Name name) {
  for (std::size_t i = vars.size(); i-- > 0;)
    if (vars[i].first == name) return i;
  return vars.size();
}

}  // namespace

std::string Template::render(const Vars& vars, const RenderLimits& limits, Spans* generation, Provenance* provenance,
                             Resumes* resumes, RenderFailure* failed) const {
  Tracker tracker;
  std::shared_ptr<ResumeState> state;
  if (resumes) resumes->state.reset();
  if (resumes && !p_->escapes) {
    static const Name kMessages("messages"), kPrompt("add_generation_prompt");
    const std::size_t m = var_index(vars, kMessages), g = var_index(vars, kPrompt);
    const bool any = std::any_of(resumes->want.begin(), resumes->want.end(), [](uint8_t w) { return w != 0; });
    if (any && m < vars.size() && g < vars.size() && vars[m].second.is_seq() &&
        vars[m].second.list->items.size() + 1 == resumes->want.size()) {
      state = std::make_shared<ResumeState>();
      state->messages_var = m;
      state->prompt_var = g;
      state->lists.emplace_back(vars[m].second, 0);
      tracker.n = resumes->want.size() - 1;
      tracker.want = resumes->want;
      tracker.clean.assign(resumes->want.size(), 15);
      state->points.resize(resumes->want.size());
      state->ready.assign(resumes->want.size(), 0);
      tracker.top = tracker.pre = &p_->body;
      tracker.vars = &vars;
      tracker.state = state.get();
    }
  }
  std::string out = RenderRunner::run(
      limits, generation, provenance,
      [&](Interp& in) {
        assign_scope(in.frames[0].vars, vars);
        if (state) {
          in.track = &tracker;
          tracker.steps = &in.steps;
          tracker.in = &in;
        }
      },
      [&](Interp& in) {
        if (!state) {
          exec(in, p_->body);
          return;
        }
        // Before the first main loop, each top-level set on its own, where
        // the tracker notes its start (resume.hpp, Start); the statements
        // between them, and all from the first main loop on, together.
        const Body& body = p_->body;
        auto set = [&](std::size_t at) { return body[at]->kind == SK::kSet && body[at]->text.empty(); };
        for (std::size_t at = 0, to = 0; at < body.size(); at = to) {
          if (!tracker.pre) {
            exec(in, body, at);
            break;
          }
          to = at + 1;
          if (set(at)) {
            tracker.top_statement(at);
          } else {
            while (to < body.size() && !set(to)) ++to;
            tracker.top_at = SIZE_MAX;
          }
          if (exec(in, body, at, to) != Flow::kNormal) break;
        }
      },
      failed);
  if (failed && failed->failed) return out;
  if (state) {
    state->full = out;
    state->provenance = provenance != nullptr;
    if (provenance) state->full_pieces = provenance->pieces;
    if (generation) state->full_generation = *generation;
    resumes->state = std::move(state);
  }
  return out;
}

std::optional<std::string> Template::resume(const Resumes& resumes, std::size_t k, bool g, const RenderLimits& limits,
                                            Spans* generation, Provenance* provenance) const {
  const ResumeState& st = *resumes.state;
  resumes.same = 0;
  if (!(st.ready[k] & (g ? 2 : 1)) && k < st.probed.size() && st.probed[k].ok && (st.ready[k] & (g ? 8 : 4))) {
    // The render with the other prompt ran up to the loop, as this one would;
    // where the budget ends before the point, the render in full says where.
    const RecordScope* rec = tl_record;
    uint64_t max = limits.max_steps;
    if (rec) max = std::min(max, rec->used_ < rec->max_steps_ ? rec->max_steps_ - rec->used_ : 0);
    if (probed_steps(st, k) >= max) return {};
    ++resumes.resumed;
    std::string out = RenderRunner::run(
        limits, generation, provenance, [&](Interp& in) { restore_probed(st, k, g, in); },
        [&](Interp& in) { run_after_loop(in, st, *st.probed[k].point, k); });
    resumes.same = st.probed[k].point->output;
    return out;  // moved into the optional
  }
  if (!(st.ready[k] & (g ? 2 : 1))) {
    // The render of messages[:k] runs up to the first main loop itself,
    // from the latest top-level statement where its state is the full
    // render's.
    Probe probe{&st, k, g};
    const Start* start = st.start_for(k, g);
    std::string out = RenderRunner::run(
        limits, generation, provenance,
        [&](Interp& in) {
          if (start && start->steps > in.max_steps) start = nullptr;  // the render from the start says where it stops
          if (start) {
            restore_start(st, *start, k, g, in);
            probe.read_prompt = start->prompt;
          } else {
            Scope vars = st.vars;
            const auto& all = vars[st.messages_var].second.list->items;
            vars[st.messages_var].second =
                Value::recycled_list(std::vector<Value>(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(k)));
            vars[st.prompt_var].second = Value::boolean(g);
            in.frames[0].vars = std::move(vars);
          }
          in.probe = &probe;
        },
        [&](Interp& in) {
          exec(in, p_->body, start ? start->at : 0);
          resumes.resumed += in.done;
        });
    resumes.same = probe.same;
    return out;  // moved into the optional
  }
  if (const RecordScope* rec = tl_record; rec && rec->used_ + st.points[k].steps >= rec->max_steps_) return {};
  ++resumes.resumed;
  std::string out = RenderRunner::run(
      limits, generation, provenance, [&](Interp& in) { restore(st, k, g, in); },
      [&](Interp& in) { run_after_loop(in, st, k); });
  resumes.same = st.points[k].output;
  return out;
}

int64_t Provenance::search(const DictObj* d) const {
  auto it = std::lower_bound(sorted.begin(), sorted.end(), std::make_pair(d, uint32_t{0}));
  if (it == sorted.end() || it->first != d) return -1;
  last = it->second;
  return static_cast<int64_t>(last);
}

bool parse_instant(std::string_view text, std::tm& out) {
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, s = 0;
  std::string t(text);
  int n = std::sscanf(t.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d", &y, &mo, &d, &h, &mi, &s);
  if (n < 3 || (n > 3 && n < 5) || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || s > 60) return false;
  std::tm tm{};
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_sec = s;
  time_t tt = timegm(&tm);  // normalizes and fills tm_wday/tm_yday
  if (tt == static_cast<time_t>(-1)) return false;
  gmtime_r(&tt, &out);
  return true;
}

}  // namespace tokfeed::tmpl
