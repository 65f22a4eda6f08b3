// The evaluator's state while one render runs: scopes, the output buffers,
// the step budget and the generation spans.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <ctime>
#include <string>
#include <utility>
#include <vector>

#include "template/ast.hpp"
#include "template/template.hpp"

namespace tokfeed::tmpl {

// Set by cancel_renders(): every render stops at its next 1024th step.
inline std::atomic<bool> render_cancel{false};

struct Tracker;  // resume.hpp
struct Probe;

// A scope's variables, by interned name.
using Scope = std::vector<std::pair<Name, Value>>;

// `vars` as a scope (its names interned), in `out`'s buffer where it is big
// enough (as a vector's copy assignment reuses it).
void assign_scope(Scope& out, const Vars& vars);

struct Frame {
  Scope vars;
  bool barrier = false;  // a macro's scope: lookups skip to the template's globals
  Value* find(Name name) {
    for (auto& [k, v] : vars)
      if (k == name) return &v;
    return nullptr;
  }
  // The index of `name` in vars (vars.size(): none). A scope's variables
  // only grow: an index stays valid while the scope lives.
  std::size_t slot(Name name) const {
    for (std::size_t k = 0; k < vars.size(); ++k)
      if (vars[k].first == name) return k;
    return vars.size();
  }
  void set(Name name, Value v) {
    if (Value* p = find(name)) {
      *p = std::move(v);
      return;
    }
    if (vars.empty()) vars.reserve(8);  // a scope's first variable: room for the next ones in one allocation
    vars.emplace_back(name, std::move(v));
  }
};

struct Interp {
  std::vector<Frame> frames;  // frames[0]: the render's variables and top-level sets
  std::string* out = nullptr;
  std::string* root = nullptr;                                             // the top-level output
  std::vector<std::pair<std::size_t, std::size_t>>* generation = nullptr;  // byte spans in *root
  Provenance* provenance = nullptr;
  Tracker* track = nullptr;  // what a render with resume points watches (resume.hpp)
  Probe* probe = nullptr;    // a prefix render that may resume at the first main loop (resume.hpp)
  bool done = false;         // a probed render resumed and ran to its end: the statements in progress stop
  // jinja2's context.eval_ctx.autoescape: set by {% autoescape %} while its
  // body runs (what join, replace, urlize, xmlattr, a set block's result and
  // a macro or caller called now read).
  bool autoescape = false;
  // Folding a constant where autoescape is volatile (Stmt::escape & 2):
  // jinja2 folds no filter or test there.
  bool fold_volatile = false;
  Value resume_items;    // a render resumed inside its loop: the loop's items (resume.hpp)
  int64_t message = -1;  // the message the innermost message-bound iteration is on (-1: none)
  // Whether the innermost one-variable `for` iteration is bound to a message
  // (null: none, or in a macro or call block); a `{% set %}` of a message
  // binds one that is not.
  bool* iteration_bound = nullptr;
  uint64_t steps = 0;
  uint64_t max_steps = 0;
  // The step count past which step() next checks the budget and
  // render_cancel (at most max_steps; every 1024th step at least).
  uint64_t step_check = 0;
  std::size_t max_output = 0;
  int depth = 0;  // macro call depth
  // What a pure macro's memo (macro_memo.hpp) needs to know of a call it
  // ran: the deepest `depth` and the most scopes reached since they were
  // last reset, how many
  // iterations were bound to a message (provenance's `seen`), and how many
  // `tojson` results of 2,000 bytes or more the record's memo served or
  // wrote while open (a dump that big counts steps for its allocations,
  // one that the memo serves does not). `memo_calls`: pure macro calls running that the
  // memo may keep (their calls inside are run as they are).
  int depth_peak = 0;
  std::size_t frames_peak = 0;  // the most scopes `frames` held since last reset (its growth counts steps)
  uint64_t message_binds = 0;
  uint64_t big_dumps = 0;
  int memo_calls = 0;
  std::tm now{};  // what strftime_now formats
  Pos pos;        // the node being evaluated, for errors

  // Namespaces given a list, dict or function: emptied when the render ends.
  std::vector<Ref<DictObj>> namespaces;
  // A buffer reused with its capacity: a {% generation %} body (taken while
  // in use, so a nested one makes its own).
  std::string spare_capture;

  void step(Pos p) {
    pos = p;
    if (++steps > step_check) [[unlikely]]
      check_steps();
  }
  // Fails past the budget or once cancel_renders() ran; else sets the next check.
  [[gnu::noinline]] void check_steps() {
    if (steps > max_steps || render_cancel.load(std::memory_order_relaxed)) step_failed();
    step_check = std::min(max_steps, steps | 1023);
  }
  // Throws what stops the render at this step: the budget, or cancel_renders().
  [[noreturn]] void step_failed() const;
  std::string step_error() const {
    return "the template ran past its step budget of " + std::to_string(max_steps) +
           " steps (raise [tokenizer] template_max_steps if the template is legitimately long)";
  }
  void keep_namespace(const Value& ns, const Value& v) {
    if (v.is_list() || v.is_dict() || v.kind == Kind::kFunc) namespaces.push_back(ns.dict);
  }
  void release_namespaces() {
    std::vector<Ref<DictObj>> all;
    all.swap(namespaces);
    for (auto& d : all) {
      std::vector<std::pair<std::string, Value>> items;
      items.swap(d->items());
    }
  }
  // The variable `name` in scope (null: none; then lookup() gives a global
  // function or an undefined value).
  const Value* find_var(Name name) {
    for (std::size_t k = frames.size(); k-- > 0;) {
      if (const Value* v = frames[k].find(name)) return v;
      if (frames[k].barrier && k > 0) k = 1;  // next: frames[0]
    }
    return nullptr;
  }
  Value lookup(Name name);
  // lookup() of a name expression that is no variable in scope: a global
  // function, or the expression's own undefined value (no allocation).
  const Value& global_or_undefined(const Expr& e, Value& tmp);
  void assign(Name name, Value v) { frames.back().set(name, std::move(v)); }
  // A scope of its own for a macro, call block, loop or block body; its
  // variables' buffer is a popped scope's where one is kept.
  void push_frame(bool barrier) {
    Frame& f = frames.emplace_back();
    if (frames.size() > frames_peak) frames_peak = frames.size();
    f.barrier = barrier;
    spare_scopes.take(f.vars);
  }
  // Never allocates (a FrameGuard pops in its destructor).
  void pop_frame() noexcept {
    spare_scopes.give(frames.back().vars);
    frames.pop_back();
  }
  // Emptied vectors' buffers, reused by the next scopes and calls: up to 8,
  // each under 4 KiB, the size whose allocation costs a step (budget.hpp),
  // so a render takes the steps it would take without them.
  template <class T>
  struct Spares {
    std::array<std::vector<T>, 8> kept;
    std::size_t count = 0;
    void take(std::vector<T>& v) noexcept {
      if (count != 0) v.swap(kept[--count]);
    }
    void give(std::vector<T>& v) noexcept {
      v.clear();
      if (v.capacity() != 0 && v.capacity() * sizeof(T) < 4096 && count < kept.size()) kept[count++].swap(v);
    }
  };
  Spares<std::pair<Name, Value>> spare_scopes;
  Spares<Value> spare_args;  // positional arguments (PooledArgs)
};

// A call's arguments, their positional buffer taken from the interpreter's
// spares and given back, emptied, when the call is done (most calls of a
// render take one to three arguments: no allocation each).
struct PooledArgs {
  Interp& in;
  Args args;
  explicit PooledArgs(Interp& i) : in(i) { in.spare_args.take(args.pos); }
  ~PooledArgs() { in.spare_args.give(args.pos); }
  PooledArgs(const PooledArgs&) = delete;
  PooledArgs& operator=(const PooledArgs&) = delete;
};

// The record's memo (template.hpp), or null.
MemoScope* current_memo() noexcept;

// A call of the macro `m`: its body rendered in a scope of its own, the
// arguments bound (`closure`: the variables of the scope it was defined
// in, for a macro defined inside a loop or another macro; else null).
Value run_macro(Interp& in, const Stmt& m, const Frame* closure, Args& args);
// The same for a pure macro (Stmt::purity) while a record's memo is open:
// served from the memo where the call was made before (macro_memo.cpp).
Value call_pure_macro(Interp& in, const Stmt& m, Args& args, MemoScope& memo);

Value eval(Interp& in, const Expr& e);
// eval() without a copy where the value already exists (a variable, an
// attribute of one, a literal): a reference to it, valid until the next
// evaluation that is not pure (ast.hpp) or the next statement; else the
// value, kept in `tmp`.
const Value& eval_ref(Interp& in, const Expr& e, Value& tmp);
// eval_ref() of an operand read as a whole (resume.hpp).
const Value& operand_ref(Interp& in, const Expr& e, Value& tmp);
// Whether the body of `s` (a macro, caller, recursive loop, set or filter
// block) gives Markup, or an output under autoescape escapes, as jinja2
// compiled it there (Stmt::escape).
inline bool escapes(const Interp& in, const Stmt& s) { return (s.escape & 2) ? in.autoescape : (s.escape & 1) != 0; }
// A `+` or `~` node, and eval() of one: a left-nested chain of them is
// evaluated as the nested nodes are (the same steps, operands and errors)
// with its strings joined in one buffer (eval_ref.cpp).
inline bool is_concat(const Expr& e) {
  return e.kind == EK::kBinary && e.name.size() == 1 && (e.name[0] == '+' || e.name[0] == '~');
}
Value concat_chain(Interp& in, const Expr& top);
// eval() of a kSet's value where Stmt::appends: the same value and errors,
// the attribute's str appended to in place where only the attribute and
// the chain hold it, O(what is appended) instead of O(the str). Its
// buffers cost no steps of their own; what the chain appends costs one
// step per 4 KiB, whichever way the str was built, so that renders with
// and without a tracker (which holds the attribute's values) count alike.
Value append_to_attribute(Interp& in, const Stmt& s);
// Steps for building `size` bytes at once (budget.hpp: an allocation costs
// one per 4 KiB).
inline void charge_steps(Interp& in, std::size_t size) {
  in.steps += size >> 12;
  if (in.steps > in.step_check) in.check_steps();
}
// The same, its result left where it is: true, the str appended to `buf`
// after its first `base` bytes (what follows them is replaced); false, `acc`
// (buf cut back to `base` bytes).
bool concat_into(Interp& in, const Expr& top, std::string& buf, Value& acc, std::size_t base = 0);
// jinja2's compile-time evaluation of a constant expression (its nodes'
// as_const): `out` and true, or false where jinja2 leaves it to the render.
// It differs from eval() only in slicing through getitem (a TypeError gives
// an undefined value).
bool fold_const(Interp& in, const Expr& e, Value& out);
// What the `break`/`continue` statements unwind with.
enum class Flow : uint8_t { kNormal, kBreak, kContinue };
// Runs body[from:to].
Flow exec(Interp& in, const Body& body, std::size_t from = 0, std::size_t to = SIZE_MAX);
// Runs iterations [from, items.size()) of the `for` statement `loop` over
// `items` in the innermost scope, which holds what the iterations before
// `from` left there (a prefix render resumed inside its loop, resume.hpp).
void resume_iterations(Interp& in, const Stmt& loop, const std::vector<Value>& items, std::size_t from);
// Renders `body` into a fresh string (macros, set blocks, filter blocks);
// `flow`, when given, receives how the body ended (break, continue).
std::string capture(Interp& in, const Body& body, Flow* flow = nullptr);
// jinja2's `self` (a TemplateReference) for a template's blocks: a
// namespace-like object whose attributes render them.
Value template_self(const std::vector<Stmt*>& blocks);
// capture() into `buf` (emptied first).
void capture_into(Interp& in, const Body& body, std::string& buf, Flow* flow = nullptr);
// The same in a scope of its own, as jinja2 runs set blocks, filter blocks
// and {% generation %} (a call block): what the body sets stays inside.
std::string scoped_capture(Interp& in, const Body& body, Flow* flow = nullptr);

// The arguments of call, filter or test `e`, from e.a[first] and e.kw, each
// read as a whole where a render is tracked (resume.hpp).
void eval_args(Interp& in, const Expr& e, std::size_t first, Args& out);
// A call's `*args` and `**kwargs` (Expr::star, kStarStar), added to `out`
// as Python adds them: the items of an iterable, the items of a mapping
// with str keys that no keyword argument repeats.
void add_star_args(const Value& v, Args& out);
void add_star_kwargs(const Value& v, Args& out);

// Builtins (builtins.cpp, methods.cpp).
Value global_function(std::string_view name);
// obj.name(args): Python methods of str, dict and list. Sets `found` false when
// `obj` has no such method.
Value call_method(Interp& in, const Value& obj, std::string_view name, Args& args, bool& found);
bool has_method(const Value& obj, std::string_view name);
// Which kinds of object have a method called `name` (kMethodStr,
// kMethodDict, kMethodList of ast.hpp; a tuple has only index and count).
uint8_t method_kinds(std::string_view name);
// s.name(args) for a str method (strmethods.cpp).
Value str_method(const std::string& s, std::string_view name, Args& args);
// The same on the str `obj`: a result equal to it may be `obj` itself.
Value str_method(const Value& obj, std::string_view name, Args& args);
Value bound_method(const Value& obj, std::string_view name);
// A method that would change its list or dict (append, pop, update, ...):
// transformers' sandbox makes it an undefined value (not defined, printed
// empty, an error when called).
bool unsafe_method(const Value& obj, std::string_view name);
// obj.name read as an attribute where has_method(obj, name): the bound
// method, or undefined for an unsafe one.
Value method_attr(const Value& obj, std::string_view name);
// range(start, stop, step) (step != 0) as the sandbox caps it; its length
// costs steps of `in` where given.
Value make_range(int64_t start, int64_t stop, int64_t step, Interp* in);
// Python semantics shared by filters and the evaluator.
Value get_item(const Value& obj, const Value& key);
Value get_attr(const Value& obj, std::string_view name);
bool contains(const Value& container, const Value& item);
// obj[a:b:c], as Python slices it (eval.cpp).
Value slice(const Value& obj, const Value& a, const Value& b, const Value& c);
// Throws Python's "unhashable type" for a list or dict (or a tuple holding one).
void require_hashable(const Value& v);
// Iterates `v` as Python's for does (dict → keys); Undefined is empty.
std::vector<Value> iterate(const Value& v);
int64_t length(const Value& v);
// The `length` (and `count`) filter: Value::integer(length(v)) (eval() reads
// `x | length` without copying x).
Value filter_length(Interp& in, Value& v, Args& a);
// json.dumps(v, ensure_ascii, indent (null: None), separators, sort_keys).
std::string tojson(const Value& v, bool ascii, const std::string* indent, bool sort_keys, const std::string* item_sep,
                   const std::string* key_sep);
// `escape`: Markup's `%`, whose %s, %r and %a fields are HTML-escaped (a
// Markup argument's %s field is not).
std::string percent_format(const std::string& fmt, const Value& args, bool escape = false);
// C's printf of the finite |d| in conversion `conv` (e E f F g G) with
// `prec` digits and `#` when `alt`: what CPython's float formatting gives.
std::string float_digits(double d, char conv, int prec, bool alt);
// Python's ascii(v): its repr with every non-ASCII code point escaped.
std::string ascii_repr(const Value& v);
// Python's format(v, spec): the format mini-language of int, bool, float
// and str; other values take an empty spec alone (strformat.cpp).
std::string format_value(const Value& v, std::string_view spec);
// s.format(*args, **kwargs), or s.format_map(args.pos[0]) where `map`, as
// jinja2's sandbox runs them: string.Formatter's fields, with attributes and
// items looked up as the template's `.` and `[]` do.
std::string str_format(const std::string& s, const Args& args, bool map);
// Python's binary operator `op` (+ - * / // % ** ~) on template values.
Value binary_op(const std::string& op, const Value& a, const Value& b);
// Python's comparison `op` (== != < > <= >= in notin) on template values.
bool compare_op(const std::string& op, const Value& a, const Value& b);

}  // namespace tokfeed::tmpl
