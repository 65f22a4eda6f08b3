#include "template/parser.hpp"

#include <charconv>
#include <cstdlib>

namespace tokfeed::tmpl {

namespace {

class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : t_(std::move(toks)) {}

  Parsed run() {
    Parsed p;
    p.body = body({});
    if (cur().kind != Tok::kEnd) fail(cur().pos, "unexpected '" + cur().text + "'");
    p.has_generation = has_generation_;
    return p;
  }

 private:
  const Token& cur() const { return t_[i_]; }
  const Token& peek(std::size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  [[noreturn]] static void fail(Pos p, const std::string& what) { throw Error(where(p) + ": " + what); }
  bool is_op(std::string_view op) const { return cur().kind == Tok::kOp && cur().text == op; }
  bool is_name(std::string_view n) const { return cur().kind == Tok::kName && cur().text == n; }
  void expect_op(std::string_view op) {
    if (!is_op(op)) fail(cur().pos, "expected '" + std::string(op) + "', got " + describe(cur()));
    ++i_;
  }
  std::string expect_name() {
    if (cur().kind != Tok::kName) fail(cur().pos, "expected a name, got " + describe(cur()));
    return t_[i_++].text;
  }
  void expect_block_end() {
    if (cur().kind != Tok::kBlockEnd) fail(cur().pos, "expected '%}', got " + describe(cur()));
    ++i_;
  }
  static std::string describe(const Token& t) {
    switch (t.kind) {
      case Tok::kEnd: return "end of template";
      case Tok::kBlockEnd: return "'%}'";
      case Tok::kVarEnd: return "'}}'";
      case Tok::kText: return "text";
      case Tok::kString: return "a string";
      default: return "'" + t.text + "'";
    }
  }

  // Statements until a block tag named in `stops` (left unconsumed after
  // its `{%`) or the end.
  Body body(std::initializer_list<std::string_view> stops) {
    Body out;
    for (;;) {
      const Token& t = cur();
      if (t.kind == Tok::kEnd) {
        if (stops.size()) fail(t.pos, "unexpected end of template; expected '{% " + std::string(*(stops.end() - 1)) + " %}'");
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
    if (tag == "generation") {
      auto s = make(SK::kGeneration, p);
      expect_block_end();
      s->bodies.push_back(body({"endgeneration"}));
      end_tag();
      has_generation_ = true;
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

  // `a`, `a, b`, `(a, b)`: names to assign.
  std::vector<std::string> targets() {
    std::vector<std::string> out;
    bool paren = is_op("(");
    if (paren) ++i_;
    out.push_back(expect_name());
    while (is_op(",")) {
      ++i_;
      if (cur().kind != Tok::kName) break;
      out.push_back(expect_name());
    }
    if (paren) expect_op(")");
    return out;
  }

  std::unique_ptr<Stmt> for_stmt(Pos p) {
    auto s = make(SK::kFor, p);
    s->targets = targets();
    if (!is_name("in")) fail(cur().pos, "expected 'in', got " + describe(cur()));
    ++i_;
    s->exprs.push_back(tuple_or_expr(false));
    s->exprs.emplace_back();
    if (is_name("if")) {
      ++i_;
      s->exprs.back() = expr(true);
    }
    if (is_name("recursive")) fail(cur().pos, "unsupported construct: recursive for loops");
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
    return s;
  }

  std::unique_ptr<Stmt> set_stmt(Pos p) {
    if (cur().kind == Tok::kName && peek().kind == Tok::kOp && peek().text == ".") {
      auto s = make(SK::kSet, p);
      s->targets.push_back(expect_name());
      ++i_;
      s->text = expect_name();
      expect_op("=");
      s->exprs.push_back(tuple_or_expr(true));
      expect_block_end();
      return s;
    }
    std::vector<std::string> names = targets();
    if (is_op("=")) {
      ++i_;
      auto s = make(SK::kSet, p);
      s->targets = std::move(names);
      s->exprs.push_back(tuple_or_expr(true));
      expect_block_end();
      return s;
    }
    auto s = make(SK::kSetBlock, p);
    if (names.size() != 1) fail(p, "a set block assigns one name");
    s->targets = std::move(names);
    if (is_op("|")) s->filter = filter_chain();
    expect_block_end();
    s->bodies.push_back(body({"endset"}));
    end_tag();
    return s;
  }

  // `| f(args) | g` applied to the placeholder name "\x01body".
  ExprPtr filter_chain() {
    auto subject = std::make_unique<Expr>();
    subject->kind = EK::kName;
    subject->pos = cur().pos;
    subject->name = "\x01body";
    if (!is_op("|")) {
      // {% filter name %}: the first filter has no leading pipe.
      return filter(std::move(subject));
    }
    ExprPtr e = std::move(subject);
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
    int saved = loop_depth_;
    loop_depth_ = 0;
    s->bodies.push_back(body({"endmacro"}));
    loop_depth_ = saved;
    end_tag();
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
    s->bodies.push_back(body({"endcall"}));
    end_tag();
    return s;
  }

  std::unique_ptr<Stmt> filter_stmt(Pos p) {
    auto s = make(SK::kFilterBlock, p);
    s->filter = filter_chain();
    expect_block_end();
    s->bodies.push_back(body({"endfilter"}));
    end_tag();
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

  ExprPtr node(EK k, Pos p) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->pos = p;
    return e;
  }

  // An expression, or a tuple of them without parentheses.
  ExprPtr tuple_or_expr(bool with_cond) {
    Pos p = cur().pos;
    ExprPtr first = expr(with_cond);
    if (!is_op(",")) return first;
    auto t = node(EK::kTuple, p);
    t->a.push_back(std::move(first));
    while (is_op(",")) {
      ++i_;
      if (cur().kind == Tok::kBlockEnd || cur().kind == Tok::kVarEnd || is_name("if")) break;
      t->a.push_back(expr(with_cond));
    }
    return t;
  }

  // Bounds the parser's (and so the evaluator's) recursion on hostile input.
  struct Depth {
    int& d;
    Depth(int& depth, Pos p) : d(depth) {
      if (++d > kMaxDepth) fail(p, "nesting deeper than " + std::to_string(kMaxDepth) + " levels");
    }
    ~Depth() { --d; }
  };
  static constexpr int kMaxDepth = 200;

  ExprPtr expr(bool with_cond) {
    Pos p = cur().pos;
    Depth guard(depth_, p);
    ExprPtr e = or_expr();
    if (!with_cond) return e;
    while (is_name("if")) {
      ++i_;
      auto c = node(EK::kCond, p);
      c->a.push_back(std::move(e));
      c->a.push_back(or_expr());
      if (is_name("else")) {
        ++i_;
        c->a.push_back(expr(true));
      } else {
        c->a.emplace_back();
      }
      e = std::move(c);
    }
    return e;
  }

  ExprPtr binary(EK k, ExprPtr l, ExprPtr r, Pos p, std::string op = {}) {
    auto e = node(k, p);
    e->name = std::move(op);
    e->a.push_back(std::move(l));
    e->a.push_back(std::move(r));
    return e;
  }

  ExprPtr or_expr() {
    ExprPtr e = and_expr();
    while (is_name("or")) {
      Pos p = t_[i_++].pos;
      e = binary(EK::kOr, std::move(e), and_expr(), p);
    }
    return e;
  }
  ExprPtr and_expr() {
    ExprPtr e = not_expr();
    while (is_name("and")) {
      Pos p = t_[i_++].pos;
      e = binary(EK::kAnd, std::move(e), not_expr(), p);
    }
    return e;
  }
  ExprPtr not_expr() {
    if (is_name("not")) {
      auto e = node(EK::kNot, t_[i_++].pos);
      e->a.push_back(not_expr());
      return e;
    }
    return compare();
  }
  ExprPtr compare() {
    Pos p = cur().pos;
    ExprPtr first = math1();
    ExprPtr c;
    for (;;) {
      std::string op;
      if (cur().kind == Tok::kOp && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                     cur().text == ">" || cur().text == "<=" || cur().text == ">=")) {
        op = t_[i_++].text;
      } else if (is_name("in")) {
        ++i_;
        op = "in";
      } else if (is_name("not") && peek().kind == Tok::kName && peek().text == "in") {
        i_ += 2;
        op = "notin";
      } else {
        break;
      }
      if (!c) {
        c = node(EK::kCompare, p);
        c->a.push_back(std::move(first));
      }
      c->ops.push_back(op);
      c->a.push_back(math1());
    }
    return c ? std::move(c) : std::move(first);
  }
  ExprPtr math1() {
    ExprPtr e = concat();
    while (is_op("+") || is_op("-")) {
      const Token& t = t_[i_++];
      e = binary(EK::kBinary, std::move(e), concat(), t.pos, t.text);
    }
    return e;
  }
  ExprPtr concat() {
    ExprPtr e = math2();
    while (is_op("~")) {
      Pos p = t_[i_++].pos;
      e = binary(EK::kBinary, std::move(e), math2(), p, "~");
    }
    return e;
  }
  ExprPtr math2() {
    ExprPtr e = power();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& t = t_[i_++];
      e = binary(EK::kBinary, std::move(e), power(), t.pos, t.text);
    }
    return e;
  }
  ExprPtr power() {
    ExprPtr e = unary(true);
    while (is_op("**")) {
      Pos p = t_[i_++].pos;
      e = binary(EK::kBinary, std::move(e), unary(true), p, "**");
    }
    return e;
  }
  ExprPtr unary(bool with_filter) {
    Depth guard(depth_, cur().pos);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      auto n = node(is_op("-") ? EK::kNeg : EK::kPos, cur().pos);
      ++i_;
      n->a.push_back(unary(false));
      e = std::move(n);
    } else {
      e = primary();
    }
    e = postfix(std::move(e));
    if (with_filter) e = filter_expr(std::move(e));
    return e;
  }

  ExprPtr literal(Value v, Pos p) {
    auto e = node(EK::kLiteral, p);
    e->lit = std::move(v);
    return e;
  }

  ExprPtr primary() {
    const Token& t = cur();
    Pos p = t.pos;
    switch (t.kind) {
      case Tok::kName: {
        ++i_;
        if (t.text == "true" || t.text == "True") return literal(Value::boolean(true), p);
        if (t.text == "false" || t.text == "False") return literal(Value::boolean(false), p);
        if (t.text == "none" || t.text == "None") return literal(Value::none(), p);
        auto e = node(EK::kName, p);
        e->name = t.text;
        return e;
      }
      case Tok::kString: {
        std::string s;
        while (cur().kind == Tok::kString) s += t_[i_++].text;
        return literal(Value::str(std::move(s)), p);
      }
      case Tok::kInt: {
        ++i_;
        int64_t v = 0;
        auto r = std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
        if (r.ec != std::errc()) fail(p, "integer literal out of range");
        return literal(Value::integer(v), p);
      }
      case Tok::kFloat: ++i_; return literal(Value::real(std::strtod(t.text.c_str(), nullptr)), p);
      case Tok::kOp:
        if (t.text == "(") {
          ++i_;
          if (is_op(")")) {
            ++i_;
            return literal(Value::new_list({}, true), p);
          }
          ExprPtr e = expr(true);
          if (is_op(",")) {
            auto tup = node(EK::kTuple, p);
            tup->a.push_back(std::move(e));
            while (is_op(",")) {
              ++i_;
              if (is_op(")")) break;
              tup->a.push_back(expr(true));
            }
            e = std::move(tup);
          }
          expect_op(")");
          return e;
        }
        if (t.text == "[") {
          ++i_;
          auto e = node(EK::kList, p);
          while (!is_op("]")) {
            e->a.push_back(expr(true));
            if (!is_op(",")) break;
            ++i_;
          }
          expect_op("]");
          return e;
        }
        if (t.text == "{") {
          ++i_;
          auto e = node(EK::kDict, p);
          while (!is_op("}")) {
            e->a.push_back(expr(true));
            expect_op(":");
            e->a.push_back(expr(true));
            if (!is_op(",")) break;
            ++i_;
          }
          expect_op("}");
          return e;
        }
        break;
      default: break;
    }
    fail(p, "unexpected " + describe(t));
  }

  ExprPtr postfix(ExprPtr e) {
    for (;;) {
      if (is_op(".")) {
        Pos p = t_[i_++].pos;
        if (cur().kind == Tok::kInt) {
          auto n = node(EK::kItem, p);
          n->a.push_back(std::move(e));
          n->a.push_back(literal(Value::integer(std::atoll(cur().text.c_str())), p));
          ++i_;
          e = std::move(n);
          continue;
        }
        auto n = node(EK::kAttr, p);
        n->name = expect_name();
        n->a.push_back(std::move(e));
        e = std::move(n);
      } else if (is_op("[")) {
        e = subscript(std::move(e));
      } else if (is_op("(")) {
        e = call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr subscript(ExprPtr e) {
    Pos p = t_[i_++].pos;
    ExprPtr parts[3];
    int n = 0;
    bool slice = false;
    for (;;) {
      if (!is_op(":") && !is_op("]")) parts[n] = expr(true);
      if (is_op(":") && n < 2) {
        ++i_;
        ++n;
        slice = true;
        continue;
      }
      break;
    }
    expect_op("]");
    auto r = node(slice ? EK::kSlice : EK::kItem, p);
    r->a.push_back(std::move(e));
    if (slice) {
      for (auto& x : parts) r->a.push_back(std::move(x));
    } else {
      if (!parts[0]) fail(p, "expected a subscript");
      r->a.push_back(std::move(parts[0]));
    }
    return r;
  }

  // (args) after `callee` into a[1..] and kw.
  void call_args(Expr& c) {
    expect_op("(");
    while (!is_op(")")) {
      if (is_op("*") || is_op("**")) fail(cur().pos, "unsupported construct: *args/**kwargs in a call");
      if (cur().kind == Tok::kName && peek().kind == Tok::kOp && peek().text == "=") {
        std::string k = t_[i_].text;
        i_ += 2;
        c.kw.emplace_back(std::move(k), expr(true));
      } else {
        if (!c.kw.empty()) fail(cur().pos, "positional argument follows keyword argument");
        c.a.push_back(expr(true));
      }
      if (!is_op(",")) break;
      ++i_;
    }
    expect_op(")");
  }

  ExprPtr call(ExprPtr callee) {
    auto c = node(EK::kCall, cur().pos);
    c->a.push_back(std::move(callee));
    call_args(*c);
    return c;
  }

  ExprPtr filter(ExprPtr subject) {
    Pos p = cur().pos;
    std::string name = expect_name();
    while (is_op(".")) {
      ++i_;
      name += "." + expect_name();
    }
    auto f = node(EK::kFilter, p);
    f->name = name;
    f->filter = find_filter(name);
    if (!f->filter) fail(p, "unsupported or unknown filter '" + name + "'");
    f->a.push_back(std::move(subject));
    if (is_op("(")) call_args(*f);
    return f;
  }

  ExprPtr filter_expr(ExprPtr e) {
    for (;;) {
      if (is_op("|")) {
        ++i_;
        e = filter(std::move(e));
      } else if (is_name("is")) {
        e = test(std::move(e));
      } else if (is_op("(")) {
        e = call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr test(ExprPtr subject) {
    Pos p = t_[i_++].pos;
    auto t = node(EK::kTest, p);
    if (is_name("not")) {
      ++i_;
      t->negate = true;
    }
    t->name = expect_name();
    while (is_op(".")) {
      ++i_;
      t->name += "." + expect_name();
    }
    t->test = find_test(t->name);
    if (!t->test) fail(p, "unsupported or unknown test '" + t->name + "'");
    t->a.push_back(std::move(subject));
    const Token& c = cur();
    if (is_op("(")) {
      call_args(*t);
    } else if ((c.kind == Tok::kName || c.kind == Tok::kString || c.kind == Tok::kInt || c.kind == Tok::kFloat ||
                is_op("[") || is_op("{")) &&
               !(c.kind == Tok::kName && (c.text == "else" || c.text == "or" || c.text == "and"))) {
      if (is_name("is")) fail(c.pos, "tests cannot be chained with 'is'");
      t->a.push_back(postfix(primary()));
    }
    return t;
  }

  std::vector<Token> t_;
  std::size_t i_ = 0;
  int loop_depth_ = 0;
  int depth_ = 0;
  bool has_generation_ = false;
};

}  // namespace

Parsed parse(std::string_view source) { return Parser(lex(source)).run(); }

}  // namespace tokfeed::tmpl
