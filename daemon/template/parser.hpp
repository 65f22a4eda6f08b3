// Tokens → statements. Every construct the engine lacks is an error here,
// at load, naming the construct and its line:column.
#pragma once

#include <string_view>

#include "template/ast.hpp"

namespace tokfeed::tmpl {

// Looked up while parsing, so an unknown filter or test fails at load.
FilterFn find_filter(std::string_view name);
TestFn find_test(std::string_view name);

struct Parsed {
  Body body;
  bool has_generation = false;
};

Parsed parse(std::string_view source);

}  // namespace tokfeed::tmpl
