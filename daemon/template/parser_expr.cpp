#include <charconv>
#include <cstdlib>

#include "template/parser.hpp"
#include "template/parser_expr.hpp"

namespace tokfeed::tmpl {

ExprPtr ExprParser::node(EK k, Pos p) {
  auto e = std::make_unique<Expr>();
  e->kind = k;
  e->pos = p;
  return e;
}

// An expression, or a tuple of them without parentheses.
ExprPtr ExprParser::tuple_or_expr(bool with_cond) {
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

ExprPtr ExprParser::expr(bool with_cond) {
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

ExprPtr ExprParser::binary(EK k, ExprPtr l, ExprPtr r, Pos p, std::string op) {
  auto e = node(k, p);
  e->name = std::move(op);
  e->a.push_back(std::move(l));
  e->a.push_back(std::move(r));
  return e;
}

ExprPtr ExprParser::or_expr() {
  ExprPtr e = and_expr();
  while (is_name("or")) {
    Pos p = t_[i_++].pos;
    e = binary(EK::kOr, std::move(e), and_expr(), p);
  }
  return e;
}
ExprPtr ExprParser::and_expr() {
  ExprPtr e = not_expr();
  while (is_name("and")) {
    Pos p = t_[i_++].pos;
    e = binary(EK::kAnd, std::move(e), not_expr(), p);
  }
  return e;
}
ExprPtr ExprParser::not_expr() {
  if (is_name("not")) {
    auto e = node(EK::kNot, t_[i_++].pos);
    e->a.push_back(not_expr());
    return e;
  }
  return compare();
}
ExprPtr ExprParser::compare() {
  Pos p = cur().pos;
  ExprPtr first = math1();
  ExprPtr c;
  for (;;) {
    std::string op;
    if (cur().kind == Tok::kOp && (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == ">" ||
                                   cur().text == "<=" || cur().text == ">=")) {
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
ExprPtr ExprParser::math1() {
  ExprPtr e = concat();
  while (is_op("+") || is_op("-")) {
    const Token& t = t_[i_++];
    e = binary(EK::kBinary, std::move(e), concat(), t.pos, t.text);
  }
  return e;
}
ExprPtr ExprParser::concat() {
  ExprPtr e = math2();
  while (is_op("~")) {
    Pos p = t_[i_++].pos;
    e = binary(EK::kBinary, std::move(e), math2(), p, "~");
  }
  return e;
}
ExprPtr ExprParser::math2() {
  ExprPtr e = power();
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    const Token& t = t_[i_++];
    e = binary(EK::kBinary, std::move(e), power(), t.pos, t.text);
  }
  return e;
}
ExprPtr ExprParser::power() {
  ExprPtr e = unary(true);
  while (is_op("**")) {
    Pos p = t_[i_++].pos;
    e = binary(EK::kBinary, std::move(e), unary(true), p, "**");
  }
  return e;
}
ExprPtr ExprParser::unary(bool with_filter) {
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

ExprPtr ExprParser::literal(Value v, Pos p) {
  auto e = node(EK::kLiteral, p);
  e->lit = std::move(v);
  return e;
}

ExprPtr ExprParser::primary() {
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
      e->prompt = e->name == "add_generation_prompt";
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

ExprPtr ExprParser::postfix(ExprPtr e) {
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

ExprPtr ExprParser::subscript(ExprPtr e) {
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
void ExprParser::call_args(Expr& c) {
  expect_op("(");
  bool star2 = false;
  while (!is_op(")")) {
    // As jinja2: f(a, k=v, *args, **kwargs), each part optional, in that order.
    if (is_op("*") || is_op("**")) {
      const bool two = is_op("**");
      if (star2 || (!two && c.star)) fail(cur().pos, "invalid syntax for function call expression");
      ++i_;
      if (two) {
        c.kw.emplace_back(std::string(kStarStar), expr(true));
        star2 = true;
      } else {
        c.a.push_back(expr(true));
        c.star = true;
      }
    } else if (cur().kind == Tok::kName && peek().kind == Tok::kOp && peek().text == "=") {
      if (c.star || star2) fail(cur().pos, "invalid syntax for function call expression");
      std::string k = t_[i_].text;  // a repeated one fails once folding is done (check_repeated_keywords)
      i_ += 2;
      c.kw.emplace_back(std::move(k), expr(true));
    } else {
      if (c.star || star2) fail(cur().pos, "invalid syntax for function call expression");
      if (!c.kw.empty()) fail(cur().pos, "positional argument follows keyword argument");
      c.a.push_back(expr(true));
    }
    if (!is_op(",")) break;
    ++i_;
  }
  expect_op(")");
}

ExprPtr ExprParser::call(ExprPtr callee) {
  auto c = node(EK::kCall, cur().pos);
  c->a.push_back(std::move(callee));
  call_args(*c);
  return c;
}

// The signature a filter or test call must be checked against when it
// runs: none where the call's arguments bind (their number and keywords are
// known here, without `*args` or `**kwargs`); a call that cannot bind fails
// when reached, as in jinja2.
static const Signature* runtime_signature(const Signature* sig, const Expr& e) {
  if (!sig || e.star) return sig;
  Args shape;
  shape.pos.resize(e.a.size() - 1);
  for (const auto& [name, x] : e.kw) {
    if (name == kStarStar) return sig;
    shape.kw.emplace_back(name, Value());
  }
  try {
    check_call(*sig, "", shape);
  } catch (const Error&) {
    return sig;
  }
  return nullptr;
}

ExprPtr ExprParser::filter(ExprPtr subject) {
  Pos p = cur().pos;
  std::string name = expect_name();
  while (is_op(".")) {
    ++i_;
    name += "." + expect_name();
  }
  auto f = node(EK::kFilter, p);
  f->name = name;
  f->filter = find_filter(name);  // null: checked once the template is parsed (parser.cpp)
  f->a.push_back(std::move(subject));
  if (is_op("(")) call_args(*f);
  f->sig = runtime_signature(filter_signature(name), *f);
  return f;
}

ExprPtr ExprParser::filter_expr(ExprPtr e) {
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

ExprPtr ExprParser::test(ExprPtr subject) {
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
  t->sig = runtime_signature(test_signature(t->name), *t);
  return t;
}

}  // namespace tokfeed::tmpl
