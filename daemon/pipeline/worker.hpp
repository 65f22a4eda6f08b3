// A forked worker: builds its share of one rank's batches into its ring.
//
// Batch i of a rank is built by worker i mod W and goes to ring seq i / W of
// that worker's ring, so a restarted worker resumes at its ring's head and
// the stream is unchanged (DESIGN.md contract 1).
#pragma once

#include <cstdint>
#include <unordered_set>
#include <vector>

#include "config/config.hpp"
#include "dataset/dataset.hpp"
#include "pipeline/schedule.hpp"
#include "tokenizer/tokenizer.hpp"
#include "cache/cache_build.hpp"
#include "cache/token_cache.hpp"
#include "tokfeed/shm/layout.hpp"

namespace tokfeed {

struct WorkerContext {
  const JobConfig* cfg;  // the job, or eval_job() of it for an evaluation stream
  const Mixture* mix;    // the training mixture, or the evaluation set
  bool eval = false;
  const Dataset* data;
  const text::Tokenizer* tok;
  const TokenStore* store;   // nullptr without the token cache
  const SampleFacts* facts;  // the store, a facts table (cache off), or nullptr
  StreamStart start;
  // A build under way whose facts a growing plan advances over (nullptr:
  // none), and its part files (none with the cache off: then the worker
  // tokenizes what it serves).
  const BuildFacts* building = nullptr;
  std::vector<int> part_fds;
  // The rows of epoch `shared_epoch`, computed by the supervisor before fork
  // and read, never written, by every worker (nullptr: none).
  const EpochRows* shared_rows = nullptr;
  uint64_t shared_epoch = 0;
  const std::unordered_set<uint64_t>* poisoned;  // valid-record indices to skip
  shm::SegmentHeader* segment;
  shm::RingHeader* ring;
  const shm::ConsumerLine* consumer;
  char* slots;
  uint32_t rank;
  uint32_t worker;
  // Among the workers of every served rank's training stream: this one's
  // number and their count (the records of a growing packed plan they
  // tokenize ahead of the builders are dealt over them).
  uint32_t helper = 0;
  uint32_t helpers = 1;
  int found_fd = -1;  // the build's hand-off file of this helper (-1: none)
  int supervisor_pid;
  int64_t crash_on_line;  // test-only fault hook: abort when building this record line; -1 none
};

// Runs in the child after fork(); never returns.
[[noreturn]] void worker_main(const WorkerContext& ctx);

}  // namespace tokfeed
