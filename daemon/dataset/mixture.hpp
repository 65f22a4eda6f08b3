// How many samples each dataset gives an epoch, and which (docs/data_model.md
// 1.1): ms-swift's `#N` counts and weights, drawn deterministically from
// (seed, epoch).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/config.hpp"

namespace tokfeed {

struct MixPart {
  uint64_t first = 0;    // o_d: its first valid record
  uint64_t records = 0;  // n_d: its valid records
  uint64_t count = 0;    // c_d: its samples per epoch
  // When not empty, the part's records are these valid-record numbers
  // (ascending, `records` of them) instead of first .. first + records - 1:
  // a training dataset less its held-out records, or the held-out records
  // themselves (section 7).
  std::vector<uint32_t> ids = {};
  uint64_t record(uint64_t i) const { return ids.empty() ? first + i : ids[i]; }
};

// Section 7: the held-out records of a training dataset of `records` valid
// records (its index `d` in the job): h = max(1, floor(records x ratio)) of
// them, drawn by `seed`, ascending (0 .. records-1). Empty when ratio is 0.
std::vector<uint32_t> held_out(uint64_t seed, std::size_t d, uint64_t records, double ratio);

// c_d for each dataset, from its settings and its valid record counts.
// Throws ConfigError where the weights leave no room.
std::vector<uint64_t> mix_counts(const std::vector<DatasetConfig>& datasets, const std::vector<uint64_t>& valid,
                                 const std::string& config_file);

class Mixture {
 public:
  Mixture() = default;
  explicit Mixture(std::vector<MixPart> parts);

  const std::vector<MixPart>& parts() const { return parts_; }
  // N_e: samples in every epoch.
  uint64_t per_epoch() const { return per_epoch_; }
  // One dataset taken whole: the sample list is 0..N-1.
  bool whole() const { return whole_; }
  // The sample list L of `epoch`: valid-record numbers, dataset by dataset.
  void sample_list(uint64_t seed, uint64_t epoch, std::vector<uint32_t>& out) const;
  // Whether valid record `rec` is a sample of some epoch (a part holds it).
  bool holds(uint64_t rec) const;

 private:
  std::vector<MixPart> parts_;
  uint64_t per_epoch_ = 0;
  bool whole_ = true;
};

}  // namespace tokfeed
