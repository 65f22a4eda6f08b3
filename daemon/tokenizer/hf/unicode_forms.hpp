// Normalization forms and character classes of HF tokenizer.json components
// beyond NFC: NFD, NFKD, NFKC, Lowercase, StripAccents, and the char classes
// of the Whitespace and Punctuation pre-tokenizers.
//
// Each follows the Unicode data of the Rust crate HF uses for it, which is
// older than ours (utf8proc and ICU, Unicode 15.0):
// - NFD, NFKD, NFKC: Unicode 9.0, as NFC (nfc_unknown in unicode.hpp): a char
//   assigned later is never decomposed, composed or reordered.
// - StripAccents removes the combining marks (general category M) of
//   Unicode 9.0.
// - Punctuation splits at the punctuation (general category P) of Unicode
//   8.0, and at ASCII punctuation.
// - Whitespace's \w is Oniguruma's: Alphabetic, M, Nd, Pc or Join_Control.
// - Lowercase maps each char by itself (no final-sigma context), with ICU's
//   full lowercase mapping.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/hf/unicode.hpp"

namespace tokfeed::text::hf {

enum class NormalForm { kNfd, kNfkd, kNfkc };

// Appends form(s) to `out` and describes the result as consecutive regions of
// `s`, as nfc_append does. Returns false (and leaves out/regions untouched)
// when s is already in that form.
bool normal_form_append(NormalForm form, std::string_view s, std::string& out, std::vector<NfcRegion>& regions);

// Builds the tables of `form` now (call at load time, before workers fork).
void normal_form_prepare(NormalForm form);

// The lowercase of one char, as Rust's char::to_lowercase; appends it to
// `out`. Returns false (appending nothing) when the char maps to itself.
bool append_lowercase(char32_t cp, std::string& out);

// Char classes, with the Unicode versions listed above. Invalid chars
// (kInvalidChar) belong to none of them.
bool is_hf_combining_mark(char32_t cp);  // removed by StripAccents
bool is_hf_punctuation(char32_t cp);     // split at by Punctuation
bool is_onig_word(char32_t cp);          // \w of Whitespace's \w+|[^\w\s]+

// Builds the char class table now (call at load time, before workers fork).
void char_classes_prepare();

}  // namespace tokfeed::text::hf
