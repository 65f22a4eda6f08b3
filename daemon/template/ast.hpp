// The parsed template: expression and statement nodes.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "template/lexer.hpp"
#include "template/name.hpp"
#include "template/value.hpp"

namespace tokfeed::tmpl {

struct Interp;
using FilterFn = Value (*)(Interp&, Value&, Args&);
using TestFn = bool (*)(Interp&, const Value&, Args&);
struct Signature;

enum class EK : uint8_t {
  kLiteral,
  kName,
  kList,
  kTuple,
  kDict,     // a: key, value, key, value...
  kAttr,     // a[0].name
  kItem,     // a[0][a[1]]
  kSlice,    // a[0][a[1]:a[2]:a[3]], absent parts null
  kCall,     // a[0](a[1..], kw)
  kFilter,   // a[0] | name(a[1..], kw)
  kTest,     // a[0] is [not] name(a[1..], kw)
  kNeg,      // -a[0]
  kPos,      // +a[0]
  kNot,      // not a[0]
  kAnd,      // a[0] and a[1]
  kOr,       // a[0] or a[1]
  kBinary,   // a[0] name a[1]: + - * / // % ** ~
  kCompare,  // a[0] ops[0] a[1] ops[1] a[2]...
  kCond,     // a[0] if a[1] else a[2] (a[2] may be null)
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  EK kind;
  Pos pos;
  Value lit;
  std::string name;
  Name var;  // kName: `name` interned (set when the template is optimized, parser.cpp)
  std::vector<ExprPtr> a;
  std::vector<std::pair<std::string, ExprPtr>> kw;
  std::vector<std::string> ops;
  bool negate = false;
  // kCall, kFilter, kTest: a.back() is `*args` (its items are further
  // positional arguments); a `**kwargs` is the kw entry named kStarStar.
  bool star = false;
  // No call and no filter below: evaluating it runs no template code, so it
  // changes no variable or namespace (a value borrowed before it stays valid).
  bool pure = false;
  FilterFn filter = nullptr;
  TestFn test = nullptr;
  const Signature* sig = nullptr;  // kFilter, kTest: the arguments it takes (parser.hpp)
  // kName, kAttr: the undefined value a miss gives (the name as its hint),
  // made once when the template is parsed, and which kinds of object have
  // a method of that name (kMethodStr | kMethodDict | kMethodList; set with
  // kMethodsKnown).
  Value undef;
  uint8_t methods = 0;
  // kName: the name is add_generation_prompt (a read that resume points
  // watch, template/resume.hpp), told once when the template is parsed.
  bool prompt = false;
};

// The variable a set or filter block's filter chain is applied to (the
// chain's subject; no identifier).
inline constexpr std::string_view kBlockBody = "\001body";
// The key of a recursive loop's `loop` that calling it runs (no identifier).
inline constexpr std::string_view kLoopCall = "\001call";
// The name of a call's `**kwargs` among its keyword arguments (no identifier).
inline constexpr std::string_view kStarStar = "**";
// A `~` under a constant true autoescape: markupsafe's markup_join (a
// Markup operand escapes the others, the result is Markup) instead of a
// plain join (kBinary's name).
inline constexpr std::string_view kMarkupJoin = "~~";

constexpr uint8_t kMethodStr = 1, kMethodDict = 2, kMethodList = 4, kMethodsKnown = 8;

enum class SK : uint8_t {
  kText,
  kOutput,
  kIf,
  kFor,
  kSet,       // targets = expr, or ns.attr = expr
  kSetBlock,  // {% set x %}body{% endset %}
  kMacro,
  kCallBlock,    // {% call m(args) %}body{% endcall %}
  kFilterBlock,  // {% filter f %}body{% endfilter %}
  kWith,
  kBreak,
  kContinue,
  kGeneration,
  kBlock,       // {% block name [scoped] [required] %}body{% endblock %}: `text` the name
  kAutoescape,  // {% autoescape exprs[0] %}body{% endautoescape %}
  kEscOutput,   // kOutput under an autoescape (Stmt::escape): it escapes what is no Markup
};

// Whether `top` is a left-nested chain of `+` and `~` (at most 64 of them)
// whose leftmost operand is `ns.attr`.
inline bool appends_to(const Expr& top, std::string_view ns, std::string_view attr) {
  const Expr* leaf = &top;
  std::size_t n = 0;
  while (n < 64 && leaf->kind == EK::kBinary && (leaf->name == "+" || leaf->name == "~")) ++n, leaf = leaf->a[0].get();
  return n > 0 && leaf->kind == EK::kAttr && leaf->name == attr && leaf->a[0]->kind == EK::kName &&
         leaf->a[0]->name == ns;
}

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

// What a pure macro's result depends on besides its arguments: the
// variables of the template's top-level scope that its body, or a pure
// macro it calls, reads (macro_memo.cpp). Where `macros[i]` is set, the
// variable `names[i]` must hold that top-level macro; else its value (or
// its absence: a builtin or an undefined value) is part of the call's key.
struct MacroPurity {
  std::vector<Name> names;
  std::vector<const Stmt*> macros;
};

struct Stmt {
  SK kind;
  Pos pos;
  std::string text;                  // kText; kSet's namespace attribute; kMacro's name
  std::vector<std::string> targets;  // kFor/kSet/kSetBlock names; kMacro params
  // kFor/kSet/kSetBlock: the target's nesting where it is not one name or a
  // flat tuple of two names or more (`a, (b, c)`, `(a,)`, `()`), in
  // pre-order: -1 a name (the next of `targets`), -2 a namespace attribute
  // (the next of `targets`, "ns.attr"), n >= 0 a tuple of n items.
  std::vector<int16_t> shape;
  std::vector<Name> names;     // `targets` interned; kMacro: then its name (set by optimize, parser.cpp)
  std::vector<ExprPtr> exprs;  // kIf: conditions; kOutput/kSet/kFor(iter, filter)/kCallBlock; kMacro defaults
  std::vector<Body> bodies;    // kIf: one per condition (+ else); kFor: body, else; others: body
  ExprPtr filter;              // kSetBlock/kFilterBlock: filter chain applied to the body (subject null)
  bool has_else = false;
  bool recursive = false;                 // kFor: `recursive` (the body may call loop(items))
  bool scoped = false, required = false;  // kBlock
  // kMacro: whether the body reads `varargs`, `kwargs`, `caller` (jinja2
  // then accepts extra positional arguments, unknown keywords, a caller).
  bool uses_varargs = false, uses_kwargs = false, uses_caller = false;
  // jinja2's compile-time autoescape where the statement is: 1 its value
  // (constant), 2 volatile (under an {% autoescape %} of a value known at
  // render time alone: in.autoescape then). An output escapes what is no
  // Markup; a `~` joins as markup_join (set on its node: kMarkupJoin); a
  // macro's, caller's or recursive loop's body and a set or filter block's
  // text are Markup (exec.cpp). A block's body is 0: jinja2 compiles blocks
  // after the template's body, the autoescape scope closed.
  uint8_t escape = 0;
  // kFor: whether the body may read past its iteration: `loop` other than
  // loop.index, index0, first, previtem, depth, cycle; `messages` or the
  // name it iterates over; add_generation_prompt; a call of a macro
  // (template/resume.hpp: where none, no point is kept inside the loop).
  bool reads_ahead = true;
  // kFor over `messages` (or a slice of it) at the top level, through
  // `if`s: whether another such loop follows it (a prefix may then run up to
  // that one itself: Tracker::enter_loop).
  bool followed = false;
  // kFor reached from the template's body through `if` bodies alone: the
  // way there, per level the `if` body taken (none at the first level) and
  // the statement's index in it, and the most levels the search for it
  // from the top (Tracker::enter_loop) holds at once, its path's growth
  // (0: not reached so; the search runs).
  std::vector<std::pair<uint32_t, uint32_t>> top_path;
  uint32_t top_path_peak = 0;
  // kFor: whether the body may read `loop` (by name, or through a macro or
  // call block defined in it); where not, no `loop` is made.
  bool uses_loop = true;
  // kFor: whether `loop` needs its `changed` method (the template names
  // `changed` somewhere: an attribute, a key, a string); where not, none is
  // made (it holds state of its own). A name built at render time
  // (`loop | attr('chan' ~ 'ged')`) finds none.
  bool uses_changed = true;
  // kFor: where its iterations may turn idle (no output, no effect, the
  // same steps each), the `if` condition's first operand that says so when
  // falsy: the body is `set name = <integer arithmetic on loop.index0,
  // loop.length, ..., x | length, integer literals>` statements, then one
  // `if` without elif or else whose condition is `g and ...`, `g` a
  // namespace's attribute (`ns.flag`) that the body binds no name of. Once
  // `g` is falsy at an iteration's start, that iteration and every later
  // one only compute those integers and test `g` (exec.cpp: the render
  // runs one and counts the others' steps). Null: none.
  const Expr* idle_guard = nullptr;
  // kMacro defined at the top level (where it closes over nothing): set
  // where the macro is pure, its output a function of its arguments and
  // the variables named here (macro_memo.cpp; docs/chat_templates.md,
  // "Pure macros"). Null: not pure.
  std::shared_ptr<const MacroPurity> purity;

  // kSet of a namespace attribute: whether the value is a chain of `+` and
  // `~` whose leftmost operand is that attribute (`set ns.out = ns.out ~
  // x`): the attribute's str then grows in place where nothing else holds
  // it (append_to_attribute, eval_ref.cpp).
  bool appends = false;

  // kFor/kSet/kSetBlock: whether the target is one name (no unpacking).
  bool one_name() const { return targets.size() == 1 && shape.empty(); }
};

}  // namespace tokfeed::tmpl
