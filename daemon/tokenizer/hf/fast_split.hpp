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
// for_each() hands each match to a callback as it is found, match by match:
// it classifies ASCII 64 bytes at a time into bit masks (split_masks.hpp)
// and takes the common matches of ASCII text from them; chars past ASCII
// keep the per-char path and the table, whole blocks of three-byte letters
// (Han, kana, Hangul) passed over without decoding. word_ends() gives a
// batch of words as their ends, for HfTokenizer's fused path
// (hf_tokenizer.cpp): where the text is ASCII it takes every match start of
// a 64-byte window at once from the masks with bit operations (no branch
// per match; fast_split.cpp says how), and where it is not, for_each's
// path.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/hf/code_point_table.hpp"
#include "tokenizer/hf/split_masks.hpp"

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
  uint8_t get(char32_t cp) const { return table_.get(cp); }
  // True when all 64 three-byte chars with this lead and second byte are
  // letters (most of Han, kana, Hangul): their class without decoding.
  bool letter_block(unsigned char lead, unsigned char second) const {
    return letter3_[lead & 0x0F] >> (second & 0x3F) & 1;
  }

 private:
  uint8_t ascii_[128];
  uint64_t letter3_[16] = {};
  CodePointTable table_;
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

// End of the run of \p{L} starting at i, where letters of any script may
// continue it (after a char past ASCII, say).
inline size_t letters_tail(const ClassTable& t, const unsigned char* s, size_t i, size_t n) {
  // Three-byte letters of blocks of letters only (Han, kana, Hangul), each
  // from one load of four bytes, while the text goes on past them.
  while (i + 4 <= n) {
    uint32_t v;
    std::memcpy(&v, s + i, 4);
    if ((v & 0xC0C0F0u) != 0x8080E0u) break;
    if (!t.letter_block(uint8_t(v), uint8_t(v >> 8))) {
      // A block with other chars (CJK punctuation): the char's own class.
      const char32_t cp = char32_t(v & 0x0F) << 12 | char32_t(v >> 2 & 0xFC0) | (v >> 16 & 0x3F);
      if (cp < 0x800 || t.get(cp) != kLetter) return i;
    }
    i += 3;
  }
  while (i < n) {
    if (s[i] < 0x80) {
      if (!is_ascii_letter(s[i])) break;
      ++i;
      continue;
    }
    if ((s[i] & 0xF0) == 0xE0 && i + 3 <= n && (s[i + 1] & 0xC0) == 0x80 && (s[i + 2] & 0xC0) == 0x80) {
      // Three bytes (Han, kana, Hangul), decoded here as multibyte_char_at
      // does; surrogates and overlong forms are not letters in the table.
      if (t.letter_block(s[i], s[i + 1])) {
        i += 3;
        continue;
      }
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
  return letters_tail(t, s, i, n);
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

// A letter of three bytes at j (j <= n) in a block of letters only (Han,
// kana, Hangul).
inline bool is_letter3(const ClassTable& t, const unsigned char* s, size_t j, size_t n) {
  return j + 3 <= n && (s[j] & 0xF0) == 0xE0 && (s[j + 1] & 0xC0) == 0x80 && (s[j + 2] & 0xC0) == 0x80 &&
         t.letter_block(s[j], s[j + 1]);
}

// Class of the three-byte char at i (s[i] is E0-EF), decoded as
// multibyte_char_at does; length 0 where the bytes are not one.
inline CharInfo char3_at(const ClassTable& t, const unsigned char* s, size_t i, size_t n) {
  if (i + 3 > n || (s[i + 1] & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80) return {kInvalid, 0};
  const char32_t cp = char32_t(s[i] & 0x0F) << 12 | char32_t(s[i + 1] & 0x3F) << 6 | (s[i + 2] & 0x3F);
  if (cp < 0x800) return {kInvalid, 0};
  return {t.get(cp), 3};  // surrogates are kInvalid in the table
}

// One match at i the general way (any char): its end, or `match` false
// for a byte of invalid UTF-8, which no alternative matches.
struct Step {
  size_t end;
  bool match;
};
Step scalar_step(const ClassTable& t, const unsigned char* s, size_t i, size_t n, int max_digits);

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
  void for_each(std::string_view subject, Match&& match) const {
    scan(subject, 0, [&](size_t b, size_t e) {
      match(b, e);
      return false;
    });
  }

  // The words of `subject` from `pos` on, as the fused tokenizer takes them:
  // each match, and the bytes between two matches (invalid UTF-8) as a word
  // of their own. Writes the ends of up to kWordBatch words to `ends`;
  // moves `pos` past the last; returns how many (at least one where
  // pos < subject.size()). One function, so that the scan's state and the
  // writer's stay in registers.
  static constexpr size_t kWordBatch = 256;
  size_t word_ends(std::string_view subject, size_t& pos, uint32_t (&ends)[kWordBatch]) const;

  int max_digits() const { return max_digits_; }

 private:
  explicit FastSplit(int max_digits) : max_digits_(max_digits) {}
  // The matches from i on: match(begin, end) for each until it returns
  // true; returns where the next match would start (subject.size() at the end).
  template <class Match>
  [[gnu::always_inline]] size_t scan(std::string_view subject, size_t i, Match&& match) const;
  int max_digits_;
};

template <class Match>
inline size_t FastSplit::scan(std::string_view subject, size_t i, Match&& match) const {
  using namespace split_detail;
  const ClassTable& t = class_table();
  const auto* s = reinterpret_cast<const unsigned char*>(subject.data());
  const size_t n = subject.size();
  // The masks of the 64 bytes from `base`, moved on when fewer than 8 bytes
  // of the window are left at i. A run that reaches the window's end, or a
  // byte past ASCII where it matters, is finished per char.
  size_t base = size_t(0) - 64;
  ByteMasks m;
  while (i < n) {
    size_t e = 0;
    if (s[i] < 0x80) {  // a char past ASCII is none of the window's matches
      if (i - base > 56) {
        base = i;
        m = classify(s + i, n - i);
      }
      size_t o = i - base;
      const uint64_t bit = uint64_t(1) << o;
      if (m.word & bit) {
        // 2. [^\r\n\p{L}\p{N}]?\p{L}+ (a letter at i, or at i + 1 after a prefix)
        size_t p = o + 1 + (~m.letter >> o & 1);
        size_t q = p + size_t(__builtin_ctzll(~(m.letter >> p)));  // p >= 1: some bit is clear
        if (q == 64) {
          e = letters_end(t, s, base + q, n);
        } else if (m.high >> q & 1) {
          e = letters_tail(t, s, base + q, n);
        } else {
          // Ended by an ASCII byte in the window; so are the letter runs
          // that follow it most of the time (prose, identifiers), matched
          // here while the window tells them.
          for (;;) {
            if (match(base + o, base + q)) return base + q;
            o = q;
            if (o > 56 || !(m.word >> o & 1)) break;  // o <= 56: p <= 58 below
            p = o + 1 + (~m.letter >> o & 1);
            q = p + size_t(__builtin_ctzll(~(m.letter >> p)));
            if (q == 64 || (m.high >> q & 1)) break;
          }
          i = base + o;
          continue;
        }
      } else if (m.digit & bit) {
        // 3. \p{N} or \p{N}{1,3}; a number past ASCII may follow a short run
        const uint64_t run = m.digit >> o & 7;
        if (max_digits_ == 1 || run == 7) e = i + size_t(max_digits_);
        else if (const size_t d = run & 2 ? 2 : 1; !(m.high >> (o + d) & 1)) e = i + d;
      } else if (((m.other & bit) && s[i] != '\'') || (s[i] == ' ' && (m.other & bit << 1))) {
        // 4.  ?[^\s\p{L}\p{N}]+[\r\n]*; what follows the first char is not
        // a letter (above), but past ASCII it may be one
        const size_t p = m.other & bit ? o + 1 : o + 2;
        if (p == o + 2 || !(m.high & bit << 1)) {
          const size_t q = p + size_t(__builtin_ctzll(~(m.other >> p)));
          e = q == 64 || (m.high >> q & 1) ? run_end(t, s, base + q, n, kOther) : base + q;
          while (e < n && is_newline(s[e])) ++e;
        } else if (is_letter3(t, s, i + 1, n)) {
          e = letters_tail(t, s, i + 4, n);  // 2. with this char as the prefix
        }
      } else if (m.space & bit) {
        // 5.-7. A run of spaces; where a byte past ASCII ends it, a Unicode space
        // may go on or the next char be invalid, unless it is a letter of three bytes.
        const size_t q = o + 1 + size_t(__builtin_ctzll(~(m.space >> (o + 1))));
        const bool high = q < 64 && (m.high >> q & 1);
        if (q < 64 && (!high || is_letter3(t, s, base + q, n))) {
          const uint64_t newlines = m.newline >> o & ((uint64_t(1) << (q - o)) - 1);
          // \s*[\r\n]+ up to the last newline; else \s+(?!\S) all of it at
          // the end or for one space, else all but the last space; one space
          // but CR or LF before a letter is 2.'s prefix.
          if (newlines != 0) e = i + size_t(64 - __builtin_clzll(newlines));
          else if (!high) e = base + q == n || q == o + 1 ? base + q : base + q - 1;
          else e = q == o + 1 ? letters_tail(t, s, base + q + 3, n) : base + q - 1;
        }
      }
    }
    if (e == 0) {
      // Three-byte chars (CJK) first: a letter, or punctuation before one, starts 2.
      CharInfo c;
      if (is_letter3(t, s, i, n)) {
        e = letters_tail(t, s, i + 3, n);
      } else if ((s[i] & 0xF0) == 0xE0 && (c = char3_at(t, s, i, n), c.len == 3) &&
                 (c.cls == kOther || c.cls == kSpace)) {
        // Punctuation (U+3002) or a space (U+3000) before a letter; punctuation
        // before an ASCII space ends its run of 4., with the newlines after it.
        if (is_letter3(t, s, i + 3, n)) {
          e = letters_tail(t, s, i + 6, n);
        } else if (c.cls == kOther && i + 3 < n && s[i + 3] < 0x80 && t.ascii(s[i + 3]) == kSpace) {
          e = i + 3;
          while (e < n && is_newline(s[e])) ++e;
        }
      }
      if (e == 0) {
        const Step st = scalar_step(t, s, i, n, max_digits_);
        if (!st.match) {  // invalid UTF-8, matched by nothing: left between matches
          i = st.end;
          continue;
        }
        e = st.end;
      }
    }
    if (match(i, e)) return e;
    i = e;
  }
  return n;
}

}  // namespace tokfeed::text::hf
