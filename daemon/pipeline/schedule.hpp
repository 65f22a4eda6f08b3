// The order of samples and batches (docs/data_model.md section 4): a pure
// function of the job, the rank and the stream's start.
//
//   epoch order (4)  ->  rows (4.1: one sample each, or packed)
//                    ->  this rank's batches (4.2: from the start (e0, s0))
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "common/random.hpp"
#include "config/config.hpp"
#include "dataset/mixture.hpp"

namespace tokfeed {

class SampleFacts;

// Where a rank's stream begins: epoch e0, from row s0 of it (4.3).
struct StreamStart {
  uint64_t epoch = 0;
  uint64_t base = 0;
  bool operator==(const StreamStart&) const = default;
};

// The rows of one epoch, world-independent (4.1). Packed: `samples` in row
// order, row j is samples[row_start[j] .. row_start[j+1]). Padded: one sample
// per row, and row_start is empty.
struct EpochRows {
  std::vector<uint32_t> samples;
  std::vector<uint32_t> row_start;
  uint64_t rows() const { return row_start.empty() ? samples.size() : row_start.size() - 1; }
};

// Best-fit decreasing over windows of `window` samples (4.1). `order` is the
// epoch order with excluded samples already taken out; `length(s)` is a
// sample's token count.
void pack_rows(const std::vector<uint32_t>& order, const std::function<uint32_t(uint32_t)>& length, uint32_t capacity,
               uint32_t window, EpochRows& out);

// One batch: rows of samples (valid-record indices), flat.
struct BatchRows {
  std::vector<uint64_t> samples;
  std::vector<uint32_t> row_start;  // rows + 1 offsets into samples
  uint32_t rows() const { return static_cast<uint32_t>(row_start.size() - 1); }
};

// The samples of `epoch` in order (sections 4 and 1.1): valid-record numbers.
void epoch_permutation(const JobConfig& cfg, const Mixture& mix, uint64_t epoch, std::vector<uint32_t>& perm);
// The order a token cache build takes the valid records in (docs/data_model.md
// section 6): the first epoch's plan (each record where it first appears),
// then the records that epoch does not use.
std::vector<uint32_t> build_order(const JobConfig& cfg, const Mixture& mix, uint64_t records);

class Schedule {
 public:
  // `mix` gives each epoch's sample list (1.1); `facts` gives each sample's
  // token count and flags, required for packed modes and wherever a sample
  // may be left out (4.1). Without facts every sample is a row.
  Schedule(const JobConfig& cfg, const Mixture& mix, uint32_t rank, StreamStart start, const SampleFacts* facts);

  // Facts still being built (SampleFacts::all_ready() false, a stream from
  // (0, 0), not passes): the schedule grows. Epoch 0's rows are known as far
  // as the built prefix of its plan decides them, the counts are unknown
  // (total_batches() is UINT64_MAX, epoch_batches() empty) until every
  // record is ready; then it is planned in full, equal to a schedule made
  // from the complete facts.
  bool growing() const { return growing_; }
  // Whether stream batch i's rows are decided (growing: advances over the
  // records ready so far; otherwise i < total_batches()). Call before
  // batch_rows() and locate() on a growing schedule.
  bool decided(uint64_t i);
  // Growing: whether the facts found so far decide batch i of epoch 0, as
  // decided() says, but the plan keeps growing (it is not planned in full
  // even once every fact is known: its owner does that when the build ends).
  bool prefix_decides(uint64_t i) {
    if (!growing_) return false;
    advance();
    return rows_.rows() >= (i + 1) * rows_per_step();
  }
  // Growing: rows of epoch 0 decided so far.
  uint64_t decided_rows() const { return growing_ ? rows_.rows() : 0; }
  // Growing, batch i not decided: the records of epoch 0's plan that it
  // waits for and that one worker is to tokenize itself (BatchBuilder::
  // find_ahead), back to front (the builders come from the front). Padded:
  // this rank's rows of the batch, where the plan's unknown part would put
  // them with nothing more left out (the rows of other ranks and other
  // batches are their workers'). Packed: the records that complete the
  // window being filled, dealt round robin over `helpers` workers (of every
  // served rank), this one being `helper`. Estimates: a record left out
  // shifts the rest, and the builders fill any gap.
  void wanted(uint64_t i, uint32_t helper, uint32_t helpers, std::vector<uint32_t>& out) const;

  StreamStart start() const { return start_; }
  // The evaluation stream (section 7): stream batch i is batch i mod B of
  // pass i / B, B = epoch_batches()[0]; total_batches() is UINT64_MAX (0
  // when this rank has no batch in a pass).
  bool passes() const { return passes_; }
  // Batches of each epoch from start().epoch on.
  const std::vector<uint64_t>& epoch_batches() const { return epoch_batches_; }
  uint64_t total_batches() const { return total_; }
  uint64_t epochs() const { return epochs_; }
  // Rows of epoch e (4.1), and the base of its segment.
  uint64_t epoch_rows(uint64_t epoch);
  uint64_t base(uint64_t epoch) const { return epoch == start_.epoch ? start_.base : 0; }
  // Rows every step deals over all ranks (R x S).
  uint64_t rows_per_step() const { return world_ * rows_per_batch_; }

  // Epoch and step of stream batch i (i < total_batches()).
  void locate(uint64_t i, uint64_t& epoch, uint64_t& step) const;
  // The stream index of (epoch, step), or total_batches() past the end.
  uint64_t index_of(uint64_t epoch, uint64_t step) const;

  // The rows of stream batch i.
  void batch_rows(uint64_t i, BatchRows& out);

  // Epoch e's rows (the same for every rank), computed once and kept until
  // another epoch's are asked for.
  const EpochRows& epoch_order(uint64_t epoch) { return rows(epoch); }
  // Reads epoch e's rows from `rows` instead of computing its own: a worker
  // shares the pages its supervisor computed before fork (4 bytes per sample
  // once, not once per worker). `rows` must outlive this schedule.
  void share_rows(uint64_t epoch, const EpochRows* rows) {
    shared_epoch_ = epoch;
    shared_ = rows;
  }

 private:
  // Epoch e's samples in order (4.1 and 1.1) into `perm`.
  void permutation(uint64_t epoch, std::vector<uint32_t>& perm) const { epoch_permutation(cfg_, mix_, epoch, perm); }
  // Every epoch's batches, from complete facts.
  void count_batches();
  // Growing: takes the plan's next ready samples into epoch 0's rows.
  void advance();
  // Growing, packed: packs window_ and appends its rows to epoch 0's.
  void pack_window();
  const EpochRows& rows(uint64_t epoch);
  uint64_t segment_batches(uint64_t n) const;
  // Section 7: this rank's share of a pass of n rows, batch k (of `batches`).
  void pass_rows(uint64_t k, const EpochRows& er, BatchRows& out) const;
  uint64_t pass_batches(uint64_t n) const;

  const JobConfig& cfg_;
  Mixture mix_;
  uint64_t n_;  // samples per epoch
  uint64_t world_;
  uint64_t rank_;
  uint64_t rows_per_batch_;
  bool packed_;
  bool passes_;
  StreamStart start_;
  const SampleFacts* facts_;
  uint8_t excluded_;  // flags that leave a sample out of every row
  bool filter_;       // some sample is left out: the rows are computed
  uint64_t epochs_;
  std::vector<uint64_t> epoch_batches_;
  std::vector<uint64_t> first_index_;  // stream index of each epoch's step 0
  uint64_t total_ = 0;
  uint64_t rows_epoch_ = UINT64_MAX;
  EpochRows rows_;
  uint64_t shared_epoch_ = UINT64_MAX;
  const EpochRows* shared_ = nullptr;
  // Growing (see growing()): epoch 0's plan, how far it is scanned, and the
  // kept samples of a pack window not yet complete.
  bool growing_ = false;
  std::vector<uint32_t> plan0_;
  uint64_t scanned_ = 0;
  std::vector<uint32_t> window_;
  EpochRows packed_window_;
};

}  // namespace tokfeed
