// Bytes -> token id for the lookups made per word (a whole word under
// ignore_merges, a char of a char-level vocabulary): one open-addressing
// table of slots holding the key's hash, so a miss rarely touches
// the keys, which sit in one buffer.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/hf/huge_table.hpp"
#include "tokenizer/hf/word_cache.hpp"

namespace tokfeed::text::hf {

uint64_t hash_bytes(std::string_view s);

class TokenIndex {
 public:
  // A key given twice keeps its first id.
  void add(std::string_view key, int32_t id) {
    if ((count_ + 1) * 2 > slots_.size()) rehash(slots_.empty() ? 1024 : slots_.size() * 2);
    const uint64_t h = hash_bytes(key);
    size_t i = h >> shift_;
    for (;; i = (i + 1) & (slots_.size() - 1)) {
      const Slot& s = slots_[i];
      if (s.len == kFree) break;
      if (s.hash == h && this->key(s) == key) return;
    }
    slots_[i] = Slot{h, id, uint32_t(key.size()), uint32_t(keys_.size())};
    keys_.append(key);
    ++count_;
  }
  bool empty() const { return slots_.empty(); }
  int32_t find(std::string_view key) const {
    if (slots_.empty()) return -1;
    const uint64_t h = hash_bytes(key);
    for (size_t i = h >> shift_;; i = (i + 1) & (slots_.size() - 1)) {
      const Slot& s = slots_[i];
      if (s.len == kFree) return -1;
      if (s.hash == h && s.len == key.size() && std::memcmp(keys_.data() + s.offset, key.data(), key.size()) == 0)
        return s.id;
    }
  }

 private:
  struct Slot {
    uint64_t hash;
    int32_t id;
    uint32_t len;  // kFree: an empty slot
    uint32_t offset;
  };
  static constexpr uint32_t kFree = ~uint32_t(0);
  std::string_view key(const Slot& s) const { return std::string_view(keys_).substr(s.offset, s.len); }
  void rehash(size_t n) {
    HugeVector<Slot> old(n, Slot{0, -1, kFree, 0});
    old.swap(slots_);
    shift_ = 64 - __builtin_ctzll(n);
    for (const Slot& s : old) {
      if (s.len == kFree) continue;
      size_t i = s.hash >> shift_;
      while (slots_[i].len != kFree) i = (i + 1) & (n - 1);
      slots_[i] = s;
    }
  }
  HugeVector<Slot> slots_;
  std::string keys_;
  size_t count_ = 0;
  int shift_ = 64;
};

// Bytes -> token id for the words the word cache misses that are one token,
// looked up by the cache's key of the word (WordCache::Key), which is there
// already. A word of up to WordCache::kInlineKey bytes is its own key: a
// slot holds the key and the id, so a hit reads one slot and nothing else.
// Longer words go to a TokenIndex. About half the words asked about are
// not tokens: a filter of the keys' hashes (two bits of one word per key,
// 8 bits a key, 128 KiB for 128,000 tokens) answers first, and only the
// few percent of those it lets through read a slot.
class WordTokenIndex {
 public:
  // A key given twice keeps its first id. Then finish(), before find().
  void add(std::string_view bytes, int32_t id) {
    if (bytes.empty()) return;
    if (bytes.size() > WordCache::kInlineKey) {
      long_.add(bytes, id);
      return;
    }
    const WordCache::Key k = WordCache::key_of(bytes, nullptr);
    keys_.push_back({k.lo, k.hi, id});
  }
  void finish() {
    size_t n = 1;
    while (n < 2 * keys_.size()) n *= 2;
    slots_ = HugeVector<Slot>(n, Slot{0, 0, -1});
    shift_ = 64 - __builtin_ctzll(n);
    size_t words = 1;
    while (words * 64 < keys_.size() * 8) words *= 2;
    filter_.assign(words, 0);
    for (const Slot& k : keys_) {
      const uint64_t g = mix(k.lo, k.hi);
      filter_[filter_word(g)] |= filter_bits(g);
      size_t i = g >> shift_;
      for (; slots_[i].hi != 0; i = (i + 1) & (n - 1))
        if (slots_[i].lo == k.lo && slots_[i].hi == k.hi) break;
      if (slots_[i].hi == 0) slots_[i] = k;
    }
    keys_.clear();
    keys_.shrink_to_fit();
  }
  bool empty() const { return slots_.empty() && long_.empty(); }
  // The id of the token whose bytes are `word`, whose key is `key`, or -1.
  int32_t find(std::string_view word, const WordCache::Key& key) const {
    if (word.size() > WordCache::kInlineKey) return long_.find(word);
    if (slots_.empty()) return -1;
    const uint64_t g = mix(key.lo, key.hi);
    if ((filter_[filter_word(g)] & filter_bits(g)) != filter_bits(g)) return -1;
    for (size_t i = g >> shift_;; i = (i + 1) & (slots_.size() - 1)) {
      const Slot& s = slots_[i];
      if (s.lo == key.lo && s.hi == key.hi) return s.id;
      if (s.hi == 0) return -1;  // a key's hi holds its length: never 0
    }
  }

 private:
  struct Slot {
    uint64_t lo, hi;  // the key; hi 0: a free slot
    int32_t id;
  };
  // The key's bits mixed (the cache's hash is a sum of two products, whose
  // low bits see only the words' first bytes); the slot's index is the top
  // bits, the filter's word the next ones, its bits the low ones.
  static uint64_t mix(uint64_t lo, uint64_t hi) {
    uint64_t h = lo * 0x9E3779B97F4A7C15ull ^ hi * 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 32;
    return h * 0xff51afd7ed558ccdull;
  }
  size_t filter_word(uint64_t g) const { return (g >> 20) & (filter_.size() - 1); }
  static uint64_t filter_bits(uint64_t g) { return uint64_t(1) << (g & 63) | uint64_t(1) << (g >> 6 & 63); }
  HugeVector<Slot> slots_;
  std::vector<uint64_t> filter_;
  std::vector<Slot> keys_;  // until finish()
  TokenIndex long_;
  int shift_ = 64;
};

}  // namespace tokfeed::text::hf
