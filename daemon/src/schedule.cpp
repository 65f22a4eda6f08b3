#include "schedule.hpp"

#include <numeric>
#include <stdexcept>

namespace tokfeed {

uint64_t splitmix64(uint64_t& state) noexcept {
  state += 0x9E3779B97F4A7C15ULL;
  uint64_t z = state;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

Schedule::Schedule(uint64_t valid_records, const ScheduleConfig& sched, uint32_t world_size, uint32_t rank,
                   uint32_t batch_size)
    : n_(valid_records), world_(world_size), rank_(rank), batch_size_(batch_size), epochs_(sched.epochs),
      shuffle_(sched.shuffle), seed_(sched.seed) {
  if (n_ > UINT32_MAX) throw std::invalid_argument("more than 2^32 records");
  // DistributedSampler: pad by wrap-around to a multiple of the world size,
  // or cut down to one with drop_last.
  uint64_t total = sched.drop_last ? n_ / world_ * world_ : (n_ + world_ - 1) / world_ * world_;
  per_rank_ = total / world_;
  batches_ = sched.drop_last ? per_rank_ / batch_size_ : (per_rank_ + batch_size_ - 1) / batch_size_;
}

const std::vector<uint32_t>& Schedule::permutation(uint64_t epoch) {
  if (epoch == cached_epoch_) return perm_;
  perm_.resize(n_);
  std::iota(perm_.begin(), perm_.end(), 0u);
  if (shuffle_) {
    uint64_t state = seed_ ^ (epoch * 0x9E3779B97F4A7C15ULL);
    for (uint64_t i = n_ - 1; i >= 1; --i) {
      uint64_t j = splitmix64(state) % (i + 1);
      std::swap(perm_[i], perm_[j]);
    }
  }
  cached_epoch_ = epoch;
  return perm_;
}

void Schedule::batch_records(uint64_t i, std::vector<uint64_t>& out) {
  out.clear();
  if (batches_ == 0) return;
  uint64_t epoch = i / batches_, step = i % batches_;
  const auto& perm = permutation(epoch);
  uint64_t first = step * batch_size_;
  uint64_t last = std::min(first + batch_size_, per_rank_);
  // Sample j of this rank sits at position rank + j * world of the padded
  // permutation, and the padding repeats the permutation from its start.
  for (uint64_t j = first; j < last; ++j) out.push_back(perm[(rank_ + j * world_) % n_]);
}

}  // namespace tokfeed
