// Where a word of a byte-level vocabulary can be cut so that its BPE is the
// BPE of the parts, each on its own: between two chars no token spans.
//
// Every merge makes a vocabulary token, so if no token's bytes can cover both
// the last byte of char c1 and the first byte of the char c2 after it, no
// merge ever joins symbols across that boundary. Each side then sees the same
// merges in the same order as it would alone (the pair merged next is the
// lowest-ranked on the whole word, so also on its side; equal ranks are the
// same pair, leftmost first on either side), and the word's BPE is the BPE of
// its parts put together. A token covers the boundary iff
//   (a) it contains the bytes of c1 then c2, or
//   (b) it starts inside c1 (with a proper suffix of c1's bytes) and goes on, or
//   (c) it ends inside c2 (with a proper prefix of c2's bytes) and started before.
// Only boundaries between two chars of two or three bytes (a lead byte and the
// continuation bytes it announces, not an overlong form) are considered. The pairs of (a) sit in a
// bit filter keyed by the two code points (a false positive forgoes a cut).
// For (b) and (c), the few "fragment" tokens (Qwen3: 116 that start with
// continuation bytes, 260 that end with an unfinished char) are kept by the
// piece of a char they start or end with, and compared with the word around
// the boundary where that piece is c1's end or c2's start, where the byte
// across the boundary from the piece is one the fragment has there (a 64-bit
// mask per piece answers most boundaries). Han, kana and
// Hangul runs, long and rarely repeated as words, fall apart into parts of a
// few chars that do repeat.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tokfeed::text::hf {

class CharCuts {
 public:
  // raw[id]: the bytes of token id (empty: none); reachable(id): the BPE of
  // its bytes is the token.
  void build(const std::vector<std::string>& raw, const std::function<bool(int32_t)>& reachable);

  // The token a part made of one 2- or 3-byte char is (its BPE), or -1.
  int32_t single_char(std::string_view part) const {
    const auto* p = reinterpret_cast<const unsigned char*>(part.data());
    if (part.size() == 2 && p[0] >= 0xC2 && p[0] <= 0xDF && cont(p[1]))
      return chars_[(p[0] & 0x1Fu) << 6 | (p[1] & 0x3Fu)];
    if (part.size() == 3 && p[0] >= 0xE0 && p[0] <= 0xEF && cont(p[1]) && cont(p[2]) && !overlong(p[0], p[1]))
      return chars_[(p[0] & 0x0Fu) << 12 | (p[1] & 0x3Fu) << 6 | (p[2] & 0x3Fu)];
    return -1;
  }

  // Calls part(begin, end) for each part of `word` in order, cutting where
  // allowed; returns false, calling nothing, where there is no cut.
  template <class Part>
  bool for_each_part(std::string_view word, Part&& part) const {
    if (ascii(word)) return false;  // most words: no char of two or three bytes
    const auto* p = reinterpret_cast<const unsigned char*>(word.data());
    const size_t n = word.size();
    size_t begin = 0, i = 0;
    uint32_t prev_cp = 0, prev_len = 0;  // the char before i, when it is a 2- or 3-byte one
    while (i < n) {
      const unsigned char b = p[i];
      uint32_t len = b >= 0xC2 && b <= 0xDF ? 2 : b >= 0xE0 && b <= 0xEF ? 3 : 0;
      if (len == 0 || i + len > n || !cont(p[i + 1]) || (len == 3 && (!cont(p[i + 2]) || overlong(b, p[i + 1])))) {
        prev_len = 0;
        i += 1;
        continue;
      }
      const uint32_t cp = len == 2 ? (b & 0x1Fu) << 6 | (p[i + 1] & 0x3Fu)
                                   : (b & 0x0Fu) << 12 | (p[i + 1] & 0x3Fu) << 6 | (p[i + 2] & 0x3Fu);
      if (prev_len != 0 && cut(word, i, prev_len, prev_cp, len, cp)) {
        part(begin, i);
        begin = i;
      }
      prev_cp = cp;
      prev_len = len;
      i += len;
    }
    if (begin == 0) return false;
    part(begin, n);
    return true;
  }

 private:
  static bool ascii(std::string_view word) {
    uint64_t bits = 0;
    size_t i = 0;
    for (; i + 8 <= word.size(); i += 8) {
      uint64_t v;
      std::memcpy(&v, word.data() + i, 8);
      bits |= v;
    }
    for (; i < word.size(); ++i) bits |= static_cast<unsigned char>(word[i]);
    return (bits & 0x8080808080808080ull) == 0;
  }
  static bool cont(unsigned char b) { return (b & 0xC0) == 0x80; }
  // E0 80..9F: a 3-byte form of a code point below U+0800, which would share
  // its code point (the key of the tables here) with a 2-byte char.
  static bool overlong(unsigned char lead, unsigned char next) { return lead == 0xE0 && next < 0xA0; }
  static bool test(const std::vector<uint64_t>& bits, uint32_t i) { return bits[i / 64] >> (i % 64) & 1; }
  static void set(std::vector<uint64_t>& bits, uint32_t i) { bits[i / 64] |= uint64_t(1) << (i % 64); }
  uint32_t pair_bit(uint32_t c1, uint32_t c2) const {
    return uint32_t(((uint64_t(c1) << 16 | c2) * 0x9E3779B97F4A7C15ull) >> pair_shift_);
  }
  // The boundary at word[i], between c1 (l1 bytes) and c2 (l2 bytes).
  bool cut(std::string_view word, size_t i, uint32_t l1, uint32_t c1, uint32_t l2, uint32_t c2) const {
    if (test(pairs_, pair_bit(c1, c2))) return false;  // (a)
    const auto* w = reinterpret_cast<const unsigned char*>(word.data());
    // (b): a fragment starting with c1's last byte, or its last two, whose
    // next byte is c2's lead byte. (c): a fragment ending with c2's first
    // byte, or its first two, whose byte before is c1's last one.
    const uint32_t lead = w[i] - 0xC0u, last = w[i - 1] & 0x3Fu;
    if ((tail1_[w[i - 1] & 0x3Fu] >> lead & 1) && covers(kTail | 1u << 16 | w[i - 1], word, i, 1)) return false;
    if (l1 == 3 && (tail2_[(w[i - 2] & 0x3Fu) << 6 | last] >> lead & 1) &&
        covers(kTail | 2u << 16 | uint32_t(w[i - 2]) << 8 | w[i - 1], word, i, 2))
      return false;
    if ((head1_[lead] >> last & 1) && covers(kHead | 1u << 16 | w[i], word, i, 1)) return false;
    if (l2 == 3 && (head2_[(w[i] & 0x0Fu) << 6 | (w[i + 1] & 0x3Fu)] >> last & 1) &&
        covers(kHead | 2u << 16 | uint32_t(w[i]) << 8 | w[i + 1], word, i, 2))
      return false;
    return true;
  }
  // Whether a fragment under `key` occurs in `word` across the boundary at i;
  // `piece` is how many of its bytes lie on c1's side (tail) or c2's (head).
  bool covers(uint32_t key, std::string_view word, size_t i, size_t piece) const;
  static constexpr uint32_t kTail = 1u << 18, kHead = 2u << 18;
  // Per piece a fragment starts with (c1's last byte, or last two: their low
  // 6 bits), the lead bytes (less 0xC0) that follow it in some fragment; per
  // piece a fragment ends with (c2's lead byte less 0xC0; a 3-byte lead's low
  // 4 bits and the next byte's low 6), the continuation bytes' low 6 bits
  // that come before it in some fragment.
  std::vector<uint64_t> tail1_ = std::vector<uint64_t>(64), tail2_ = std::vector<uint64_t>(4096);
  std::vector<uint64_t> head1_ = std::vector<uint64_t>(64), head2_ = std::vector<uint64_t>(1024);
  std::vector<int32_t> chars_ = std::vector<int32_t>(65536, -1);  // by code point: single_char()
  std::unordered_map<uint32_t, std::vector<std::string>> fragments_;
  std::vector<uint64_t> pairs_;
  int pair_shift_ = 64;
};

}  // namespace tokfeed::text::hf
