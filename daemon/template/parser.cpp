#include "template/parser.hpp"

#include <algorithm>
#include <cmath>

#include "template/budget.hpp"
#include "template/interp.hpp"
#include "template/macro_memo.hpp"
#include "template/parser_expr.hpp"
#include "template/pystr.hpp"

namespace tokfeed::tmpl {

namespace {

void check_names(const Body& body, bool soft, std::vector<std::string>& warnings);
bool reads(const Body& body, std::string_view name, bool into_blocks = true);

// A call with a keyword argument repeated: Python's SyntaxError when jinja2
// compiles what its optimizer left, so not where folding removed the call
// (`true or f(a=1, a=2)`).
void check_repeated_keywords(const Expr* e) {
  if (!e) return;
  for (std::size_t i = 0; i < e->kw.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (e->kw[i].first == e->kw[j].first)
        throw Error(where(e->pos) + ": keyword argument repeated: " + e->kw[i].first);
  for (const auto& x : e->a) check_repeated_keywords(x.get());
  for (const auto& [k, x] : e->kw) check_repeated_keywords(x.get());
}
void check_repeated_keywords(const Body& body) {
  for (const auto& sp : body) {
    for (const auto& x : sp->exprs) check_repeated_keywords(x.get());
    check_repeated_keywords(sp->filter.get());
    for (const Body& b : sp->bodies) check_repeated_keywords(b);
  }
}

// Whether a statement in `body` assigns the name `loop` (a set, set block
// or for target; a with's are parameters), at any depth.
bool assigns_loop(const Body& body) {
  for (const auto& sp : body) {
    const Stmt& s = *sp;
    bool stores = (s.kind == SK::kSet && s.text.empty()) || s.kind == SK::kSetBlock || s.kind == SK::kFor;
    if (stores && std::find(s.targets.begin(), s.targets.end(), "loop") != s.targets.end()) return true;
    for (const Body& b : s.bodies)
      if (assigns_loop(b)) return true;
  }
  return false;
}
void optimize(Body& body, uint8_t escape = 0);
bool any_escape(const Body& body) {
  for (const auto& s : body) {
    if (s->escape) return true;
    for (const Body& b : s->bodies)
      if (any_escape(b)) return true;
  }
  return false;
}
void template_reference(Body& body);

class Parser : public ExprParser {
 public:
  explicit Parser(std::vector<Token> toks) : ExprParser(std::move(toks)) {}

  Parsed run() {
    Parsed p;
    p.body = body({});
    if (cur().kind != Tok::kEnd) fail(cur().pos, "unexpected '" + cur().text + "'");
    p.has_generation = has_generation_;
    check_names(p.body, false, p.warnings);
    optimize(p.body);
    p.escapes = any_escape(p.body);
    check_repeated_keywords(p.body);
    return p;
  }

 private:
  // Statements until a block tag named in `stops` (left unconsumed after
  // its `{%`) or the end.
  Body body(std::initializer_list<std::string_view> stops) {
    Body out;
    for (;;) {
      const Token& t = cur();
      if (t.kind == Tok::kEnd) {
        if (stops.size())
          fail(t.pos, "unexpected end of template; expected '{% " + std::string(*(stops.end() - 1)) + " %}'");
        return out;
      }
      if (t.kind == Tok::kText) {
        auto s = std::make_unique<Stmt>();
        s->kind = SK::kText;
        s->pos = t.pos;
        s->text = t.text;
        out.push_back(std::move(s));
        ++i_;
      } else if (t.kind == Tok::kVarBegin) {
        auto s = std::make_unique<Stmt>();
        s->kind = SK::kOutput;
        s->pos = t.pos;
        ++i_;
        s->exprs.push_back(expr(true));
        if (cur().kind != Tok::kVarEnd) fail(cur().pos, "expected '}}', got " + describe(cur()));
        ++i_;
        out.push_back(std::move(s));
      } else if (t.kind == Tok::kBlockBegin) {
        const Token& n = peek();
        if (n.kind != Tok::kName) fail(n.pos, "expected a tag name, got " + describe(n));
        for (std::string_view s : stops)
          if (n.text == s) {
            ++i_;  // leave the tag name current
            return out;
          }
        ++i_;
        out.push_back(statement());
      } else {
        fail(t.pos, "unexpected " + describe(t));
      }
    }
  }

  // A macro's, call block's or {% generation %} body: jinja2 compiles it to
  // a function, so `break`/`continue` there are outside any loop.
  Body body_outside_loop(std::initializer_list<std::string_view> stops) {
    int saved = loop_depth_;
    loop_depth_ = 0;
    Body b = body(stops);
    loop_depth_ = saved;
    return b;
  }

  std::unique_ptr<Stmt> make(SK k, Pos p) {
    auto s = std::make_unique<Stmt>();
    s->kind = k;
    s->pos = p;
    return s;
  }

  std::unique_ptr<Stmt> statement() {
    Pos p = cur().pos;
    Depth guard(depth_, p);
    std::string tag = expect_name();
    if (tag == "if") return if_stmt(p);
    if (tag == "for") return for_stmt(p);
    if (tag == "set") return set_stmt(p);
    if (tag == "macro") return macro_stmt(p);
    if (tag == "call") return call_stmt(p);
    if (tag == "filter") return filter_stmt(p);
    if (tag == "with") return with_stmt(p);
    if (tag == "block") return block_stmt(p);
    if (tag == "autoescape") {
      // A scope of its own (jinja2's Scope around the eval context
      // modifier), in which the value is computed (optimize() tells what
      // its statements escape).
      auto s = make(SK::kAutoescape, p);
      s->exprs.push_back(expr(true));
      expect_block_end();
      s->bodies.push_back(body({"endautoescape"}));
      end_tag();
      return s;
    }
    if (tag == "generation") {
      auto s = make(SK::kGeneration, p);
      expect_block_end();
      s->bodies.push_back(body_outside_loop({"endgeneration"}));
      end_tag();
      has_generation_ = true;
      // transformers' extension makes it a call block: the body is a caller
      // of its own, with its own (empty) varargs and kwargs and no caller.
      s->uses_varargs = reads(s->bodies[0], "varargs", false);
      s->uses_kwargs = reads(s->bodies[0], "kwargs", false);
      s->uses_caller = reads(s->bodies[0], "caller", false);
      return s;
    }
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) fail(p, "'" + tag + "' outside a for loop");
      auto s = make(tag == "break" ? SK::kBreak : SK::kContinue, p);
      expect_block_end();
      return s;
    }
    fail(p, "unsupported or unknown tag '" + tag + "'");
  }

  void end_tag() {
    ++i_;  // the end tag's name
    expect_block_end();
  }

  std::unique_ptr<Stmt> if_stmt(Pos p) {
    auto s = make(SK::kIf, p);
    s->exprs.push_back(expr(true));
    expect_block_end();
    for (;;) {
      s->bodies.push_back(body({"elif", "else", "endif"}));
      std::string tag = cur().text;
      ++i_;
      if (tag == "elif") {
        s->exprs.push_back(expr(true));
        expect_block_end();
      } else if (tag == "else") {
        expect_block_end();
        s->bodies.push_back(body({"endif"}));
        s->has_else = true;
        end_tag();
        return s;
      } else {
        expect_block_end();
        return s;
      }
    }
  }

  // An assignment target as jinja2's parse_assign_target reads it: at the
  // top level, items separated by commas (after a trailing comma jinja2
  // reads the next token as an item, so `for a, in xs` fails); an item is
  // a name or, in parentheses, any expression that is a name or a tuple of
  // targets (`(a, (b, c))`, `(a,)`, `()`); a set's top-level items may be
  // namespace attributes (`ns.a, b`). Sets `s.targets` (the names in order;
  // "ns.a" for a namespace attribute) and `s.shape` (Stmt::shape).
  void targets(Stmt& s, bool with_namespace = false) {
    std::vector<int16_t> shape{0};
    bool tuple = false;
    for (;;) {
      target_item(s, shape, with_namespace);
      ++shape[0];
      if (!is_op(",")) break;
      tuple = true;
      ++i_;
      if (cur().kind == Tok::kBlockEnd || cur().kind == Tok::kVarEnd || is_op(")")) break;
    }
    if (!tuple) shape.erase(shape.begin());
    // One name, or a flat tuple of two names or more: no shape.
    const bool flat = std::all_of(shape.begin() + (tuple ? 1 : 0), shape.end(), [](int16_t x) { return x == -1; });
    if (flat && (tuple ? shape.size() >= 3 : shape.size() == 1)) shape.clear();
    s.shape = std::move(shape);
  }

  void target_item(Stmt& s, std::vector<int16_t>& shape, bool with_namespace) {
    if (is_op("(")) {
      ExprPtr e = primary();
      store_target(*e, s, shape);
      return;
    }
    const Token& t = cur();
    if (t.kind != Tok::kName) fail(t.pos, "expected a name, got " + describe(t));
    if (t.text == "true" || t.text == "True" || t.text == "false" || t.text == "False" || t.text == "none" ||
        t.text == "None")
      fail(t.pos, "can't assign to 'const'");
    s.targets.push_back(expect_name());
    shape.push_back(-1);
    if (with_namespace && is_op(".")) {
      ++i_;
      s.targets.back() += "." + expect_name();
      shape.back() = -2;
    }
  }

  void store_target(const Expr& e, Stmt& s, std::vector<int16_t>& shape) {
    if (e.kind == EK::kName) {
      s.targets.push_back(e.name);
      shape.push_back(-1);
    } else if (e.kind == EK::kTuple || (e.kind == EK::kLiteral && e.lit.is_list() && e.lit.list->items.empty())) {
      if (e.a.size() > 32767) fail(e.pos, "too many targets");
      shape.push_back(static_cast<int16_t>(e.a.size()));
      for (const auto& x : e.a) store_target(*x, s, shape);
    } else {
      fail(e.pos, "can't assign to this expression");
    }
  }

  std::unique_ptr<Stmt> for_stmt(Pos p) {
    auto s = make(SK::kFor, p);
    targets(*s);
    if (!is_name("in")) fail(cur().pos, "expected 'in', got " + describe(cur()));
    ++i_;
    s->exprs.push_back(tuple_or_expr(false));
    s->exprs.emplace_back();
    if (is_name("if")) {
      ++i_;
      s->exprs.back() = expr(true);
    }
    if (is_name("recursive")) {
      ++i_;
      s->recursive = true;
    }
    expect_block_end();
    ++loop_depth_;
    s->bodies.push_back(body({"else", "endfor"}));
    --loop_depth_;
    if (cur().text == "else") {
      ++i_;
      expect_block_end();
      s->bodies.push_back(body({"endfor"}));
      s->has_else = true;
    }
    end_tag();
    // jinja2 refuses any assignment to `loop` inside a for statement.
    if (std::find(s->targets.begin(), s->targets.end(), "loop") != s->targets.end() ||
        std::any_of(s->bodies.begin(), s->bodies.end(), [](const Body& b) { return assigns_loop(b); }))
      fail(p, "can't assign to special loop variable in for-loop target");
    return s;
  }

  std::unique_ptr<Stmt> set_stmt(Pos p) {
    Stmt target;
    targets(target, true);
    if (is_op("=")) {
      ++i_;
      auto s = make(SK::kSet, p);
      // ns.attr = ...: the namespace's name, `text` the attribute.
      if (target.shape.size() == 1 && target.shape[0] == -2) {
        std::string& t = target.targets[0];
        s->text = t.substr(t.find('.') + 1);
        t.resize(t.find('.'));
        target.shape.clear();
      }
      s->targets = std::move(target.targets);
      s->shape = std::move(target.shape);
      s->exprs.push_back(tuple_or_expr(true));
      s->appends = !s->text.empty() && s->shape.empty() && appends_to(*s->exprs[0], s->targets[0], s->text);
      expect_block_end();
      return s;
    }
    auto s = make(SK::kSetBlock, p);
    s->targets = std::move(target.targets);
    s->shape = std::move(target.shape);
    if (is_op("|")) s->filter = filter_chain(false);
    expect_block_end();
    s->bodies.push_back(body({"endset"}));
    end_tag();
    return s;
  }

  // `| f(args) | g` applied to the block body's placeholder variable, kBlockBody.
  ExprPtr filter_chain(bool inline_first) {
    auto subject = std::make_unique<Expr>();
    subject->kind = EK::kName;
    subject->pos = cur().pos;
    subject->name = kBlockBody;
    ExprPtr e = std::move(subject);
    // {% filter name | more %}: the first filter has no leading pipe (and
    // may not have one); {% set x | name | more %} has one.
    if (inline_first) e = filter(std::move(e));
    while (is_op("|")) {
      ++i_;
      e = filter(std::move(e));
    }
    return e;
  }

  std::unique_ptr<Stmt> macro_stmt(Pos p) {
    auto s = make(SK::kMacro, p);
    s->text = expect_name();
    params(*s);
    expect_block_end();
    s->bodies.push_back(body_outside_loop({"endmacro"}));
    end_tag();
    s->uses_varargs = reads(s->bodies[0], "varargs", false);
    s->uses_kwargs = reads(s->bodies[0], "kwargs", false);
    s->uses_caller = reads(s->bodies[0], "caller", false);
    return s;
  }

  void params(Stmt& s) {
    expect_op("(");
    while (!is_op(")")) {
      s.targets.push_back(expect_name());
      if (is_op("=")) {
        ++i_;
        s.exprs.push_back(expr(true));
      } else {
        if (!s.exprs.empty() && s.exprs.back()) fail(cur().pos, "non-default argument follows default argument");
        s.exprs.emplace_back();
      }
      if (!is_op(",")) break;
      ++i_;
    }
    expect_op(")");
  }

  std::unique_ptr<Stmt> call_stmt(Pos p) {
    auto s = make(SK::kCallBlock, p);
    if (is_op("(")) params(*s);
    std::vector<ExprPtr> defaults = std::move(s->exprs);
    s->exprs.clear();
    s->exprs.push_back(expr(true));
    if (s->exprs[0]->kind != EK::kCall) fail(p, "expected a call after 'call'");
    for (auto& d : defaults) s->exprs.push_back(std::move(d));
    expect_block_end();
    s->bodies.push_back(body_outside_loop({"endcall"}));
    end_tag();
    s->uses_varargs = reads(s->bodies[0], "varargs", false);  // the caller's, as a macro's
    s->uses_kwargs = reads(s->bodies[0], "kwargs", false);
    s->uses_caller = reads(s->bodies[0], "caller", false);
    return s;
  }

  std::unique_ptr<Stmt> filter_stmt(Pos p) {
    auto s = make(SK::kFilterBlock, p);
    s->filter = filter_chain(true);
    expect_block_end();
    s->bodies.push_back(body({"endfilter"}));
    end_tag();
    return s;
  }

  // A block renders in place (the template extends none): jinja2 compiles
  // it to a function of the template's context (top-level variables alone;
  // the enclosing scope's too where `scoped`), so break and continue are
  // outside any loop in it.
  std::unique_ptr<Stmt> block_stmt(Pos p) {
    auto s = make(SK::kBlock, p);
    s->text = expect_name();
    if (is_name("scoped")) {
      ++i_;
      s->scoped = true;
    }
    if (is_name("required")) {
      ++i_;
      s->required = true;
    }
    if (is_op("-"))
      fail(cur().pos, "Block names in Jinja have to be valid Python identifiers and may not contain hyphens");
    expect_block_end();
    s->bodies.push_back(body_outside_loop({"endblock"}));
    ++i_;  // endblock
    if (cur().kind == Tok::kName && cur().text == s->text) ++i_;
    expect_block_end();
    if (s->required)
      for (const auto& x : s->bodies[0])
        if (x->kind != SK::kText || !(x->text.empty() || py_isspace_str(x->text)))
          fail(x->pos, "Required blocks can only contain comments or whitespace");
    return s;
  }

  std::unique_ptr<Stmt> with_stmt(Pos p) {
    auto s = make(SK::kWith, p);
    while (cur().kind != Tok::kBlockEnd) {
      if (!s->targets.empty()) expect_op(",");
      s->targets.push_back(expect_name());
      expect_op("=");
      s->exprs.push_back(expr(true));
    }
    expect_block_end();
    s->bodies.push_back(body({"endwith"}));
    end_tag();
    return s;
  }

  int loop_depth_ = 0;
  bool has_generation_ = false;
};

bool reads(const Expr& e, std::string_view name) {
  if (e.kind == EK::kName && e.name == name) return true;
  for (const auto& x : e.a)
    if (x && reads(*x, name)) return true;
  for (const auto& [k, x] : e.kw)
    if (reads(*x, name)) return true;
  return false;
}

// Whether `body` reads the variable `name`; not inside a {% block %} where
// !into_blocks (jinja2's find_undeclared, which tells a macro's varargs,
// kwargs and caller, visits no block).
bool reads(const Body& body, std::string_view name, bool into_blocks) {
  for (const auto& s : body) {
    if (!into_blocks && s->kind == SK::kBlock) continue;
    for (const auto& x : s->exprs)
      if (x && reads(*x, name)) return true;
    if (s->filter && reads(*s->filter, name)) return true;
    for (const Body& b : s->bodies)
      if (reads(b, name, into_blocks)) return true;
  }
  return false;
}

// Unknown filters and tests, as jinja2 3.x compiles them: inside an `if`
// (its conditions and branches) or a conditional expression they fail only
// when reached, and become load warnings; anywhere else, and under a
// construct that opens a new scope (loop body, macro, call, filter, with,
// set block), they fail at load.
void check_expr(const Expr& e, bool soft, std::vector<std::string>& warnings) {
  if (e.kind == EK::kCond) soft = true;
  bool unknown = (e.kind == EK::kFilter && !e.filter) || (e.kind == EK::kTest && !e.test);
  if (unknown) {
    std::string what = std::string(e.kind == EK::kFilter ? "filter" : "test") + " '" + e.name + "'";
    if (!soft) throw Error(where(e.pos) + ": unsupported or unknown " + what);
    warnings.push_back(where(e.pos) + ": unknown " + what + " (an error if a render reaches it)");
  }
  for (const auto& x : e.a)
    if (x) check_expr(*x, soft, warnings);
  for (const auto& [k, x] : e.kw) check_expr(*x, soft, warnings);
}

void check_names(const Body& body, bool soft, std::vector<std::string>& warnings) {
  auto exprs = [&](const Stmt& s, std::size_t from, std::size_t to, bool sf) {
    for (std::size_t k = from; k < s.exprs.size() && k < to; ++k)
      if (s.exprs[k]) check_expr(*s.exprs[k], sf, warnings);
  };
  for (const auto& sp : body) {
    const Stmt& s = *sp;
    switch (s.kind) {
      case SK::kIf:
        exprs(s, 0, s.exprs.size(), true);
        for (const Body& b : s.bodies) check_names(b, true, warnings);
        break;
      case SK::kFor:
        exprs(s, 0, 1, soft);  // the iterable: the enclosing scope
        exprs(s, 1, 2, false);
        for (const Body& b : s.bodies) check_names(b, false, warnings);
        break;
      case SK::kCallBlock:
        exprs(s, 0, 1, soft);  // the call: the enclosing scope
        exprs(s, 1, s.exprs.size(), false);
        check_names(s.bodies[0], false, warnings);
        break;
      case SK::kWith:
        exprs(s, 0, s.exprs.size(), soft);
        check_names(s.bodies[0], false, warnings);
        break;
      default:
        exprs(s, 0, s.exprs.size(), s.kind == SK::kMacro ? false : soft);
        if (s.filter) check_expr(*s.filter, false, warnings);
        for (const Body& b : s.bodies) check_names(b, false, warnings);
    }
  }
}

// Whether Python can write `v` as a literal (jinja2's has_safe_repr): what
// its optimizer may fold into the template.
bool safe_repr(const Value& v) {
  switch (v.kind) {
    case Kind::kNone:
    case Kind::kBool:
    case Kind::kInt:
    case Kind::kFloat:
    case Kind::kStr: return true;
    case Kind::kList:
      if (!v.is_seq()) return false;
      for (const Value& x : v.list->items)
        if (!safe_repr(x)) return false;
      return true;
    case Kind::kDict:
      if (v.ns) return false;
      for (const auto& [k, x] : v.dict->items())
        if (!safe_repr(x)) return false;
      return true;
    default: return false;
  }
}

// A list or dict, in `v` or a tuple `v` is: what Python cannot hash.
const Value* unhashable_in(const Value& v) {
  if (v.is_list() && v.tuple && v.is_seq()) {
    for (const Value& x : v.list->items)
      if (const Value* u = unhashable_in(x)) return u;
    return nullptr;
  }
  return (v.is_list() && v.is_seq()) || (v.is_dict() && !v.ns) ? &v : nullptr;
}

// jinja2's optimizer folds a dict literal with dict() over its pairs in
// order: a constant key Python cannot hash, its value and the pairs before
// it constant, fails the compile (the TypeError is no Impossible), reached
// or not. It runs on the operands of an operator, attribute, item, call,
// filter, test or conditional (the code generator's @optimizeconst nodes)
// where autoescape is not volatile; a dict printed, assigned, iterated or
// in a list or tuple alone is left to the render.
void check_constant_keys(Interp& in, const Expr& e) {
  for (std::size_t k = 0; k + 1 < e.a.size(); k += 2) {
    Value key, value;
    if (!fold_const(in, *e.a[k], key) || !fold_const(in, *e.a[k + 1], value)) return;
    if (const Value* u = unhashable_in(key))
      throw Error(where(e.a[k]->pos) + ": unhashable type: '" + std::string(type_name(*u)) + "'");
  }
}

// Where `folds`: under an @optimizeconst node (check_constant_keys).
void optimize_expr(ExprPtr& e, Interp& in, bool folds = false) {
  if (!e) return;
  const bool below = folds || !(e->kind == EK::kLiteral || e->kind == EK::kName || e->kind == EK::kList ||
                                e->kind == EK::kTuple || e->kind == EK::kDict);
  if (e->kind == EK::kBinary && e->name == "~" && in.autoescape && !in.fold_volatile) e->name = kMarkupJoin;
  for (auto& x : e->a) optimize_expr(x, in, below);
  for (auto& [k, x] : e->kw) optimize_expr(x, in, below);
  if (e->kind == EK::kName) e->var = Name(e->name);
  if (e->kind == EK::kName || e->kind == EK::kAttr) {
    e->undef = Value::undefined(e->name);
    e->methods = method_kinds(e->name) | kMethodsKnown;
  }
  e->pure = e->kind != EK::kCall && e->kind != EK::kFilter;
  for (const auto& x : e->a) e->pure = e->pure && (!x || x->pure);
  for (const auto& [k, x] : e->kw) e->pure = e->pure && x->pure;
  if (e->kind == EK::kDict && folds && !in.fold_volatile) check_constant_keys(in, *e);
  Value v;
  if (e->kind == EK::kLiteral || !fold_const(in, *e, v) || !safe_repr(v)) return;
  auto lit = std::make_unique<Expr>();
  lit->kind = EK::kLiteral;
  lit->pos = e->pos;
  lit->lit = std::move(v);
  lit->pure = true;
  e = std::move(lit);
}

// Whether Python writes `v` with an `inf` or `nan` in it (a float that is
// not finite, in a list or dict or not).
bool has_nonfinite(const Value& v) {
  if (v.kind == Kind::kFloat) return !std::isfinite(v.f);
  if (v.is_list())
    return std::any_of(v.list->items.begin(), v.list->items.end(), [](const Value& x) { return has_nonfinite(x); });
  if (v.is_dict())
    return std::any_of(v.dict->items().begin(), v.dict->items().end(),
                       [](const auto& kv) { return has_nonfinite(kv.second); });
  return false;
}

// jinja2 writes a constant into the code it generates as str() of a float
// or repr() of anything else: a constant that holds an inf or nan (folded,
// as 'inf' | float or 1e308 * 10, or a literal as 1e400) becomes the name
// `inf` or `nan`, a NameError when that code runs. A constant output is
// text instead (folded before this), as is a constant a larger constant
// expression folds into.
void poison_nonfinite(ExprPtr& e) {
  if (!e) return;
  if (e->kind == EK::kLiteral && has_nonfinite(e->lit)) {
    auto callee = std::make_unique<Expr>();
    callee->kind = EK::kLiteral;
    callee->pos = e->pos;
    std::string name = to_str(e->lit).find("nan") != std::string::npos ? "nan" : "inf";
    callee->lit =
        Value::func(name, [name](Interp&, Args&) -> Value { throw Error("name '" + name + "' is not defined"); });
    auto call = std::make_unique<Expr>();
    call->kind = EK::kCall;
    call->pos = e->pos;
    call->a.push_back(std::move(callee));
    e = std::move(call);
    return;
  }
  for (auto& x : e->a) poison_nonfinite(x);
  for (auto& [k, x] : e->kw) poison_nonfinite(x);
}

// jinja2's compile-time constant folding, where it can differ from
// rendering (a slice of a constant that is not sliceable gives an undefined
// value there): its optimizer turns a constant subexpression with a literal
// value into that literal, and its code generator writes the output of a
// constant expression as text.
// Whether `e` may read past its loop's iteration (Stmt::reads_ahead);
// `seq`: the name the loop iterates over.
bool expr_reads_ahead(const Expr* e, const std::string& seq) {
  if (!e) return false;
  if (e->kind == EK::kAttr && e->a[0]->kind == EK::kName && e->a[0]->name == "loop") {
    static const std::string_view kSafe[] = {"index", "index0", "first", "previtem", "depth", "depth0", "cycle"};
    return std::find(std::begin(kSafe), std::end(kSafe), e->name) == std::end(kSafe);
  }
  if (e->kind == EK::kName &&
      (e->name == "loop" || e->name == seq || e->name == "messages" || e->name == "add_generation_prompt"))
    return true;
  if (e->kind == EK::kCall && e->a[0]->kind != EK::kAttr) return true;
  for (const auto& x : e->a)
    if (expr_reads_ahead(x.get(), seq)) return true;
  for (const auto& [k, x] : e->kw)
    if (expr_reads_ahead(x.get(), seq)) return true;
  return false;
}

bool body_reads_ahead(const Body& body, const std::string& seq) {
  for (const auto& sp : body) {
    const Stmt& s = *sp;
    if (s.kind == SK::kCallBlock || s.kind == SK::kMacro) return true;
    for (const auto& x : s.exprs)
      if (expr_reads_ahead(x.get(), seq)) return true;
    if (expr_reads_ahead(s.filter.get(), seq)) return true;
    for (const Body& b : s.bodies)
      if (body_reads_ahead(b, seq)) return true;
  }
  return false;
}

// Whether a loop body may read its `loop`: by name, as a namespace set's
// target, through a macro or call block defined inside it, or through
// `caller` (a call block's body runs in a scope above the loop's).
bool may_read_loop(const Body& body) {
  if (reads(body, "loop") || reads(body, "caller")) return true;
  for (const auto& s : body) {
    if (s->kind == SK::kMacro || s->kind == SK::kCallBlock) return true;
    if (std::find(s->targets.begin(), s->targets.end(), "loop") != s->targets.end()) return true;
    for (const Body& b : s->bodies)
      if (may_read_loop(b)) return true;
  }
  return false;
}

// The names a statement in `body` binds in the scope it runs in or below
// (set, set block and for targets, with parameters, macro names; a
// namespace attribute's set binds none), at any depth.
void bound_names(const Body& body, std::vector<std::string>& out) {
  for (const auto& sp : body) {
    const Stmt& s = *sp;
    if (s.kind == SK::kMacro) out.push_back(s.text);
    if (s.kind != SK::kMacro && s.kind != SK::kCallBlock && !(s.kind == SK::kSet && !s.text.empty()))
      out.insert(out.end(), s.targets.begin(), s.targets.end());
    for (const Body& b : s.bodies) bound_names(b, out);
  }
}

bool is_bound(const std::vector<std::string>& bound, const std::string& name) {
  return std::find(bound.begin(), bound.end(), name) != bound.end();
}

// Whether `e` is integer arithmetic whose value is an int each iteration,
// computed by the same steps and never failing (Stmt::idle_guard): integer
// literals under 2^40, the loop's int attributes, `x | length` of a name
// the body does not bind, `+` and `-` of those, at most 32 nodes (no sum
// overflows 64 bits).
bool uniform_int(const Expr* e, const std::vector<std::string>& bound, int& nodes) {
  if (!e || ++nodes > 32) return false;
  switch (e->kind) {
    case EK::kLiteral:
      return e->lit.kind == Kind::kInt && e->lit.i < (int64_t{1} << 40) && e->lit.i > -(int64_t{1} << 40);
    case EK::kAttr: {
      static const std::string_view kInts[] = {"index", "index0", "revindex", "revindex0", "length", "depth", "depth0"};
      return e->a[0]->kind == EK::kName && e->a[0]->name == "loop" &&
             std::find(std::begin(kInts), std::end(kInts), e->name) != std::end(kInts);
    }
    case EK::kFilter:
      return e->filter == &filter_length && e->a.size() == 1 && e->kw.empty() && !e->star &&
             e->a[0]->kind == EK::kName && !e->a[0]->prompt && e->a[0]->name != "loop" &&
             !is_bound(bound, e->a[0]->name);
    case EK::kBinary:
      return (e->name == "+" || e->name == "-") && uniform_int(e->a[0].get(), bound, nodes) &&
             uniform_int(e->a[1].get(), bound, nodes);
    default: return false;
  }
}

const Expr* idle_guard(const Stmt& s) {
  if (s.exprs[1] || s.recursive || !s.one_name() || !s.uses_loop) return nullptr;
  const Body& body = s.bodies[0];
  std::vector<std::string> bound = s.targets;
  bound.emplace_back("loop");
  bound_names(body, bound);
  const Stmt* test = nullptr;
  for (const auto& sp : body) {
    const Stmt& x = *sp;
    if (x.kind == SK::kText && x.text.empty()) continue;
    int nodes = 0;
    if (!test && x.kind == SK::kSet && x.text.empty() && x.one_name() && x.targets[0] != "loop" &&
        uniform_int(x.exprs[0].get(), bound, nodes))
      continue;
    if (test || x.kind != SK::kIf || x.exprs.size() != 1 || x.bodies.size() != 1) return nullptr;
    test = &x;
  }
  if (!test) return nullptr;
  const Expr* g = test->exprs[0].get();
  while (g->kind == EK::kAnd) g = g->a[0].get();
  if (g->kind != EK::kAttr || g->a[0]->kind != EK::kName || g->a[0]->prompt || is_bound(bound, g->a[0]->name))
    return nullptr;
  return g;
}

// Every for loop in `body` makes no loop.changed (Stmt::uses_changed).
void no_changed(Body& body) {
  for (auto& s : body) {
    if (s->kind == SK::kFor) s->uses_changed = false;
    for (Body& b : s->bodies) no_changed(b);
  }
}

// `escape`: jinja2's compile-time autoescape there (Stmt::escape).
void optimize(Body& body, uint8_t escape) {
  std::string sink;
  Interp in;
  in.frames.emplace_back();
  in.out = in.root = &sink;
  in.max_steps = 1'000'000;
  in.max_output = 1u << 20;
  // Folding allocates under a budget of its own: a constant that would not
  // fit is left to the render, whose budget refuses it with the limit named.
  RenderBudget budget;
  budget.max_bytes = 64u << 20;
  budget.steps = &in.steps;
  budget.max_steps = in.max_steps;
  BudgetScope scope(&budget);
  for (auto& sp : body) {
    Stmt& s = *sp;
    for (const std::string& t : s.targets) s.names.emplace_back(t);
    if (s.kind == SK::kMacro) s.names.emplace_back(s.text);
    s.escape = escape;
    in.autoescape = (escape & 1) != 0;  // what join, replace, ... fold with (jinja2's compile-time eval context)
    in.fold_volatile = (escape & 2) != 0;
    for (auto& x : s.exprs) optimize_expr(x, in);
    optimize_expr(s.filter, in, true);
    uint8_t inner = escape;
    if (s.kind == SK::kAutoescape) {
      // A constant sets the value (volatile stays volatile); anything else
      // makes the scope volatile, the value left as it was.
      const Expr& x = *s.exprs[0];
      inner = x.kind == EK::kLiteral ? static_cast<uint8_t>((escape & 2) | (truthy(x.lit) ? 1 : 0)) : (escape | 2);
    } else if (s.kind == SK::kBlock) {
      inner = 0;
    }
    for (Body& b : s.bodies) optimize(b, inner);
    if (s.kind == SK::kFor) {
      const Expr* seq = s.exprs[0].get();
      while (seq->kind == EK::kSlice) seq = seq->a[0].get();  // messages[1:]
      s.reads_ahead = seq->kind != EK::kName || body_reads_ahead(s.bodies[0], seq->name);
      s.uses_loop = may_read_loop(s.bodies[0]);
      s.idle_guard = idle_guard(s);
    }
    Value v;
    if (s.kind == SK::kOutput && fold_const(in, *s.exprs[0], v)) {
      s.kind = SK::kText;
      s.text = (escape & 1) ? *markup_escape(v).s : to_str(v);
      s.exprs.clear();
    } else if (s.kind == SK::kOutput && escape) {
      s.kind = SK::kEscOutput;
    }
    for (auto& x : s.exprs) poison_nonfinite(x);
    poison_nonfinite(s.filter);
  }
}

// The statements of kind `k` in `body`, at any depth.
void collect(Body& body, SK k, std::vector<Stmt*>& out) {
  for (auto& s : body) {
    if (s->kind == k) out.push_back(s.get());
    for (Body& b : s->bodies) collect(b, k, out);
  }
}

// Points every `self` name in `e` at `self_ref`.
void bind_self(Expr* e, const Value& self_ref) {
  if (!e) return;
  if (e->kind == EK::kName && e->name == "self") e->lit = self_ref;
  for (auto& x : e->a) bind_self(x.get(), self_ref);
  for (auto& [k, x] : e->kw) bind_self(x.get(), self_ref);
}
void bind_self(Body& body, const Value& self_ref) {
  for (auto& s : body) {
    for (auto& x : s->exprs) bind_self(x.get(), self_ref);
    bind_self(s->filter.get(), self_ref);
    for (Body& b : s->bodies) bind_self(b, self_ref);
  }
}

// The template's blocks, each name once; `self` (jinja2's
// TemplateReference: a block by name, rendering it) where no variable of
// that name is set.
void template_reference(Body& body) {
  std::vector<Stmt*> blocks;
  collect(body, SK::kBlock, blocks);
  for (std::size_t i = 0; i < blocks.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (blocks[i]->text == blocks[j]->text)
        throw Error(where(blocks[i]->pos) + ": block '" + blocks[i]->text + "' defined twice");
  bind_self(body, template_self(blocks));
}

// The loops over `messages` (or a slice of it) at the top level, through
// `if`s, in the order they come.
void message_loops(Body& body, std::vector<Stmt*>& out) {
  for (auto& s : body) {
    if (s->kind == SK::kIf) {
      for (Body& b : s->bodies) message_loops(b, out);
      continue;
    }
    if (s->kind != SK::kFor) continue;
    const Expr* seq = s->exprs[0].get();
    while (seq->kind == EK::kSlice) seq = seq->a[0].get();
    if (seq->kind == EK::kName && seq->name == "messages") out.push_back(s.get());
  }
}

// Each loop's Stmt::top_path, as Tracker::enter_loop's search (resume.cpp,
// find_path) would find it: the same walk, in the same order, through the
// statements of `body` (body `sel` of the `if` that `way` ends with) and
// the bodies of its `if`s; `peak`, the most levels the walk held so far.
void top_paths(Body& body, uint32_t sel, std::vector<std::pair<uint32_t, uint32_t>>& way, uint32_t& peak) {
  for (std::size_t i = 0; i < body.size(); ++i) {
    Stmt& s = *body[i];
    const auto at = static_cast<uint32_t>(i);
    if (s.kind == SK::kFor) {
      s.top_path = way;
      s.top_path.emplace_back(sel, at);
      s.top_path_peak = std::max(peak, static_cast<uint32_t>(s.top_path.size()));
    }
    if (s.kind != SK::kIf) continue;
    way.emplace_back(sel, at);
    peak = std::max(peak, static_cast<uint32_t>(way.size()));
    for (std::size_t b = 0; b < s.bodies.size(); ++b) top_paths(s.bodies[b], static_cast<uint32_t>(b), way, peak);
    way.pop_back();
  }
}

}  // namespace

Parsed parse(std::string_view source) {
  Parsed p = Parser(lex(source)).run();
  template_reference(p.body);
  std::vector<Stmt*> loops;
  message_loops(p.body, loops);
  for (std::size_t i = 0; i + 1 < loops.size(); ++i) loops[i]->followed = true;
  if (source.find("changed") == std::string_view::npos) no_changed(p.body);
  find_pure_macros(p.body);
  std::vector<std::pair<uint32_t, uint32_t>> way;
  uint32_t peak = 0;
  top_paths(p.body, 0, way, peak);
  return p;
}

}  // namespace tokfeed::tmpl
