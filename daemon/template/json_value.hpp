// JSON (simdjson's DOM) → template values, as Python's json.loads builds them.
#pragma once

#include <simdjson.h>

#include "template/value.hpp"

namespace tokfeed::tmpl {

// Throws tmpl::Error for an integer of 2^63 or more (simdjson's uint64),
// which the engine's 64-bit integers cannot hold.
Value from_json(simdjson::dom::element e);
// Parses `text` as JSON; throws tmpl::Error naming what is wrong.
Value parse_json(std::string_view text);
// What Python's json.loads reads where simdjson stops at `text`: `NaN`,
// `Infinity`, `-Infinity` and numbers whose text overflows a double (inf).
// Throws tmpl::Error saying what it cannot hold (an integer outside 64
// bits, a lone UTF-16 surrogate, bytes that are not UTF-8) or, for text
// json.loads refuses too, "malformed JSON: " + `simdjson_reason`. Slower
// than simdjson: for the records it refuses.
Value parse_python_json(std::string_view text, std::string_view simdjson_reason);

}  // namespace tokfeed::tmpl
