// A byte per Unicode code point, stored in blocks of 256 shared between equal
// blocks (a two-stage table: a few dozen KiB instead of 1.1 MB).
#pragma once

#include <cstdint>
#include <map>
#include <vector>

namespace tokfeed::text::hf {

class CodePointTable {
 public:
  CodePointTable() = default;
  // `full` holds the byte of every code point 0..0x10FFFF.
  explicit CodePointTable(const std::vector<uint8_t>& full) {
    std::map<std::vector<uint8_t>, uint16_t> blocks;
    stage1_.resize(0x110000 >> 8);
    for (size_t blk = 0; blk < stage1_.size(); ++blk) {
      std::vector<uint8_t> v(full.begin() + long(blk << 8), full.begin() + long((blk + 1) << 8));
      auto [it, added] = blocks.emplace(v, uint16_t(blocks.size()));
      if (added) stage2_.insert(stage2_.end(), v.begin(), v.end());
      stage1_[blk] = it->second;
    }
  }
  // cp must be at most 0x10FFFF.
  uint8_t get(char32_t cp) const { return stage2_[size_t(stage1_[cp >> 8]) << 8 | (cp & 0xFF)]; }

 private:
  std::vector<uint16_t> stage1_;
  std::vector<uint8_t> stage2_;
};

}  // namespace tokfeed::text::hf
