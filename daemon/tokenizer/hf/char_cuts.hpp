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
// bit filter keyed by the two chars' bytes (a false positive forgoes a cut).
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

  // Calls part(begin, end, id) for each part of `word` (at least 4 bytes:
  // fewer hold no two chars of two or three bytes) in order, cutting
  // where allowed; id is the token a part made of one 2- or 3-byte char is
  // (its BPE), or -1 for any other part. Returns false, calling nothing,
  // where there is no cut.
  template <class Part>
  bool for_each_part(std::string_view word, Part&& part) const {
    if (ascii(word)) return false;  // most words: no char of two or three bytes
    const auto* p = reinterpret_cast<const unsigned char*>(word.data());
    const size_t n = word.size();
    size_t begin = 0, i = 0;
    // Where the char before i starts, when it is a 2- or 3-byte one (else
    // SIZE_MAX), and its bytes (char_key). A part [begin, i) is that one
    // char iff it starts at begin.
    size_t prev_at = SIZE_MAX;
    uint32_t prev_key = 0;
    auto step = [&](uint32_t v) __attribute__((always_inline)) {
      uint32_t key, len;
      if ((v & 0xC0C0F0u) == 0x8080E0u && (v & 0x200Fu) != 0) {
        key = v, len = 3;  // Han, kana, Hangul, CJK punctuation: most chars of the words that come here
      } else if ((v & 0xC0E0u) == 0x80C0u && (v & 0x1Eu) != 0) {
        key = v & 0xFFFFu, len = 2;
      } else {
        prev_at = SIZE_MAX;
        i += 1;
        return;
      }
      if (prev_at != SIZE_MAX && cut(word, i, prev_key, key)) {
        part(begin, i, prev_at == begin ? chars_[key_code_point(prev_key)] : -1);
        begin = i;
      }
      prev_at = i;
      prev_key = key;
      i += len;
    };
    // Four bytes read at a time while they are in the word; the last char
    // or two (most often one of three bytes) from the bytes that are left.
    for (uint32_t v; i + 4 <= n;) {
      std::memcpy(&v, p + i, 4);
      step(v & 0xFFFFFFu);
    }
    while (i < n) step(load3(p, i, n));
    if (begin == 0) return false;
    part(begin, n, prev_at == begin ? chars_[key_code_point(prev_key)] : -1);
    return true;
  }

  // The key of a 2- or 3-byte char: its bytes, the first lowest. A 2-byte
  // char's lead (C2-DF) and a 3-byte char's (E0-EF) differ, so do their keys.
  static uint32_t key_code_point(uint32_t key) {
    return (key & 0xF0u) == 0xE0u ? (key & 0x0Fu) << 12 | (key >> 2 & 0xFC0u) | (key >> 16 & 0x3Fu)
                                  : (key & 0x1Fu) << 6 | (key >> 8 & 0x3Fu);
  }

 private:
  // Whether a word of at least 4 bytes is ASCII, with no loop over its last
  // bytes: its first 8 and last 8 (4 and 4 below 8), then the 8-byte chunks
  // between.
  static bool ascii(std::string_view word) {
    constexpr uint64_t kHigh = 0x8080808080808080ull;
    const char* p = word.data();
    const size_t n = word.size();
    if (n < 8) {
      uint32_t a, b;
      std::memcpy(&a, p, 4);
      std::memcpy(&b, p + n - 4, 4);
      return ((a | b) & 0x80808080u) == 0;
    }
    // A CJK word is done here.
    uint64_t bits, last;
    std::memcpy(&bits, p, 8);
    std::memcpy(&last, p + n - 8, 8);
    bits |= last;
    if (bits & kHigh) return false;
    for (size_t i = 8; i + 8 < n; i += 8) {
      uint64_t v;
      std::memcpy(&v, p + i, 8);
      bits |= v;
    }
    return (bits & kHigh) == 0;
  }
  // The bytes at p[i, min(i + 3, n)), the first lowest, zero-padded.
  static uint32_t load3(const unsigned char* p, size_t i, size_t n) {
    uint32_t v = p[i];
    if (i + 1 < n) v |= uint32_t(p[i + 1]) << 8;
    if (i + 2 < n) v |= uint32_t(p[i + 2]) << 16;
    return v;
  }
  static bool cont(unsigned char b) { return (b & 0xC0) == 0x80; }
  // E0 80..9F: a 3-byte form of a code point below U+0800, which would share
  // its code point (the key of the tables here) with a 2-byte char.
  static bool overlong(unsigned char lead, unsigned char next) { return lead == 0xE0 && next < 0xA0; }
  static bool test(const std::vector<uint64_t>& bits, uint32_t i) { return bits[i / 64] >> (i % 64) & 1; }
  static void set(std::vector<uint64_t>& bits, uint32_t i) { bits[i / 64] |= uint64_t(1) << (i % 64); }
  uint32_t pair_bit(uint32_t k1, uint32_t k2) const {
    return uint32_t(((uint64_t(k1) << 24 | k2) * 0x9E3779B97F4A7C15ull) >> pair_shift_);
  }
  // The boundary at word[i], between the chars with keys k1 and k2.
  [[gnu::always_inline]] bool cut(std::string_view word, size_t i, uint32_t k1, uint32_t k2) const {
    if (test(pairs_, pair_bit(k1, k2))) return false;  // (a)
    // (b) and (c): the masks of both pieces of each side at once (tail3_,
    // head3_); where one lets a fragment through, each piece on its own.
    const bool three1 = k1 > 0xFFFFu, three2 = k2 > 0xFFFFu;
    const uint32_t lead = (k2 & 0xFFu) - 0xC0u, last = (three1 ? k1 >> 16 : k1 >> 8) & 0x3Fu;
    // Between two 3-byte chars (most boundaries: Han runs) the tail's bits
    // of 3-byte leads alone, from a table a quarter of tail3_'s size.
    const uint32_t tail_at = (k1 >> 2 & 0xFC0u) | last;
    const uint64_t tail = three1 ? (three2 ? uint64_t(tail3_lead3_[tail_at]) << 32 : tail3_[tail_at]) : tail1_[last];
    const uint64_t head = three2 ? head3_[(k2 & 0x0Fu) << 6 | (k2 >> 8 & 0x3Fu)] : head1_[lead];
    return (((tail >> lead) | (head >> last)) & 1) == 0 || !fragment_spans(word, i, three1 ? 3 : 2, three2 ? 3 : 2);
  }
  // Whether a fragment covers the boundary at word[i] ((b), (c)).
  [[gnu::noinline]] bool fragment_spans(std::string_view word, size_t i, uint32_t l1, uint32_t l2) const {
    const auto* w = reinterpret_cast<const unsigned char*>(word.data());
    // (b): a fragment starting with c1's last byte, or its last two, whose
    // next byte is c2's lead byte. (c): a fragment ending with c2's first
    // byte, or its first two, whose byte before is c1's last one.
    const uint32_t lead = w[i] - 0xC0u, last = w[i - 1] & 0x3Fu;
    if ((tail1_[last] >> lead & 1) && test(tail1x_, tail1x_bit(w[i - 1], w[i], w[i + 1])) &&
        covers(kTail | 1u << 16 | w[i - 1], word, i, 1))
      return true;
    if (l1 == 3 && (tail2_[(w[i - 2] & 0x3Fu) << 6 | last] >> lead & 1) &&
        covers(kTail | 2u << 16 | uint32_t(w[i - 2]) << 8 | w[i - 1], word, i, 2))
      return true;
    if ((head1_[lead] >> last & 1) && covers(kHead | 1u << 16 | w[i], word, i, 1)) return true;
    if (l2 == 3 && (head2_[(w[i] & 0x0Fu) << 6 | (w[i + 1] & 0x3Fu)] >> last & 1) &&
        covers(kHead | 2u << 16 | uint32_t(w[i]) << 8 | w[i + 1], word, i, 2))
      return true;
    return false;
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
  // Both pieces of a 3-byte char at once: tail3_ by its last two bytes' low 6 bits,
  // tail1_ | tail2_; head3_ by its first two, head1_ | head2_.
  std::vector<uint64_t> tail3_ = std::vector<uint64_t>(4096), head3_ = std::vector<uint64_t>(1024);
  // tail3_'s bits of the 3-byte leads E0-EF (bits 32-47).
  std::vector<uint16_t> tail3_lead3_ = std::vector<uint16_t>(4096);
  // (b) with c1's last byte, finer: per c1's last byte, c2's lead and the
  // byte after it (their low 6 bits), whether a fragment starts with them
  // (one that ends inside c2 is found by (c) as well).
  static uint32_t tail1x_bit(uint32_t last, uint32_t lead, uint32_t next) {
    return (last & 0x3Fu) << 12 | (lead & 0x3Fu) << 6 | (next & 0x3Fu);
  }
  std::vector<uint64_t> tail1x_ = std::vector<uint64_t>(4096);
  std::vector<int32_t> chars_ = std::vector<int32_t>(65536, -1);  // by code point: a one-char part's token
  std::unordered_map<uint32_t, std::vector<std::string>> fragments_;
  std::vector<uint64_t> pairs_;
  int pair_shift_ = 64;
};

}  // namespace tokfeed::text::hf
