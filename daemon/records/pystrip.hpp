// Python's str.strip() on UTF-8 text: what Jinja's `trim` filter does in HF
// chat templates.
#pragma once

#include <string_view>

namespace tokfeed::text {

// Strips the characters Python's str.isspace() accepts from both ends.
std::string_view py_strip(std::string_view s) noexcept;

}  // namespace tokfeed::text
