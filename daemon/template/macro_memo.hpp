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
#include <memory>
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
    uint64_t hash = 0;  // of the call (its index key)
    // The call: its positional arguments, its keyword arguments, the
    // values of the macro's top-level variables (MacroPurity::names; an
    // absent one is `absent`). The entry holds them: their objects stay
    // alive, so their addresses name no other object while it lives.
    std::vector<Value> positional;
    std::vector<std::pair<std::string, Value>> kw;
    std::vector<Value> env;
    std::vector<char> absent;
    // The macro's analysis, held: a template loaded later at the same
    // address has another (entries are kept from one record to the next).
    std::shared_ptr<const MacroPurity> purity;
    std::size_t max_output = 0;  // the render's output limit (which a capture inside may pass)
    // The provenance (and scope) for which the key was last found to reach
    // none of its messages: the run bound no iteration to a message of the
    // render it ran in; in another render, none of whose messages the key
    // reaches, it binds none either.
    const Provenance* checked = nullptr;
    uint64_t checked_scope = 0;
    bool used = false;  // served in this scope
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
  uint64_t scope = 0;  // the MemoScope's number on this thread (entries kept from one to the next)
};

// The entries a MemoScope that ends keeps for the next one on its thread
// (null: none): those whose key's objects something besides the entries
// holds, up to 64 entries and 4 MiB of text.
std::unique_ptr<MacroMemo> keep_macros(std::unique_ptr<MacroMemo> mm);

}  // namespace tokfeed::tmpl
