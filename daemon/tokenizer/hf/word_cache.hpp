// Word -> BPE pieces, per process (see bpe.hpp). One pass over the word gives
// the hash and, for words of up to 16 bytes (most of them), the key as two
// integers: the probe compares those with a 32-byte slot that holds the key
// and, for a one-piece word, the piece itself. A miss remembers its slot, so
// the insert that follows does not probe again.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace tokfeed::text::hf {

// A token of a word: its id and how many bytes of the word it covers.
struct WordPiece {
  int32_t id;
  uint32_t len;
};

class WordCache {
 public:
  static constexpr size_t kMaxWordLen = 256;
  static constexpr size_t kInlineKey = 16;

  // What a lookup learned, for the insert after a miss.
  struct Lookup {
    uint64_t hash;
    uint64_t lo, hi;  // the word zero-padded, when it has at most kInlineKey bytes
    size_t slot;      // the free slot the probe ended on
  };
  // On a hit appends the word's pieces to `out` and returns true.
  // `word` is non-empty and at most kMaxWordLen bytes.
  bool find(std::string_view word, Lookup& at, std::vector<WordPiece>& out) const;
  // Right after find() missed on the same word.
  void insert(std::string_view word, Lookup& at, const WordPiece* pieces, size_t n);

 private:
  static constexpr uint16_t kFree = 0xFFFF;
  struct Entry {
    uint64_t hash;
    uint16_t key_len;  // kFree: an empty slot
    uint16_t n;        // pieces
    uint32_t val;      // n == 1: the piece's id (its length is the key's); else its offset in values_
    uint64_t lo, hi;   // the key, when inline; else lo is its offset in keys_
  };
  static_assert(sizeof(Entry) == 32);
  // Open addressing at most half full. The table starts small and doubles up
  // to kMaxSlots (16 MiB of slots), so memory follows the words a dataset
  // has; past that it is cleared and refilled (cheap and good enough: a
  // corpus's frequent words are back in it within a few kilobytes of text).
  static constexpr size_t kMinSlots = 1 << 14;
  static constexpr size_t kMaxSlots = 1 << 19;
  bool matches(const Entry& e, std::string_view word, const Lookup& at) const {
    if (e.hash != at.hash || e.key_len != word.size()) return false;
    if (word.size() <= kInlineKey) return e.lo == at.lo && e.hi == at.hi;
    return std::memcmp(keys_.data() + e.lo, word.data(), word.size()) == 0;
  }
  void grow();
  std::vector<Entry> slots_;
  std::string keys_;
  std::vector<WordPiece> values_;
  size_t count_ = 0;
};

}  // namespace tokfeed::text::hf
