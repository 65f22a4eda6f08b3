// The supervisor's start-up phases before serving: the datasets are indexed
// (on a thread, while the control socket answers), then the token cache is
// reused or built by forked builders. Nothing here forks while the index
// thread runs.
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "supervisor/supervisor.hpp"

#include "cache/cache_trim.hpp"
#include "tokfeed/shm/futex.hpp"

namespace tokfeed {

// ------------------------------------------------------------ dataset index

// The datasets are indexed on a thread while the control socket already
// answers (status shows the progress); the thread is joined before anything
// forks.
void Supervisor::start_indexing() {
  phase_ = Phase::kIndexing;
  index_thread_ = std::thread([this] {
    try {
      indexed_ = std::make_unique<Dataset>(cfg_, &index_progress_);
    } catch (...) {
      index_error_ = std::current_exception();
    }
    index_done_.store(true, std::memory_order_release);
  });
  poll_indexing();
}

void Supervisor::poll_indexing() {
  if (!index_done_.load(std::memory_order_acquire)) {
    index_timer_.expires_after(std::chrono::milliseconds(50));
    index_timer_.async_wait([this](boost::system::error_code ec) {
      if (!ec) poll_indexing();
    });
    return;
  }
  index_thread_.join();
  if (stopping_) return;
  if (index_error_) {
    fail_start(index_error_);
    return;
  }
  if (indexed_->pending()) {
    start_record_check();
    return;
  }
  dataset_ready();
}

// As main() reports every other start-up error.
void Supervisor::fail_start(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    sd_notifyf(0, "STATUS=error: %s", e.what());
  }
  exit_code_ = 1;
  begin_shutdown("the dataset cannot be served");
}

// The records a template renders are judged in forked children (the index
// thread has been joined: forking is safe), as many as the cache builders.
void Supervisor::start_record_check() {
  const uint32_t children = static_cast<uint32_t>(cfg_.workers.count * cfg_.ranks.serve.size());
  record_check_ = std::make_unique<RecordCheck>(*indexed_, children, cfg_.workers.max_crashes, crash_on_line_);
  spdlog::info("datasets read; rendering {} records in forked children to check them", record_check_->total());
  record_check_->start([this](const std::function<void()>& child) { return fork_child(child); });
  if (record_check_->done()) record_check_done();
}

void Supervisor::record_check_done() {
  const uint64_t bad = record_check_->bad().size(), total = record_check_->total();
  const double seconds = record_check_->seconds();
  try {
    indexed_->apply_verdicts(cfg_, record_check_->bad());
  } catch (...) {
    record_check_.reset();
    fail_start(std::current_exception());
    return;
  }
  record_check_.reset();
  spdlog::info("{} rendered records checked in {:.2f} s in forked children: {} bad", total, seconds, bad);
  dataset_ready();
}

void Supervisor::dataset_ready() {
  data_ = std::move(indexed_);
  for (const BadRecord& b : data_->bad()) spdlog::warn("{}:{}: bad record skipped: {}", b.file, b.line, b.reason);
  for (const DatasetInfo& d : data_->datasets())
    spdlog::info(
        "dataset {}: {} shard(s), {} records, {} valid, {} bad, {} samples per epoch ({} shard(s) indexed, "
        "the others from the index cache)",
        d.name, d.shards, d.records, d.valid, d.bad, d.samples, d.indexed);
  spdlog::info("datasets indexed in {:.2f} s: {} valid records, {} samples per epoch", data_->index_seconds(),
               data_->size(), data_->mixture().per_epoch());
  prepare_cache();
}

std::string Supervisor::index_line() const {
  if (record_check_) {
    const uint64_t done = record_check_->checked(), total = record_check_->total();
    const double seconds = record_check_->seconds(), rate = seconds > 0 ? done / seconds : 0;
    return fmt::format(
        "checking records: {}/{} rendered in forked children ({:.1f}%), {} bad so far, {:.0f} records/s, ETA {:.0f} s",
        done, total, total ? 100.0 * done / total : 100.0, record_check_->bad().size(), rate,
        rate > 0 ? (total - done) / rate : 0);
  }
  const IndexProgress& p = index_progress_;
  if (std::string f = fetch_line(p.objects); !f.empty()) return f;  // s3:// objects come first
  double seconds = (shm::monotonic_ns() - start_ns_) / 1e9;
  uint64_t done = p.bytes_done.load(std::memory_order_relaxed), total = p.bytes_total.load(std::memory_order_relaxed);
  double rate = seconds > 0 ? done / seconds : 0;
  double eta = rate > 0 && total > done ? (total - done) / rate : 0;
  return fmt::format(
      "indexing datasets: shard {}/{}, {:.1f}/{:.1f} MB ({:.1f}%), {} records, {:.0f} MB/s, ETA {:.0f} s",
      p.shards_done.load(std::memory_order_relaxed), p.shards_total.load(std::memory_order_relaxed), done / 1e6,
      total / 1e6, total ? 100.0 * done / total : 100.0, p.records.load(std::memory_order_relaxed), rate / 1e6, eta);
}

// ------------------------------------------------------------ token cache

void Supervisor::prepare_cache() {
  if (!cfg_.cache.enabled) {
    // Batches leave out samples by facts known only once they are tokenized
    // (truncation = "drop", no trained token): the plan needs every record's
    // before the first batch, so a facts-only build finds them. With
    // keep_untrained and right or left truncation nothing is left out and
    // the first batch waits for nothing.
    if (cfg_.batch.leaves_samples_out() || data_->jsonl_checked_when_read()) {
      spdlog::info(
          "token cache off: tokenizing every record once for the lengths and flags the plan needs "
          "(truncation = \"{}\", keep_untrained = {}{}); tokens are not kept",
          truncation_name(cfg_.batch.truncation), cfg_.batch.keep_untrained,
          data_->jsonl_checked_when_read() ? ", records checked when read" : "");
      phase_ = Phase::kCacheBuild;
      uint32_t parts = static_cast<uint32_t>(cfg_.workers.count * cfg_.ranks.serve.size());
      build_order_ = build_order(cfg_, data_->mixture(), data_->size());
      cache_build_ =
          std::make_unique<CacheBuild>(cfg_, *data_, *tok_, CacheKey{}, parts, crash_on_line_, true, build_order_);
      cache_build_->start([this](const std::function<void()>& child) { return fork_child(child); });
      if (cache_build_->done()) cache_ready();
      else if (grows_while_building()) serve_growing("the cache is off");
      return;
    }
    start_serving();
    return;
  }
  uint64_t t0 = shm::monotonic_ns();
  cache_key_ = cache_key(cfg_, *data_);
  std::error_code ec;
  std::filesystem::create_directories(cfg_.cache.dir, ec);
  if (ec)
    throw std::runtime_error(
        fmt::format("[cache] dir {}: cannot create it: {}; set [cache] dir to a writable "
                    "directory",
                    cfg_.cache.dir, ec.message()));
  hold_store();
  std::string why;
  store_ = TokenStore::open(cfg_.cache.dir, cache_key_, data_->size(), why);
  if (store_) {
    cache_hit_ = true;
    cache_seconds_ = (shm::monotonic_ns() - t0) / 1e9;
    spdlog::info("token cache: {} ({} tokens), reused in {:.3f} s", store_->path(), store_->tokens(), cache_seconds_);
    trim_cache_dir();
    start_serving();
    return;
  }
  spdlog::info("token cache: {} ({}): building it", store_path(cfg_.cache.dir, cache_key_, "idx"), why);
  std::string lock = store_path(cfg_.cache.dir, cache_key_, "lock");
  cache_lock_fd_ = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0660);  // the umask decides: 0600 or 0660
  if (cache_lock_fd_ < 0)
    throw std::runtime_error(
        fmt::format("{}: cannot create the cache lock: {}; set [cache] dir to a writable "
                    "directory",
                    lock, std::strerror(errno)));
  try_cache_lock();
}

// Daemons that share a key build it once: the one holding the lock builds,
// the others wait for it and then map what it built.
void Supervisor::try_cache_lock() {
  if (::flock(cache_lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    if (phase_ != Phase::kCacheWait || cache_log_ns_ == 0) {
      spdlog::info("token cache: another tokfeedd is building {}; waiting for it",
                   store_path(cfg_.cache.dir, cache_key_, "idx"));
      cache_log_ns_ = shm::monotonic_ns();
    }
    cache_timer_.expires_after(std::chrono::milliseconds(200));
    cache_timer_.async_wait([this](boost::system::error_code ec) {
      if (!ec && !stopping_) try_cache_lock();
    });
    return;
  }
  std::string why;
  if ((store_ = TokenStore::open(cfg_.cache.dir, cache_key_, data_->size(), why))) {
    cache_hit_ = true;
    spdlog::info("token cache: {} was built by another tokfeedd; using it", store_->path());
    cache_ready();
    return;
  }
  // Under the lock no one else builds this key: temporary files of it, and
  // parts cut for another number of builders, are left by a daemon that
  // stopped while building. Parts cut as this build cuts them are kept.
  uint32_t parts = static_cast<uint32_t>(cfg_.workers.count * cfg_.ranks.serve.size());
  parts = static_cast<uint32_t>(std::max<uint64_t>(1, std::min<uint64_t>(parts, data_->size())));
  build_order_ = build_order(cfg_, data_->mixture(), data_->size());
  std::error_code ec;
  const std::string prefix = cache_key_.hex() + ".";
  const std::string ours = std::filesystem::path(CacheBuild::part_prefix(cfg_.cache.dir, cache_key_, parts,
                                                                         CacheBuild::order_hash(build_order_)))
                               .filename()
                               .string();
  for (const auto& e : std::filesystem::directory_iterator(cfg_.cache.dir, ec)) {
    std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    const bool part = name.ends_with(".part") || name.ends_with(".facts");
    if (name.find(".tmp.") != std::string::npos || (part && name.rfind(ours, 0) != 0)) {
      spdlog::info("token cache: removing {} left by an interrupted build", e.path().string());
      std::filesystem::remove(e.path(), ec);
    }
  }
  phase_ = Phase::kCacheBuild;
  cache_build_ =
      std::make_unique<CacheBuild>(cfg_, *data_, *tok_, cache_key_, parts, crash_on_line_, false, build_order_);
  if (uint64_t kept = cache_build_->progress().kept)
    spdlog::info("token cache: {} of {} records kept from an interrupted build; building the rest", kept,
                 data_->size());
  cache_build_->start([this](const std::function<void()>& child) { return fork_child(child); });
  if (cache_build_->done()) {
    cache_ready();
  } else if (grows_while_building()) {
    serve_growing("the token cache builds");
  } else if (serves_while_building()) {
    // Nothing is left out of the plan and nothing packed: the plan needs no
    // facts, so workers serve now, tokenizing their batches' records, while
    // the builders fill the cache for later starts.
    spdlog::info(
        "token cache: serving while it builds (the plan needs no token counts: padding = \"{}\", "
        "keep_untrained = true, truncation = \"{}\")",
        padding_name(cfg_.batch.padding), truncation_name(cfg_.batch.truncation));
    start_serving();
    yield_builders();
  }
}

// The builders take the records in the first epoch's plan order and publish
// each one's facts as they write it: workers serve the batches whose rows
// the records built so far decide, reading their tokens from the part files
// (or, with the cache off, tokenizing them), while the builders run ahead.
void Supervisor::serve_growing(const char* why) {
  spdlog::info(
      "{}: serving while it builds, in the order the first epoch's plan takes the records; batch counts "
      "are known once every record is built",
      why);
  grows_ = true;
  start_serving();
}

void Supervisor::plan_grown_ranks() {
  if (!grows_) return;
  // Evaluation streams waited for every record's facts: planned and started now.
  bool deferred = false;
  for (uint32_t ri = 0; ri < ranks_.size(); ++ri)
    if (ranks_[ri].eval && !ranks_[ri].schedule && phase_ == Phase::kServing) {
      plan_rank(ri, {});
      deferred = true;
    }
  if (deferred) {
    for (WorkerSlot& w : workers_)
      if (ranks_[w.rank_index].eval && w.pid <= 0) spawn(w);
    log_eval();
  }
  for (uint32_t ri = 0; ri < ranks_.size(); ++ri) {
    RankSlot& rs = ranks_[ri];
    if (!rs.schedule || (rs.eval && deferred)) continue;
    // The same plan, now over the store's (or the table's) facts: a growing
    // one gets every count, the running workers finish theirs from the same
    // facts, so nothing is restarted, and the ring's end stays open (workers
    // stop at their plan's end). A plan made once every record was ready
    // but before the build was seen to end is remade too: it read the
    // build's facts, which go now.
    const bool was_growing = rs.schedule->growing();
    rs.schedule = std::make_unique<Schedule>(cfg_of(rs), mixture_of(rs), rs.rank, rs.schedule->start(), facts());
    if (!was_growing) continue;
    publish_counts(rs);
    spdlog::info("rank {}: batch counts known: {} per epoch", rs.rank, fmt::join(rs.schedule->epoch_batches(), ","));
  }
}

// While workers serve beside the build, the builders take what CPU the
// workers leave (nice 19): the batches a trainer waits for come first.
void Supervisor::yield_builders() {
  if (!cache_build_ || phase_ != Phase::kServing || grows_) return;
  for (pid_t pid : cache_build_->pids())
    if (::setpriority(PRIO_PROCESS, static_cast<id_t>(pid), 19) != 0)
      spdlog::warn("token cache builder {}: cannot lower its priority: {}", pid, std::strerror(errno));
}

void Supervisor::cache_ready() {
  if (cache_build_ && cache_build_->facts_only()) {
    CacheProgress pr = cache_build_->progress();
    cache_seconds_ = pr.seconds;
    log_found();
    facts_table_ = cache_build_->take_facts();
    plan_grown_ranks();  // before the build's facts go
    grows_ = false;
    cache_build_.reset();
    spdlog::info("sample facts: {} records tokenized in {:.2f} s, {:.0f} records/s", pr.total, pr.seconds, pr.rate());
    if (phase_ != Phase::kServing) start_serving();
    else count_left_out();
    return;
  }
  if (cache_build_) {
    cache_build_->publish();
    CacheProgress pr = cache_build_->progress();
    cache_seconds_ = pr.seconds;
    std::string why;
    store_ = TokenStore::open(cfg_.cache.dir, cache_key_, data_->size(), why);
    if (!store_) throw std::runtime_error("token cache: the store just built does not open: " + why);
    plan_grown_ranks();  // before the build's facts go
    log_found();
    grows_ = false;
    cache_build_.reset();
    spdlog::info("token cache: built {} ({} records, {} tokens) in {:.2f} s, {:.0f} records/s", store_->path(),
                 store_->size(), store_->tokens(), pr.seconds, pr.rate());
  }
  ::close(cache_lock_fd_);  // releases the lock
  cache_lock_fd_ = -1;
  trim_cache_dir();
  if (phase_ != Phase::kServing) start_serving();
  else count_left_out();  // served while it built: counted now that the facts are known
}

void Supervisor::log_eval() const {
  if (!cfg_.eval.enabled()) return;
  std::vector<uint64_t> pass;
  for (const RankSlot& rs : ranks_)
    if (rs.eval && rs.schedule) pass.push_back(rs.schedule->epoch_batches()[0]);
  if (pass.empty()) {
    spdlog::info("evaluation stream: served once the token cache is built (its passes need every record's facts)");
    return;
  }
  spdlog::info("evaluation stream: {} samples per pass, {} batches per pass on ranks {} ({} workers each)",
               data_->eval_mixture().per_epoch(), fmt::join(pass, ","), fmt::join(cfg_.ranks.serve, ","),
               cfg_.eval.workers);
}

void Supervisor::log_found() const {
  if (const uint64_t found = grows_ && cache_build_ ? cache_build_->facts().found_total() : 0)
    spdlog::info(
        "{} of {} records were tokenized first by the workers whose batches waited for them, ahead of the builders "
        "({} of them copied into the cache from the workers' hand-off files)",
        found, cache_build_->facts().size(), cache_build_->handed());
}

void Supervisor::hold_store() {
  std::string use = store_path(cfg_.cache.dir, cache_key_, "use");
  for (int attempt = 0; attempt < 10; ++attempt) {
    store_use_fd_ = ::open(use.c_str(), O_RDONLY | O_CREAT | O_CLOEXEC, 0644);  // flock needs no write access
    // A trim holds it exclusively only while it removes the store.
    if (store_use_fd_ < 0 || ::flock(store_use_fd_, LOCK_SH) != 0) break;
    // A trim that removed the file while this waited leaves the lock on a
    // file no one else can open: take it again on the new one.
    struct stat held, now;
    if (::fstat(store_use_fd_, &held) == 0 && ::stat(use.c_str(), &now) == 0 && held.st_ino == now.st_ino &&
        held.st_dev == now.st_dev)
      return;
    ::close(store_use_fd_);
    store_use_fd_ = -1;
  }
  spdlog::warn("{}: cannot hold the store in use ({}): a cache trim by another daemon may remove it", use,
               std::strerror(errno));
}

void Supervisor::trim_cache_dir() {
  if (!cfg_.cache.max_bytes) return;
  std::vector<std::string> used = data_->cache_files(cfg_.cache.dir);
  for (const char* ext : {"idx", "bin", "lock", "use"}) used.push_back(store_path(cfg_.cache.dir, cache_key_, ext));
  mark_used(used);
  TrimReport r = trim_cache(cfg_.cache.dir, cfg_.cache.max_bytes, used);
  for (const std::string& e : r.removed) spdlog::info("cache trim: removed {}", e);
  if (!r.removed.empty() || r.bytes_after > cfg_.cache.max_bytes)
    spdlog::info(
        "cache trim: {} holds {} bytes ({} before; max_gb = {:g}){}", cfg_.cache.dir, r.bytes_after, r.bytes_before,
        cfg_.cache.max_bytes / 1e9,
        r.bytes_after > cfg_.cache.max_bytes
            ? fmt::format(": still over, what is left is in use ({} token store(s) held by other daemons)", r.in_use)
            : "");
}

std::string Supervisor::cache_line() const {
  if (!cfg_.cache.enabled && cache_build_) {
    CacheProgress p = cache_build_->progress();
    return fmt::format(
        "token cache off; finding sample facts: {}/{} records ({:.1f}%), {:.0f} records/s, ETA {:.0f} s{}", p.done,
        p.total, p.total ? 100.0 * p.done / p.total : 100.0, p.rate(), p.eta(),
        grows_ ? fmt::format("; workers serve the plan's prefix found so far ({} waiting)",
                             cache_build_->facts().waiting())
               : "");
  }
  if (!cfg_.cache.enabled) return facts_table_ ? "token cache off; sample facts found" : "token cache off";
  if (phase_ == Phase::kCacheWait) return "waiting for another daemon's token cache";
  if (cache_build_) {
    CacheProgress p = cache_build_->progress();
    return fmt::format("building token cache: {}/{} records ({:.1f}%{}), {:.0f} records/s, ETA {:.0f} s; {}", p.done,
                       p.total, p.total ? 100.0 * p.done / p.total : 100.0,
                       p.kept ? fmt::format(", {} kept from an interrupted build", p.kept) : "", p.rate(), p.eta(),
                       !grows_ && phase_ == Phase::kServing ? "workers serve meanwhile, tokenizing what they serve"
                       : grows_
                           ? fmt::format("built in plan order; workers serve the plan's built prefix, tokenizing what "
                                         "they need first themselves ({} records so far, {} waiting)",
                                         cache_build_->facts().found_total(), cache_build_->facts().waiting())
                           : std::string("workers start when it is built"));
  }
  if (!store_) return "token cache: opened once the datasets are indexed and checked";
  return fmt::format("token cache {} in {:.2f} s", cache_hit_ ? "reused" : "built", cache_seconds_);
}

}  // namespace tokfeed
