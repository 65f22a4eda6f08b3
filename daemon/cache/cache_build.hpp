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
// length and flags are final, and its tokens in its part file, once built(i).
// A worker whose batch waits for a record the builders have not reached
// tokenizes it itself and publishes its facts here too (found(i)), with its
// tokens in the worker's hand-off file: the same encoder gives the same
// facts, so the plan grows alike whoever found them, and a builder that
// reaches a found record copies its tokens into its part instead of
// tokenizing it again. Only builders write parts: what a stopped build keeps
// is theirs alone.
// Readable by every process forked after the build's start (the mapping is
// shared). Thread and process safety: builders write a record's fields, then
// its ready byte with release; readers load built() with acquire first. A
// worker claims a record (compare-and-swap of its found word from 0), writes
// its tokens and their place, then stores the word with kFound (release);
// readers load it with acquire. A builder claims each record it tokenizes
// the same way, so no worker tokenizes it again (it is ready once the
// builder's next write); one that meets a worker's claim waits for the
// worker's tokens, and tokenizes the record itself when a claim stays
// incomplete (its worker died).
class BuildFacts final : public SampleFacts {
 public:
  uint64_t size() const override { return records_; }
  uint32_t length(uint64_t i) const override {
    return built(i) ? lengths_[i] : static_cast<uint32_t>(found_[i].load(std::memory_order_acquire));
  }
  uint8_t flags(uint64_t i) const override {
    return built(i) ? flags_[i] : static_cast<uint8_t>(found_[i].load(std::memory_order_acquire) >> 32);
  }
  // Built or found.
  bool ready(uint64_t i) const override { return built(i) || found(i); }
  // Record i's tokens are in its builder's part file.
  bool built(uint64_t i) const { return ready_[i].load(std::memory_order_acquire) != 0; }
  // A worker found record i's facts.
  bool found(uint64_t i) const { return found_[i].load(std::memory_order_acquire) & kFound; }
  // Takes record i to tokenize it, for `claimer` (a worker's helper number,
  // or kBuilder | a builder's): false when it is built, found or taken
  // already.
  static constexpr uint32_t kBuilder = 1u << 16;
  bool claim(uint64_t i, uint32_t claimer) const;
  // Publishes the facts of a record the caller claimed, with its tokens at
  // byte `at` of hand-off file `file` (kNoTokens: none), and wakes the
  // processes waiting for more.
  static constexpr uint64_t kNoTokens = ~uint64_t{0};
  void publish_found(uint64_t i, uint32_t length, uint8_t flags, uint32_t file, uint64_t at) const;
  // Where a found record's tokens are: file << 48 | byte offset, or kNoTokens.
  uint64_t found_at(uint64_t i) const { return found_at_[i]; }
  uint64_t found_word(uint64_t i) const { return found_[i].load(std::memory_order_acquire); }
  // Records whose facts workers found before the builders wrote them.
  uint64_t found_total() const { return found_total_->load(std::memory_order_relaxed); }
  // Every record is built (the plan's end is known once it is).
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
  // found_ word: 0, kClaimed | claimer (a process tokenizes it), or
  // kFound | flags << 32 | length.
  static constexpr uint64_t kFound = uint64_t{1} << 63;
  static constexpr uint64_t kClaimed = uint64_t{1} << 62;
  std::atomic<uint64_t>* found_ = nullptr;
  uint64_t* found_at_ = nullptr;  // per record: written by its claimer before kFound
  std::atomic<uint64_t>* found_total_ = nullptr;
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
  // The hand-off file of each of the `parts` workers given to the
  // constructor (none for a facts-only build): a worker writes the tokens of
  // the records it finds into its own, and builders read them from there.
  const std::vector<int>& found_fds() const { return found_fds_; }
  // Records whose tokens builders copied from a hand-off file.
  uint64_t handed() const { return handed_->load(std::memory_order_relaxed); }
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
  // A builder reached record r, which a worker found (its found word):
  // takes its facts and, when `tokens`, appends its tokens from the
  // worker's hand-off file to `buf`. False when they are not there.
  bool take_found(uint64_t r, uint64_t word, bool tokens, std::vector<uint32_t>& buf);

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
  std::vector<int> found_fds_;  // memfds, emptied once the build ends
  std::map<uint64_t, uint32_t> crashes_;
  void* shared_ = nullptr;
  std::size_t shared_bytes_ = 0;
  uint32_t* lengths_ = nullptr;
  uint8_t* flags_ = nullptr;
  uint64_t* offsets_ = nullptr;            // per record: part << 48 | byte offset in it
  std::atomic<uint8_t>* ready_ = nullptr;  // per record
  std::atomic<uint64_t>* ready_total_ = nullptr;
  std::atomic<uint64_t>* handed_ = nullptr;
  BuildFacts view_;
  std::atomic<uint64_t>* done_ = nullptr;     // per part: records whose tokens are in its file
  std::atomic<uint64_t>* current_ = nullptr;  // per part: record being encoded + 1
  uint64_t start_ns_ = 0;
  uint64_t kept_ = 0;  // records recovered from an interrupted build
  pid_t owner_;        // the supervisor: only it kills builders and removes the parts
};

}  // namespace tokfeed
