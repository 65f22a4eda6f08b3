// Builds one batch straight into a ring slot (docs/data_model.md section 5).
#pragma once

#include <cstdint>
#include <functional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "config/config.hpp"
#include "dataset/dataset.hpp"
#include "encode/sample_encoder.hpp"
#include "pipeline/schedule.hpp"
#include "chat/sample.hpp"
#include "tokenizer/tokenizer.hpp"
#include "cache/cache_build.hpp"
#include "cache/token_cache.hpp"
#include "tokfeed/shm/slot.hpp"

namespace tokfeed {

struct BuildStats {
  uint32_t rows = 0;
  uint32_t seq_len = 0;
  uint64_t samples = 0;  // samples in the batch
  uint64_t tokens = 0;   // rows x L
  uint64_t real_tokens = 0;
  uint64_t truncated = 0;
  uint64_t dropped = 0;
  uint64_t all_masked = 0;
};

class BatchBuilder {
 public:
  // Samples come from `store` when there is one, else are encoded here.
  // `facts` (the store, a facts table, or nullptr) say which samples the
  // plan left out; the builder leaves out the same ones should it meet them.
  // While the cache builds, `building` and `part_fds` (the build's part
  // files, in part order) give a ready record's tokens instead of the store.
  BatchBuilder(const JobConfig& cfg, const Dataset& data, const text::Tokenizer& tok, const TokenStore* store,
               const SampleFacts* facts, Schedule& schedule, const std::unordered_set<uint64_t>& poisoned,
               const BuildFacts* building = nullptr, std::vector<int> part_fds = {});

  // Bytes one slot needs for this job's largest batch.
  static uint64_t slot_bytes(const JobConfig& cfg);

  // A growing plan's batch `i` is not decided: tokenizes one record it
  // waits for that the builders have not reached (Schedule::wanted()) and
  // publishes its facts, keeping the sample for the batch that takes it.
  // False when there is none to tokenize (wait for the builders then).
  bool find_ahead(uint64_t i, uint32_t helper, uint32_t helpers, const std::function<void(uint64_t)>& on_record);
  // The build's hand-off file this worker writes the tokens of the records
  // it finds into (-1: none), for the builders to copy; `file` is its
  // number, which is also this worker's helper number.
  void hand_off_to(int fd, uint32_t file);

  // Encodes stream batch `i` into `slot`. `on_record` is told each valid
  // record index before it is encoded, so a crash can be traced to it.
  BuildStats build(uint64_t i, char* slot, uint64_t slot_bytes, uint64_t seq, uint64_t session,
                   const std::function<void(uint64_t)>& on_record);

 private:
  // The sample of valid record `rec`, or nullptr when it is left out.
  const text::EncodedSample* sample(uint64_t rec, std::size_t k, BuildStats& st,
                                    const std::function<void(uint64_t)>& on_record);
  bool read_part(uint64_t rec, text::EncodedSample& s);
  // cu_seq_lens_q and max_length_q of a packed batch of `rows` x `len`.
  void add_hf_varlen(shm::SlotWriter& w, uint32_t rows, uint32_t len);

  const JobConfig& cfg_;
  const text::Tokenizer& tok_;
  const TokenStore* store_;
  const SampleFacts* facts_;
  const BuildFacts* building_;
  std::vector<int> part_fds_;
  std::vector<uint32_t> tokens_;  // a record read from a part file
  // Samples find_ahead() tokenized, until a batch takes them (bounded).
  std::unordered_map<uint64_t, text::EncodedSample> ahead_;
  std::vector<uint32_t> wanted_;
  int found_fd_ = -1;
  uint32_t found_file_ = 0;
  uint64_t found_end_ = 0;  // bytes in the hand-off file
  uint8_t excluded_;
  Schedule& schedule_;
  const std::unordered_set<uint64_t>& poisoned_;
  SampleEncoder encoder_;
  // Reused across batches, so the steady state allocates nothing.
  BatchRows rows_;
  std::vector<text::EncodedSample> samples_;
  std::vector<const text::EncodedSample*> kept_;
  std::vector<uint32_t> kept_row_start_;
};

}  // namespace tokfeed
