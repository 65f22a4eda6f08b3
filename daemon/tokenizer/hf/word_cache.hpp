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
#include <vector>

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
  // Right after find() missed on the same word. A word longer than
  // kInlineKey is kept only the second time it misses: most such words (a
  // run of Han characters up to the next punctuation, a long identifier)
  // occur once, and keeping them all would fill the table with words that
  // never hit, for the price of a key copy, a value copy and the table's
  // growth each. A bit per hash remembers the first miss.
  void insert(std::string_view word, Lookup& at, const WordPiece* pieces, size_t n);

 private:
  struct Entry {
    uint64_t lo, hi;  // as in Lookup
    // n <= 3: the pieces' ids. Else the pieces are in values_, from ids[1],
    // ids[2] of them; and a word longer than kInlineKey (always so stored)
    // is in keys_ from ids[0].
    uint32_t ids[3];
    uint8_t key_len;  // 0: a free slot
    uint8_t n;        // 1..3: pieces inline; kOutOfLine: in values_
    uint8_t lens[2];  // n >= 2: the lengths of the first pieces (the last one's is the rest)
  };
  static_assert(sizeof(Entry) == 32);
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
        emit(int32_t(e.ids[1]), len - e.lens[0]);
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
      // kLowBytes[k]: the low k bytes of a word.
      static constexpr uint64_t kLowBytes[9] = {
          0, 0xFF, 0xFFFF, 0xFFFFFF, 0xFFFFFFFF, 0xFFFFFFFFFFull, 0xFFFFFFFFFFFFull, 0xFFFFFFFFFFFFFFull, ~uint64_t(0)};
      at.lo = load8(p) & kLowBytes[n < 8 ? n : 8];
      at.hi = load8(p + 8) & kLowBytes[n > 8 ? n - 8 : 0];
    } else if (n >= 8) {
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
    // The slot index is the top bits: a product's top bits depend on all of its factor's.
    at.hash = (at.lo ^ n) * 0x9E3779B97F4A7C15ull ^ at.hi * 0xc4ceb9fe1a85ec53ull;
  }
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
