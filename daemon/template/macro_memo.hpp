// Pure macros and the record's memo of their calls (docs/chat_templates.md,
// "Pure macros"). A macro defined at the top level is pure when its output
// depends on its arguments and the top-level variables it reads alone:
// decided when the template loads (find_pure_macros). While a record's
// MemoScope is open, a call of a pure macro whose arguments are the same
// values (the same scalars, the same objects) as a call made before, in
// this render or another of the record, with the same values of those
// variables, gives the text that call gave, and counts the steps it
// counted, without running the body.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "template/ast.hpp"
#include "template/template.hpp"

namespace tokfeed::tmpl {

// Marks the pure macros of the template `body` (Stmt::purity).
void find_pure_macros(Body& body);

struct MacroMemo {
  struct Entry {
    const Stmt* macro = nullptr;
    // The call: its positional arguments, its keyword arguments, the
    // values of the macro's top-level variables (MacroPurity::names; an
    // absent one is `absent`). The entry holds them: their objects stay
    // alive, so their addresses name no other object while it lives.
    std::vector<Value> positional;
    std::vector<std::pair<std::string, Value>> kw;
    std::vector<Value> env;
    std::vector<char> absent;
    const Provenance* provenance = nullptr;  // the renders' provenance (iterations bound to messages are its)
    // What the call gave and did: its text (and the capacity of the
    // string it built), its steps, the most memory it held above what the
    // render held when it started (bytes), how many macro calls deep it
    // went, and the position the render was at when it returned (where a
    // later error without a step of its own is placed).
    std::string text;
    std::size_t capacity = 0;
    uint64_t steps = 0;
    int64_t peak = 0;
    int depth = 0;
    std::size_t frames = 0;  // how many scopes it pushed at most (none may grow the render's vector of them)
    Pos at;
  };
  std::vector<Entry> entries;
  std::vector<const Stmt*> macros;                       // those it holds calls of
  std::unordered_multimap<uint64_t, std::size_t> index;  // a call's hash → its entries
  std::size_t bytes = 0;                                 // of their texts
};

}  // namespace tokfeed::tmpl
