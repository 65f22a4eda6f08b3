// Building the token cache: forked builder processes tokenize the valid
// records in parallel, in the order the first epoch's plan consumes them
// (docs/data_model.md section 6), each into its own part file; the
// supervisor restarts a builder that dies (isolating a record that keeps
// crashing it), then joins the parts into the store and renames it into place.
//
// The build order is cut into blocks of kBuildBlock records dealt round
// robin over the builders, so together they advance over the plan's prefix.
// As each builder writes, it publishes every record's length, flags, place
// in its part file and a ready byte in memory shared with the workers
// (BuildFacts): the plan advances over the records built so far while the
// rest are built.
//
// A part is two files in `[cache] dir`, named by the store's key, the number
// of parts and a hash of the build order: `<key>.p<P>-<order>-<k>.part`
// (tokens) and `.facts` (each record's length and flags, 5 bytes, written
// after its tokens). A build that stops (kill -9, SIGTERM, a crash) leaves
// them; the next start with the same key and order keeps every record whose
// facts and tokens are both whole and builds the rest.
//
// Driven by the supervisor's event loop: start(), then on_exit() for each
// child that exits, until done().
//
// With the cache off, a facts-only build tokenizes the same way but keeps
// only each record's length and flags, in memory (take_facts()): the plan
// needs them before any batch, and the workers tokenize again as they serve.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "dataset/dataset.hpp"
#include "tokenizer/tokenizer.hpp"
#include "cache/token_cache.hpp"

namespace tokfeed {

struct CacheProgress {
  uint64_t done = 0, total = 0;
  uint64_t kept = 0;   // of done: found built by an interrupted build, not built again
  double seconds = 0;  // since the build started
  double rate() const { return seconds > 0 ? (done - kept) / seconds : 0; }
  double eta() const { return done > kept ? seconds * (total - done) / (done - kept) : 0; }
};

inline constexpr uint64_t kBuildBlock = 4;  // records of the build order dealt to a builder at once

// The facts of a build under way, as its builders publish them: record i's
// length and flags are final, and its tokens in its part file, once ready(i).
// Readable by every process forked after the build's start (the mapping is
// shared). Thread and process safety: builders write a record's fields, then
// its ready byte with release; readers load ready() with acquire first.
class BuildFacts final : public SampleFacts {
 public:
  uint64_t size() const override { return records_; }
  uint32_t length(uint64_t i) const override { return lengths_[i]; }
  uint8_t flags(uint64_t i) const override { return flags_[i]; }
  bool ready(uint64_t i) const override { return ready_[i].load(std::memory_order_acquire) != 0; }
  // Every record is ready.
  bool all_ready() const override { return ready_total_->load(std::memory_order_acquire) >= records_; }
  // The part holding record i's tokens and their byte offset in it.
  uint32_t part(uint64_t i) const { return static_cast<uint32_t>(offsets_[i] >> 48); }
  uint64_t offset(uint64_t i) const { return offsets_[i] & ((uint64_t{1} << 48) - 1); }
  // Waits up to `timeout` for more records to become ready; counts the
  // caller among the waiting (status) meanwhile.
  void wait(std::chrono::nanoseconds timeout) const;
  uint32_t waiting() const { return waiting_->load(std::memory_order_relaxed); }

 private:
  friend class CacheBuild;
  uint64_t records_ = 0;
  const uint32_t* lengths_ = nullptr;
  const uint8_t* flags_ = nullptr;
  const uint64_t* offsets_ = nullptr;
  const std::atomic<uint8_t>* ready_ = nullptr;
  const std::atomic<uint64_t>* ready_total_ = nullptr;
  std::atomic<uint32_t>* progress_ = nullptr;  // futex word: bumped when records become ready
  std::atomic<uint32_t>* waiting_ = nullptr;   // processes waiting for records
};

// Lengths and flags of every valid record, from a facts-only build.
class FactsTable final : public SampleFacts {
 public:
  FactsTable(void* map, std::size_t bytes, const uint32_t* lengths, const uint8_t* flags, uint64_t records)
      : map_(map), bytes_(bytes), lengths_(lengths), flags_(flags), records_(records) {}
  ~FactsTable() override;
  FactsTable(const FactsTable&) = delete;
  FactsTable& operator=(const FactsTable&) = delete;
  uint64_t size() const override { return records_; }
  uint32_t length(uint64_t i) const override { return lengths_[i]; }
  uint8_t flags(uint64_t i) const override { return flags_[i]; }

 private:
  void* map_;
  std::size_t bytes_;
  const uint32_t* lengths_;
  const uint8_t* flags_;
  uint64_t records_;
};

class CacheBuild {
 public:
  // `fork_child` forks and runs the function in the child (which must not
  // return); it returns the child's pid or -1.
  using ForkFn = std::function<pid_t(const std::function<void()>&)>;

  // `facts_only`: no store is written (the cache is off); take_facts() once done().
  // `order`: the valid records in the order to build them, each once
  // (empty: 0, 1, 2, ...).
  CacheBuild(const JobConfig& cfg, const Dataset& data, const text::Tokenizer& tok, CacheKey key, uint32_t parts,
             int64_t crash_on_line, bool facts_only = false, const std::vector<uint32_t>& order = {});
  ~CacheBuild();

  void start(const ForkFn& fork_child);
  // A child exited: returns false when it was not a builder. `isolated` gets
  // a report when a record was isolated.
  bool on_exit(pid_t pid, int status, const ForkFn& fork_child, std::vector<std::string>& isolated);
  bool done() const;
  CacheProgress progress() const;
  // The part files' names of a store, for `parts` parts and a build order
  // (its hash): a start removes other parts' files of the same key.
  static std::string part_prefix(const std::string& dir, const CacheKey& key, uint32_t parts, const std::string& order);
  std::string part_prefix() const;
  static std::string order_hash(const std::vector<uint32_t>& order);
  // The facts published so far; valid for the life of the build, and in
  // children forked after start().
  const BuildFacts& facts() const { return view_; }
  // Read-only descriptors of the part files, in part order (none for a
  // facts-only build): a worker forked during the build keeps them, so it
  // reads tokens even after publish() removes the files.
  const std::vector<int>& part_fds() const { return part_fds_; }
  // Joins the parts and publishes the store. Call once done().
  void publish();
  // The lengths and flags, for the life of the job (facts-only builds).
  std::unique_ptr<FactsTable> take_facts();
  bool facts_only() const { return facts_only_; }
  // Kills the builders (shutdown).
  void abort();
  std::vector<pid_t> pids() const;

 private:
  struct Part {
    std::vector<uint32_t> records;  // in build order
    pid_t pid = -1;
    bool finished = false;
    std::string path;   // tokens
    std::string facts;  // lengths and flags
  };
  // What an interrupted build left of part `k`: its records, into the
  // shared lengths and flags. Returns how many.
  uint64_t recover(std::size_t k);
  void spawn(Part& p, const ForkFn& fork_child);
  [[noreturn]] void builder_main(std::size_t index, int fd, int facts_fd);

  const JobConfig& cfg_;
  const Dataset& data_;
  const text::Tokenizer& tok_;
  CacheKey key_;
  int64_t crash_on_line_;
  bool facts_only_;
  uint64_t records_;
  std::string order_hash_;
  std::vector<Part> parts_;
  std::vector<int> part_fds_;
  std::map<uint64_t, uint32_t> crashes_;
  void* shared_ = nullptr;
  std::size_t shared_bytes_ = 0;
  uint32_t* lengths_ = nullptr;
  uint8_t* flags_ = nullptr;
  uint64_t* offsets_ = nullptr;            // per record: part << 48 | byte offset in it
  std::atomic<uint8_t>* ready_ = nullptr;  // per record
  std::atomic<uint64_t>* ready_total_ = nullptr;
  BuildFacts view_;
  std::atomic<uint64_t>* done_ = nullptr;     // per part: records whose tokens are in its file
  std::atomic<uint64_t>* current_ = nullptr;  // per part: record being encoded + 1
  uint64_t start_ns_ = 0;
  uint64_t kept_ = 0;  // records recovered from an interrupted build
  pid_t owner_;        // the supervisor: only it kills builders and removes the parts
};

}  // namespace tokfeed
