// Building the token cache: forked builder processes tokenize contiguous
// ranges of the valid records in parallel, each into its own part file; the
// supervisor restarts a builder that dies (isolating a record that keeps
// crashing it), then joins the parts into the store and renames it into place.
//
// A part is two files in `[cache] dir`, named by the store's key and the
// number of parts: `<key>.p<P>-<k>.part` (tokens) and `.facts` (each record's
// length and flags, 5 bytes, written after its tokens). A build that stops
// (kill -9, SIGTERM, a crash) leaves them; the next start with the same key
// keeps every record whose facts and tokens are both whole and builds the
// rest.
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
  CacheBuild(const JobConfig& cfg, const Dataset& data, const text::Tokenizer& tok, CacheKey key, uint32_t parts,
             int64_t crash_on_line, bool facts_only = false);
  ~CacheBuild();

  void start(const ForkFn& fork_child);
  // A child exited: returns false when it was not a builder. `isolated` gets
  // a report when a record was isolated.
  bool on_exit(pid_t pid, int status, const ForkFn& fork_child, std::vector<std::string>& isolated);
  bool done() const;
  CacheProgress progress() const;
  // The part files' names of a store, for `parts` parts: a start removes
  // other part counts' files of the same key.
  static std::string part_prefix(const std::string& dir, const CacheKey& key, uint32_t parts);
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
    uint64_t from, to;
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
  std::vector<Part> parts_;
  std::map<uint64_t, uint32_t> crashes_;
  void* shared_ = nullptr;
  std::size_t shared_bytes_ = 0;
  uint32_t* lengths_ = nullptr;
  uint8_t* flags_ = nullptr;
  std::atomic<uint64_t>* done_ = nullptr;     // per part: records whose tokens are in its file
  std::atomic<uint64_t>* current_ = nullptr;  // per part: record being encoded + 1
  uint64_t start_ns_ = 0;
  uint64_t kept_ = 0;  // records recovered from an interrupted build
  pid_t owner_;        // the supervisor: only it kills builders and removes the parts
};

}  // namespace tokfeed
