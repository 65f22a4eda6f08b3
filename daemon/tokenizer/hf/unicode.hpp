// Unicode helpers for the HF tokenizer.json backend: lenient UTF-8 decoding,
// NFC with a fast path, the GPT-2 byte-level alphabet, general categories.
//
// Invalid UTF-8: our input is bytes, not Python strings, so any byte that does
// not start a well-formed UTF-8 sequence is decoded as a "char" of its own
// (length 1, code point kInvalidChar). Such chars are never letters, digits or
// spaces, NFC leaves them unchanged, and no regex class matches them.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tokfeed::text::hf {

inline constexpr char32_t kInvalidChar = 0xFFFFFFFF;

struct DecodedChar {
  char32_t cp;   // code point, or kInvalidChar
  uint32_t len;  // bytes consumed, 1..4
};

// Decodes the char starting at s[i] (i < s.size()).
DecodedChar decode_utf8(std::string_view s, size_t i);

// Length of the char starting at s[i], with the same rules as decode_utf8.
inline uint32_t utf8_char_len(std::string_view s, size_t i) { return decode_utf8(s, i).len; }

void append_utf8(std::string& out, char32_t cp);

// Rust's char::is_numeric: general category Nd, Nl or No.
bool is_numeric(char32_t cp);
// Rust's char::is_whitespace: the Unicode White_Space property.
bool is_whitespace(char32_t cp);
// A regex \w char (L*, M*, Nd, Pc): used for added tokens' single_word.
bool is_word_char(char32_t cp);

// The GPT-2 byte-level alphabet: each byte is shown as one printable char.
const std::array<char32_t, 256>& byte_to_unicode();
// Inverse of byte_to_unicode(); -1 for a code point outside the alphabet.
int unicode_to_byte(char32_t cp);

// One region of an NFC result. `changed` is false where NFC kept the input
// bytes as they were (then out_len == in_len).
struct NfcRegion {
  uint32_t in_begin, in_len;
  uint32_t out_len;
  bool changed;
};

// HF tokenizers normalizes with the Unicode 9.0 data of its normalization
// crate (its regexes know a newer Unicode): to it, a char assigned later has
// combining class 0, no decomposition and no composition. tokfeed's NFC does
// the same, so that NFC(s) equals HF's on every text.
inline constexpr int kHfNormalizerUnicode = 9;
// True for an assigned code point newer than kHfNormalizerUnicode.
bool nfc_unknown(char32_t cp);

// Appends NFC(s) to `out` and describes the result as consecutive regions of
// `s`. Regions cut only before "inert" chars (combining class 0, no canonical
// decomposition, never the second half of a composition), where NFC of the
// whole equals the concatenation of NFC of the parts. A changed region is
// the smallest such span that NFC rewrote, usually a base char plus marks.
// Returns false (and leaves out/regions untouched) if s is already NFC; it
// starts with the quick check (nfc_check.hpp).
bool nfc_append(std::string_view s, std::string& out, std::vector<NfcRegion>& regions);

// Builds nfc_append's tables now (they are built once per process, on first
// use otherwise): call at load time, before worker processes fork.
void nfc_prepare();

}  // namespace tokfeed::text::hf
