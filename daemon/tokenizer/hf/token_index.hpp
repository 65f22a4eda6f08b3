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

}  // namespace tokfeed::text::hf
