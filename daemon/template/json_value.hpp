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

}  // namespace tokfeed::tmpl
