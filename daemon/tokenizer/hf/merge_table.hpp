// The merges of a BPE model as a flat hash table keyed by the id pair.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "tokenizer/hf/huge_table.hpp"

namespace tokfeed::text::hf {

struct Merge {
  int32_t rank;
  int32_t new_id;
};

// Open addressing over 16-byte slots holding key and merge together, so a
// lookup touches one cache line; a bit filter in front answers most misses.
class MergeTable {
 public:
  // A repeated pair keeps its last entry, as HF's map does.
  void build(const std::vector<std::pair<uint64_t, Merge>>& entries);
  static uint64_t key(int32_t a, int32_t b) { return uint64_t(uint32_t(a)) << 32 | uint32_t(b); }
  const Merge* find(int32_t a, int32_t b) const {
    const uint64_t k = key(a, b);
    const uint64_t bit = filter_bit(k);
    if (((filter_[bit / 64] >> (bit % 64)) & 1) == 0) return nullptr;
    for (uint64_t i = slot(k);; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == k) return &s.merge;
      if (s.key == kEmpty) return nullptr;
    }
  }

 private:
  struct Slot {
    uint64_t key;
    Merge merge;
  };
  static constexpr uint64_t kEmpty = ~uint64_t(0);
  uint64_t slot(uint64_t k) const { return (k * 0x9E3779B97F4A7C15ull) >> shift_ & mask_; }
  uint64_t filter_bit(uint64_t k) const { return (k * 0xc4ceb9fe1a85ec53ull) >> filter_shift_; }
  HugeVector<Slot> slots_;
  // A bit per hash of every pair, 16 bits per merge (a few per cent false
  // positives): most pairs looked up are no merge, and this table, a few
  // hundred KiB where the slots take several MiB, says so without a probe.
  HugeVector<uint64_t> filter_;
  int filter_shift_ = 58;
  uint64_t mask_ = 0;
  int shift_ = 0;
};

}  // namespace tokfeed::text::hf
