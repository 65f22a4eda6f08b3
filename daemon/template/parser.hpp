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

struct Parsed {
  Body body;
  bool has_generation = false;
  std::vector<std::string> warnings;  // "line:column: unknown filter 'x' ..."
};

Parsed parse(std::string_view source);

}  // namespace tokfeed::tmpl
