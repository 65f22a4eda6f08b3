// A hand-written matcher for the split regex of the Qwen2/Qwen3 and Llama-3
// tokenizer.json files, which most BPE tokenizers of today share:
//
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,K}|
//    ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// (K = 1 for Qwen, written \p{N}; K = 3 for Llama-3). It gives exactly the
// matches Regex gives through PCRE2 (see regex.hpp: Oniguruma's \s, invalid
// UTF-8 matched by nothing), in one forward pass with no backtracking. The
// Unicode classes (\p{L}, \p{N}, \s) come from PCRE2 itself, read once per
// process into a two-level table, so both paths agree on every code point.
// tests/unit/test_fast_split.cpp checks it against PCRE2 on the golden texts
// and on random strings.
//
// for_each() hands each match to a callback as it is found, so a caller can
// tokenize word by word with no list of matches in between
// (HfTokenizer's fused path, hf_model.hpp).
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

namespace tokfeed::text::hf {

namespace split_detail {

// What the split regex can say of a char. kInvalid: a byte of invalid UTF-8
// (or a surrogate), which no part of the regex matches.
enum Class : uint8_t { kInvalid = 0, kLetter = 1, kNumber = 2, kSpace = 3, kOther = 4 };

// Class of every code point, in blocks of 256 shared between equal blocks.
class ClassTable {
 public:
  ClassTable();
  uint8_t ascii(unsigned char c) const { return ascii_[c]; }
  uint8_t get(char32_t cp) const { return stage2_[size_t(stage1_[cp >> 8]) << 8 | (cp & 0xFF)]; }

 private:
  uint8_t ascii_[128];
  std::vector<uint16_t> stage1_;
  std::vector<uint8_t> stage2_;
};

const ClassTable& class_table();

struct CharInfo {
  uint8_t cls;
  uint8_t len;
};

// Class and length of the char at s[i] (i < n) that is not ASCII, decoding
// UTF-8 as decode_utf8 does: a byte that starts no well-formed sequence is a
// char of its own, of class kInvalid.
CharInfo multibyte_char_at(const ClassTable& t, const unsigned char* s, size_t i, size_t n);

inline CharInfo char_at(const ClassTable& t, const unsigned char* s, size_t i, size_t n) {
  if (s[i] < 0x80) return {t.ascii(s[i]), 1};
  return multibyte_char_at(t, s, i, n);
}

inline bool is_newline(unsigned char c) { return c == '\r' || c == '\n'; }

// How many of the 8 bytes at p, from the first, are ASCII letters.
inline size_t ascii_letters8(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  constexpr uint64_t kOnes = 0x0101010101010101ull, kHigh = 0x8080808080808080ull;
  const uint64_t y = v | 0x20 * kOnes;  // lower case; bytes below 0x80 stay below 0x80
  // Bit 7 of each byte: y >= 'a' and y <= 'z' (no carries: every sum stays below 0x100).
  const uint64_t letter = (y + 0x1F * kOnes) & ~(y + 0x05 * kOnes) & ~v & kHigh;
  const uint64_t other = ~letter & kHigh;
  return other == 0 ? 8 : size_t(__builtin_ctzll(other)) / 8;
}

inline bool is_ascii_letter(unsigned char c) { return unsigned((c | 0x20) - 'a') < 26; }

// End of the run of \p{L} starting at i, ASCII letters eight at a time.
inline size_t letters_end(const ClassTable& t, const unsigned char* s, size_t i, size_t n) {
  while (i + 8 <= n) {
    const size_t k = ascii_letters8(s + i);
    i += k;
    if (k < 8) {
      if (s[i] < 0x80) return i;  // the common end: an ASCII char that is not a letter
      break;
    }
  }
  while (i < n && s[i] < 0x80) {
    if (!is_ascii_letter(s[i])) return i;
    ++i;
  }
  if (i == n) return i;
  // A char past ASCII: letters of any script continue the run.
  while (i < n) {
    if (s[i] < 0x80) {
      if (!is_ascii_letter(s[i])) break;
      ++i;
      continue;
    }
    if ((s[i] & 0xF0) == 0xE0 && i + 3 <= n && (s[i + 1] & 0xC0) == 0x80 && (s[i + 2] & 0xC0) == 0x80) {
      // Three bytes (Han, kana, Hangul), decoded here as multibyte_char_at
      // does; surrogates and overlong forms are not letters in the table.
      const char32_t cp = char32_t(s[i] & 0x0F) << 12 | char32_t(s[i + 1] & 0x3F) << 6 | (s[i + 2] & 0x3F);
      if (cp < 0x800 || t.get(cp) != kLetter) break;
      i += 3;
      continue;
    }
    CharInfo c = multibyte_char_at(t, s, i, n);
    if (c.cls != kLetter) break;
    i += c.len;
  }
  return i;
}

// End of the run of chars of class `cls` starting at i.
inline size_t run_end(const ClassTable& t, const unsigned char* s, size_t i, size_t n, uint8_t cls) {
  while (i < n) {
    if (s[i] < 0x80) {
      if (t.ascii(s[i]) != cls) break;
      ++i;
      continue;
    }
    CharInfo c = multibyte_char_at(t, s, i, n);
    if (c.cls != cls) break;
    i += c.len;
  }
  return i;
}

// (?i:'s|'t|'re|'ve|'m|'ll|'d) at s[i] == '\'': the end of the match, or 0.
size_t contraction(const unsigned char* s, size_t i, size_t n);

// The end of the run of spaces starting at i (\s*[\r\n]+|\s+(?!\S)|\s+).
size_t spaces_end(const ClassTable& t, const unsigned char* s, size_t i, size_t n);

}  // namespace split_detail

class FastSplit {
 public:
  // The matcher for `pattern` (as written in tokenizer.json) when it is one
  // of the patterns above, else null.
  static std::unique_ptr<FastSplit> for_pattern(std::string_view pattern);

  // Appends the [begin, end) of every match in `subject`, as Regex::find_all.
  void find_all(std::string_view subject, std::vector<std::pair<uint32_t, uint32_t>>& out) const {
    for_each(subject, [&](size_t b, size_t e) { out.emplace_back(uint32_t(b), uint32_t(e)); });
  }

  // Calls match(begin, end) for every match in `subject`, in order. Bytes
  // between matches (invalid UTF-8 only) are matched by nothing.
  template <class Match>
  void for_each(std::string_view subject, Match&& match) const;

  int max_digits() const { return max_digits_; }

 private:
  explicit FastSplit(int max_digits) : max_digits_(max_digits) {}
  int max_digits_;
};

template <class Match>
void FastSplit::for_each(std::string_view subject, Match&& match) const {
  using namespace split_detail;
  const ClassTable& t = class_table();
  const auto* s = reinterpret_cast<const unsigned char*>(subject.data());
  const size_t n = subject.size();
  size_t i = 0;
  while (i < n) {
    // The common words first: an ASCII letter, or a space and one.
    if (is_ascii_letter(s[i])) {
      const size_t e = letters_end(t, s, i + 1, n);
      match(i, e);
      i = e;
      continue;
    }
    if (s[i] == ' ' && i + 1 < n && is_ascii_letter(s[i + 1])) {
      const size_t e = letters_end(t, s, i + 2, n);
      match(i, e);
      i = e;
      continue;
    }
    const CharInfo c = char_at(t, s, i, n);
    size_t e = 0;
    if (c.cls == kLetter) {
      // 2. [^\r\n\p{L}\p{N}]?\p{L}+ with an empty prefix
      e = letters_end(t, s, i + c.len, n);
    } else if (c.cls == kNumber) {
      // 3. \p{N} or \p{N}{1,3}
      e = i + c.len;
      for (int k = 1; k < max_digits_ && e < n; ++k) {
        CharInfo d = char_at(t, s, e, n);
        if (d.cls != kNumber) break;
        e += d.len;
      }
    } else if (c.cls == kInvalid) {  // matched by nothing: left between matches
      i += c.len;
      continue;
    } else if (s[i] == '\'' && (e = contraction(s, i, n)) != 0) {
      // 1. (?i:'s|'t|'re|'ve|'m|'ll|'d)
    } else {
      // c is a space or another char (punctuation, symbol, mark, control).
      const size_t j = i + c.len;
      const CharInfo next = j < n ? char_at(t, s, j, n) : CharInfo{kInvalid, 0};
      if (next.cls == kLetter && !is_newline(s[i])) {
        // 2. with the one-char prefix
        e = letters_end(t, s, j + next.len, n);
      } else if (c.cls == kOther || (s[i] == ' ' && next.cls == kOther)) {
        // 4.  ?[^\s\p{L}\p{N}]+[\r\n]*
        e = run_end(t, s, c.cls == kOther ? j : j + next.len, n, kOther);
        while (e < n && is_newline(s[e])) ++e;
      } else {
        e = spaces_end(t, s, i, n);
      }
    }
    match(i, e);
    i = e;
  }
}

}  // namespace tokfeed::text::hf
