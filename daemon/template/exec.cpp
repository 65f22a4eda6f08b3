// Statements: output, control flow, assignment, macros.
#include <algorithm>
#include <memory>
#include <optional>

#include "template/interp.hpp"
#include "template/resume.hpp"

namespace tokfeed::tmpl {

namespace {

[[noreturn, gnu::noinline, gnu::cold]] void output_past_limit(const Interp& in) {
  throw Error("the template's output passed " + std::to_string(in.max_output) + " bytes");
}

// Output bytes [at, end) have been appended to in.out: their provenance, the limit.
void wrote(Interp& in, std::size_t at) {
  const std::size_t end = in.out->size();
  if (in.provenance && in.message >= 0 && in.out == in.root && end > at) {
    auto& pieces = in.provenance->pieces;
    const auto m = static_cast<uint32_t>(in.message);
    if (!pieces.empty() && pieces.back().message == m && pieces.back().end == at) pieces.back().end = end;
    else pieces.push_back({at, end, m});
  }
  if (end > in.max_output) [[unlikely]]
    output_past_limit(in);
}

void write(Interp& in, std::string_view s) {
  const std::size_t at = in.out->size();
  in.out->append(s);
  wrote(in, at);
}

std::string unpack_error(std::size_t want, std::size_t got) {
  return got < want
             ? "not enough values to unpack (expected " + std::to_string(want) + ", got " + std::to_string(got) + ")"
             : "too many values to unpack (expected " + std::to_string(want) + ")";
}

// jinja2's error where the variable `name` holds `obj`, which is no
// namespace, and a set assigns an attribute of it.
void require_namespace(const Value& obj, std::string_view name) {
  if (!(obj.is_dict() && obj.ns && !obj.view))
    throw Error("cannot assign attribute on non-namespace object '" + std::string(name) + "'");
}

// `ns.attr` in a tuple target (`{% set ns.attr, b = ... %}`): `ns` is the
// variable's name. (A set of `ns.attr` alone is exec's.)
void set_attribute(Interp& in, const Name& ns, const std::string& attr, Value v) {
  Value obj = in.lookup(ns);
  require_namespace(obj, ns.str());
  if (!attr.empty() && attr[0] == '_') throw Error("namespace attributes cannot start with '_'");
  if (tracking(in)) in.track->stored(v);
  in.keep_namespace(obj, v);
  if (tracking(in)) in.track->set_attr(obj, attr, v);
  obj.dict->set(attr, std::move(v));
}

// A nested target (Stmt::shape) from shape[at] on, names from names[name] on.
void unpack(Interp& in, const Stmt& s, std::size_t& at, std::size_t& name, const Value& v) {
  const int16_t n = s.shape[at++];
  if (n == -1) {
    in.assign(s.names[name++], v);
    return;
  }
  if (n == -2) {  // ns.attr
    const std::string& t = s.targets[name++];
    const std::size_t dot = t.find('.');
    set_attribute(in, Name(std::string_view(t).substr(0, dot)), t.substr(dot + 1), v);
    return;
  }
  if (v.kind == Kind::kNone || v.kind == Kind::kBool || v.kind == Kind::kInt || v.kind == Kind::kFloat ||
      v.kind == Kind::kFunc)
    throw Error("cannot unpack non-iterable " + std::string(type_name(v)) + " object");
  std::vector<Value> items = iterate(v);
  if (items.size() != static_cast<std::size_t>(n)) throw Error(unpack_error(static_cast<std::size_t>(n), items.size()));
  for (const Value& x : items) unpack(in, s, at, name, x);
}

void assign_targets(Interp& in, const Stmt& s, const Value& v) {
  if (!s.shape.empty()) {
    // jinja2 checks each namespace of the target before it assigns anything.
    for (std::size_t k = 0, name = 0; k < s.shape.size(); ++k) {
      if (s.shape[k] >= 0) continue;
      if (s.shape[k] == -2) {
        const std::string_view ns = std::string_view(s.targets[name]).substr(0, s.targets[name].find('.'));
        require_namespace(in.lookup(Name(ns)), ns);
      }
      ++name;
    }
    std::size_t at = 0, name = 0;
    unpack(in, s, at, name, v);
    return;
  }
  const std::vector<Name>& names = s.names;
  if (names.size() == 1) {
    in.assign(names[0], v);
    return;
  }
  std::vector<Value> items = iterate(v);
  if (items.size() != names.size()) throw Error(unpack_error(names.size(), items.size()));
  for (std::size_t k = 0; k < names.size(); ++k) in.assign(names[k], items[k]);
}

// The names the engine binds itself.
const Name& kLoopName() {
  static const Name n("loop");
  return n;
}
const Name& kCallerName() {
  static const Name n("caller");
  return n;
}
const Name& kBlockBodyName() {
  static const Name n(kBlockBody);
  return n;
}

struct FrameGuard {
  Interp& in;
  FrameGuard(Interp& i, bool barrier) : in(i) { in.push_frame(barrier); }
  ~FrameGuard() { in.pop_frame(); }
};

bool loop_body(Interp& in, const Stmt& s, const std::vector<Value>& items, bool main, int64_t ahead = -1,
               std::size_t from = 0, int64_t depth = 0);

// Which message `item` is (-1: none), for provenance.
int64_t message_index(const Interp& in, const Value& item) {
  return item.is_dict() ? in.provenance->index_of(item.dict.get()) : -1;
}

// Restores the message the enclosing iterations are on.
struct MessageGuard {
  Interp& in;
  int64_t saved;
  bool* saved_bound;
  explicit MessageGuard(Interp& i) : in(i), saved(i.message), saved_bound(i.iteration_bound) {}
  ~MessageGuard() {
    in.message = saved;
    in.iteration_bound = saved_bound;
  }
};

// `{% set name = v %}` in an iteration no message is bound to (a scan by
// index): v, when a message, binds the rest of the iteration to it.
void bind_iteration(Interp& in, const Value& v) {
  if (!in.iteration_bound || *in.iteration_bound) return;
  int64_t m = message_index(in, v);
  if (m < 0) return;
  in.message = m;
  *in.iteration_bound = true;
  in.provenance->seen[static_cast<std::size_t>(m)] = 1;
  ++in.message_binds;
}

Flow run_loop(Interp& in, const Stmt& s, const Value& seq, bool main, int64_t depth, int64_t ahead = -1);

// loop(items) in a recursive loop whose scope is in.frames[base]: the loop
// run again over `items` one level deeper, its output returned. As jinja2
// compiles the loop to a function, the run sees the scopes the loop
// statement sees (the caller's, from `base` up, are set aside meanwhile).
Value recurse(Interp& in, const Stmt& s, const Value& items, int64_t depth, std::size_t base) {
  if (in.depth >= 100) throw Error("maximum recursion depth exceeded in a recursive loop");
  struct Restore {
    Interp& in;
    std::size_t base;
    std::string* out;
    std::vector<Frame> hidden;
    ~Restore() {
      in.out = out;
      in.frames.resize(std::min(in.frames.size(), base));
      for (Frame& f : hidden) in.frames.push_back(std::move(f));
      --in.depth;
    }
  } restore{in, base, in.out, {}};
  in.depth_peak = std::max(in.depth_peak, ++in.depth);
  if (in.frames.size() > base) {
    auto from = in.frames.begin() + static_cast<std::ptrdiff_t>(base);
    restore.hidden.assign(std::make_move_iterator(from), std::make_move_iterator(in.frames.end()));
    in.frames.erase(from, in.frames.end());
  }
  std::string buf;
  in.out = &buf;
  run_loop(in, s, items, false, depth);
  if (s.escape && escapes(in, s)) return markup(std::move(buf));
  return Value::str(std::move(buf));
}

Flow exec_for(Interp& in, const Stmt& s) {
  Value seq = eval(in, *s.exprs[0]);
  if (seq.is_none() || seq.kind == Kind::kInt || seq.kind == Kind::kFloat || seq.kind == Kind::kBool ||
      seq.kind == Kind::kFunc)
    throw Error("'" + std::string(type_name(seq)) + "' object is not iterable");
  if (in.probe && prefix_at_loop(in, s, seq)) return Flow::kNormal;  // resumed: the render is done
  int64_t ahead = -1;  // a look-ahead loop over messages[ahead:] (Tracker::enter_loop)
  const bool main = tracking(in) && in.track->enter_loop(in, s, seq, ahead);
  return run_loop(in, s, seq, main, 0, ahead);
}

// The loop `s` over `seq`: its filter, its iterations and its else body, at
// recursion depth `depth` (a recursive loop's loop(items) runs it again).
Flow run_loop(Interp& in, const Stmt& s, const Value& seq, bool main, int64_t depth, int64_t ahead) {
  // A list proper is iterated in place: no template changes its items, and
  // `seq` keeps it alive while the loop runs.
  std::vector<Value> all;
  if (!seq.is_seq()) all = iterate(seq);
  const std::vector<Value>& source = seq.is_seq() ? seq.list->items : all;
  std::vector<Value> filtered;
  const std::vector<Value>* items = &source;
  if (s.exprs[1]) {
    items = &filtered;
    FrameGuard filter_scope(in, false);
    for (const auto& v : source) {
      in.step(s.pos);
      assign_targets(in, s, v);
      Value keep = eval(in, *s.exprs[1]);
      if (tracking(in)) in.track->truth(keep);
      if (truthy(keep)) filtered.push_back(v);
    }
  }
  // jinja2 runs `else` unless an iteration reached the end of the body (a
  // loop whose every iteration breaks or continues runs it too), in a scope
  // of its own: the loop's variables are not in it.
  bool completed = false;
  {
    FrameGuard guard(in, false);
    if (!items->empty()) completed = loop_body(in, s, *items, main, ahead, 0, depth);
  }
  if (ahead >= 0 && in.track) in.track->ahead_end(in);
  if (main) in.track->loop_ended(in);
  if (!completed && s.has_else) {
    FrameGuard else_scope(in, false);
    return exec(in, s.bodies[1]);
  }
  return Flow::kNormal;
}

// An int or bool in place (the `loop` attributes, rewritten every iteration).
void set_int(Value& v, int64_t x) {
  if (v.kind == Kind::kInt) v.i = x;
  else v = Value::integer(x);
}
void set_bool(Value& v, bool x) {
  if (v.kind == Kind::kBool) v.b = x;
  else v = Value::boolean(x);
}

// `loop`'s attributes in the iteration over items[i].
[[gnu::always_inline]] inline void set_loop(std::vector<std::pair<std::string, Value>>& dv,
                                            const std::vector<Value>& items, int64_t i, int64_t depth) {
  static const Value no_previtem = Value::undefined("loop.previtem"), no_nextitem = Value::undefined("loop.nextitem");
  const auto n = static_cast<int64_t>(items.size());
  set_int(dv[0].second, i + 1);
  set_int(dv[1].second, i);
  set_int(dv[2].second, n - i);
  set_int(dv[3].second, n - i - 1);
  set_bool(dv[4].second, i == 0);
  set_bool(dv[5].second, i == n - 1);
  set_int(dv[6].second, n);
  set_int(dv[7].second, depth + 1);
  set_int(dv[8].second, depth);
  dv[9].second = i > 0 ? items[static_cast<std::size_t>(i - 1)] : no_previtem;
  dv[10].second = i + 1 < n ? items[static_cast<std::size_t>(i + 1)] : no_nextitem;
}

// Whether the idle guard `g` (Stmt::idle_guard: `ns.name`) is falsy now,
// as the body would read it: the namespace's attribute false, none or 0.
bool guard_false(Interp& in, const Expr& g) {
  const Value* ns = in.find_var(g.a[0]->var);
  if (!ns || !ns->is_dict() || !ns->ns) return false;
  const Value* v = ns->dict->find(g.name);
  return v && ((v->kind == Kind::kBool && !v->b) || v->kind == Kind::kNone || (v->kind == Kind::kInt && v->i == 0));
}

// The iterations of a for loop over `items` (not empty); whether one ran to
// the end of the body.
// `main`: the loop over the messages that resume points are taken in.
// `ahead`: a look-ahead loop over messages[ahead:] (Tracker::enter_loop), else -1.
// `from`: the first iteration run (a render resumed inside the loop).
bool loop_body(Interp& in, const Stmt& s, const std::vector<Value>& items, bool main, int64_t ahead, std::size_t from,
               int64_t depth) {
  const int64_t n = static_cast<int64_t>(items.size());
  // `loop`, made only where the body may read it.
  Value loop;
  // What loop.changed() saw last, emptied when the loop ends (it may hold
  // `loop` itself: no reference cycle outlives the loop).
  std::shared_ptr<std::optional<std::vector<Value>>> changed_state;
  struct ChangedReset {
    std::shared_ptr<std::optional<std::vector<Value>>>& p;
    ~ChangedReset() {
      if (p) p->reset();
    }
  } changed_reset{changed_state};
  std::vector<std::pair<std::string, Value>>* d = nullptr;
  if (s.uses_loop) {
    // Its attributes' names, made once (their values are set per iteration).
    static const std::vector<std::pair<std::string, Value>> kAttrs = [] {
      std::vector<std::pair<std::string, Value>> a;
      for (const char* k : {"index", "index0", "revindex", "revindex0", "first", "last", "length", "depth", "depth0",
                            "previtem", "nextitem"})
        a.emplace_back(k, Value());
      return a;
    }();
    loop = Value::new_dict();
    loop.view = kLoopView;
    d = &loop.dict->items();
    // The names of its methods, made once too (not a string built from a
    // literal per loop).
    static const std::string kCycle("cycle"), kCycleFn("loop.cycle"), kChanged("changed"), kChangedFn("loop.changed"),
        kLoopFn("loop"), kCall(kLoopCall);
    d->reserve(14);
    d->assign(kAttrs.begin(), kAttrs.end());
    d->emplace_back(kCycle, Value::func(kCycleFn, [loop_d = loop.dict.get()](Interp&, Args& a) -> Value {
                      if (a.pos.empty()) throw Error("no items for cycling given");
                      int64_t i = loop_d->items()[1].second.i;
                      return a.pos[static_cast<std::size_t>(i % static_cast<int64_t>(a.pos.size()))];
                    }));
    // loop.changed(*values): whether they differ from the last call's (true the first time).
    if (s.uses_changed) {
      changed_state = std::make_shared<std::optional<std::vector<Value>>>();
      d->emplace_back(kChanged, Value::func(kChangedFn, [last = changed_state](Interp&, Args& a) -> Value {
                        if (!a.kw.empty()) throw Error("changed() got an unexpected keyword argument");
                        auto& prev = *last;
                        if (prev && prev->size() == a.pos.size() &&
                            std::equal(a.pos.begin(), a.pos.end(), prev->begin(),
                                       [](const Value& x, const Value& y) { return equal(x, y); }))
                          return Value::boolean(false);
                        prev = a.pos;
                        return Value::boolean(true);
                      }));
    }
    if (s.recursive) {
      d->emplace_back(kCall,
                      Value::func(kLoopFn, [&s, depth, base = in.frames.size() - 1](Interp& in2, Args& a) -> Value {
                        if (a.pos.size() != 1 || !a.kw.empty())
                          throw Error("loop() takes exactly one argument (" + std::to_string(a.pos.size()) + " given)");
                        return recurse(in2, s, a.pos[0], depth + 1, base);
                      }));
    }
    in.assign(kLoopName(), loop);
    if (main) in.track->loop = loop.dict.get();
  }
  // Where `loop` and a single target sit in the loop's scope (found once:
  // the scope only grows while the loop runs).
  const std::size_t frame = in.frames.size() - 1;
  const std::size_t loop_slot = s.uses_loop ? in.frames[frame].slot(kLoopName()) : 0;
  std::size_t target_slot = SIZE_MAX;
  bool completed = false;
  MessageGuard message_guard(in);
  const bool one = s.one_name();
  const bool track = in.provenance && one;
  bool bound = false;
  if (track) in.iteration_bound = &bound;
  // The scope's size once `loop` and the targets are in it: each iteration
  // starts with those alone, as jinja2 runs the body (what an iteration
  // sets is not there in the next one).
  std::size_t keep = SIZE_MAX;
  for (auto i = static_cast<int64_t>(from); i < n; ++i) {
    if (in.frames[frame].vars.size() > keep) in.frames[frame].vars.resize(keep);
    // Where the iterations from here on are idle (Stmt::idle_guard), this
    // one runs and the others are counted.
    bool idle = false;
    uint64_t before = 0;
    if (s.idle_guard) [[unlikely]] {
      idle = i + 1 < n && !main && !tracking(in) && guard_false(in, *s.idle_guard);
      before = in.steps;
    }
    // Here the render of messages[:offset + i] leaves the loop.
    if (main) in.track->iteration(in, in.track->offset + static_cast<std::size_t>(i));
    else if (ahead >= 0 && tracking(in)) in.track->ahead_iteration(in, static_cast<std::size_t>(ahead + i));
    in.step(s.pos);  // an empty body still costs a step per iteration
    if (d) set_loop(*d, items, i, depth);
    const Value& item = items[static_cast<std::size_t>(i)];
    if (one) {
      auto& vars = in.frames[frame].vars;
      if (target_slot < vars.size()) {
        vars[target_slot].second = item;
      } else {
        in.assign(s.names[0], item);
        target_slot = in.frames[frame].slot(s.names[0]);
      }
    } else {
      assign_targets(in, s, item);
    }
    if (keep == SIZE_MAX) keep = in.frames[frame].vars.size();
    if (track) {
      int64_t m = message_index(in, item);
      in.message = m >= 0 ? m : message_guard.saved;
      bound = m >= 0;
      if (m >= 0) in.provenance->seen[static_cast<std::size_t>(m)] = 1, ++in.message_binds;
    }
    if (d) {
      Value& held = in.frames[frame].vars[loop_slot].second;  // the body may have set `loop`
      if (!(held.kind == Kind::kDict && held.dict == loop.dict)) held = loop;
    }
    const std::size_t written = in.out->size();
    Flow f = exec(in, s.bodies[0]);
    if (f == Flow::kBreak) break;
    completed = completed || f == Flow::kNormal;
    if (idle && f == Flow::kNormal && !in.done && in.out->size() == written) [[unlikely]] {
      // Every later iteration runs the same steps as this one, writes
      // nothing and changes nothing: counted, not run, where the budget
      // holds them all (else they run, and the budget stops the render
      // where it would).
      const uint64_t each = in.steps - before, left = static_cast<uint64_t>(n - i - 1);
      if (in.steps <= in.max_steps && each <= (in.max_steps - in.steps) / left) {
        in.steps += each * left;
        if (in.steps > in.step_check) in.check_steps();
        if (track)
          for (auto j = static_cast<std::size_t>(i + 1); j < items.size(); ++j)
            if (int64_t m = message_index(in, items[j]); m >= 0)
              in.provenance->seen[static_cast<std::size_t>(m)] = 1, ++in.message_binds;
        if (d) set_loop(*d, items, n - 1, depth);  // as the last iteration leaves `loop` (a namespace may hold it)
        break;
      }
    }
  }
  return completed;
}

// Binds a call's arguments to the parameters of `m` as jinja2's
// Macro.__call__ binds them: positional, then keywords for the parameters
// left, then `caller`; leftover keywords or positionals are an error unless
// the body reads `kwargs` or `varargs`. `m` is a macro, or a call block
// (its caller: the defaults follow the call in `exprs`, from `first_default`).
void bind_params(Interp& in, const Stmt& m, std::size_t first_default, Args& args) {
  const auto& params = m.targets;
  const auto& param_names = m.names;
  auto label = [&m] { return m.kind == SK::kMacro ? "'" + m.text + "'" : std::string("'caller'"); };
  auto kw = args.kw;
  auto pop = [&](std::string_view name, Value& out) {
    for (auto it = kw.begin(); it != kw.end(); ++it)
      if (it->first == name) {
        out = std::move(it->second);
        kw.erase(it);
        return true;
      }
    return false;
  };
  // Which parameters the call gave (most macros take a few: no allocation).
  char given_small[16];
  std::unique_ptr<char[]> given_big;
  char* given = given_small;
  if (params.size() > sizeof given_small) given_big.reset(given = new char[params.size()]);
  for (std::size_t k = 0; k < params.size(); ++k) {
    Value v;
    if (k < args.pos.size()) v = args.pos[k], given[k] = true;
    else given[k] = pop(params[k], v);
    if (given[k]) in.assign(param_names[k], std::move(v));
  }
  if (m.uses_caller) {
    Value caller;
    if (!pop("caller", caller)) caller = Value::undefined("caller");
    in.assign(kCallerName(), caller);
  }
  if (!m.uses_kwargs && !kw.empty()) {
    if (kw[0].first == "caller")
      throw Error("macro " + label() + " was invoked with two values for the special caller argument");
    throw Error("macro " + label() + " takes no keyword argument '" + kw[0].first + "'");
  }
  if (args.pos.size() > params.size() && !m.uses_varargs)
    throw Error("macro " + label() + " takes not more than " + std::to_string(params.size()) + " argument(s)");
  for (std::size_t k = 0; k < params.size(); ++k) {
    if (given[k]) continue;
    if (const auto& d = m.exprs[first_default + k]) in.assign(param_names[k], eval(in, *d));
    else in.assign(param_names[k], Value::undefined(params[k]));
  }
  // `varargs` and `kwargs` exist where the body reads them (nothing else
  // could see them).
  static const Name varargs("varargs"), kwargs_name("kwargs");
  if (m.uses_varargs) {
    std::vector<Value> extra;
    if (args.pos.size() > params.size())
      extra.assign(args.pos.begin() + static_cast<std::ptrdiff_t>(params.size()), args.pos.end());
    in.assign(varargs, Value::new_list(std::move(extra), true));
  }
  if (m.uses_kwargs) {
    Value kwargs = Value::new_dict();
    for (auto& [name, v] : kw) kwargs.dict->set(name, v);
    in.assign(kwargs_name, kwargs);
  }
}

// A macro value: calling it renders its body in a fresh scope, its
// arguments bound by bind_params.
// A macro defined inside a loop or another macro sees the variables of
// its definition's scope (jinja2 compiles it to a closure): `closure` holds
// them, the template's top-level variables are read when it runs.
Value make_macro(const Stmt& s, std::shared_ptr<const Frame> closure) {
  const Stmt* m = &s;
  const bool top = !closure;
  // A pure macro's calls may be served from the record's memo (not where
  // its result is Markup: the memo keeps strs).
  Value f = top && s.purity ? Value::func(s.text,
                                          [m](Interp& in, Args& args) -> Value {
                                            if (MemoScope* memo = current_memo();
                                                memo && in.memo_calls == 0 && !in.autoescape && !m->escape)
                                              return call_pure_macro(in, *m, args, *memo);
                                            return run_macro(in, *m, nullptr, args);
                                          })
                            : Value::func(s.text, [m, closure](Interp& in, Args& args) -> Value {
                                return run_macro(in, *m, closure.get(), args);
                              });
  if (top) f.fn->macro = m;
  f.fn->def = m;
  return f;
}

// A block's body, in place or called through `self`: a scope that sees the
// template's top-level variables alone (the enclosing scope's too where
// it is scoped and renders in place).
// Its output goes to `into` where given (emptied first).
void run_block(Interp& in, const Stmt& s, bool scoped, std::string* into = nullptr) {
  if (s.required) throw Error("Required block '" + s.text + "' not found");
  FrameGuard g(in, !scoped);
  // No break or continue in it (parser.cpp).
  if (into) capture_into(in, s.bodies[0], *into);
  else exec(in, s.bodies[0]);
}

}  // namespace

Value run_macro(Interp& in, const Stmt& m, const Frame* closure, Args& args) {
  if (++in.depth > 100) throw Error("maximum macro recursion depth exceeded");
  in.depth_peak = std::max(in.depth_peak, in.depth);
  FrameGuard outer(in, true);
  if (closure) in.frames.back().vars = closure->vars;
  FrameGuard guard(in, false);
  MessageGuard message_guard(in);  // a set in a macro binds no iteration
  in.iteration_bound = nullptr;
  bind_params(in, m, 0, args);
  std::string r = capture(in, m.bodies[0]);
  --in.depth;
  // Markup where the body escapes, or where autoescape is on (jinja2's
  // Macro.__call__ takes the caller's eval context).
  if (in.autoescape || (m.escape && escapes(in, m))) return markup(std::move(r));
  return Value::str(std::move(r));
}

Value template_self(const std::vector<Stmt*>& blocks) {
  Value self = Value::new_dict();
  self.ns = true;
  self.view = kSelfView;
  for (const Stmt* b : blocks)
    self.dict->set(b->text, Value::func(b->text, [b](Interp& in, Args& args) -> Value {
                     if (!args.pos.empty() || !args.kw.empty())
                       throw Error("BlockReference.__call__() takes 1 positional argument");
                     if (++in.depth > 100) throw Error("maximum recursion depth exceeded");
                     MessageGuard message_guard(in);  // a block called so binds no iteration
                     in.iteration_bound = nullptr;
                     std::string buf;
                     run_block(in, *b, false, &buf);
                     --in.depth;
                     if (in.autoescape) return markup(std::move(buf));  // BlockReference.__call__
                     return Value::str(std::move(buf));
                   }));
  return self;
}

void resume_iterations(Interp& in, const Stmt& loop, const std::vector<Value>& items, std::size_t from) {
  if (from < items.size()) loop_body(in, loop, items, false, -1, from);
}

std::string scoped_capture(Interp& in, const Body& body, Flow* flow) {
  FrameGuard g(in, false);
  return capture(in, body, flow);
}

std::string capture(Interp& in, const Body& body, Flow* flow) {
  std::string buf;
  capture_into(in, body, buf, flow);
  return buf;
}

void capture_into(Interp& in, const Body& body, std::string& buf, Flow* flow) {
  buf.clear();
  std::string* saved = in.out;
  in.out = &buf;
  try {
    Flow f = exec(in, body);
    if (flow) *flow = f;
  } catch (...) {
    in.out = saved;
    throw;
  }
  in.out = saved;
}

namespace {

// An output under an autoescape: markupsafe's escape() of what is no Markup
// where the autoescape is on.
[[gnu::noinline]] void escaped_output(Interp& in, const Stmt& s) {
  Value v = eval(in, *s.exprs[0]);
  if (tracking(in)) in.track->operand(v);
  if (!escapes(in, s) || (v.is_str() && v.markup)) {
    write(in, v.is_str() ? *v.s : to_str(v));
    return;
  }
  std::string e;
  html_escape(v.is_str() ? std::string_view(*v.s) : std::string_view(to_str(v)), e);
  write(in, e);
}

// Markup(v): a str marked safe as it is, anything else its str().
[[gnu::noinline]] void as_markup(Value& v) {
  if (v.is_str()) v.markup = true;
  else v = markup(to_str(v));
}

// A {% generation %} body's own varargs, kwargs and caller (a caller called
// without arguments).
[[gnu::noinline]] void bind_caller_names(Interp& in, const Stmt& s) {
  Args none;
  bind_params(in, s, 0, none);
}

// {% autoescape %}: the value set while the body runs; jinja2 reverts the
// eval context after the body, so a break or continue in it leaves the
// value set.
[[gnu::noinline]] Flow exec_autoescape(Interp& in, const Stmt& s) {
  FrameGuard g(in, false);
  const bool was = in.autoescape;
  in.autoescape = truthy(eval(in, *s.exprs[0]));
  Flow f = exec(in, s.bodies[0]);
  if (f == Flow::kNormal) in.autoescape = was;
  return f;
}

// exec()'s cases other than output, `if`, `for` and `set`, each in a
// function of its own: exec() keeps a short loop, and an error thrown
// through it (raise_exception, a type error) has fewer call sites to
// search in each of its frames.

// {% set x %}...{% endset %}, with its filter where it has one.
[[gnu::noinline]] Flow exec_set_block(Interp& in, const Stmt& s) {
  // A break or continue inside leaves the loop iteration at once: no
  // assignment (no output, for a filter block), as in jinja2.
  Flow f = Flow::kNormal;
  std::string body = scoped_capture(in, s.bodies[0], &f);
  if (f != Flow::kNormal) return f;
  Value v = Value::str(std::move(body));
  // (Markup if context.eval_ctx.autoescape else identity)(filter(Markup(text) where escapes))
  if (s.escape && s.filter && escapes(in, s)) v.markup = true;
  if (s.filter) {
    FrameGuard g(in, false);
    in.assign(kBlockBodyName(), v);
    v = eval(in, *s.filter);
  }
  if (in.autoescape) [[unlikely]]
    as_markup(v);
  if (s.one_name()) in.assign(s.names[0], std::move(v));
  else assign_targets(in, s, v);
  return Flow::kNormal;
}

// {% macro %}: the macro, with the scope it was defined in.
[[gnu::noinline]] void define_macro(Interp& in, const Stmt& s) {
  std::shared_ptr<Frame> closure;
  for (std::size_t k = in.frames.size(); k-- > 1;) {  // the definition's scope, innermost first
    if (!closure) closure = std::make_shared<Frame>();
    for (const auto& [name, v] : in.frames[k].vars)
      if (!closure->find(name)) closure->vars.emplace_back(name, v);
    if (in.frames[k].barrier) break;
  }
  in.assign(s.names.back(), make_macro(s, std::move(closure)));
}

// {% call %}: the macro called with the block as its caller.
[[gnu::noinline]] void exec_call_block(Interp& in, const Stmt& s) {
  const Stmt* cs = &s;
  // Markup where the body escapes, or where autoescape is on (a Macro
  // called from the template gets the caller's eval context).
  Value caller = Value::func("caller", [cs](Interp& i2, Args& a) -> Value {
    FrameGuard g(i2, false);
    MessageGuard message_guard(i2);  // nor one in a call block
    i2.iteration_bound = nullptr;
    bind_params(i2, *cs, 1, a);
    std::string r = capture(i2, cs->bodies[0]);
    if (i2.autoescape || (cs->escape && escapes(i2, *cs))) return markup(std::move(r));
    return Value::str(std::move(r));
  });
  caller.fn->def = cs;
  const Expr& call = *s.exprs[0];
  Value f = eval(in, *call.a[0]);
  Args args;
  eval_args(in, call, 1, args);
  args.kw.emplace_back("caller", caller);
  if (f.kind != Kind::kFunc) throw Error("'call' needs a macro");
  write(in, to_str(f.fn->call(in, args)));
}

// {% filter %}: the body's output through the filter chain.
[[gnu::noinline]] Flow exec_filter_block(Interp& in, const Stmt& s) {
  Flow f = Flow::kNormal;
  std::string body = scoped_capture(in, s.bodies[0], &f);
  if (f != Flow::kNormal) return f;
  FrameGuard g(in, false);
  Value text = Value::str(std::move(body));
  if (s.escape && escapes(in, s)) text.markup = true;
  in.assign(kBlockBodyName(), std::move(text));
  // jinja2 yields the chain's result as it is: what is no str fails
  // the join of the output.
  Value r = eval(in, *s.filter);
  if (!r.is_str()) throw Error("sequence item 0: expected str instance, " + std::string(type_name(r)) + " found");
  write(in, *r.s);
  return Flow::kNormal;
}

// {% with %}: the body in a scope of its own.
[[gnu::noinline]] Flow exec_with(Interp& in, const Stmt& s) {
  FrameGuard g(in, false);
  std::vector<Value> vals;
  for (const auto& x : s.exprs) vals.push_back(eval(in, *x));
  for (std::size_t k = 0; k < vals.size(); ++k) in.assign(s.names[k], vals[k]);
  Flow f = exec(in, s.bodies[0]);
  if (f != Flow::kNormal) return f;
  return Flow::kNormal;
}

// {% generation %}: the body's output, its span kept as transformers counts it.
[[gnu::noinline]] void exec_generation(Interp& in, const Stmt& s) {
  std::string body = std::move(in.spare_capture);
  {
    FrameGuard g(in, false);
    if (s.uses_varargs || s.uses_kwargs || s.uses_caller) [[unlikely]]
      bind_caller_names(in, s);
    capture_into(in, s.bodies[0], body);
  }
  // As transformers counts it: from the top-level output so far.
  std::size_t start = in.root->size();
  if (in.generation) in.generation->emplace_back(start, start + body.size());
  write(in, body);
  in.spare_capture = std::move(body);
}

}  // namespace

Flow exec(Interp& in, const Body& body, std::size_t from, std::size_t to) {
  const std::size_t end = std::min(to, body.size());
  for (std::size_t at = from; at < end && !in.done; ++at) {
    const Stmt& s = *body[at];
    in.step(s.pos);
    switch (s.kind) {
      case SK::kText: write(in, s.text); break;
      case SK::kEscOutput: escaped_output(in, s); break;
      case SK::kOutput: {
        const Expr& x = *s.exprs[0];
        if (is_concat(x)) {  // joined straight into the output (no expression writes to it)
          in.step(x.pos);
          std::string& out = *in.out;
          const std::size_t at = out.size();
          Value acc;
          if (concat_into(in, x, out, acc, at)) {
            wrote(in, at);
          } else {
            if (tracking(in)) in.track->operand(acc);
            if (acc.is_str()) write(in, acc.s.through());
            else write(in, to_str(acc));
          }
          break;
        }
        Value t;
        const Value& v = eval_ref(in, x, t);
        if (tracking(in)) in.track->operand(v);
        if (v.is_str()) write(in, v.s.through());
        else write(in, to_str(v));
        break;
      }
      case SK::kIf: {
        std::size_t k = 0;
        for (; k < s.exprs.size(); ++k) {
          Value t;
          const Value& c = eval_ref(in, *s.exprs[k], t);
          if (tracking(in)) in.track->truth(c);
          if (truthy(c)) break;
        }
        if (k < s.bodies.size()) {
          Flow f = exec(in, s.bodies[k]);
          if (f != Flow::kNormal) return f;
        }
        break;
      }
      case SK::kFor: {
        Flow f = exec_for(in, s);
        if (f != Flow::kNormal) return f;
        break;
      }
      case SK::kSet: {
        Value v = s.appends && !in.autoescape ? append_to_attribute(in, s) : eval(in, *s.exprs[0]);
        if (tracking(in)) {
          if (!s.text.empty() || !s.one_name()) in.track->operand(v);
          if (!s.text.empty()) in.track->stored(v);
          if (s.text.empty() && in.frames.size() == 1 &&
              std::find(s.targets.begin(), s.targets.end(), "add_generation_prompt") != s.targets.end())
            in.track->spoil_now(static_cast<int64_t>(in.track->n));
        }
        if (!s.text.empty()) {
          Value obj = in.lookup(s.names[0]);
          require_namespace(obj, s.targets[0]);
          if (!s.text.empty() && s.text[0] == '_') throw Error("namespace attributes cannot start with '_'");
          in.keep_namespace(obj, v);
          if (tracking(in)) in.track->set_attr(obj, s.text, v);
          obj.dict->set(s.text, std::move(v));
        } else {
          if (in.provenance && s.one_name()) bind_iteration(in, v);
          if (s.one_name()) in.assign(s.names[0], std::move(v));
          else assign_targets(in, s, v);
        }
        break;
      }
      case SK::kSetBlock: {
        Flow f = exec_set_block(in, s);
        if (f != Flow::kNormal) return f;
        break;
      }
      case SK::kMacro: define_macro(in, s); break;
      case SK::kCallBlock: exec_call_block(in, s); break;
      case SK::kFilterBlock: {
        Flow f = exec_filter_block(in, s);
        if (f != Flow::kNormal) return f;
        break;
      }
      case SK::kWith: {
        Flow f = exec_with(in, s);
        if (f != Flow::kNormal) return f;
        break;
      }
      case SK::kBlock: run_block(in, s, s.scoped); break;
      case SK::kAutoescape: {
        Flow f = exec_autoescape(in, s);
        if (f != Flow::kNormal) return f;
        break;
      }
      case SK::kBreak: return Flow::kBreak;
      case SK::kContinue: return Flow::kContinue;
      case SK::kGeneration: exec_generation(in, s); break;
    }
  }
  return Flow::kNormal;
}

}  // namespace tokfeed::tmpl
