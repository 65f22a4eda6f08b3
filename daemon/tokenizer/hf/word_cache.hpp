// Word -> BPE pieces, per process (see bpe.hpp). A word of up to 15 bytes
// (most of them) is its own key: two integers, the word zero-padded with its
// length in the top byte, so that two keys are equal iff their words are.
// The hash comes from those. A 32-byte slot holds the key and, for up to
// three pieces that cover the word, the pieces themselves: a hit is one
// slot read and two compares, with no second lookup and no allocation. A
// miss remembers its slot, so the insert that follows does not probe again.
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

#if defined(__SSE2__)
// Row n (0..15) of kWordKeyMasks: 16 bytes, n of 0xFF then zeros; then 16
// bytes, zeros but the last, n (WordCache::key16).
struct WordKeyMasks {
  alignas(32) unsigned char rows[16][32];
  constexpr WordKeyMasks() : rows{} {
    for (size_t n = 0; n < 16; ++n) {
      for (size_t i = 0; i < n; ++i) rows[n][i] = 0xFF;
      rows[n][31] = static_cast<unsigned char>(n);
    }
  }
};
static constexpr WordKeyMasks kWordKeyMasks{};  // a copy per translation unit: no GOT load
#endif

// A token of a word: its id and how many bytes of the word it covers.
struct WordPiece {
  int32_t id;
  uint32_t len;
};

class WordCache {
 public:
  static constexpr size_t kMaxWordLen = 255;
  static constexpr size_t kInlineKey = 15;  // words up to this long are their own key
#if defined(__SSE2__)
  static_assert(kInlineKey < 16);  // a row of kWordKeyMasks each
#endif

  // A word's key and hash. A word of n <= kInlineKey bytes: lo its bytes 0-7
  // and hi its bytes 8-14, little-endian, zero-padded, with n in hi's top
  // byte (1..15: no two words share a key). A longer word: lo its hash (of
  // all its bytes), hi kLongKey, whose top byte no short word's key has.
  struct Key {
    uint64_t lo, hi, hash;
  };
  // What a lookup learned, for the insert after a miss.
  struct Lookup {
    uint64_t lo, hi;  // as in Key
    uint64_t hash;
    size_t slot;  // the free slot the probe ended on
  };
  static constexpr uint64_t kLongKey = uint64_t(0x40) << 56;
  // Set in a slot's hi where the word's pieces are out of line (and always
  // for a long word): no key has it, so a slot equal to a word's key holds
  // the word with its pieces inline.
  static constexpr uint64_t kOutOfLine = uint64_t(1) << 63;

  // A slot. The fused path's batch loop (hf_tokenizer.cpp) reads a word's
  // home slot itself: where the slot's lo and hi equal the word's key, its
  // pieces are ids[0, n) with their lengths as lens says. The 16 bytes from
  // ids may be copied as a whole (the three ids and one more int).
  struct Entry {
    uint64_t lo, hi;  // the key, hi | kOutOfLine where the pieces are out of line; 0, 0: a free slot
    // Inline: the pieces' ids. Out of line: the pieces are in values_, from
    // ids[1], ids[2] of them; and a long word's bytes are in keys_ from ids[0].
    uint32_t ids[3];
    uint8_t key_len;  // the word's length; 0: a free slot
    uint8_t n;        // 1..3: pieces inline; 0: out of line
    // Inline: lens[0] the first piece's length (the word's for n == 1),
    // lens[1] the second's (0 for n == 1); the third's is the rest. So piece
    // k ends at lens[0] + ... + lens[k] (the word's end for k == n - 1), and
    // no inline piece is empty.
    uint8_t lens[2];
  };
  static_assert(sizeof(Entry) == 32);

  // The key of a word of 1..kInlineKey bytes at p, where 16 bytes from p may
  // be read, to key[0] (lo) and key[1] (hi); its hash. As Key's, with no
  // branch on the length.
  [[gnu::always_inline]] static uint64_t key16(const char* p, size_t n, uint64_t* key) {
#if defined(__SSE2__)
    // The 16 bytes, and with n's row of kWordKeyMasks, bytes from n on
    // cleared and n put in the top byte.
    const unsigned char* row = kWordKeyMasks.rows[n];
    const __m128i v = _mm_or_si128(_mm_and_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)),
                                                 _mm_load_si128(reinterpret_cast<const __m128i*>(row))),
                                   _mm_load_si128(reinterpret_cast<const __m128i*>(row + 16)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(key), v);
    return hash_of(uint64_t(_mm_cvtsi128_si64(v)), uint64_t(_mm_cvtsi128_si64(_mm_unpackhi_epi64(v, v))));
#else
    // kLowBytes[k]: the low k bytes of a word.
    static constexpr uint64_t kLowBytes[9] = {
        0, 0xFF, 0xFFFF, 0xFFFFFF, 0xFFFFFFFF, 0xFFFFFFFFFFull, 0xFFFFFFFFFFFFull, 0xFFFFFFFFFFFFFFull, ~uint64_t(0)};
    key[0] = load8(p) & kLowBytes[n < 8 ? n : 8];
    key[1] = (load8(p + 8) & kLowBytes[n > 8 ? n - 8 : 0]) | uint64_t(n) << 56;
    return hash_of(key[0], key[1]);
#endif
  }
  // The key of any word (up to kMaxWordLen bytes). Bytes from `word` up to
  // `readable_end` may be read (not used).
  static Key key_of(std::string_view word, const char* readable_end) {
    Lookup at;
    key(word, at, readable_end);
    return {at.lo, at.hi, at.hash};
  }
  // A long word's hi that no slot holds, for a key that must match no slot
  // as it is (hf_tokenizer.cpp's batch loop); key_again makes it a key again.
  static constexpr uint64_t kMatchesNone = ~kLongKey;
  // The key with this lo and hi (a key's, or a long word's hash and kMatchesNone).
  [[gnu::always_inline]] static Key key_again(uint64_t lo, uint64_t hi) {
    if (hi == kMatchesNone) return {lo, kLongKey, lo};
    return {lo, hi, hash_of(lo, hi)};
  }
  // The home slot of a word with hash h in a table at `slots`, whose
  // offset_mask() is `mask`.
  [[gnu::always_inline]] static const Entry* home_of(const Entry* slots, uint64_t mask, uint64_t h) {
    return reinterpret_cast<const Entry*>(reinterpret_cast<const char*>(slots) + (h >> (kIndexShift - 5) & mask));
  }
  // Where e, the home slot of `word` with key k, holds the word with its
  // pieces out of line (more than three, or a word longer than kInlineKey):
  // its pieces, *count of them; else null.
  const WordPiece* pieces_at(const Entry& e, const Key& k, std::string_view word, size_t& count) const {
    if (e.lo != k.lo || e.hi != (k.hi | kOutOfLine) || e.key_len != word.size()) return nullptr;
    if (word.size() > kInlineKey && std::memcmp(keys_.data() + e.ids[0], word.data(), word.size()) != 0) return nullptr;
    count = e.ids[2];
    return values_.data() + e.ids[1];
  }
  // The table, for a batch's home-slot reads (home_of); null while empty.
  // Valid until the next insert.
  const Entry* slots() const { return slots_.empty() ? nullptr : slots_.data(); }
  // The byte offset of a slot in the table is (hash >> (kIndexShift - 5)) & offset_mask().
  uint64_t offset_mask() const { return uint64_t(slots_.size() - 1) << 5; }
  // Changes when the table grows or is cleared (slots() and the home slots with it).
  uint32_t generation() const { return generation_; }
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
    const size_t mask = slots_.size() - 1;
    size_t i = home(at.hash, mask);
    if (same_key(slots_[i], word, at)) return emit_pieces(slots_[i], uint32_t(word.size()), emit);
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
    const size_t mask = slots_.size() - 1, h = home(at.hash, mask);
    for (size_t i = h;; i = (i + 1) & mask) {
      if (same_key(slots_[i], word, at)) {
        if (i != h) std::swap(slots_[i], slots_[h]);
        return emit_pieces(slots_[h], uint32_t(word.size()), emit);
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
  // A slot's index is the hash's bits from kIndexShift up: a product's top
  // bits depend on all of its factor's.
  static constexpr int kIndexShift = 40;
  [[gnu::always_inline]] static size_t home(uint64_t hash, size_t mask) { return size_t(hash >> kIndexShift) & mask; }
  [[gnu::always_inline]] bool same_key(const Entry& e, std::string_view word, const Lookup& at) const {
    if (e.lo != at.lo || (e.hi & ~kOutOfLine) != at.hi || e.key_len != word.size()) return false;
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
    // The word (1..15 bytes) as two little-endian integers, zero-padded:
    // where 16 bytes may be read, two loads masked to its length (no branch
    // on the length, which varies from word to word); else overlapping
    // fixed-size loads.
    if (n <= kInlineKey && readable_end != nullptr && readable_end - p >= 16) {
      uint64_t k[2];
      at.hash = key16(p, n, k);
      at.lo = k[0], at.hi = k[1];
      return;
    }
    if (n > kInlineKey) {
      at.lo = at.hash = hash_long(word);
      at.hi = kLongKey;
      return;
    }
    if (n >= 8) {
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
    at.hi |= uint64_t(n) << 56;
    at.hash = hash_of(at.lo, at.hi);
  }
  [[gnu::always_inline]] static uint64_t hash_of(uint64_t lo, uint64_t hi) {
    return lo * 0x9E3779B97F4A7C15ull ^ hi * 0xc4ceb9fe1a85ec53ull;
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
  static_assert(kMaxSlots <= size_t(1) << (64 - kIndexShift));
  void grow();
  HugeVector<Entry> slots_;
  static constexpr int kSeenBits = 20;
  std::vector<uint64_t> seen_ = std::vector<uint64_t>(size_t(1) << (kSeenBits - 6), 0);  // long words missed once
  std::string keys_;
  std::vector<WordPiece> values_;
  size_t count_ = 0;
  uint32_t generation_ = 0;
};

}  // namespace tokfeed::text::hf
