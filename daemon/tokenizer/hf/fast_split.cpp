#include "tokenizer/hf/fast_split.hpp"

#include <cstring>
#include <map>
#include <string>

#include "tokenizer/hf/regex.hpp"
#include "tokenizer/hf/unicode.hpp"

namespace tokfeed::text::hf {

namespace {

// What the split regex can say of a char. kInvalid: a byte of invalid UTF-8
// (or a surrogate), which no part of the regex matches.
enum Class : uint8_t { kInvalid = 0, kLetter = 1, kNumber = 2, kSpace = 3, kOther = 4 };

// Class of every code point, in blocks of 256 shared between equal blocks.
class ClassTable {
 public:
  ClassTable() {
    std::vector<uint8_t> full(0x110000, kOther);
    for (char32_t cp = 0xD800; cp <= 0xDFFF; ++cp) full[cp] = kInvalid;
    // Every code point once, in order, as UTF-8; PCRE2 tells which belong to
    // each class (exactly the classes Regex uses for the split patterns).
    std::string all;
    all.reserve(0x110000 * 4);
    for (char32_t cp = 0; cp < 0x110000; ++cp)
      if (full[cp] != kInvalid) append_utf8(all, cp);
    std::vector<std::pair<uint32_t, uint32_t>> runs;
    const std::pair<const char*, Class> classes[] = {{"\\s+", kSpace}, {"\\p{N}+", kNumber}, {"\\p{L}+", kLetter}};
    for (const auto& [pattern, cls] : classes) {
      runs.clear();
      Regex(pattern, "character classes").find_all(all, runs);
      for (auto [b, e] : runs)
        for (size_t i = b; i < e;) {
          DecodedChar d = decode_utf8(all, i);
          full[d.cp] = cls;
          i += d.len;
        }
    }
    std::map<std::vector<uint8_t>, uint16_t> blocks;
    stage1_.resize(0x110000 >> 8);
    for (size_t blk = 0; blk < stage1_.size(); ++blk) {
      std::vector<uint8_t> v(full.begin() + long(blk << 8), full.begin() + long((blk + 1) << 8));
      auto [it, added] = blocks.emplace(v, uint16_t(blocks.size()));
      if (added) stage2_.insert(stage2_.end(), v.begin(), v.end());
      stage1_[blk] = it->second;
    }
    for (int c = 0; c < 128; ++c) ascii_[c] = full[size_t(c)];
  }
  uint8_t ascii(unsigned char c) const { return ascii_[c]; }
  uint8_t get(char32_t cp) const { return stage2_[size_t(stage1_[cp >> 8]) << 8 | (cp & 0xFF)]; }

 private:
  uint8_t ascii_[128];
  std::vector<uint16_t> stage1_;
  std::vector<uint8_t> stage2_;
};

const ClassTable& class_table() {
  static const ClassTable table;
  return table;
}

struct CharInfo {
  uint8_t cls;
  uint8_t len;
};

// Class and length of the char at s[i] (i < n), decoding UTF-8 as
// decode_utf8 does: a byte that starts no well-formed sequence is a char of
// its own, of class kInvalid.
inline CharInfo char_at(const ClassTable& t, const unsigned char* s, size_t i, size_t n) {
  const unsigned char b0 = s[i];
  if (b0 < 0x80) return {t.ascii(b0), 1};
  const size_t left = n - i;
  auto cont = [&](size_t k) { return k < left && (s[i + k] & 0xC0) == 0x80; };
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    if (cont(1)) return {t.get(char32_t((b0 & 0x1F) << 6 | (s[i + 1] & 0x3F))), 2};
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    if (cont(1) && cont(2)) {
      char32_t cp = (b0 & 0x0F) << 12 | (s[i + 1] & 0x3F) << 6 | (s[i + 2] & 0x3F);
      if (cp >= 0x800) return {t.get(cp), 3};  // surrogates are kInvalid in the table
    }
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    if (cont(1) && cont(2) && cont(3)) {
      char32_t cp = (b0 & 0x07) << 18 | (s[i + 1] & 0x3F) << 12 | (s[i + 2] & 0x3F) << 6 | (s[i + 3] & 0x3F);
      if (cp >= 0x10000 && cp <= 0x10FFFF) return {t.get(cp), 4};
    }
  }
  return {kInvalid, 1};
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

// End of the run of chars of class `cls` starting at i.
inline size_t run_end(const ClassTable& t, const unsigned char* s, size_t i, size_t n, uint8_t cls) {
  if (cls == kLetter) {
    // ASCII letters eight at a time (every one of them is \p{L}).
    while (i + 8 <= n) {
      const size_t k = ascii_letters8(s + i);
      i += k;
      if (k < 8) break;
    }
  }
  while (i < n) {
    if (s[i] < 0x80) {
      if (t.ascii(s[i]) != cls) break;
      ++i;
      continue;
    }
    CharInfo c = char_at(t, s, i, n);
    if (c.cls != cls) break;
    i += c.len;
  }
  return i;
}

// (?i:'s|'t|'re|'ve|'m|'ll|'d) at s[i] == '\'': the end of the match, or 0.
// Caseless as in PCRE2 and Oniguruma: 's' also matches U+017F (long s).
inline size_t contraction(const unsigned char* s, size_t i, size_t n) {
  if (i + 1 >= n) return 0;
  const unsigned char a = s[i + 1] | 0x20;
  auto second = [&](unsigned char want) { return i + 2 < n && (s[i + 2] | 0x20) == want ? i + 3 : 0; };
  switch (a) {
    case 's':
    case 't':
    case 'm':
    case 'd': return s[i + 1] == a || s[i + 1] == (a & ~0x20) ? i + 2 : 0;
    case 'r': return s[i + 1] == 'r' || s[i + 1] == 'R' ? second('e') : 0;
    case 'v': return s[i + 1] == 'v' || s[i + 1] == 'V' ? second('e') : 0;
    case 'l': return s[i + 1] == 'l' || s[i + 1] == 'L' ? second('l') : 0;
    default: break;
  }
  if (s[i + 1] == 0xC5 && i + 2 < n && s[i + 2] == 0xBF) return i + 3;  // U+017F
  return 0;
}

// The pattern with literal CR and LF written as \r and \n (tokenizer.json
// files use both spellings).
std::string canonical(std::string_view p) {
  std::string out;
  for (char c : p) {
    if (c == '\r') out += "\\r";
    else if (c == '\n') out += "\\n";
    else out.push_back(c);
  }
  return out;
}

}  // namespace

std::unique_ptr<FastSplit> FastSplit::for_pattern(std::string_view pattern) {
  static const std::string kHead = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|";
  static const std::string kTail = "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  const std::string p = canonical(pattern);
  int max_digits = p == kHead + "\\p{N}" + kTail ? 1 : p == kHead + "\\p{N}{1,3}" + kTail ? 3 : 0;
  if (max_digits == 0) return nullptr;
  class_table();  // built now, at load time, before workers fork
  return std::unique_ptr<FastSplit>(new FastSplit(max_digits));
}

void FastSplit::find_all(std::string_view subject, std::vector<std::pair<uint32_t, uint32_t>>& out) const {
  const ClassTable& t = class_table();
  const auto* s = reinterpret_cast<const unsigned char*>(subject.data());
  const size_t n = subject.size();
  size_t i = 0;
  while (i < n) {
    const CharInfo c = char_at(t, s, i, n);
    if (c.cls == kInvalid) {  // matched by nothing: left between matches
      i += c.len;
      continue;
    }
    size_t e = 0;
    // 1. (?i:'s|'t|'re|'ve|'m|'ll|'d)
    if (s[i] == '\'') e = contraction(s, i, n);
    if (e != 0) {
      // matched
    } else if (c.cls == kLetter) {
      // 2. [^\r\n\p{L}\p{N}]?\p{L}+ with an empty prefix
      e = run_end(t, s, i + c.len, n, kLetter);
    } else if (c.cls == kNumber) {
      // 3. \p{N} or \p{N}{1,3}
      e = i + c.len;
      for (int k = 1; k < max_digits_ && e < n; ++k) {
        CharInfo d = char_at(t, s, e, n);
        if (d.cls != kNumber) break;
        e += d.len;
      }
    } else {
      // c is a space or another char (punctuation, symbol, mark, control).
      const size_t j = i + c.len;
      const CharInfo next = j < n ? char_at(t, s, j, n) : CharInfo{kInvalid, 0};
      if (!is_newline(s[i]) && next.cls == kLetter) {
        // 2. with the one-char prefix
        e = run_end(t, s, j + next.len, n, kLetter);
      } else if (c.cls == kOther || (s[i] == ' ' && next.cls == kOther)) {
        // 4.  ?[^\s\p{L}\p{N}]+[\r\n]*
        e = run_end(t, s, c.cls == kOther ? j : j + next.len, n, kOther);
        while (e < n && is_newline(s[e])) ++e;
      } else {
        // A run of spaces W: 5. \s*[\r\n]+ takes W up to its last newline;
        // else 6. \s+(?!\S) takes W when nothing but the end (or a byte no
        // class matches) follows, else W but its last char; else 7. \s+.
        size_t w = i, last_start = i, last_newline = SIZE_MAX, count = 0;
        while (w < n) {
          CharInfo d = char_at(t, s, w, n);
          if (d.cls != kSpace) break;
          if (is_newline(s[w])) last_newline = w;
          last_start = w;
          w += d.len;
          ++count;
        }
        if (last_newline != SIZE_MAX) e = last_newline + 1;
        else if (w == n || char_at(t, s, w, n).cls == kInvalid || count == 1) e = w;
        else e = last_start;
      }
    }
    out.emplace_back(uint32_t(i), uint32_t(e));
    i = e;
  }
}

}  // namespace tokfeed::text::hf
