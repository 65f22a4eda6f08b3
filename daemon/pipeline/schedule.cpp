#include "pipeline/schedule.hpp"

#include <algorithm>
#include <map>
#include <numeric>
#include <stdexcept>
#include <utility>

#include "cache/token_cache.hpp"

namespace tokfeed {

void pack_rows(const std::vector<uint32_t>& order, const std::function<uint32_t(uint32_t)>& length, uint32_t capacity,
               uint32_t window, EpochRows& out) {
  out.samples.clear();
  out.row_start.assign(1, 0);
  std::vector<uint32_t> by_length;
  std::vector<std::vector<uint32_t>> bins;
  // Open rows by (free space, opening order): lower_bound finds the best fit,
  // and among equal free space the row opened first.
  std::map<std::pair<uint32_t, uint32_t>, uint32_t> open;
  for (std::size_t w0 = 0; w0 < order.size(); w0 += window) {
    std::size_t w1 = std::min(order.size(), w0 + window);
    by_length.assign(order.begin() + static_cast<std::ptrdiff_t>(w0), order.begin() + static_cast<std::ptrdiff_t>(w1));
    std::stable_sort(by_length.begin(), by_length.end(), [&](uint32_t a, uint32_t b) { return length(a) > length(b); });
    bins.clear();
    open.clear();
    for (uint32_t s : by_length) {
      uint32_t len = length(s);
      auto it = open.lower_bound({len, 0});
      uint32_t bin;
      uint32_t free_after;
      if (it == open.end()) {
        bin = static_cast<uint32_t>(bins.size());
        bins.emplace_back();
        free_after = capacity - len;
      } else {
        bin = it->second;
        free_after = it->first.first - len;
        open.erase(it);
      }
      bins[bin].push_back(s);
      open.emplace(std::pair{free_after, bin}, bin);
    }
    for (const auto& b : bins) {
      out.samples.insert(out.samples.end(), b.begin(), b.end());
      out.row_start.push_back(static_cast<uint32_t>(out.samples.size()));
    }
  }
}

Schedule::Schedule(const JobConfig& cfg, const Mixture& mix, uint32_t rank, StreamStart start, const SampleFacts* facts)
    : cfg_(cfg),
      mix_(mix),
      n_(mix.per_epoch()),
      world_(cfg.ranks.world_size),
      rank_(rank),
      rows_per_batch_(cfg.batch.rows()),
      packed_(is_packed(cfg.batch.padding)),
      passes_(cfg.schedule.passes),
      start_(start),
      facts_(facts),
      excluded_(excluded_flags(cfg.batch)),
      filter_(false),
      epochs_(cfg.schedule.epochs) {
  if (n_ > UINT32_MAX) throw std::invalid_argument("more than 2^32 records");
  if (packed_ && !facts_) throw std::invalid_argument("packed modes need the token cache");
  if (facts_ && !facts_->all_ready()) {
    if (passes_ || start_ != StreamStart{}) throw std::invalid_argument("a growing plan starts at (0, 0) of training");
    growing_ = true;
    filter_ = true;
    first_index_.push_back(0);
    total_ = UINT64_MAX;
    permutation(0, plan0_);
    rows_epoch_ = 0;
    rows_.samples.clear();
    rows_.row_start.clear();
    if (packed_) rows_.row_start.push_back(0);
    advance();
    return;
  }
  count_batches();
}

void Schedule::count_batches() {
  // Padded rows are the epoch order itself unless some sample is left out.
  filter_ = false;
  for (uint64_t i = 0; facts_ && !packed_ && !filter_ && i < facts_->size(); ++i)
    filter_ = facts_->flags(i) & excluded_;
  first_index_.clear();
  epoch_batches_.clear();
  if (passes_) {
    start_ = {};
    epochs_ = 1;
    first_index_.push_back(0);
    epoch_batches_.push_back(pass_batches(epoch_rows(0)));
    total_ = epoch_batches_[0] ? UINT64_MAX : 0;
    return;
  }
  uint64_t index = 0;
  for (uint64_t e = start_.epoch; e < epochs_; ++e) {
    uint64_t rows = epoch_rows(e);
    uint64_t b = std::min(base(e), rows);
    first_index_.push_back(index);
    epoch_batches_.push_back(segment_batches(rows - b));
    index += epoch_batches_.back();
  }
  total_ = index;
}

// Epoch 0's rows grow over the plan's prefix whose facts are ready: a padded
// row is the next kept sample; packed rows come a whole window at a time
// (4.1), the last window once the plan is scanned to its end.
void Schedule::advance() {
  while (scanned_ < plan0_.size() && facts_->ready(plan0_[scanned_])) {
    const uint32_t s = plan0_[scanned_++];
    if (facts_->flags(s) & excluded_) continue;
    if (!packed_) {
      rows_.samples.push_back(s);
      continue;
    }
    window_.push_back(s);
    if (window_.size() < cfg_.batch.pack_window && scanned_ < plan0_.size()) continue;
    pack_window();
  }
  // The plan ends inside a window: pack what it holds.
  if (packed_ && scanned_ == plan0_.size() && !window_.empty()) pack_window();
}

void Schedule::pack_window() {
  pack_rows(
      window_, [this](uint32_t x) { return facts_->length(x); }, cfg_.batch.capacity(), cfg_.batch.pack_window,
      packed_window_);
  const uint32_t at = static_cast<uint32_t>(rows_.samples.size());
  rows_.samples.insert(rows_.samples.end(), packed_window_.samples.begin(), packed_window_.samples.end());
  for (std::size_t j = 1; j < packed_window_.row_start.size(); ++j)
    rows_.row_start.push_back(at + packed_window_.row_start[j]);
  window_.clear();
}

bool Schedule::decided(uint64_t i) {
  if (!growing_) return i < total_;
  if (facts_->all_ready()) {
    // Every fact is known: plan in full, as a schedule made now would.
    growing_ = false;
    std::vector<uint32_t>().swap(plan0_);
    std::vector<uint32_t>().swap(window_);
    rows_epoch_ = UINT64_MAX;
    count_batches();
    return i < total_;
  }
  advance();
  // Batch i takes the segment's rows below (i+1)·R·S whatever the epoch's
  // length (4.2): it is decided once they are.
  return rows_.rows() >= (i + 1) * rows_per_step();
}

void Schedule::wanted(uint64_t i, uint32_t helper, uint32_t helpers, std::vector<uint32_t>& out) const {
  out.clear();
  if (!growing_) return;
  const uint64_t plan = plan0_.size();
  if (!packed_) {
    // This rank's row j of the segment is row r + j·R (4.2); row x beyond
    // the decided ones would be the plan's record scanned_ + (x - rows).
    const uint64_t rows = rows_.rows(), S = rows_per_batch_;
    for (uint64_t j = (i + 1) * S; j-- > i * S;) {
      const uint64_t x = rank_ + j * world_;
      if (x < rows) break;
      if (const uint64_t p = scanned_ + (x - rows); p < plan) out.push_back(plan0_[p]);
    }
    return;
  }
  const uint64_t need = cfg_.batch.pack_window - std::min<uint64_t>(window_.size(), cfg_.batch.pack_window);
  for (uint64_t p = std::min(plan, scanned_ + need); p-- > scanned_;)
    if (p % helpers == helper) out.push_back(plan0_[p]);
}

uint64_t Schedule::segment_batches(uint64_t n) const {
  const uint64_t S = rows_per_batch_;
  const bool drop = cfg_.schedule.drop_last;
  if (packed_) return drop ? n / (world_ * S) : (n + world_ * S - 1) / (world_ * S);
  // DistributedSampler: pad by wrap-around to a multiple of the world size,
  // or cut down to one with drop_last.
  uint64_t total = drop ? n / world_ * world_ : (n + world_ - 1) / world_ * world_;
  uint64_t per_rank = total / world_;
  return drop ? per_rank / S : (per_rank + S - 1) / S;
}

void epoch_permutation(const JobConfig& cfg, const Mixture& mix, uint64_t epoch, std::vector<uint32_t>& perm) {
  const uint64_t n = mix.per_epoch();
  perm.resize(n);
  std::iota(perm.begin(), perm.end(), 0u);
  if (cfg.schedule.shuffle && n > 1) {
    uint64_t state = cfg.schedule.seed ^ (epoch * 0x9E3779B97F4A7C15ULL);
    for (uint64_t i = n - 1; i >= 1; --i) {
      uint64_t j = splitmix64(state) % (i + 1);
      std::swap(perm[i], perm[j]);
    }
  }
  if (!mix.whole()) {
    // Positions of the sample list -> the records they hold (1.1).
    std::vector<uint32_t> list;
    mix.sample_list(cfg.schedule.seed, epoch, list);
    for (uint32_t& p : perm) p = list[p];
  }
}

std::vector<uint32_t> build_order(const JobConfig& cfg, const Mixture& mix, uint64_t records) {
  std::vector<uint32_t> order;
  epoch_permutation(cfg, mix, 0, order);
  std::vector<uint8_t> seen(records, 0);
  std::erase_if(order, [&](uint32_t r) { return r >= records || std::exchange(seen[r], 1); });
  for (uint64_t r = 0; r < records; ++r)
    if (!seen[r]) order.push_back(static_cast<uint32_t>(r));
  return order;
}

// One epoch's rows at a time, and nothing else per sample (4 bytes a sample);
// a worker reads the supervisor's copy of the epoch it starts in.
const EpochRows& Schedule::rows(uint64_t epoch) {
  if (passes_) epoch = 0;  // every pass is the same
  if (shared_ && epoch == shared_epoch_) return *shared_;
  if (epoch == rows_epoch_) return rows_;
  if (!packed_) {
    // A sample left out takes no row, so the next one moves up: every batch
    // but an epoch's last is full.
    permutation(epoch, rows_.samples);
    if (filter_) std::erase_if(rows_.samples, [this](uint32_t s) { return facts_->flags(s) & excluded_; });
    rows_.row_start.clear();
  } else {
    std::vector<uint32_t> order;
    permutation(epoch, order);
    std::erase_if(order, [this](uint32_t s) { return facts_->flags(s) & excluded_; });
    pack_rows(
        order, [this](uint32_t s) { return facts_->length(s); }, cfg_.batch.capacity(), cfg_.batch.pack_window, rows_);
  }
  rows_epoch_ = epoch;
  return rows_;
}

// Unpacked with nothing left out, every sample of the epoch is a row: no
// permutation needed.
uint64_t Schedule::epoch_rows(uint64_t epoch) { return packed_ || filter_ ? rows(epoch).rows() : n_; }

void Schedule::locate(uint64_t i, uint64_t& epoch, uint64_t& step) const {
  if (passes_) {
    epoch = i / epoch_batches_[0];
    step = i % epoch_batches_[0];
    return;
  }
  auto it = std::upper_bound(first_index_.begin(), first_index_.end(), i);
  // The last epoch starting at or before i (epochs without batches share
  // their successor's first index, so they are passed over).
  std::size_t k = static_cast<std::size_t>(it - first_index_.begin()) - 1;
  epoch = start_.epoch + k;
  step = i - first_index_[k];
}

uint64_t Schedule::index_of(uint64_t epoch, uint64_t step) const {
  if (passes_) {
    const uint64_t B = epoch_batches_[0];
    if (B == 0) return 0;
    if (epoch > (UINT64_MAX - 1) / B - 1) return UINT64_MAX;
    return epoch * B + std::min(step, B);
  }
  if (epoch < start_.epoch) return 0;
  uint64_t k = epoch - start_.epoch;
  if (k >= epoch_batches_.size()) return total_;
  return first_index_[k] + std::min(step, epoch_batches_[k]);
}

void Schedule::batch_rows(uint64_t i, BatchRows& out) {
  out.samples.clear();
  out.row_start.assign(1, 0);
  if (i >= total_) return;
  uint64_t epoch, k;
  locate(i, epoch, k);
  const EpochRows& er = rows(epoch);
  if (passes_) {
    pass_rows(k, er, out);
    return;
  }
  const uint64_t b = std::min(base(epoch), er.rows());
  const uint64_t n = er.rows() - b;
  const uint64_t S = rows_per_batch_, W = world_, r = rank_;
  auto push_row = [&](uint64_t row) {  // row of the segment Q
    if (er.row_start.empty()) {
      out.samples.push_back(er.samples[b + row]);
    } else {
      for (uint32_t s = er.row_start[b + row]; s < er.row_start[b + row + 1]; ++s) out.samples.push_back(er.samples[s]);
    }
    out.row_start.push_back(static_cast<uint32_t>(out.samples.size()));
  };

  if (!packed_) {
    // DistributedSampler: this rank's sample j sits at r + j*W of the padded
    // segment, and the padding repeats the segment from its start.
    uint64_t total = cfg_.schedule.drop_last ? n / W * W : (n + W - 1) / W * W;
    uint64_t per_rank = total / W;
    for (uint64_t j = k * S; j < std::min((k + 1) * S, per_rank); ++j) push_row((r + j * W) % n);
    return;
  }
  // A growing plan builds only decided batches: their blocks are whole
  // (decided()), dealt alike whether or not they are the last.
  const uint64_t B = growing_ ? UINT64_MAX : epoch_batches_[epoch - start_.epoch];
  if (cfg_.schedule.drop_last || k + 1 < B) {
    for (uint64_t t = 0; t < S; ++t) push_row(k * W * S + r + t * W);
    return;
  }
  // The last step: split the tail's fullest rows until every rank has one,
  // when there are samples enough (4.2).
  std::vector<std::vector<uint32_t>> tail;
  for (uint64_t row = k * W * S; row < n; ++row) {
    auto& t = tail.emplace_back();
    for (uint32_t s = er.row_start[b + row]; s < er.row_start[b + row + 1]; ++s) t.push_back(er.samples[s]);
  }
  while (tail.size() < W) {
    std::size_t most = 0;
    for (std::size_t t = 1; t < tail.size(); ++t)
      if (tail[t].size() > tail[most].size()) most = t;
    if (tail.empty() || tail[most].size() < 2) break;
    uint32_t s = tail[most].back();
    tail[most].pop_back();
    tail.push_back({s});
  }
  // Fewer samples left than ranks: the ranks still without a row get one
  // sample each, repeated from the segment's start (DistributedSampler's
  // wrap-around), so no rank gets an empty batch.
  const uint32_t first = er.row_start[b], count = er.row_start[b + n] - first;
  for (uint32_t j = 0; tail.size() < W; ++j) tail.push_back({er.samples[first + j % count]});
  for (std::size_t p = r; p < tail.size(); p += W) {
    out.samples.insert(out.samples.end(), tail[p].begin(), tail[p].end());
    out.row_start.push_back(static_cast<uint32_t>(out.samples.size()));
  }
}

// Section 7. A pass of n rows over R ranks, S rows a batch: B = ceil(n / RS)
// steps; step k < B-1 gives rank r the rows [kRS + rS, kRS + (r+1)S); the
// last step's t rows are split in R contiguous shares, rank r's being
// [floor(rt/R), floor((r+1)t/R)) of them. A rank whose share is empty has
// B-1 batches.
uint64_t Schedule::pass_batches(uint64_t n) const {
  const uint64_t step = world_ * rows_per_batch_;
  if (n == 0) return 0;
  const uint64_t B = (n + step - 1) / step;
  const uint64_t t = n - (B - 1) * step;
  return (rank_ + 1) * t / world_ > rank_ * t / world_ ? B : B - 1;
}

void Schedule::pass_rows(uint64_t k, const EpochRows& er, BatchRows& out) const {
  const uint64_t n = er.rows(), S = rows_per_batch_, step = world_ * S;
  const uint64_t B = (n + step - 1) / step;
  uint64_t from, to;
  if (k + 1 < B) {
    from = k * step + rank_ * S;
    to = from + S;
  } else {
    const uint64_t t = n - (B - 1) * step;
    from = (B - 1) * step + rank_ * t / world_;
    to = (B - 1) * step + (rank_ + 1) * t / world_;
  }
  for (uint64_t row = from; row < to; ++row) {
    if (er.row_start.empty()) {
      out.samples.push_back(er.samples[row]);
    } else {
      for (uint32_t s = er.row_start[row]; s < er.row_start[row + 1]; ++s) out.samples.push_back(er.samples[s]);
    }
    out.row_start.push_back(static_cast<uint32_t>(out.samples.size()));
  }
}

}  // namespace tokfeed
