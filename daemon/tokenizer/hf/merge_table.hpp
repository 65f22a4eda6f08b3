// The merges of a BPE model as a flat hash table keyed by the id pair.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace tokfeed::text::hf {

struct Merge {
  int32_t rank;
  int32_t new_id;
};

// Open addressing over 16-byte slots holding key and merge together, so a
// lookup touches one cache line.
class MergeTable {
 public:
  // A repeated pair keeps its last entry, as HF's map does.
  void build(const std::vector<std::pair<uint64_t, Merge>>& entries);
  static uint64_t key(int32_t a, int32_t b) { return uint64_t(uint32_t(a)) << 32 | uint32_t(b); }
  const Merge* find(int32_t a, int32_t b) const {
    const uint64_t k = key(a, b);
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
  std::vector<Slot> slots_;
  uint64_t mask_ = 0;
  int shift_ = 0;
};

}  // namespace tokfeed::text::hf
