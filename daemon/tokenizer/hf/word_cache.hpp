// Word -> BPE pieces, per process (see bpe.hpp). A word of up to 16 bytes
// (most of them) is its own key, as two integers zero-padded; the hash comes
// from those. A 32-byte slot holds the key and, for up to three pieces that
// cover the word, the pieces themselves: a hit is one slot read, with no
// second lookup and no allocation. A miss remembers its slot, so the insert
// that follows does not probe again.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "tokenizer/hf/huge_table.hpp"

namespace tokfeed::text::hf {

// A token of a word: its id and how many bytes of the word it covers.
struct WordPiece {
  int32_t id;
  uint32_t len;
};

class WordCache {
 public:
  static constexpr size_t kMaxWordLen = 255;
  static constexpr size_t kInlineKey = 16;

  // What a lookup learned, for the insert after a miss.
  struct Lookup {
    uint64_t lo, hi;  // the word zero-padded (up to kInlineKey bytes); else its hash and 0
    uint64_t hash;
    size_t slot;  // the free slot the probe ended on
  };

  // A slot. The fused path's batch loop (hf_tokenizer.cpp) reads a word's
  // home slot itself: an inline hit there (inline_hit) is the word's pieces,
  // ids[0, n) with their lengths as piece_lens says.
  struct Entry {
    uint64_t lo, hi;  // as in Lookup
    // n <= 3: the pieces' ids. Else the pieces are in values_, from ids[1],
    // ids[2] of them; and a word longer than kInlineKey (always so stored)
    // is in keys_ from ids[0].
    uint32_t ids[3];
    uint8_t key_len;  // 0: a free slot
    uint8_t n;        // 1..3: pieces inline; kOutOfLine: in values_
    // n <= 3: lens[0] the first piece's length (the word's for n == 1),
    // lens[1] the second's (0 for n == 1); the third's is the rest. So piece
    // k ends at lens[0] + ... + lens[k] (the word's end for k == n - 1), and
    // no inline piece is empty.
    uint8_t lens[2];
  };
  static_assert(sizeof(Entry) == 32);

  // A word's key and hash, computed ahead of its probe.
  struct Key {
    uint64_t lo, hi, hash;
  };
  // The key of a word of 1..kInlineKey bytes at p, where 16 bytes from p may
  // be read: as Lookup's, with no branch on the length.
  [[gnu::always_inline]] static Key key16(const char* p, size_t n) {
    Key k;
#if defined(__SSE2__)
    // The 16 bytes and a mask of n bytes of 0xFF, read from kOnesThenZeros.
    const __m128i v = _mm_and_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)),
                                    _mm_loadu_si128(reinterpret_cast<const __m128i*>(kOnesThenZeros + 16 - n)));
    k.lo = uint64_t(_mm_cvtsi128_si64(v));
    k.hi = uint64_t(_mm_cvtsi128_si64(_mm_unpackhi_epi64(v, v)));
#else
    // kLowBytes[k]: the low k bytes of a word.
    static constexpr uint64_t kLowBytes[9] = {
        0, 0xFF, 0xFFFF, 0xFFFFFF, 0xFFFFFFFF, 0xFFFFFFFFFFull, 0xFFFFFFFFFFFFull, 0xFFFFFFFFFFFFFFull, ~uint64_t(0)};
    k.lo = load8(p) & kLowBytes[n < 8 ? n : 8];
    k.hi = load8(p + 8) & kLowBytes[n > 8 ? n - 8 : 0];
#endif
    k.hash = hash_of(k.lo, k.hi, n);
    return k;
  }
  // The key of any word (up to kMaxWordLen bytes).
  static Key key_of(std::string_view word, const char* readable_end) {
    Lookup at;
    key(word, at, readable_end);
    return {at.lo, at.hi, at.hash};
  }
  // Where e, the home slot of `word` with key k, holds the word with its
  // pieces out of line (more than three, or a word longer than kInlineKey):
  // its pieces, *count of them; else null.
  const WordPiece* pieces_at(const Entry& e, const Key& k, std::string_view word, size_t& count) const {
    if (((e.lo ^ k.lo) | (e.hi ^ k.hi) | (e.key_len ^ word.size())) != 0 || e.n != kOutOfLine) return nullptr;
    if (word.size() > kInlineKey && std::memcmp(keys_.data() + e.ids[0], word.data(), word.size()) != 0) return nullptr;
    count = e.ids[2];
    return values_.data() + e.ids[1];
  }
  // The table, for a batch's home-slot reads; null while empty. Valid until
  // the next insert.
  const Entry* slots() const { return slots_.empty() ? nullptr : slots_.data(); }
  int shift() const { return shift_; }
  // True when e, the home slot of a word of `len` bytes with key k, holds it
  // with its pieces inline. Branch-free but for the caller's test of the result.
  [[gnu::always_inline]] static bool inline_hit(const Entry& e, const Key& k, size_t len) {
    return (((e.lo ^ k.lo) | (e.hi ^ k.hi) | (e.key_len ^ len)) == 0) & (uint8_t(e.n - 1) < 3);
  }
  // On a hit calls emit(id, len) for each of the word's pieces and returns
  // true. `word` is non-empty and at most kMaxWordLen bytes.
  // Bytes from `word` up to `readable_end` may be read (not used).
  template <class Emit>
  [[gnu::always_inline]] bool find(std::string_view word, Lookup& at, Emit&& emit,
                                   const char* readable_end = nullptr) const {
    key(word, at, readable_end);
    at.slot = SIZE_MAX;
    if (slots_.empty()) return false;
    // The first slot on its own: most words are found there, and the loop's
    // bookkeeping is only paid past it.
    size_t i = at.hash >> shift_;
    if (same_key(slots_[i], word, at)) return emit_pieces(slots_[i], uint32_t(word.size()), emit);
    const size_t mask = slots_.size() - 1;
    for (;;) {
      if (slots_[i].key_len == 0) {
        at.slot = i;
        return false;
      }
      i = (i + 1) & mask;
      if (same_key(slots_[i], word, at)) return emit_pieces(slots_[i], uint32_t(word.size()), emit);
    }
  }
  // As find(), with the key and hash of `at` already computed (key_of,
  // key16). A word found past its home slot is swapped into it (the word
  // there stays reachable: every slot between its own home and the found
  // one is taken), so that a frequent word is read at home next time.
  template <class Emit>
  bool find_keyed(std::string_view word, Lookup& at, Emit&& emit) {
    at.slot = SIZE_MAX;
    if (slots_.empty()) return false;
    const size_t home = at.hash >> shift_, mask = slots_.size() - 1;
    for (size_t i = home;; i = (i + 1) & mask) {
      if (same_key(slots_[i], word, at)) {
        if (i != home) std::swap(slots_[i], slots_[home]);
        return emit_pieces(slots_[home], uint32_t(word.size()), emit);
      }
      if (slots_[i].key_len == 0) {
        at.slot = i;
        return false;
      }
    }
  }
  // Right after find() missed on the same word. A word longer than
  // kInlineKey is kept only the second time it misses: most such words (a
  // run of Han characters up to the next punctuation, a long identifier)
  // occur once, and keeping them all would fill the table with words that
  // never hit, for the price of a key copy, a value copy and the table's
  // growth each. A bit per hash remembers the first miss. `second_miss`:
  // so for a word of any length.
  void insert(std::string_view word, Lookup& at, const WordPiece* pieces, size_t n, bool second_miss = false);

 private:
  static constexpr uint8_t kOutOfLine = 0xFF;
  [[gnu::always_inline]] bool same_key(const Entry& e, std::string_view word, const Lookup& at) const {
    if (e.lo != at.lo || e.hi != at.hi || e.key_len != word.size()) return false;
    return word.size() <= kInlineKey || std::memcmp(keys_.data() + e.ids[0], word.data(), word.size()) == 0;
  }
  template <class Emit>
  [[gnu::always_inline]] bool emit_pieces(const Entry& e, uint32_t len, Emit&& emit) const {
    switch (e.n) {
      case 1: emit(int32_t(e.ids[0]), len); break;
      case 2:
        emit(int32_t(e.ids[0]), uint32_t(e.lens[0]));
        emit(int32_t(e.ids[1]), uint32_t(e.lens[1]));
        break;
      case 3:
        emit(int32_t(e.ids[0]), uint32_t(e.lens[0]));
        emit(int32_t(e.ids[1]), uint32_t(e.lens[1]));
        emit(int32_t(e.ids[2]), len - e.lens[0] - e.lens[1]);
        break;
      default:
        for (const WordPiece *p = values_.data() + e.ids[1], *end = p + e.ids[2]; p != end; ++p) emit(p->id, p->len);
    }
    return true;
  }
  [[gnu::always_inline]] static void key(std::string_view word, Lookup& at, const char* readable_end = nullptr) {
    const char* p = word.data();
    const size_t n = word.size();
    // The word (1..16 bytes) as two little-endian integers, zero-padded:
    // where 16 bytes may be read, two loads masked to its length (no branch
    // on the length, which varies from word to word); else overlapping
    // fixed-size loads.
    if (n <= kInlineKey && readable_end != nullptr && readable_end - p >= 16) {
      const Key k = key16(p, n);
      at.lo = k.lo, at.hi = k.hi, at.hash = k.hash;
      return;
    }
    if (n >= 8) {
      if (n > kInlineKey) {
        at.lo = at.hash = hash_long(word);
        at.hi = 0;
        return;
      }
      at.lo = load8(p);
      at.hi = n == 8 ? 0 : load8(p + n - 8) >> (8 * (16 - n));
    } else if (n >= 4) {
      at.lo = load4(p) | uint64_t(load4(p + n - 4)) << (8 * (n - 4));
      at.hi = 0;
    } else {
      const auto b = [&](size_t i) { return uint64_t(static_cast<unsigned char>(p[i])) << (8 * i); };
      at.lo = b(0) | b(n / 2) | b(n - 1);
      at.hi = 0;
    }
    at.hash = hash_of(at.lo, at.hi, n);
  }
  // The slot index is the top bits: a product's top bits depend on all of its factor's.
  [[gnu::always_inline]] static uint64_t hash_of(uint64_t lo, uint64_t hi, size_t n) {
    return (lo ^ n) * 0x9E3779B97F4A7C15ull ^ hi * 0xc4ceb9fe1a85ec53ull;
  }
#if defined(__SSE2__)
  alignas(32) static constexpr unsigned char kOnesThenZeros[32] = {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
                                                                   0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF};
#endif
  static uint64_t load8(const char* p) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    return v;
  }
  static uint32_t load4(const char* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
  }
  static uint64_t hash_long(std::string_view word);
  // Open addressing at most half full. The table starts small and doubles up
  // to kMaxSlots, so memory follows the words a dataset has; past that it is
  // cleared and refilled (cheap and good enough: a corpus's frequent words
  // are back in it within a few kilobytes of text).
  static constexpr size_t kMinSlots = 1 << 14;
  static constexpr size_t kMaxSlots = 1 << 19;
  void grow();
  HugeVector<Entry> slots_;
  int shift_ = 64;
  static constexpr int kSeenBits = 20;
  std::vector<uint64_t> seen_ = std::vector<uint64_t>(size_t(1) << (kSeenBits - 6), 0);  // long words missed once
  std::string keys_;
  std::vector<WordPiece> values_;
  size_t count_ = 0;
};

}  // namespace tokfeed::text::hf
