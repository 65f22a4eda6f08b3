// The supervisor: owns the config, the dataset index, the tokenizer and the
// segments; forks one worker per (rank, worker) ring and restarts any that
// dies; serves the control socket.
//
// Like PostgreSQL's postmaster, it never writes into the rings: after the
// segments are initialised it only bumps the heartbeat word and reads the
// workers' counters (as untrusted numbers), so a worker that corrupts its
// ring cannot take the supervisor down with it.
#pragma once

#include <sys/types.h>

#include <utility>  // Boost 1.74 Asio uses std::exchange without it
#include <boost/asio.hpp>
#include <map>
#include <memory>
#include <atomic>
#include <exception>
#include <optional>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "cache/cache_build.hpp"
#include "cache/record_check.hpp"
#include "common/child_exit.hpp"
#include "config/config.hpp"
#include "control/control.hpp"
#include "config/cpu_policy.hpp"
#include "dataset/dataset.hpp"
#include "control/metrics_http.hpp"
#include "pipeline/schedule.hpp"
#include "tokenizer/tokenizer.hpp"
#include "cache/token_cache.hpp"
#include "tokfeed/shm/layout.hpp"
#include "tokfeed/shm/segment.hpp"

namespace tokfeed {

// Shared memory a job needs, for --check-config and start-up errors.
struct ShmPlan {
  uint64_t slot_bytes;  // the larger of a training and an evaluation batch
  uint64_t data_bytes;
  uint64_t consumer_bytes;       // per served rank
  uint64_t eval_consumer_bytes;  // per served rank's evaluation stream (0 without [eval])
  uint64_t ranks;
  uint64_t total() const { return data_bytes + (consumer_bytes + eval_consumer_bytes) * ranks; }
};
ShmPlan plan_shm(const JobConfig& cfg);

class Supervisor final : public ControlHandler {
 public:
  // Loads everything and creates the segments; throws std::runtime_error
  // with a message for the operator on any failure.
  explicit Supervisor(JobConfig cfg);
  ~Supervisor() override;

  // Forks the workers, binds the socket, notifies systemd, and serves until
  // shutdown. Returns the process exit code.
  int run();

  Reply handle(const Peer& peer, const msgpack::object& request) override;
  void closed(const Peer& peer) override;

 private:
  struct WorkerSlot {
    uint32_t rank_index;
    uint32_t worker;
    pid_t pid = -1;
    uint64_t restarts = 0;
    uint64_t started_ns = 0;
    uint64_t last_restart_ms = 0;  // time from death to respawn
    std::string last_exit;
  };
  // One stream of one served rank: its training stream, or its evaluation
  // passes (docs/data_model.md section 7), each with its own rings
  // [ring_base, ring_base + workers) and consumer segment.
  struct RankSlot {
    uint32_t rank;
    uint32_t served;  // index of the rank in [ranks] serve (its cores)
    bool eval = false;
    uint32_t ring_base = 0;
    uint32_t workers = 0;
    shm::Mapping consumer;
    std::unique_ptr<Schedule> schedule;  // set once the token cache is ready
    // The schedule was planned with the store's or a facts table's facts;
    // false for a plan that needs none, made while the cache builds: its
    // workers tokenize what they serve until the rank is planned again.
    bool with_facts = false;
    std::optional<Peer> client;
  };
  // Where start-up stands: the token cache comes before the workers.
  enum class Phase { kIndexing, kCacheWait, kCacheBuild, kServing };
  struct Rates {
    uint64_t t_ns = 0, samples = 0, tokens = 0, real_tokens = 0;
  };

  void acquire_instance_locks();
  void start_indexing();
  void poll_indexing();
  void fail_start(const std::exception_ptr& error);
  void start_record_check();
  void record_check_done();
  void dataset_ready();
  std::string index_line() const;
  void create_segments();
  void prepare_cache();
  void try_cache_lock();
  void cache_ready();
  void start_serving();
  void log_eval() const;
  // Whether the plan needs no sample facts (padded, nothing left out), so
  // workers may serve while the token cache builds (docs/data_model.md 6).
  bool serves_while_building() const;
  void yield_builders();
  void plan_rank(uint32_t ri, StreamStart start);
  // The end of worker w's ring under the rank's plan: seqs [0, end) make up
  // its share (UINT64_MAX while the plan grows, and for evaluation passes).
  static uint64_t ring_end(const RankSlot& rs, uint32_t w);
  void replan_rank(uint32_t ri, StreamStart start);
  // `rank_index`: the served rank a worker builds for, whose cores it gets;
  // -1 (a cache builder): the cores of all served ranks.
  pid_t fork_child(const std::function<void()>& child, int rank_index = -1);
  void spawn(WorkerSlot& w);
  void on_sigchld();
  // A child died of SIGBUS because a dataset file shrank under its mapping:
  // logs which and why, and stops the daemon (exit 1). False otherwise.
  bool stop_if_dataset_shrank(int status);
  void follow_objects();
  void want_first_batches();
  // Takes a shared lock on `<key>.use` for the daemon's life: no cache trim
  // removes a store in use.
  void hold_store();
  // Keeps [cache] dir under max_gb once this job's store is ready.
  void trim_cache_dir();
  void on_worker_exit(WorkerSlot& w, int status);
  void heartbeat();
  void begin_shutdown(const char* why);
  void finish_shutdown();

  Reply attach(const Peer& peer, const proto::AttachRequest& req);
  Reply attach_eval(const Peer& peer, const proto::AttachRequest& req, uint32_t ri);
  // Shares the segments with the client and sends the reply.
  Reply grant(const Peer& peer, RankSlot& rs, uint64_t start_index, bool replanned, uint64_t epoch, uint64_t step);
  std::string status_payload();
  void pack_dataset(msgpack::packer<msgpack::sbuffer>& pk) const;
  std::string summary_line();
  std::string cache_line() const;

  shm::RingHeader& ring(std::size_t index) const;
  // What the plan knows of each sample: the store, a facts table, the facts
  // of a build under way that serving grows over, or nothing.
  const SampleFacts* facts() const {
    if (store_) return store_.get();
    if (facts_table_) return facts_table_.get();
    return grows_ && cache_build_ ? &cache_build_->facts() : nullptr;
  }
  // Whether serving may start while the build runs, the plan growing over
  // the records built so far (docs/data_model.md 4.1). The training streams
  // grow; evaluation passes need their whole set's facts, so their plans and
  // workers wait for the build's end (unless no plan needs facts at all:
  // then every stream serves at once, serves_while_building()).
  bool grows_while_building() const { return !cfg_.eval.enabled() || !serves_while_building(); }
  // A rank slot planned only once the build ends: an evaluation stream
  // while a growing plan serves.
  bool deferred(const RankSlot& rs) const { return rs.eval && grows_; }
  // Starts serving over a build under way (growing plans).
  void serve_growing(const char* why);
  // The build is done: growing plans are planned in full, and their
  // clients told the counts.
  void plan_grown_ranks();
  // Logs how many records workers tokenized ahead of the builders.
  void log_found() const;
  // Writes a rank's batch counts into its consumer segment (or marks them
  // unknown for a growing plan).
  void publish_counts(RankSlot& rs);
  // Counts and logs the records each rule leaves out of every epoch.
  void count_left_out();

  JobConfig cfg_;
  JobConfig eval_cfg_;  // eval_job(cfg_), when [eval] is set
  const JobConfig& cfg_of(const RankSlot& rs) const { return rs.eval ? eval_cfg_ : cfg_; }
  const Mixture& mixture_of(const RankSlot& rs) const { return rs.eval ? data_->eval_mixture() : data_->mixture(); }
  // The RankSlot of (rank, split), or nullptr.
  RankSlot* find_slot(uint32_t rank, bool eval, uint32_t& index);
  std::unique_ptr<text::Tokenizer> tok_;
  std::unique_ptr<Dataset> data_;  // set once indexing is done
  Phase phase_ = Phase::kIndexing;
  IndexProgress index_progress_;
  std::thread index_thread_;
  std::unique_ptr<Dataset> indexed_;           // written by index_thread_; pending() while record_check_ runs
  std::unique_ptr<RecordCheck> record_check_;  // judging the records a template renders, in children
  std::exception_ptr index_error_;
  std::atomic<bool> index_done_{false};
  int exit_code_ = 0;
  CacheKey cache_key_{};
  std::unique_ptr<TokenStore> store_;
  std::unique_ptr<FactsTable> facts_table_;  // the cache off: lengths and flags only
  uint64_t too_long_ = 0;                    // valid records longer than max_length under truncation = "drop"
  uint64_t bad_when_read_ = 0;               // valid records refused when encoded (check_rows = "when_read")
  uint64_t untrained_ = 0;                   // valid records with no trained token after truncation
  bool left_out_counted_ = false;
  std::unique_ptr<CacheBuild> cache_build_;
  std::vector<uint32_t> build_order_;  // the records in the order the build takes them
  bool grows_ = false;                 // serving grows over cache_build_'s facts
  int cache_lock_fd_ = -1;             // `<key>.lock`, held exclusively while building
  int store_use_fd_ = -1;              // `<key>.use`, held shared while the store is in use
  bool cache_hit_ = false;
  double cache_seconds_ = 0;
  uint64_t cache_log_ns_ = 0;
  ShmPlan plan_{};
  shm::Mapping data_seg_;
  std::vector<RankSlot> ranks_;
  std::vector<WorkerSlot> workers_;
  std::unordered_set<uint64_t> poisoned_;
  std::map<uint64_t, uint32_t> crashes_;  // valid record → crashes while building it
  std::vector<std::string> poison_reports_;
  std::vector<int> lock_fds_;
  int64_t crash_on_line_ = -1;
  uint64_t start_ns_ = 0;
  CpuPlan cpu_plan_;  // [workers] cpus, resolved at start
  std::vector<int> builder_cpus_;
  Rates last_rates_{}, prev_rates_{};
  bool stopping_ = false;

  boost::asio::io_context io_;
  boost::asio::signal_set signals_{io_};
  boost::asio::signal_set sigchld_{io_};
  boost::asio::steady_timer beat_{io_};
  boost::asio::steady_timer cache_timer_{io_};
  boost::asio::steady_timer index_timer_{io_};
  std::unique_ptr<ControlServer> server_;
  std::unique_ptr<MetricsHttpServer> metrics_;  // [server] metrics_listen
};

}  // namespace tokfeed
