// The order of samples and batches (docs/data_model.md section 4): a pure
// function of (valid record count, seed, epoch, world size, rank).
#pragma once

#include <cstdint>
#include <vector>

#include "config.hpp"

namespace tokfeed {

uint64_t splitmix64(uint64_t& state) noexcept;

class Schedule {
 public:
  Schedule(uint64_t valid_records, const ScheduleConfig& sched, uint32_t world_size, uint32_t rank,
           uint32_t batch_size);

  uint64_t samples_per_rank() const { return per_rank_; }
  uint64_t batches_per_epoch() const { return batches_; }
  uint64_t epochs() const { return epochs_; }
  uint64_t total_batches() const { return batches_ * epochs_; }

  // The valid-record indices of stream batch `i` (epoch i / B, step i % B).
  void batch_records(uint64_t i, std::vector<uint64_t>& out);

 private:
  const std::vector<uint32_t>& permutation(uint64_t epoch);

  uint64_t n_;
  uint64_t world_;
  uint64_t rank_;
  uint64_t batch_size_;
  uint64_t per_rank_;
  uint64_t batches_;
  uint64_t epochs_;
  bool shuffle_;
  uint64_t seed_;
  uint64_t cached_epoch_ = UINT64_MAX;
  std::vector<uint32_t> perm_;
};

}  // namespace tokfeed
