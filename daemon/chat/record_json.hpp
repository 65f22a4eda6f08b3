// A record's JSON read straight into template values (internal to
// daemon/chat): what simdjson's tree and tmpl::from_json build, in one pass
// over the text, for the records most datasets hold. Anything it does not
// take exactly as simdjson would (bad JSON, bytes that are not UTF-8, a
// lone surrogate, a number outside the plain forms, a key starting with
// \x01, deep nesting, a huge record) it leaves to the parse it stands in
// for, whose values or reason stand (docs/benchmarks.md, "Records read
// without simdjson's tree").
#pragma once

#include <cstddef>
#include <string_view>

#include "template/value.hpp"

namespace tokfeed::text::detail {

// The previous record's values are refilled in place for this record's
// where nothing else holds them any more: records repeat their shapes (a
// list of dicts with the same keys), so a dict keeps its keys where they
// are and a string its buffer, instead of each object going to the
// recycler and back (Value::recycled_*). An object anything else holds (a
// message the caller kept, a tojson memo's subject, the kept tools) is
// left alone and a new one built. Bounded as the recycler is: no buffer
// over kReusedBytes is refilled, no dict over kInPlace keys.
constexpr std::size_t kReusedBytes = std::size_t{16} << 10;
constexpr std::size_t kInPlace = 16;  // DictObj's linear size: no index to keep

inline bool only_here(const tmpl::Value& v) { return v.s.raw() && v.s.raw()->unique(); }

// Bigger records go to simdjson: the buffers kept per thread are about a
// record's size.
constexpr std::size_t kMaxRecord = std::size_t{1} << 20;

// A message's reasoning, under each of its names (transformers'
// _alias_reasoning_fields; add_turn in chat_messages.cpp).
constexpr std::string_view kReasoningNames[] = {"reasoning_content", "thinking", "reasoning"};

// Whether a turn's role names a tool call or a tool response, which the
// mapping rewrites (add_turn in chat_messages.cpp).
// (Told by the size first: a role of another size is none of them.)
inline bool names_tool_turn(std::string_view role) {
  switch (role.size()) {
    case 9: return role == "tool_call";
    case 11: return role == "observation";
    case 13: return role == "function_call" || role == "tool_response";
    default: return false;
  }
}

// The record `json` (a JSON object) as tmpl::from_json builds it from
// simdjson's tree, its top-level `tools` array from the thread's
// ToolsCache where `cached_tools`, refilling `prev`'s objects. False where
// it leaves the record to simdjson (`out` then holds a partial value to
// refill or free). `top_repeats`, where given, says whether the record's top
// level repeats a key or holds more than kInPlace keys (where from_json's
// values, the last of a key, may not be the first that simdjson's lookup
// by name finds).
bool read_record(std::string_view json, bool cached_tools, tmpl::Value&& prev, tmpl::Value& out,
                 bool* top_repeats = nullptr);

// The JSON value at the start of `text` (what follows it is not read), in
// a list or dict `depth` deep in its record, as read_record builds it; `n`
// set to the value's length. False where read_record would leave it to
// simdjson.
bool read_value(std::string_view text, int depth, tmpl::Value& out, std::size_t& n);

}  // namespace tokfeed::text::detail
