#include "supervisor/supervisor.hpp"

#include <fmt/format.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>

#include <fcntl.h>
#include <sys/file.h>

#include <filesystem>

#include "pipeline/batch_builder.hpp"
#include "template/template.hpp"
#include "control/metrics_text.hpp"
#include "tokfeed/proto/frame.hpp"
#include "tokfeed/shm/futex.hpp"
#include "pipeline/worker.hpp"

namespace tokfeed {

namespace asio = boost::asio;

ShmPlan plan_shm(const JobConfig& cfg) {
  ShmPlan p;
  const bool eval = cfg.eval.enabled();
  p.slot_bytes = BatchBuilder::slot_bytes(cfg);
  if (eval) p.slot_bytes = std::max(p.slot_bytes, BatchBuilder::slot_bytes(eval_job(cfg)));
  const uint32_t per_rank = cfg.workers.count + (eval ? cfg.eval.workers : 0);
  shm::SegmentGeometry g{static_cast<uint32_t>(cfg.ranks.serve.size() * per_rank), cfg.workers.slots, p.slot_bytes};
  p.data_bytes = g.data_bytes();
  p.consumer_bytes = shm::SegmentGeometry::consumer_bytes(cfg.workers.count, cfg.schedule.epochs);
  p.eval_consumer_bytes = eval ? shm::SegmentGeometry::consumer_bytes(cfg.eval.workers) : 0;
  p.ranks = cfg.ranks.serve.size();
  return p;
}

namespace {

// An instance lock that cannot outlive its holder: a socket bound in the
// abstract namespace, released by the kernel when the process dies. No file
// is left behind after kill -9.
int abstract_lock(const std::string& name, std::string& error) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::size_t n = std::min(name.size(), sizeof(addr.sun_path) - 2);
  std::memcpy(addr.sun_path + 1, name.data(), n);
  socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    error = std::strerror(errno);
    ::close(fd);
    return -1;
  }
  return fd;
}

std::string describe_exit(int status) {
  if (WIFEXITED(status) && WEXITSTATUS(status) == kChildOutOfMemory) return "ran out of memory ([workers] max_memory)";
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return fmt::format("killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  return "stopped";
}

}  // namespace

Supervisor::Supervisor(JobConfig cfg) : cfg_(std::move(cfg)) {
  start_ns_ = shm::monotonic_ns();
  if (cfg_.eval.enabled()) eval_cfg_ = eval_job(cfg_);
  acquire_instance_locks();
  tok_ = text::load_tokenizer(cfg_.tokenizer.type, cfg_.tokenizer.path);
  spdlog::info("tokenizer {}: {}", cfg_.tokenizer.path, tok_->engine());
  cpu_plan_ = plan_cpus(cfg_);
  for (const auto& r : cpu_plan_.per_rank) builder_cpus_.insert(builder_cpus_.end(), r.begin(), r.end());
  std::sort(builder_cpus_.begin(), builder_cpus_.end());
  builder_cpus_.erase(std::unique(builder_cpus_.begin(), builder_cpus_.end()), builder_cpus_.end());
  spdlog::info("workers and cache builders: {}; nice {}, policy {}", cpu_plan_.summary, cfg_.workers.nice,
               cfg_.workers.batch_policy ? "batch" : "other");
#ifdef TOKFEED_FAULT_HOOKS
  if (const char* s = getenv("TOKFEED_FAULT_CRASH_LINE")) crash_on_line_ = std::atoll(s);
  if (const char* s = getenv("TOKFEED_FAULT_INDEX_CHUNK_MS")) index_progress_.slow_chunk_ms = std::atoi(s);
#endif
  create_segments();
}

Supervisor::~Supervisor() {
  if (index_thread_.joinable()) index_thread_.join();
  for (int fd : lock_fds_) ::close(fd);
}

void Supervisor::acquire_instance_locks() {
  std::string error;
  for (const auto& [what, key] :
       {std::pair<std::string, std::string>{"socket", cfg_.server.socket}, {"shm_prefix", cfg_.server.shm_prefix}}) {
    int fd = abstract_lock("tokfeed/" + what + "/" + key, error);
    if (fd < 0) {
      throw std::runtime_error(
          fmt::format("another tokfeedd is running with [server] {} = \"{}\" ({}); stop it first or choose another {}",
                      what, key, error, what));
    }
    lock_fds_.push_back(fd);
  }
  // We hold the locks, so a socket file left here is stale (its daemon died).
  if (::unlink(cfg_.server.socket.c_str()) == 0)
    spdlog::info("removed stale socket {} left by a daemon that died", cfg_.server.socket);
}

void Supervisor::create_segments() {
  plan_ = plan_shm(cfg_);
  const bool eval = cfg_.eval.enabled();
  const uint32_t per_rank = cfg_.workers.count + (eval ? cfg_.eval.workers : 0);
  const uint32_t rings = static_cast<uint32_t>(cfg_.ranks.serve.size() * per_rank);
  if (auto e = shm::create_segment(cfg_.server.shm_dir, plan_.data_bytes, "data", data_seg_))
    throw std::runtime_error(e.message);

  auto* h = data_seg_.at<shm::SegmentHeader>(0);
  h->magic = shm::kDataMagic;
  h->version_major = shm::kVersionMajor;
  h->version_minor = shm::kVersionMinor;
  h->header_bytes = sizeof(shm::SegmentHeader);
  h->segment_bytes = plan_.data_bytes;
  h->ring_count = rings;
  h->slots_per_ring = cfg_.workers.slots;
  h->slot_bytes = plan_.slot_bytes;
  shm::SegmentGeometry g{rings, cfg_.workers.slots, plan_.slot_bytes};
  h->rings_offset = g.rings_offset();
  h->ring_stride = sizeof(shm::RingHeader);
  h->slots_offset = g.slots_offset();
  h->daemon_pid = static_cast<uint32_t>(getpid());
  h->instance_id = std::random_device{}() | (uint64_t{std::random_device{}()} << 32);
  h->heartbeat_ns.store(shm::monotonic_ns(), std::memory_order_relaxed);

  // Every served rank's training rings, then (with [eval]) every served
  // rank's evaluation rings: workers_[i] builds into ring(i).
  uint32_t next_ring = 0;
  for (int pass = 0; pass < (eval ? 2 : 1); ++pass) {
    for (uint32_t si = 0; si < cfg_.ranks.serve.size(); ++si) {
      RankSlot rs;
      rs.rank = cfg_.ranks.serve[si];
      rs.served = si;
      rs.eval = pass == 1;
      rs.workers = rs.eval ? cfg_.eval.workers : cfg_.workers.count;
      rs.ring_base = next_ring;
      next_ring += rs.workers;
      for (uint32_t w = 0; w < rs.workers; ++w) {
        shm::RingHeader& r = ring(rs.ring_base + w);
        r.rank = rs.rank;
        r.worker = w;
        r.end_seq = 0;  // set by plan_rank once the token counts are known
      }
      const uint64_t bytes = rs.eval ? plan_.eval_consumer_bytes : plan_.consumer_bytes;
      if (auto e = shm::create_segment(cfg_.server.shm_dir, bytes,
                                       fmt::format("rank {} {}consumer", rs.rank, rs.eval ? "eval " : ""), rs.consumer))
        throw std::runtime_error(e.message);
      auto* c = rs.consumer.at<shm::ConsumerHeader>(0);
      c->magic = shm::kConsumerMagic;
      c->version_major = shm::kVersionMajor;
      c->version_minor = shm::kVersionMinor;
      c->header_bytes = sizeof(shm::ConsumerHeader);
      c->segment_bytes = bytes;
      c->rank = rs.rank;
      c->ring_count = rs.workers;
      c->lines_offset = sizeof(shm::ConsumerHeader);
      c->line_stride = sizeof(shm::ConsumerLine);
      c->counts_offset = static_cast<uint32_t>(shm::SegmentGeometry::counts_offset(rs.workers));
      c->counts_entries = 0;
      // SYNC POINT: pairs with the client's state.load(acquire) in validation.
      c->state.store(shm::kStateReady, std::memory_order_release);
      const uint32_t ri = static_cast<uint32_t>(ranks_.size());
      for (uint32_t w = 0; w < rs.workers; ++w) workers_.push_back(WorkerSlot{ri, w, -1, 0, 0, 0, {}});
      ranks_.push_back(std::move(rs));
    }
  }
  // SYNC POINT: pairs with the client's state.load(acquire): every field
  // above is visible before the segment reads as ready.
  h->state.store(shm::kStateReady, std::memory_order_release);
  spdlog::info("shared memory: {} bytes of rings in {} ({} rings x {} slots x {} bytes), anonymous", plan_.data_bytes,
               cfg_.server.shm_dir, rings, cfg_.workers.slots, plan_.slot_bytes);
}

// ------------------------------------------------------------ serving

void Supervisor::plan_rank(uint32_t ri, StreamStart start) {
  RankSlot& rs = ranks_[ri];
  const uint32_t W = rs.workers;
  rs.with_facts = facts() != nullptr;
  rs.schedule = std::make_unique<Schedule>(cfg_of(rs), mixture_of(rs), rs.rank, start, facts());
  publish_counts(rs);
  for (uint32_t w = 0; w < W; ++w) ring(rs.ring_base + w).end_seq = ring_end(rs, w);
}

uint64_t Supervisor::ring_end(const RankSlot& rs, uint32_t w) {
  // A growing plan's total is open (UINT64_MAX) until the build ends;
  // evaluation passes repeat without end (when the rank has a batch in one).
  const uint64_t total = rs.schedule ? rs.schedule->total_batches() : 0, W = rs.workers;
  return total == UINT64_MAX ? UINT64_MAX : total > w ? (total - w + W - 1) / W : 0;
}

void Supervisor::publish_counts(RankSlot& rs) {
  auto* c = rs.consumer.at<shm::ConsumerHeader>(0);
  const Schedule& s = *rs.schedule;
  if (s.growing()) {
    c->counts_state.store(0, std::memory_order_relaxed);
    return;
  }
  const std::vector<uint64_t>& counts = s.epoch_batches();
  const uint64_t room = (rs.consumer.size() - c->counts_offset) / 8;
  c->counts_entries = static_cast<uint32_t>(std::min<uint64_t>(counts.size(), room));
  auto* out = rs.consumer.at<uint64_t>(c->counts_offset);
  for (uint32_t k = 0; k < c->counts_entries; ++k) out[k] = counts[k];
  // SYNC POINT: pairs with the client's counts_state.load(acquire): the
  // counts are written before they read as known.
  c->counts_state.store(shm::kCountsKnown, std::memory_order_release);
}

// A new start for one rank: its workers are stopped, the stream is planned
// again from `start`, and fresh workers build it. The client that asked
// repositions, so nothing built for the old plan is delivered.
void Supervisor::replan_rank(uint32_t ri, StreamStart start) {
  for (WorkerSlot& w : workers_) {
    if (w.rank_index != ri || w.pid <= 0) continue;
    ::kill(w.pid, SIGKILL);
    ::waitpid(w.pid, nullptr, 0);
    w.pid = -1;
  }
  plan_rank(ri, start);
  for (WorkerSlot& w : workers_)
    if (w.rank_index == ri) spawn(w);
}

void Supervisor::count_left_out() {
  const SampleFacts* f = facts();
  if (!f || !f->all_ready() || left_out_counted_) return;  // growing: counted once the build is done
  left_out_counted_ = true;
  for (uint64_t i = 0; i < f->size(); ++i) {
    uint8_t fl = f->flags(i);
    too_long_ += (fl & cache_flags::kDropped) != 0;
    bad_when_read_ += (fl & cache_flags::kBad) != 0;
    untrained_ += (fl & (cache_flags::kAllMasked | cache_flags::kExcluded)) == cache_flags::kAllMasked;
  }
  if (too_long_)
    spdlog::info("{} of {} records are longer than max_length = {} and are left out (truncation = \"drop\")", too_long_,
                 f->size(), cfg_.batch.max_length);
  if (bad_when_read_)
    spdlog::info("{} of {} records were found bad as they were read (check_rows = \"when_read\") and are left out",
                 bad_when_read_, f->size());
  if (untrained_)
    spdlog::info("{} of {} records have no trained token after truncation: {} ([batch] keep_untrained = {})",
                 untrained_, f->size(), cfg_.batch.keep_untrained ? "kept" : "left out", cfg_.batch.keep_untrained);
}

bool Supervisor::serves_while_building() const {
  auto none = [](const JobConfig& c) { return !is_packed(c.batch.padding) && !c.batch.leaves_samples_out(); };
  return none(cfg_) && (!cfg_.eval.enabled() || none(eval_cfg_)) && !data_->jsonl_checked_when_read();
}

// Objects still fetched footer first: the row groups of every rank's first
// batches are asked for in the order they are served (batch 0 of every rank,
// then batch 1...), as many batches as the workers build ahead.
void Supervisor::want_first_batches() {
  if (!data_->objects_pending()) return;
  const uint64_t ahead = uint64_t{cfg_.workers.count} * cfg_.workers.slots;
  std::vector<uint64_t> records;
  BatchRows rows;
  uint32_t per_batch = 0;
  for (uint64_t i = 0; i < ahead; ++i)
    for (RankSlot& rs : ranks_) {
      if (rs.eval || i >= rs.schedule->total_batches()) continue;
      rs.schedule->batch_rows(i, rows);
      if (i == 0) per_batch += static_cast<uint32_t>(rows.samples.size());
      records.insert(records.end(), rows.samples.begin(), rows.samples.end());
    }
  data_->want_soon(records, per_batch);
}

void Supervisor::start_serving() {
  phase_ = Phase::kServing;
  count_left_out();
  for (uint32_t ri = 0; ri < ranks_.size(); ++ri)
    if (!deferred(ranks_[ri])) plan_rank(ri, {});
  want_first_batches();
  for (WorkerSlot& w : workers_)
    if (ranks_[w.rank_index].schedule) spawn(w);
  spdlog::info("tokfeedd {} serving ranks {} with {} workers each on {}", getpid(), fmt::join(cfg_.ranks.serve, ","),
               cfg_.workers.count, cfg_.server.socket);
  log_eval();
  sd_notify(0, ("STATUS=" + summary_line()).c_str());
}

shm::RingHeader& Supervisor::ring(std::size_t index) const {
  auto* h = data_seg_.at<shm::SegmentHeader>(0);
  return *data_seg_.at<shm::RingHeader>(h->rings_offset + index * sizeof(shm::RingHeader));
}

void Supervisor::spawn(WorkerSlot& w) {
  RankSlot& rs = ranks_[w.rank_index];
  std::size_t index = rs.ring_base + w.worker;
  WorkerContext ctx;
  ctx.cfg = &cfg_of(rs);
  ctx.mix = &mixture_of(rs);
  ctx.data = data_.get();
  ctx.tok = tok_.get();
  ctx.poisoned = &poisoned_;
  ctx.segment = data_seg_.at<shm::SegmentHeader>(0);
  ctx.ring = &ring(index);
  auto* ch = rs.consumer.at<shm::ConsumerHeader>(0);
  ctx.consumer = rs.consumer.at<shm::ConsumerLine>(ch->lines_offset + w.worker * sizeof(shm::ConsumerLine));
  ctx.slots = data_seg_.at<char>(ctx.segment->slots_offset + index * cfg_.workers.slots * plan_.slot_bytes);
  ctx.eval = rs.eval;
  ctx.rank = rs.rank;
  ctx.worker = w.worker;
  ctx.helper = rs.served * rs.workers + w.worker;
  ctx.helpers = static_cast<uint32_t>(cfg_.ranks.serve.size()) * rs.workers;
  ctx.supervisor_pid = getpid();
  ctx.crash_on_line = crash_on_line_;

  // A plan made without facts while the cache built keeps its workers on
  // the records (the store's facts could leave out what it kept).
  ctx.store = rs.with_facts ? store_.get() : nullptr;
  ctx.facts = rs.with_facts ? facts() : nullptr;
  ctx.start = rs.schedule->start();
  // A growing plan: the worker advances over the build's facts as they are
  // published, and reads built records from its part files.
  if (rs.schedule->growing() && cache_build_) {
    ctx.building = &cache_build_->facts();
    ctx.part_fds = cache_build_->part_fds();
    if (ctx.helper < cache_build_->found_fds().size()) ctx.found_fd = cache_build_->found_fds()[ctx.helper];
  }
  // The order of the epoch the worker starts in, computed here once: forked
  // workers read these pages instead of each holding its own copy. An epoch's
  // rows do not depend on the rank, so rank 0's schedule keeps them for all.
  // The first slot of the same split holds them (evaluation ranks follow
  // the training ones).
  if (ctx.start.epoch < rs.schedule->epochs() && !rs.schedule->growing()) {
    const RankSlot& first = ranks_[rs.eval ? cfg_.ranks.serve.size() : 0];
    ctx.shared_rows = &first.schedule->epoch_order(ctx.start.epoch);
    ctx.shared_epoch = ctx.start.epoch;
  }
  pid_t pid = fork_child([&ctx] { worker_main(ctx); }, static_cast<int>(rs.served));
  if (pid < 0) {
    spdlog::error("rank {} worker {}: fork failed: {}", rs.rank, w.worker, std::strerror(errno));
    return;
  }
  w.pid = pid;
  w.started_ns = shm::monotonic_ns();
}

void Supervisor::on_sigchld() {
  for (;;) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) break;
    if (stop_if_dataset_shrank(status)) {
      for (WorkerSlot& w : workers_)
        if (w.pid == pid) w.pid = -1, w.last_exit = describe_exit(status);
      continue;
    }
    if (record_check_ && !stopping_) {
      std::vector<std::string> isolated;
      auto fork_fn = [this](const std::function<void()>& child) { return fork_child(child); };
      if (record_check_->on_exit(pid, status, fork_fn, isolated)) {
        for (const std::string& r : isolated) spdlog::error("{}", r);
        if (record_check_->done()) record_check_done();
        continue;
      }
    }
    if (cache_build_ && !stopping_) {
      std::vector<std::string> isolated;
      auto fork_fn = [this](const std::function<void()>& child) { return fork_child(child); };
      if (cache_build_->on_exit(pid, status, fork_fn, isolated)) {
        for (std::string& r : isolated) {
          spdlog::error("{}", r);
          poison_reports_.push_back(std::move(r));
        }
        if (cache_build_->done()) cache_ready();
        else yield_builders();  // a builder restarted beside serving workers
        continue;
      }
    }
    for (WorkerSlot& w : workers_)
      if (w.pid == pid) on_worker_exit(w, status);
  }
  if (stopping_) {
    bool any = false;
    for (const WorkerSlot& w : workers_) any |= w.pid > 0;
    if (!any && !cache_build_) finish_shutdown();
  }
}

bool Supervisor::stop_if_dataset_shrank(int status) {
  if (stopping_ || !data_ || !WIFSIGNALED(status) || WTERMSIG(status) != SIGBUS) return false;
  // Every record past the new end would crash a worker: restarting them, or
  // isolating records one by one, cannot help.
  std::string why = data_->shrunk();
  if (why.empty()) return false;
  spdlog::error("{}", why);
  sd_notifyf(0, "STATUS=error: %s", why.c_str());
  poison_reports_.push_back(why);
  exit_code_ = 1;
  begin_shutdown("a dataset file shrank while it was served");
  return true;
}

void Supervisor::on_worker_exit(WorkerSlot& w, int status) {
  uint64_t died_ns = shm::monotonic_ns();
  RankSlot& rs = ranks_[w.rank_index];
  shm::RingHeader& r = ring(rs.ring_base + w.worker);
  w.pid = -1;
  w.last_exit = describe_exit(status);
  if (stopping_) return;
  // The worker published which record it was encoding; a record that keeps
  // killing workers is isolated so the stream can go on (deterministically:
  // the same record crashes every time).
  // Only a death the record can cause counts against it: a kill from outside
  // (SIGKILL, SIGTERM, SIGINT: an operator, a test, the OOM killer) hits
  // whatever was being built, and must not get a good record skipped.
  uint64_t rec = r.building_record.load(std::memory_order_relaxed);
  bool external =
      WIFSIGNALED(status) && (WTERMSIG(status) == SIGKILL || WTERMSIG(status) == SIGTERM || WTERMSIG(status) == SIGINT);
  std::string where;
  if (rec > 0 && rec - 1 < data_->size()) {
    uint64_t v = rec - 1;
    where = " while encoding " + data_->where(v);
    if (!external && ++crashes_[v] >= cfg_.workers.max_crashes && poisoned_.insert(v).second) {
      std::string report =
          fmt::format("{}: record crashed a worker {} times; skipping it", data_->where(v), crashes_[v]);
      spdlog::error("{}", report);
      poison_reports_.push_back(report);
    }
  }
  spdlog::warn("rank {} worker {} (pid {}) {}{}; restarting it", rs.rank, w.worker,
               r.producer_pid.load(std::memory_order_relaxed), w.last_exit, where);
  ++w.restarts;
  spawn(w);
  w.last_restart_ms = (shm::monotonic_ns() - died_ns) / 1'000'000;
}

// Objects fetched footer first arrive while the workers serve their groups
// (workers wait for a group until it is whole). A fetch that fails stops the
// daemon: what it had not fetched cannot be served.
void Supervisor::follow_objects() {
  if (!data_ || stopping_ || !data_->objects_pending()) return;
  std::string why = data_->poll_objects();
  if (why.empty()) return;
  spdlog::error("{}", why);
  sd_notifyf(0, "STATUS=error: %s", why.c_str());
  poison_reports_.push_back(why);
  exit_code_ = 1;
  begin_shutdown("an object of the dataset cannot be fetched");
}

void Supervisor::heartbeat() {
  auto* h = data_seg_.at<shm::SegmentHeader>(0);
  uint64_t now = shm::monotonic_ns();
  // The only word the supervisor writes once the workers run.
  h->heartbeat_ns.store(now, std::memory_order_relaxed);
  if (now - last_rates_.t_ns >= 1'000'000'000ULL) {
    prev_rates_ = last_rates_;
    last_rates_ = {now, 0, 0, 0};
    for (std::size_t i = 0; i < workers_.size(); ++i) {
      last_rates_.samples += ring(i).samples.load(std::memory_order_relaxed);
      last_rates_.tokens += ring(i).tokens.load(std::memory_order_relaxed);
      last_rates_.real_tokens += ring(i).real_tokens.load(std::memory_order_relaxed);
    }
    sd_notify(0, ("STATUS=" + summary_line()).c_str());
    if (cache_build_) spdlog::info("{}", cache_line());
    if (phase_ == Phase::kIndexing && now - start_ns_ >= 1'000'000'000ULL) spdlog::info("{}", index_line());
  }
  follow_objects();
  if (stopping_) return;
  beat_.expires_after(std::chrono::milliseconds(cfg_.server.heartbeat_ms));
  beat_.async_wait([this](boost::system::error_code ec) {
    if (!ec) heartbeat();
  });
}

int Supervisor::run() {
  signals_.add(SIGTERM);
  signals_.add(SIGINT);
  signals_.async_wait([this](boost::system::error_code ec, int sig) {
    if (!ec) begin_shutdown(sig == SIGTERM ? "SIGTERM" : "SIGINT");
  });
  ::signal(SIGPIPE, SIG_IGN);
  sigchld_.add(SIGCHLD);
  std::function<void(boost::system::error_code, int)> on_child = [this, &on_child](boost::system::error_code ec, int) {
    if (ec) return;
    on_sigchld();
    if (!stopping_ || !workers_.empty()) sigchld_.async_wait(on_child);
  };
  sigchld_.async_wait(on_child);

  if (!cfg_.server.metrics_listen.empty()) {
    // Bound before the workers fork (they close every inherited descriptor),
    // so a taken port is a start-up error with nothing left running.
    metrics_ = std::make_unique<MetricsHttpServer>(io_, cfg_.server.metrics_host, cfg_.server.metrics_port, [this] {
      std::string payload = status_payload();
      msgpack::object_handle h = msgpack::unpack(payload.data(), payload.size());
      return prometheus_text(h.get());
    });
    spdlog::info("metrics: serving http://{}/metrics", metrics_->endpoint());
  }
  server_ = std::make_unique<ControlServer>(io_, cfg_.server.socket, *this,
                                            Access{cfg_.server.allow_uids, cfg_.server.allow_gids});
  heartbeat();
  // Ready once the socket answers: status shows the token cache's progress.
  sd_notify(0, "READY=1");
  start_indexing();
  io_.run();
  // A stop does not wait long for the index: renders and shards stop at
  // their next step or record, but one record's parsing can take a while.
  // Past the grace period the process ends without it (nothing is left:
  // the socket is gone, the segments are anonymous, the builders are dead).
  for (int i = 0; i < 100 && index_thread_.joinable() && !index_done_.load(std::memory_order_acquire); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (index_thread_.joinable() && !index_done_.load(std::memory_order_acquire)) {
    spdlog::warn("indexing has not stopped 1 s after the shutdown; exiting without it");
    spdlog::default_logger()->flush();
    ::_exit(exit_code_);
  }
  return exit_code_;
}

void Supervisor::begin_shutdown(const char* why) {
  if (stopping_) return;
  stopping_ = true;
  spdlog::info("shutting down ({})", why);
  sd_notify(0, "STOPPING=1");
  if (server_) server_->close();
  if (metrics_) metrics_->close();
  beat_.cancel();
  cache_timer_.cancel();
  index_timer_.cancel();
  index_progress_.cancel.store(true, std::memory_order_relaxed);
  tmpl::cancel_renders();  // a render in the index does not hold the shutdown up
  signals_.cancel();
  if (record_check_) record_check_.reset();  // kills the checking children
  if (cache_build_) cache_build_.reset();    // kills the builders and removes their parts
  bool any = false;
  for (WorkerSlot& w : workers_) {
    if (w.pid > 0) {
      ::kill(w.pid, SIGKILL);  // workers hold no state worth flushing
      any = true;
    }
  }
  if (!any) finish_shutdown();
}

void Supervisor::finish_shutdown() {
  sigchld_.cancel();
  // Rings and consumer segments are anonymous: unmapping them here (and the
  // clients unmapping theirs) frees them; nothing is left in shm_dir.
  server_.reset();
  io_.stop();
}

void Supervisor::closed(const Peer& peer) {
  for (RankSlot& rs : ranks_) {
    if (rs.client && rs.client->id == peer.id) {
      auto* c = rs.consumer.at<shm::ConsumerHeader>(0);
      spdlog::info("rank {}{}: client pid {} detached at batch {}", rs.rank, rs.eval ? " eval" : "", peer.pid,
                   c->next_index.load(std::memory_order_relaxed));
      rs.client.reset();
    }
  }
}

Reply Supervisor::handle(const Peer& peer, const msgpack::object& req) {
  proto::Op op{};
  if (std::string e = proto::decode_op(req, op); !e.empty())
    return {error_reply(e, proto::ErrorCode::kBadRequest), {}, false};
  switch (op) {
    case proto::Op::kStatus: return {status_payload(), {}, false};
    case proto::Op::kAttach: {
      proto::AttachRequest attach_req;
      if (std::string e = proto::AttachRequest::decode(req, attach_req); !e.empty())
        return {error_reply(e, proto::ErrorCode::kBadRequest), {}, true};
      return attach(peer, attach_req);
    }
    case proto::Op::kPing: return {proto::encode_ok(), {}, false};
    case proto::Op::kShutdown:
      spdlog::info("shutdown requested by pid {} uid {}", peer.pid, peer.uid);
      asio::post(io_, [this] { begin_shutdown("tokfeedctl shutdown"); });
      return {proto::encode_ok(), {}, true};
  }
  return {error_reply("unknown op", proto::ErrorCode::kBadRequest), {}, false};
}

}  // namespace tokfeed
