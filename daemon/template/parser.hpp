// Tokens → statements. Every construct the engine lacks is an error here,
// at load, naming the construct and its line:column (an unknown filter or
// test only where jinja2 3.x also fails at load).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "template/ast.hpp"

namespace tokfeed::tmpl {

// Looked up while parsing; an unknown name fails at load or when reached,
// as jinja2 3.x decides (parser.cpp, check_names).
FilterFn find_filter(std::string_view name);
TestFn find_test(std::string_view name);

// A filter's or test's Python signature (signatures.cpp): its parameters,
// the subject first, and how many have no default.
struct Signature {
  std::string_view params[5];
  std::size_t count;
  std::size_t required;
  bool positional_only;  // a builtin (len, abs, operator.eq ...)
};
// Null for a filter or test that takes *args/**kwargs (or an unknown one).
const Signature* filter_signature(std::string_view name);
const Signature* test_signature(std::string_view name);
// Binds `args` (the subject aside) as Python would: an Error where the call
// raises a TypeError (too many, unknown, repeated or missing arguments).
void check_call(const Signature& sig, std::string_view name, const Args& args);

struct Parsed {
  Body body;
  bool has_generation = false;
  // Whether some statement is under an autoescape that is not constant and
  // false (Stmt::escape): such renders keep no resume points (resume.hpp
  // keeps no autoescape state).
  bool escapes = false;
  std::vector<std::string> warnings;  // "line:column: unknown filter 'x' ..."
};

Parsed parse(std::string_view source);

}  // namespace tokfeed::tmpl
