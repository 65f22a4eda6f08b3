// General categories for the PCRE2 regexes, from the Unicode data the rest of
// the tokenizer uses (utf8proc).
//
// PCRE2 carries Unicode tables of its own, often of an older version than
// utf8proc's: a character assigned since (a newer emoji, a CJK extension)
// is unassigned (Cn) to PCRE2, so `\p{L}` or `\p{S}` would not match it while
// Oniguruma, which HF tokenizers compiles its regexes with, and the
// hand-written split (fast_split.hpp) classify it. The pattern rewrite
// (onig_to_pcre2) adds those characters to every general-category class.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace tokfeed::text::hf {

// The two-letter or one-letter general category a \p{...} name stands for
// ("L", "Letter", "lu", "Uppercase_Letter", "LC", ...; compared as Oniguruma
// does, without case, spaces, '_' or '-'), or nothing for another property
// (a script, a binary property).
std::optional<std::string> general_category(std::string_view name);

// The characters of `category` (a result of general_category) that PCRE2's
// tables leave out, as the body of a regex class ("\x{1F6DC}\x{31350}-..."),
// "" when it knows them all. Computed once per process, on first use.
const std::string& pcre2_category_additions(const std::string& category);

// Whether PCRE2's Unicode tables are of utf8proc's Unicode version or an
// older one. Then a code point utf8proc leaves unassigned (Cn) or private
// (Co) is also one to PCRE2 (Unicode never unassigns a code point, and the
// private-use ranges are fixed): no letter, number, space or other class of
// a split pattern holds it.
bool utf8proc_covers_pcre2();

}  // namespace tokfeed::text::hf
