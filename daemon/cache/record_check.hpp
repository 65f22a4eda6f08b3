// Judging rendered records out of the supervisor (docs/reliability.md): the
// records a dataset's template renders are rendered and labelled in forked
// children, each over a contiguous share of Dataset::pending_ranges(), under
// the crash policy of the cache builders: a child that dies is restarted
// after the record it was on, and a record that kills [workers]
// max_crashes children (a crash, a signal, [workers] max_memory exhausted)
// is a bad record named by file:line. The supervisor never renders.
//
// Driven by the supervisor's event loop (start(), then on_exit() for each
// child that exits, until done()), or to the end at once by run().
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "dataset/dataset.hpp"

namespace tokfeed {

class RecordCheck {
 public:
  // `fork_child` forks and runs the function in the child (which must not
  // return); it returns the child's pid or -1.
  using ForkFn = std::function<pid_t(const std::function<void()>&)>;

  // `crash_on_line`: test-only fault hook (TOKFEED_FAULT_CRASH_LINE), -1 none.
  RecordCheck(const Dataset& data, uint32_t children, uint32_t max_crashes, int64_t crash_on_line);
  ~RecordCheck();
  RecordCheck(const RecordCheck&) = delete;
  RecordCheck& operator=(const RecordCheck&) = delete;

  void start(const ForkFn& fork_child);
  // A child exited: false when it was not one of these. `isolated` gets a
  // line for each record isolated.
  bool on_exit(pid_t pid, int status, const ForkFn& fork_child, std::vector<std::string>& isolated);
  bool done() const;
  // Forks the children and waits for them (tokfeedd --check-config).
  void run(const ForkFn& fork_child, std::vector<std::string>& isolated);
  uint64_t checked() const;
  uint64_t total() const { return total_; }
  double seconds() const;
  // The bad records found (record number → reason). Once done().
  const std::map<uint64_t, std::string>& bad() const { return bad_; }
  // Kills the children (shutdown).
  void abort();
  std::vector<pid_t> pids() const;

 private:
  struct Part {
    uint64_t from, to;  // positions in the pending records
    pid_t pid = -1;
    bool finished = false;
    int fd = -1;  // memfd: the child's verdicts, entries of (u64 record, u32 length, reason)
  };
  void spawn(Part& p, const ForkFn& fork_child);
  [[noreturn]] void child_main(std::size_t index);
  // Moves the complete entries of a part's file into bad_ and empties it.
  void collect(Part& p);
  // The record at position `pos` of the pending records.
  uint64_t record_at(uint64_t pos) const;

  const Dataset& data_;
  uint32_t max_crashes_;
  int64_t crash_on_line_;
  std::vector<std::pair<uint64_t, uint64_t>> ranges_;
  std::vector<uint64_t> range_pos_;  // position of each range's first record
  uint64_t total_ = 0;
  std::vector<Part> parts_;
  std::map<uint64_t, uint32_t> crashes_;
  std::map<uint64_t, std::string> bad_;
  void* shared_ = nullptr;
  std::size_t shared_bytes_ = 0;
  std::atomic<uint64_t>* done_ = nullptr;     // per part: positions judged
  std::atomic<uint64_t>* current_ = nullptr;  // per part: record being judged + 1
  uint64_t start_ns_ = 0;
  pid_t owner_;
};

// For the offline commands (tokfeedd --check-config, render, tokenize): judges
// `data`'s pending records in forked children, each under [workers]
// max_memory, and applies the verdicts. Records isolated are reported on
// stderr. Throws DatasetError as Dataset::apply_verdicts() does.
void check_records(const JobConfig& cfg, Dataset& data);

}  // namespace tokfeed
