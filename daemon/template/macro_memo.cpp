// Pure macros: which they are (at load) and the record's memo of their
// calls (at render). docs/chat_templates.md, "Pure macros".
#include "template/macro_memo.hpp"

#include <algorithm>
#include <cstring>
#include <functional>
#include <iterator>
#include <memory>
#include <string_view>

#include "template/budget.hpp"
#include "template/interp.hpp"
#include "template/resume.hpp"

namespace tokfeed::tmpl {

namespace {

// ---- At load: which macros are pure ----

// Names whose value a call sees other than through its arguments and the
// template's top-level variables (`caller`, `self`'s blocks), or whose use
// changes what the render does later or depends on something else
// (cycler and joiner state, a namespace, the clock, random text,
// add_generation_prompt, which the prefix renders watch).
constexpr std::string_view kImpureNames[] = {"caller", "self",         "cycler",    "joiner",
                                             "lipsum", "strftime_now", "namespace", "add_generation_prompt"};
// Methods that change their object (transformers' sandbox refuses them;
// a pure macro names none).
constexpr std::string_view kMutators[] = {"append", "extend", "insert",     "pop",  "popitem", "remove",
                                          "clear",  "update", "setdefault", "sort", "reverse"};

template <class C>
bool among(const C& c, std::string_view x) {
  return std::find(std::begin(c), std::end(c), x) != std::end(c);
}

using Bound = std::vector<std::string>;  // names a read finds in the macro's own scopes

struct Scan {
  bool pure = true;
  Bound free;  // names read from the template's top-level scope
};

void scan_expr(const Expr* e, const Bound& bound, Scan& sc) {
  if (!e || !sc.pure) return;
  switch (e->kind) {
    case EK::kName:
      if (e->prompt || among(kImpureNames, e->name)) {
        sc.pure = false;
      } else if (!among(bound, e->name) && !among(sc.free, e->name)) {
        sc.free.push_back(e->name);
      }
      return;
    case EK::kLiteral:
      if (e->lit.is_str() && e->lit.text() == "random") sc.pure = false;  // map('random')
      return;
    case EK::kAttr:
      if (among(kMutators, e->name)) sc.pure = false;
      break;
    case EK::kFilter:
      if (e->name == "random") sc.pure = false;
      break;
    default: break;
  }
  for (const auto& x : e->a) scan_expr(x.get(), bound, sc);
  for (const auto& [k, x] : e->kw) scan_expr(x.get(), bound, sc);
}

// Targets that are names (not a namespace's attribute).
bool plain_targets(const Stmt& s) {
  return std::none_of(s.targets.begin(), s.targets.end(),
                      [](const std::string& t) { return t.find('.') != std::string::npos; });
}

void add(Bound& bound, const std::vector<std::string>& names) { bound.insert(bound.end(), names.begin(), names.end()); }

// The statements of `body`, run in a scope where the names `bound` are
// set: a name a statement sets is set for the statements after it in the
// same body (and theirs), not after an `if` or a loop that set it.
void scan_body(const Body& body, Bound bound, Scan& sc) {
  for (const auto& sp : body) {
    if (!sc.pure) return;
    const Stmt& s = *sp;
    switch (s.kind) {
      case SK::kText:
      case SK::kBreak:
      case SK::kContinue: break;
      case SK::kOutput: scan_expr(s.exprs[0].get(), bound, sc); break;
      case SK::kIf:
        for (const auto& x : s.exprs) scan_expr(x.get(), bound, sc);
        for (const Body& b : s.bodies) scan_body(b, bound, sc);
        break;
      case SK::kFor: {
        if (!plain_targets(s)) {
          sc.pure = false;
          break;
        }
        scan_expr(s.exprs[0].get(), bound, sc);
        Bound inner = bound;
        add(inner, s.targets);
        if (s.exprs.size() > 1) scan_expr(s.exprs[1].get(), inner, sc);  // the filter: targets set, no `loop`
        if (s.uses_loop) inner.emplace_back("loop");
        scan_body(s.bodies[0], inner, sc);
        if (s.bodies.size() > 1) scan_body(s.bodies[1], bound, sc);  // else: the loop's scope is gone
        break;
      }
      case SK::kSet:
        if (!s.text.empty() || !plain_targets(s)) {
          sc.pure = false;  // a namespace's attribute
          break;
        }
        scan_expr(s.exprs[0].get(), bound, sc);
        add(bound, s.targets);
        break;
      case SK::kSetBlock:
      case SK::kFilterBlock: {
        if (!plain_targets(s)) {
          sc.pure = false;
          break;
        }
        scan_body(s.bodies[0], bound, sc);  // a scope of its own
        Bound subject = bound;
        subject.emplace_back(kBlockBody);
        scan_expr(s.filter.get(), subject, sc);
        if (s.kind == SK::kSetBlock) add(bound, s.targets);
        break;
      }
      case SK::kWith: {
        if (!plain_targets(s)) {
          sc.pure = false;
          break;
        }
        for (const auto& x : s.exprs) scan_expr(x.get(), bound, sc);
        Bound inner = bound;
        add(inner, s.targets);
        scan_body(s.bodies[0], inner, sc);
        break;
      }
      case SK::kAutoescape:
        scan_expr(s.exprs[0].get(), bound, sc);
        scan_body(s.bodies[0], bound, sc);
        break;
      default:  // a macro or call block defined inside (a closure), {% generation %}, a block
        sc.pure = false;
        break;
    }
  }
}

Scan scan_macro(const Stmt& m) {
  Scan sc;
  if (m.uses_caller) {
    sc.pure = false;
    return sc;
  }
  // Defaults are evaluated as the parameters are bound: any name they read
  // is taken as the top-level variable (a parameter read there is also in
  // the call's key as its argument).
  for (const auto& d : m.exprs) scan_expr(d.get(), {}, sc);
  Bound bound = m.targets;
  if (m.uses_varargs) bound.emplace_back("varargs");
  if (m.uses_kwargs) bound.emplace_back("kwargs");
  scan_body(m.bodies[0], std::move(bound), sc);
  return sc;
}

// The macros a render defines with no closure: at the top level, or in a
// top-level `if`.
void collect_top(Body& body, std::vector<Stmt*>& out) {
  for (auto& sp : body) {
    if (sp->kind == SK::kMacro) out.push_back(sp.get());
    else if (sp->kind == SK::kIf)
      for (Body& b : sp->bodies) collect_top(b, out);
  }
}

constexpr std::size_t kMaxNames = 32;  // top-level variables a pure macro reads, with those of the macros it calls

}  // namespace

void find_pure_macros(Body& body) {
  std::vector<Stmt*> macros;
  collect_top(body, macros);
  const std::size_t n = macros.size();
  std::vector<Scan> scans(n);
  std::vector<char> pure(n);
  for (std::size_t i = 0; i < n; ++i) {
    scans[i] = scan_macro(*macros[i]);
    pure[i] = scans[i].pure;
  }
  // The top-level macro a name calls: the one macro of that name (npos:
  // none; n: several, which one depends on the render).
  auto macro_named = [&](const std::string& name) {
    std::size_t found = SIZE_MAX;
    for (std::size_t j = 0; j < n; ++j)
      if (macros[j]->text == name) found = found == SIZE_MAX ? j : n;
    return found;
  };
  // A macro that reads a macro of several definitions, or an impure one,
  // is impure: until nothing changes.
  for (bool changed = true; changed;) {
    changed = false;
    for (std::size_t i = 0; i < n; ++i) {
      if (!pure[i]) continue;
      for (const std::string& name : scans[i].free) {
        const std::size_t j = macro_named(name);
        if (j == SIZE_MAX || (j < n && pure[j])) continue;
        pure[i] = 0;
        changed = true;
        break;
      }
    }
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (!pure[i]) continue;
    auto purity = std::make_shared<MacroPurity>();
    std::vector<std::size_t> todo{i}, seen{i};
    while (!todo.empty()) {
      const std::size_t k = todo.back();
      todo.pop_back();
      for (const std::string& name : scans[k].free) {
        if (std::find(purity->names.begin(), purity->names.end(), Name(name)) != purity->names.end()) continue;
        const std::size_t j = macro_named(name);
        purity->names.emplace_back(name);
        purity->macros.push_back(j < n ? macros[j] : nullptr);
        if (j < n && std::find(seen.begin(), seen.end(), j) == seen.end()) {
          seen.push_back(j);
          todo.push_back(j);
        }
      }
    }
    if (purity->names.size() <= kMaxNames) macros[i]->purity = std::move(purity);
  }
}

// ---- At render: the record's memo ----

namespace {

constexpr uint64_t kMinSteps = 100;  // a call that ran fewer steps is not kept: looking it up costs about as much
constexpr std::size_t kMaxEntries = 1024;
constexpr std::size_t kMaxBytes = std::size_t{16} << 20;  // of the entries' texts
constexpr std::size_t kMaxNodes = std::size_t{1} << 16;   // values walked to find a call's values settled
constexpr std::size_t kKeptEntries = 64;                  // kept from one record to the next
constexpr std::size_t kKeptBytes = std::size_t{4} << 20;  // of their texts
constexpr int kMaxWalk = 200;                             // nesting walked

uint64_t mix(uint64_t h, uint64_t x) {
  return (h ^ (x + 0x9E3779B97F4A7C15ULL + (h << 6) + (h >> 2))) * 0xFF51AFD7ED558CCDULL;
}

// A value as the memo knows it: its kind and flags, and its scalar or the
// object it points at (a str too: an equal text in another object is
// another key, which only costs a miss).
uint64_t identity(const Value& v) {
  const uint64_t head = static_cast<uint64_t>(v.kind) | uint64_t{v.tuple} << 8 | uint64_t{v.ns} << 9 |
                        uint64_t{v.gen} << 10 | uint64_t{v.view} << 11 | uint64_t{v.markup} << 14;
  uint64_t x = 0;
  switch (v.kind) {
    case Kind::kNone: break;
    case Kind::kBool: x = v.b; break;
    case Kind::kInt: x = static_cast<uint64_t>(v.i); break;
    case Kind::kFloat: std::memcpy(&x, &v.f, sizeof x); break;
    default: x = reinterpret_cast<uintptr_t>(v.s.raw());
  }
  return mix(head, x);
}

bool same(const Value& a, const Value& b) {
  if (a.kind != b.kind || a.tuple != b.tuple || a.ns != b.ns || a.gen != b.gen || a.view != b.view ||
      a.markup != b.markup)
    return false;
  switch (a.kind) {
    case Kind::kNone: return true;
    case Kind::kBool: return a.b == b.b;
    case Kind::kInt: return a.i == b.i;
    case Kind::kFloat: return std::memcmp(&a.f, &b.f, sizeof a.f) == 0;
    default: return a.s.raw() == b.s.raw();
  }
}

// Whether `v` holds nothing that changes or is used up (a namespace, a
// loop's `loop`, an iterator) and no function: the same object then has
// the same value in every render of the record. Lists and dicts other
// than namespaces never change once built.
bool settled(const Value& v, std::size_t& left, int depth = 0) {
  if (left == 0 || depth > kMaxWalk) return false;
  --left;
  switch (v.kind) {
    case Kind::kFunc: return false;
    case Kind::kList:
      if (v.gen) return false;
      for (const Value& x : v.list->items)
        if (!settled(x, left, depth + 1)) return false;
      return true;
    case Kind::kDict:
      if (v.ns || v.view) return false;
      for (const auto& [k, x] : v.dict->items())
        if (!settled(x, left, depth + 1)) return false;
      return true;
    default: return true;
  }
}

// Work for the memo itself (its entries and their texts): counted neither
// in the render's memory nor in its steps, and never failing it.
class Uncounted {
 public:
  Uncounted() noexcept : b_(current_budget()) {
    if (!b_) return;
    saved_ = *b_;
    b_->max_bytes = uint64_t{1} << 62;
    b_->steps = nullptr;
  }
  ~Uncounted() {
    if (!b_) return;
    b_->live = saved_.live;
    b_->peak = saved_.peak;
    b_->max_bytes = saved_.max_bytes;
    b_->steps = saved_.steps;
  }
  Uncounted(const Uncounted&) = delete;
  Uncounted& operator=(const Uncounted&) = delete;

 private:
  RenderBudget* b_;
  RenderBudget saved_;
};

bool matches(const MacroMemo::Entry& e, const Stmt& m, const Args& args, const Value* const* env, const MacroPurity& p,
             std::size_t max_output) {
  if (e.macro != &m || e.purity.get() != &p || e.max_output != max_output || e.positional.size() != args.pos.size() ||
      e.kw.size() != args.kw.size())
    return false;
  for (std::size_t i = 0; i < args.pos.size(); ++i)
    if (!same(e.positional[i], args.pos[i])) return false;
  for (std::size_t i = 0; i < args.kw.size(); ++i)
    if (e.kw[i].first != args.kw[i].first || !same(e.kw[i].second, args.kw[i].second)) return false;
  for (std::size_t i = 0; i < p.names.size(); ++i) {
    if (p.macros[i]) continue;
    if (e.absent[i] != (env[i] == nullptr) || (env[i] && !same(e.env[i], *env[i]))) return false;
  }
  return true;
}

// Whether the render's vector of scopes, of capacity `capacity`, holds
// `size` scopes with no growth that counts a step: it grows by doubling, and
// an allocation of 4 KiB or more counts one step per 4 KiB (budget.hpp).
bool growth_free(std::size_t capacity, std::size_t size) {
  if (size <= capacity) return true;
  while (capacity < size) capacity = capacity ? 2 * capacity : 1;
  return capacity * sizeof(Frame) < 4096;
}

// Whether the call, run here, would run as it ran when kept: its steps
// within the render's budget, its memory within the render's, its depth
// within the recursion limit, its scopes within the render's vector of
// them (whose growth would count steps). Where not, it runs, and fails
// where it fails.
bool fits(const MacroMemo::Entry& e, const Interp& in) {
  if (in.steps > in.max_steps || e.steps > in.max_steps - in.steps) return false;
  if (in.depth + e.depth > 100 || !growth_free(in.frames.capacity(), in.frames.size() + e.frames)) return false;
  const RenderBudget* b = current_budget();
  return !b || b->live + e.peak <= static_cast<int64_t>(b->max_bytes);
}

// Whether `v` reaches a dict that is one of `prov`'s messages.
bool reaches_message(const Value& v, const Provenance& prov, int depth = 0) {
  if (depth > kMaxWalk) return true;
  if (v.is_list()) {
    for (const Value& x : v.list->items)
      if (reaches_message(x, prov, depth + 1)) return true;
  } else if (v.is_dict()) {
    if (prov.index_of(v.dict.get()) >= 0) return true;
    for (const auto& [k, x] : v.dict->items())
      if (reaches_message(x, prov, depth + 1)) return true;
  }
  return false;
}

// Whether the call, run in this render, would bind no iteration to a
// message: its run bound none, and where this render's provenance is
// another than the one it was found for (or the scope another), the key
// reaches none of its messages (an iteration binds what it iterates over,
// which the key's objects hold).
bool binds_none(MacroMemo::Entry& e, const Interp& in, uint64_t scope) {
  if (!in.provenance || (e.checked == in.provenance && e.checked_scope == scope)) return true;
  for (const Value& v : e.positional)
    if (reaches_message(v, *in.provenance)) return false;
  for (const auto& [k, v] : e.kw)
    if (reaches_message(v, *in.provenance)) return false;
  for (const Value& v : e.env)
    if (reaches_message(v, *in.provenance)) return false;
  e.checked = in.provenance;
  e.checked_scope = scope;
  return true;
}

// Whether `v` reaches a list the tracker watches (`messages`, a slice of it).
bool reaches_watched(const Value& v, const Tracker& t, int depth = 0) {
  if (depth > kMaxWalk) return true;
  if (v.is_list()) {
    if (t.offset_of(v.list.get()) >= 0) return true;
    for (const Value& x : v.list->items)
      if (reaches_watched(x, t, depth + 1)) return true;
  } else if (v.is_dict()) {
    for (const auto& [k, x] : v.dict->items())
      if (reaches_watched(x, t, depth + 1)) return true;
  }
  return false;
}

// Whether, in a render that keeps resume points, the call's run would
// tell the tracker nothing: its hooks (resume.hpp) see only the lists it
// watches, `loop` of the main loop and the namespaces it follows, and the
// run reads nothing but its key's values (settled: no namespace, no
// `loop`) and what it builds from them. So where the key reaches no
// watched list, the run's hooks do nothing, and serving it is running it.
bool unwatched(const MacroMemo::Entry& e, const Interp& in) {
  if (!tracking(in)) return true;
  const Tracker& t = *in.track;
  for (const Value& v : e.positional)
    if (reaches_watched(v, t)) return false;
  for (const auto& [k, v] : e.kw)
    if (reaches_watched(v, t)) return false;
  for (const Value& v : e.env)
    if (reaches_watched(v, t)) return false;
  return true;
}

// The kept call's result: its text in a string of the capacity the call
// built (the memory the render then holds is what the call left it
// holding), its steps counted, the render's position where the call left
// it.
Value serve(const MacroMemo::Entry& e, Interp& in) {
  const uint64_t steps = in.steps;
  RenderBudget* b = current_budget();
  const int64_t live = b ? b->live : 0;
  std::string text;
  text.reserve(e.capacity);
  text.append(e.text);
  Value r = Value::str(std::move(text));
  in.steps = steps + e.steps;
  if (b && live + e.peak > static_cast<int64_t>(b->peak)) b->peak = static_cast<uint64_t>(live + e.peak);
  in.pos = e.at;
  if (in.steps > in.step_check) in.check_steps();  // not past the budget (fits): cancel_renders()
  return r;
}

}  // namespace

namespace {

// The top-level variables the call reads, as it sees them, into `env`
// (null: absent), and the call's hash; false where a macro it calls is not
// the pure one it was analysed with (the variable holds another value).
bool call_key(Interp& in, const Stmt& m, const Args& args, const Value** env, uint64_t& h) {
  const MacroPurity& p = *m.purity;
  Frame& top = in.frames[0];
  h = mix(0, reinterpret_cast<uintptr_t>(&m));
  for (std::size_t i = 0; i < p.names.size(); ++i) {
    const Value* v = top.find(p.names[i]);
    env[i] = v;
    if (p.macros[i]) {
      if (!v || v->kind != Kind::kFunc || v->fn->macro != p.macros[i]) return false;
      continue;
    }
    h = mix(h, v ? identity(*v) : 1);
  }
  for (const Value& a : args.pos) h = mix(h, identity(a));
  for (const auto& [k, a] : args.kw) h = mix(mix(h, std::hash<std::string_view>{}(k)), identity(a));
  return true;
}

}  // namespace

Value call_pure_macro(Interp& in, const Stmt& m, Args& args, MemoScope& memo) {
  const MacroPurity& p = *m.purity;
  const Value* env[kMaxNames];
  uint64_t h = 0;
  MacroMemo* mm = memo.macros.get();
  bool keyed = false, known = false;
  // Looked up where the memo holds a call of this macro.
  if (mm && std::find(mm->macros.begin(), mm->macros.end(), &m) != mm->macros.end()) {
    if (!call_key(in, m, args, env, h)) return run_macro(in, m, nullptr, args);
    keyed = true;
    auto [lo, hi] = mm->index.equal_range(h);
    for (auto it = lo; it != hi; ++it) {
      MacroMemo::Entry& e = mm->entries[it->second];
      if (!matches(e, m, args, env, p, in.max_output)) continue;
      if (fits(e, in) && binds_none(e, in, mm->scope) && unwatched(e, in)) {
        e.used = true;
        return serve(e, in);
      }
      known = true;  // runs: the limit stops it where it would
      break;
    }
  }

  // Run, measured: its steps, the memory it held at most, its depth.
  RenderBudget* b = current_budget();
  const uint64_t steps0 = in.steps, binds0 = in.message_binds, dumps0 = in.big_dumps;
  const int depth0 = in.depth;
  const int64_t live0 = b ? b->live : 0;
  struct Measure {
    Interp& in;
    RenderBudget* b;
    int depth_peak;
    std::size_t frames_peak;
    uint64_t peak;
    ~Measure() {
      --in.memo_calls;
      in.depth_peak = std::max(in.depth_peak, depth_peak);
      in.frames_peak = std::max(in.frames_peak, frames_peak);
      if (b) b->peak = std::max(b->peak, peak);
    }
  } measure{in, b, in.depth_peak, in.frames_peak, b ? b->peak : 0};
  const std::size_t frames0 = in.frames.size(), capacity0 = in.frames.capacity();
  ++in.memo_calls;
  in.depth_peak = in.depth;
  in.frames_peak = frames0;
  if (b) b->peak = live0 > 0 ? static_cast<uint64_t>(live0) : 0;
  Value r = run_macro(in, m, nullptr, args);
  const uint64_t steps = in.steps - steps0;
  const int64_t peak = b ? static_cast<int64_t>(b->peak) - live0 : 0;
  const int depth = in.depth_peak - depth0;
  const std::size_t frames = in.frames_peak - frames0;
  const Pos at = in.pos;
  // Kept where it took steps enough, bound no iteration to a message (its
  // provenance), dumped no big tojson through the record's memo (whose
  // steps depend on whether the memo had it), and read only settled
  // values, and grew the render's vector of scopes by no step (a growth
  // that counts steps does so where it happens: here, not in a render that
  // grew the vector before).
  // (The body changed no top-level variable: `env` is as it was.)
  if (known || steps < kMinSteps || in.message_binds != binds0 || in.big_dumps != dumps0 ||
      (in.frames.capacity() != capacity0 && in.frames.capacity() * sizeof(Frame) >= 4096))
    return r;
  if (mm && (mm->entries.size() >= kMaxEntries || mm->bytes + r.s->size() > kMaxBytes)) return r;
  if (!keyed && !call_key(in, m, args, env, h)) return r;
  std::size_t left = kMaxNodes;
  for (const Value& a : args.pos)
    if (!settled(a, left)) return r;
  for (const auto& [k, a] : args.kw)
    if (!settled(a, left)) return r;
  for (std::size_t i = 0; i < p.names.size(); ++i)
    if (!p.macros[i] && env[i] && !settled(*env[i], left)) return r;

  Uncounted uncounted;
  if (!mm) {
    mm = (memo.macros = std::make_unique<MacroMemo>()).get();
    mm->scope = memo.number;
  }
  if (std::find(mm->macros.begin(), mm->macros.end(), &m) == mm->macros.end()) mm->macros.push_back(&m);
  MacroMemo::Entry& e = mm->entries.emplace_back();
  e.macro = &m;
  e.hash = h;
  e.positional = args.pos;
  e.kw = args.kw;
  e.env.resize(p.names.size());
  e.absent.resize(p.names.size());
  for (std::size_t i = 0; i < p.names.size(); ++i) {
    if (p.macros[i]) continue;
    e.absent[i] = env[i] == nullptr;
    if (env[i]) e.env[i] = *env[i];
  }
  e.purity = m.purity;
  e.max_output = in.max_output;
  e.checked = in.provenance;
  e.checked_scope = mm->scope;
  e.text = *r.s;
  e.capacity = r.s->capacity();
  e.steps = steps;
  e.peak = peak;
  e.depth = depth;
  e.frames = frames;
  e.at = at;
  mm->bytes += e.text.size();
  mm->index.emplace(h, mm->entries.size() - 1);
  return r;
}

std::unique_ptr<MacroMemo> keep_macros(std::unique_ptr<MacroMemo> mm) {
  if (!mm || mm->entries.empty()) return nullptr;
  // Which objects something besides the memo's entries holds: each object
  // is asked with one entry's reference left in place, the others set
  // aside. (A tojson entry's reference counts as another holder: an object
  // both memos alone hold stays while both keep it, up to their limits.)
  std::vector<Value*> refs;
  for (auto& e : mm->entries) {
    for (Value& v : e.positional)
      if (v.s.raw()) refs.push_back(&v);
    for (auto& [k, v] : e.kw)
      if (v.s.raw()) refs.push_back(&v);
    for (Value& v : e.env)
      if (v.s.raw()) refs.push_back(&v);
  }
  std::sort(refs.begin(), refs.end(), [](const Value* a, const Value* b) { return a->s.raw() < b->s.raw(); });
  std::vector<const RefCounted*> alone;  // held by the entries alone
  std::vector<Value> aside;
  for (std::size_t i = 0, j; i < refs.size(); i = j) {
    for (j = i + 1; j < refs.size() && refs[j]->s.raw() == refs[i]->s.raw();) ++j;
    aside.clear();
    for (std::size_t k = i + 1; k < j; ++k) aside.push_back(std::move(*refs[k]));
    if (refs[i]->s.raw()->unique()) alone.push_back(refs[i]->s.raw());
    for (std::size_t k = i + 1; k < j; ++k) *refs[k] = std::move(aside[k - i - 1]);
  }
  auto held = [&](const Value& v) { return !v.s.raw() || !std::binary_search(alone.begin(), alone.end(), v.s.raw()); };
  auto keep = [&](const MacroMemo::Entry& e) {
    return std::all_of(e.positional.begin(), e.positional.end(), held) &&
           std::all_of(e.kw.begin(), e.kw.end(), [&](const auto& kv) { return held(kv.second); }) &&
           std::all_of(e.env.begin(), e.env.end(), held);
  };
  // In place: the entries served in this scope first where the limits
  // drop some, else in the order written.
  std::vector<char> kept(mm->entries.size());
  std::size_t count = 0, bytes = 0;
  for (int pass = 0; pass < 2; ++pass)
    for (std::size_t k = 0; k < mm->entries.size(); ++k) {
      const MacroMemo::Entry& e = mm->entries[k];
      if (e.used != (pass == 0) || !keep(e)) continue;
      if (count >= kKeptEntries || bytes + e.text.size() > kKeptBytes) continue;
      kept[k] = 1;
      ++count;
      bytes += e.text.size();
    }
  if (count == 0) return nullptr;
  if (count != mm->entries.size()) {
    std::size_t to = 0;
    for (std::size_t k = 0; k < mm->entries.size(); ++k)
      if (kept[k]) {
        if (to != k) mm->entries[to] = std::move(mm->entries[k]);
        ++to;
      }
    mm->entries.resize(to);
    mm->index.clear();
    for (std::size_t k = 0; k < to; ++k) mm->index.emplace(mm->entries[k].hash, k);
    mm->macros.clear();
    for (const auto& e : mm->entries)
      if (std::find(mm->macros.begin(), mm->macros.end(), e.macro) == mm->macros.end()) mm->macros.push_back(e.macro);
  }
  mm->bytes = bytes;
  for (auto& e : mm->entries) e.used = false;
  return mm;
}

}  // namespace tokfeed::tmpl
