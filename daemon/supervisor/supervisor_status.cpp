// What `tokfeedctl status` shows: assembled from the supervisor's own state
// and the counters the workers and clients keep in shared memory (read as
// plain numbers, never trusted as offsets).
#include <fmt/format.h>
#include <unistd.h>

#include "supervisor/supervisor.hpp"
#include "tokfeed/proto/frame.hpp"
#include "tokfeed/shm/futex.hpp"

namespace tokfeed {

namespace {

using Packer = msgpack::packer<msgpack::sbuffer>;

template <class T>
void kv(Packer& pk, const char* key, const T& value) {
  pk.pack(key);
  pk.pack(value);
}

uint64_t load(const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); }

// "objects": the fetch of s3:// datasets' objects (all 0 without them).
void pack_objects(Packer& pk, const ObjectProgress& o) {
  pk.pack("objects");
  pk.pack_map(8);
  kv(pk, "objects_total", load(o.objects_total));
  kv(pk, "objects_done", load(o.objects_done));
  kv(pk, "objects_reused", load(o.objects_reused));
  kv(pk, "bytes_total", load(o.bytes_total));
  kv(pk, "bytes_done", load(o.bytes_done));
  kv(pk, "retries", load(o.retries));
  std::lock_guard lock(o.mu);
  kv(pk, "current", o.current);
  kv(pk, "last_retry", o.last_retry);
}

}  // namespace

std::string Supervisor::summary_line() {
  uint64_t dt = last_rates_.t_ns - prev_rates_.t_ns;
  double sps = dt && prev_rates_.t_ns ? (last_rates_.samples - prev_rates_.samples) * 1e9 / dt : 0;
  double tps = dt && prev_rates_.t_ns ? (last_rates_.real_tokens - prev_rates_.real_tokens) * 1e9 / dt : 0;
  std::size_t attached = 0;
  uint64_t restarts = 0;
  for (const RankSlot& rs : ranks_) attached += rs.client.has_value();
  for (const WorkerSlot& w : workers_) restarts += w.restarts;
  if (phase_ == Phase::kIndexing) return index_line();
  if (phase_ != Phase::kServing)
    return fmt::format("{} records ({} bad); {}", data_->size(), data_->bad().size(), cache_line());
  return fmt::format(
      "{} records ({} bad), {} workers ({} restarts), {}/{} {} attached, {:.0f} samples/s, "
      "{:.0f} tokens/s",
      data_->size(), data_->bad().size(), workers_.size(), restarts, attached, ranks_.size(),
      cfg_.eval.enabled() ? "rank streams (train and eval)" : "ranks", sps, tps);
}

// The "dataset" map: indexing progress, then what was indexed, in all and per
// dataset (docs/status.md).
void Supervisor::pack_dataset(msgpack::packer<msgpack::sbuffer>& pk) const {
  const IndexProgress& ip = index_progress_;
  pk.pack("dataset");
  pk.pack_map(16);
  kv(pk, "state", data_ ? "ready" : record_check_ ? "checking" : "indexing");
  pk.pack("index");
  pk.pack_map(7);
  uint64_t done = ip.bytes_done.load(std::memory_order_relaxed), total = ip.bytes_total.load(std::memory_order_relaxed);
  double seconds = data_ ? data_->index_seconds() : (shm::monotonic_ns() - start_ns_) / 1e9;
  double rate = seconds > 0 ? done / seconds : 0;
  kv(pk, "bytes_done", done);
  kv(pk, "bytes_total", total);
  kv(pk, "shards_done", ip.shards_done.load(std::memory_order_relaxed));
  kv(pk, "shards_total", ip.shards_total.load(std::memory_order_relaxed));
  kv(pk, "records", ip.records.load(std::memory_order_relaxed));
  kv(pk, "seconds", seconds);
  kv(pk, "eta_s", !data_ && rate > 0 && total > done ? (total - done) / rate : 0.0);
  std::string path;
  for (const DatasetConfig& d : cfg_.datasets) path += (path.empty() ? "" : ", ") + d.path;
  kv(pk, "path", path);
  kv(pk, "bytes", data_ ? data_->file_bytes() : uint64_t{0});
  kv(pk, "records", data_ ? data_->records_total() : uint64_t{0});
  kv(pk, "valid", data_ ? data_->size() : uint64_t{0});
  kv(pk, "bad", data_ ? data_->bad().size() : std::size_t{0});
  kv(pk, "samples_per_epoch", data_ ? data_->mixture().per_epoch() : uint64_t{0});
  kv(pk, "eval_samples", data_ ? data_->eval_mixture().per_epoch() : uint64_t{0});
  pk.pack("datasets");
  pk.pack_array(data_ ? static_cast<uint32_t>(data_->datasets().size()) : 0u);
  if (data_) {
    for (const DatasetInfo& d : data_->datasets()) {
      pk.pack_map(10);
      kv(pk, "name", d.name);
      kv(pk, "split",
         &d - data_->datasets().data() < static_cast<std::ptrdiff_t>(cfg_.train_datasets) ? "train" : "eval");
      kv(pk, "held_out", d.held_out);
      kv(pk, "shards", d.shards);
      kv(pk, "bytes", d.bytes);
      kv(pk, "records", d.records);
      kv(pk, "valid", d.valid);
      kv(pk, "bad", d.bad);
      kv(pk, "samples_per_epoch", d.samples);
      kv(pk, "shards_indexed", d.indexed);
    }
  }
  pk.pack("bad_records");
  std::size_t shown = data_ ? std::min<std::size_t>(data_->bad().size(), 20) : 0;
  pk.pack_array(static_cast<uint32_t>(shown));
  for (std::size_t i = 0; i < shown; ++i) {
    const BadRecord& b = data_->bad()[i];
    pk.pack(fmt::format("{}:{}: {}", b.file, b.line, b.reason));
  }
  pk.pack("poisoned");
  pk.pack(poison_reports_);
  kv(pk, "too_long", too_long_);
  kv(pk, "untrained", untrained_);
  kv(pk, "bad_when_read", bad_when_read_);
  pack_objects(pk, ip.objects);
}

std::string Supervisor::status_payload() {
  msgpack::sbuffer buf;
  Packer pk(buf);
  pk.pack_map(8);
  kv(pk, "v", proto::kVersion);
  kv(pk, "ok", true);

  pk.pack("cache");
  pk.pack_map(14);
  const char* state = !cfg_.cache.enabled           ? "off"
                      : phase_ == Phase::kCacheWait ? "waiting"
                      : cache_build_                ? "building"
                      : cache_hit_                  ? "reused"
                                                    : "built";
  CacheProgress cp = cache_build_ ? cache_build_->progress() : CacheProgress{};
  if (store_) cp.done = cp.total = store_->size();
  kv(pk, "state", state);
  // "" until the key is known (the datasets indexed and checked).
  const bool keyed = cache_key_.hi || cache_key_.lo;
  kv(pk, "path", cfg_.cache.enabled && keyed ? store_path(cfg_.cache.dir, cache_key_, "idx") : std::string());
  kv(pk, "records_done", cp.done);
  kv(pk, "records_total", cache_build_ ? cp.total : data_ ? data_->size() : uint64_t{0});
  kv(pk, "records_kept", cp.kept);
  // Workers held back: all of them before serving starts, or those a
  // growing plan keeps waiting for records the builders have not reached.
  const uint32_t waiting = grows_ && cache_build_ ? cache_build_->facts().waiting() : 0;
  kv(pk, "workers_wait", (cache_build_ != nullptr && phase_ != Phase::kServing) || waiting > 0);
  kv(pk, "workers_waiting", uint64_t{waiting});
  kv(pk, "plan_order", cache_build_ != nullptr && grows_);
  // Records whose facts workers found themselves, ahead of the builders.
  kv(pk, "records_found", grows_ && cache_build_ ? cache_build_->facts().found_total() : uint64_t{0});
  kv(pk, "rate", cp.rate());
  kv(pk, "eta_s", cp.eta());
  kv(pk, "seconds", cache_build_ ? cp.seconds : cache_seconds_);
  kv(pk, "tokens", store_ ? store_->tokens() : uint64_t{0});
  kv(pk, "summary", cache_line());

  pk.pack("daemon");
  pk.pack_map(6);
  kv(pk, "pid", static_cast<int64_t>(getpid()));
  kv(pk, "uptime_s", (shm::monotonic_ns() - start_ns_) / 1e9);
  kv(pk, "config_file", cfg_.file);
  kv(pk, "socket", cfg_.server.socket);
  kv(pk, "config", describe(cfg_));
  kv(pk, "metrics_listen", metrics_ ? metrics_->endpoint() : std::string());

  pack_dataset(pk);

  pk.pack("workers");
  pk.pack_array(static_cast<uint32_t>(workers_.size()));
  uint64_t batches = 0, samples = 0, tokens = 0, real = 0, truncated = 0, dropped = 0, masked = 0;
  for (std::size_t i = 0; i < workers_.size(); ++i) {
    const WorkerSlot& w = workers_[i];
    const shm::RingHeader& r = ring(i);
    // The plan's end, not end_seq: a plan grown while the cache built
    // leaves its rings' end_seq open, and knows its end once it is built.
    bool done = r.head.load(std::memory_order_relaxed) >= ring_end(ranks_[w.rank_index], w.worker);
    bool building = r.building_index.load(std::memory_order_relaxed) != 0;
    const ProcCpu cpu = read_proc_cpu(w.pid);
    pk.pack_map(14);
    kv(pk, "rank", ranks_[w.rank_index].rank);
    kv(pk, "split", ranks_[w.rank_index].eval ? "eval" : "train");
    kv(pk, "worker", w.worker);
    kv(pk, "pid", static_cast<int64_t>(w.pid));
    // An evaluation stream's workers wait unforked for the build's end.
    const bool unplanned = !ranks_[w.rank_index].schedule;
    kv(pk, "state",
       unplanned    ? "waiting"
       : w.pid <= 0 ? "restarting"
       : done       ? "done"
       : building   ? "building"
                    : "waiting");
    kv(pk, "batches", load(r.batches));
    kv(pk, "restarts", w.restarts);
    kv(pk, "last_restart_ms", w.last_restart_ms);
    kv(pk, "last_exit", w.last_exit);
    kv(pk, "generation", r.generation.load(std::memory_order_relaxed));
    kv(pk, "cpu_s", cpu.cpu_s);
    kv(pk, "cpus", cpu.cpus);
    kv(pk, "nice", static_cast<int64_t>(cpu.nice));
    kv(pk, "policy", cpu.policy);
    batches += load(r.batches), samples += load(r.samples), tokens += load(r.tokens);
    real += load(r.real_tokens), truncated += load(r.truncated), dropped += load(r.dropped);
    masked += load(r.all_masked);
  }

  pk.pack("ranks");
  pk.pack_array(static_cast<uint32_t>(ranks_.size()));
  for (uint32_t ri = 0; ri < ranks_.size(); ++ri) {
    const RankSlot& rs = ranks_[ri];
    const uint32_t W = rs.workers;
    const auto* ch = rs.consumer.at<shm::ConsumerHeader>(0);
    uint64_t fill = 0;
    for (uint32_t w = 0; w < W; ++w) {
      const shm::RingHeader& r = ring(rs.ring_base + w);
      const auto* line = rs.consumer.at<shm::ConsumerLine>(ch->lines_offset + w * sizeof(shm::ConsumerLine));
      uint64_t head = r.head.load(std::memory_order_relaxed), tail = line->tail.load(std::memory_order_relaxed);
      bool same = r.session.load(std::memory_order_relaxed) == line->session.load(std::memory_order_relaxed);
      if (same && head >= tail) fill += std::min<uint64_t>(head - tail, cfg_.workers.slots);
    }
    uint64_t next = load(ch->next_index);
    // Of the evaluation stream: epoch is the pass, epochs 0 (passes repeat).
    uint64_t epoch = 0, step = 0, bpe = 0, epochs = rs.eval ? 0 : cfg_.schedule.epochs;
    StreamStart start;
    if (const Schedule* s = rs.schedule.get()) {
      start = s->start();
      if (next < s->total_batches()) s->locate(next, epoch, step);
      else epoch = epochs;
      if (s->passes()) bpe = s->epoch_batches()[0];
      else if (epoch >= start.epoch && epoch - start.epoch < s->epoch_batches().size())
        bpe = s->epoch_batches()[epoch - start.epoch];
    }
    uint64_t wait = load(ch->wait_ns), busy = load(ch->busy_ns);
    pk.pack_map(17);
    kv(pk, "rank", rs.rank);
    kv(pk, "split", rs.eval ? "eval" : "train");
    kv(pk, "attached", rs.client.has_value());
    kv(pk, "client_pid", rs.client ? static_cast<int64_t>(rs.client->pid) : int64_t{0});
    kv(pk, "ring_fill", fill);
    kv(pk, "ring_capacity", uint64_t{W} * cfg_.workers.slots);
    kv(pk, "epoch", epoch);
    kv(pk, "step", step);
    kv(pk, "batches_per_epoch", bpe);  // of the current epoch: packing varies it; 0 while unknown
    kv(pk, "counts_known", rs.schedule && !rs.schedule->growing());
    kv(pk, "epochs", epochs);
    kv(pk, "start_epoch", start.epoch);
    kv(pk, "start_base", start.base);
    kv(pk, "consumed", load(ch->consumed));
    kv(pk, "stall_fraction", wait + busy ? double(wait) / double(wait + busy) : 0.0);
    kv(pk, "wait_s", wait / 1e9);
    pk.pack("wait_hist");  // next() waits: <1us <10us ... <100s, more
    pk.pack_array(10);
    for (const auto& bucket : ch->wait_hist) pk.pack(bucket.load(std::memory_order_relaxed));
  }

  uint64_t dt = last_rates_.t_ns - prev_rates_.t_ns;
  bool have = dt && prev_rates_.t_ns;
  pk.pack("throughput");
  pk.pack_map(11);
  kv(pk, "samples_per_s", have ? (last_rates_.samples - prev_rates_.samples) * 1e9 / dt : 0.0);
  kv(pk, "tokens_per_s", have ? (last_rates_.tokens - prev_rates_.tokens) * 1e9 / dt : 0.0);
  kv(pk, "real_tokens_per_s", have ? (last_rates_.real_tokens - prev_rates_.real_tokens) * 1e9 / dt : 0.0);
  kv(pk, "pad_fraction", tokens ? 1.0 - double(real) / double(tokens) : 0.0);
  kv(pk, "batches", batches);
  kv(pk, "samples", samples);
  kv(pk, "tokens", tokens);
  kv(pk, "real_tokens", real);
  kv(pk, "truncated", truncated);
  kv(pk, "dropped", dropped);
  kv(pk, "all_masked", masked);
  return std::string(buf.data(), buf.size());
}

}  // namespace tokfeed
