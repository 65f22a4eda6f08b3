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
};

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

 private:
  std::vector<MixPart> parts_;
  uint64_t per_epoch_ = 0;
  bool whole_ = true;
};

}  // namespace tokfeed
