// Python str semantics on UTF-8 text: code-point indexing, strip, split,
// case mapping and repr, as chat templates call them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tokfeed::tmpl {

bool py_isspace(uint32_t cp) noexcept;
// Decodes the code point at s[i] (invalid bytes read as themselves); returns its length.
std::size_t utf8_decode(std::string_view s, std::size_t i, uint32_t& cp) noexcept;
void utf8_append(uint32_t cp, std::string& out);
std::vector<uint32_t> code_points(std::string_view s);
std::size_t py_len(std::string_view s) noexcept;

// str.strip/lstrip/rstrip; `chars` unset strips whitespace.
std::string_view py_strip(std::string_view s, const std::optional<std::string_view>& chars, bool left, bool right);
// str.split / str.rsplit; `sep` unset splits on whitespace runs.
std::vector<std::string> py_split(std::string_view s, std::optional<std::string_view> sep, int64_t maxsplit,
                                  bool from_right);
// str.splitlines(): \n, \r, \r\n, \v, \f, \x1c-\x1e, \x85, U+2028, U+2029.
std::vector<std::string> py_splitlines(std::string_view s, bool keepends);

// Case mapping and character classes (pycase.cpp, from ICU's Unicode data):
// str.upper, lower, casefold, capitalize, title, swapcase with full
// mappings and the final-sigma rule; isupper, islower, istitle, isalpha,
// isdecimal, isdigit, isnumeric, isalnum, isspace.
std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
std::string py_casefold(std::string_view s);
std::string py_capitalize(std::string_view s);
std::string py_title(std::string_view s);
std::string py_swapcase(std::string_view s);
bool py_isupper(std::string_view s);
bool py_islower(std::string_view s);
bool py_istitle(std::string_view s);
bool py_isalpha(std::string_view s);
bool py_isdecimal(std::string_view s);
bool py_isidentifier(std::string_view s);
bool py_isprintable(std::string_view s);
bool py_isdigit(std::string_view s);
bool py_isnumeric(std::string_view s);
bool py_isalnum(std::string_view s);
bool py_isspace_str(std::string_view s);
// What Python's re matches with \w in a str pattern.
bool py_is_word_char(uint32_t cp);
// int(s) and float(s) of a str: whitespace around, a sign, digits of any
// script, single underscores between digits; float also inf/nan and
// exponents. kTooBig: Python gives an int beyond 64 bits.
enum class NumParse : uint8_t { kOk, kInvalid, kTooBig };
// Python's int(s, base) (base 0 or 2..36, prefixes and underscores as
// CPython takes them), within 64 bits.
NumParse py_parse_int(std::string_view s, int64_t& out, int64_t base = 10);
bool py_parse_float(std::string_view s, double& out);

std::string py_replace(std::string_view s, std::string_view from, std::string_view to, int64_t count);
// repr(s) appended to out.
void py_repr(std::string_view s, std::string& out);
// json.dumps(s, ensure_ascii=False) appended to out.
void json_quote(std::string_view s, std::string& out, bool ensure_ascii = false);

}  // namespace tokfeed::tmpl
