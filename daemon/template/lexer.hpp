// Template source → tokens, with Jinja's whitespace control as transformers
// configures it: trim_blocks, lstrip_blocks, `-`/`+` markers, and the
// source's final newline dropped.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tokfeed::tmpl {

struct Pos {
  uint32_t line = 1;
  uint32_t col = 1;
};
std::string where(Pos p);

enum class Tok : uint8_t {
  kText,        // literal output
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,
  kInt,
  kFloat,
  kOp,  // operators and punctuation, in `text`
  kEnd,
};

struct Token {
  Tok kind;
  Pos pos;
  std::string text;  // text, name, decoded string, number, operator
};

// Throws tmpl::Error naming line:column for a malformed tag or literal.
std::vector<Token> lex(std::string_view source);

}  // namespace tokfeed::tmpl
