// The expression half of the parser (parser.cpp holds the statements):
// Jinja's precedence, from conditional expressions down to primaries, with
// filters and tests resolved at load (unknown names are left null).
#pragma once

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "template/ast.hpp"

namespace tokfeed::tmpl {

class ExprParser {
 public:
  explicit ExprParser(std::vector<Token> toks) : t_(std::move(toks)) {}

 protected:
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

  // Bounds the parser's (and so the evaluator's) recursion on hostile input.
  struct Depth {
    int& d;
    Depth(int& depth, Pos p) : d(depth) {
      if (++d > kMaxDepth) fail(p, "nesting deeper than " + std::to_string(kMaxDepth) + " levels");
    }
    ~Depth() { --d; }
  };
  static constexpr int kMaxDepth = 200;

  ExprPtr node(EK k, Pos p);
  ExprPtr tuple_or_expr(bool with_cond);
  ExprPtr expr(bool with_cond);
  ExprPtr binary(EK k, ExprPtr l, ExprPtr r, Pos p, std::string op = {});
  ExprPtr or_expr();
  ExprPtr and_expr();
  ExprPtr not_expr();
  ExprPtr compare();
  ExprPtr math1();
  ExprPtr concat();
  ExprPtr math2();
  ExprPtr power();
  ExprPtr unary(bool with_filter);
  ExprPtr literal(Value v, Pos p);
  ExprPtr primary();
  ExprPtr postfix(ExprPtr e);
  ExprPtr subscript(ExprPtr e);
  void call_args(Expr& c);
  ExprPtr call(ExprPtr callee);
  ExprPtr filter(ExprPtr subject);
  ExprPtr filter_expr(ExprPtr e);
  ExprPtr test(ExprPtr subject);

  std::vector<Token> t_;
  std::size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace tokfeed::tmpl
