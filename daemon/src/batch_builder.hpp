// Builds one batch straight into a ring slot (docs/data_model.md section 5).
#pragma once

#include <cstdint>
#include <functional>
#include <unordered_set>
#include <vector>

#include "config.hpp"
#include "dataset.hpp"
#include "schedule.hpp"
#include "text/sample.hpp"
#include "text/tokenizer.hpp"

namespace tokfeed {

struct BuildStats {
  uint32_t rows = 0;
  uint32_t seq_len = 0;
  uint64_t samples = 0;  // rows built
  uint64_t tokens = 0;   // rows x L
  uint64_t real_tokens = 0;
  uint64_t truncated = 0;
  uint64_t dropped = 0;
  uint64_t all_masked = 0;
};

class BatchBuilder {
 public:
  BatchBuilder(const JobConfig& cfg, const Dataset& data, const text::Tokenizer& tok, Schedule& schedule,
               const std::unordered_set<uint64_t>& poisoned);

  // Bytes one slot needs for this job's largest batch.
  static uint64_t slot_bytes(const JobConfig& cfg);

  // Encodes stream batch `i` into `slot`. `on_record` is told each valid
  // record index before it is encoded, so a crash can be traced to it.
  BuildStats build(uint64_t i, char* slot, uint64_t slot_bytes, uint64_t seq, uint64_t session,
                   const std::function<void(uint64_t)>& on_record);

 private:
  const JobConfig& cfg_;
  const Dataset& data_;
  const text::Tokenizer& tok_;
  Schedule& schedule_;
  const std::unordered_set<uint64_t>& poisoned_;
  text::RecordRules rules_;
  text::RenderOptions render_;
  // Reused across batches, so the steady state allocates nothing.
  std::vector<uint64_t> records_;
  std::vector<text::EncodedSample> samples_;
  std::vector<const text::EncodedSample*> kept_;
  text::Conversation conv_;
  text::Rendered rendered_;
  std::vector<text::Token> tokens_;
};

// The record rules a job's config implies.
text::RecordRules record_rules(const JobConfig& cfg);

}  // namespace tokfeed
