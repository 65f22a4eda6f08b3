// status and shutdown.
#include <fmt/format.h>

#include <cstdio>

#include "ctl.hpp"
#include "tokfeed/proto/frame.hpp"
#include "tokfeed/proto/messages.hpp"

namespace tokfeed::ctl {

namespace {

using proto::find;
using proto::get_int;
using proto::get_str;

double get_num(const msgpack::object& m, std::string_view key) { return proto::as_number(find(m, key)); }

std::string str(const msgpack::object& m, std::string_view key) { return std::string(get_str(m, key).value_or("")); }

// A worker's or rank's stream; a daemon that predates splits serves train.
std::string split_of(const msgpack::object& m) { return std::string(get_str(m, "split").value_or("train")); }

void print_table(const msgpack::object& s) {
  const msgpack::object empty;
  const msgpack::object& d = find(s, "daemon") ? *find(s, "daemon") : empty;
  fmt::print("daemon     pid {}  up {:.0f} s  config {}\n", get_int(d, "pid").value_or(0), get_num(d, "uptime_s"),
             str(d, "config_file"));
  const msgpack::object& ds = find(s, "dataset") ? *find(s, "dataset") : empty;
  const msgpack::object& ix = find(ds, "index") ? *find(ds, "index") : empty;
  const msgpack::object* ob = find(ds, "objects");
  const bool fetching = ob && !str(*ob, "current").empty();
  if (str(ds, "state") == "indexing" && fetching) {
    fmt::print("dataset    {}: fetching its objects (below), indexing each as it arrives\n", str(ds, "path"));
  } else if (str(ds, "state") == "indexing") {
    double done = get_num(ix, "bytes_done"), total = get_num(ix, "bytes_total");
    fmt::print("dataset    indexing: shard {}/{}  {:.1f}/{:.1f} MB ({:.1f}%)  {} records  ETA {:.0f} s\n",
               get_int(ix, "shards_done").value_or(0), get_int(ix, "shards_total").value_or(0), done / 1e6, total / 1e6,
               total > 0 ? 100 * done / total : 100.0, get_int(ix, "records").value_or(0), get_num(ix, "eta_s"));
  } else {
    fmt::print("dataset    {}  {} records, {} valid, {} bad, {} samples per epoch (indexed in {:.2f} s)\n",
               str(ds, "path"), get_int(ds, "records").value_or(0), get_int(ds, "valid").value_or(0),
               get_int(ds, "bad").value_or(0), get_int(ds, "samples_per_epoch").value_or(0), get_num(ix, "seconds"));
  }
  if (ob && get_int(*ob, "objects_total").value_or(0) > 0) {
    const int64_t n = get_int(*ob, "objects_total").value_or(0), done = get_int(*ob, "objects_done").value_or(0);
    fmt::print("objects    {} {}/{}  {:.1f}/{:.1f} MB  {} reused from the cache  {} retries{}\n",
               done < n ? "fetching" : "fetched", done, n, get_num(*ob, "bytes_done") / 1e6,
               get_num(*ob, "bytes_total") / 1e6, get_int(*ob, "objects_reused").value_or(0),
               get_int(*ob, "retries").value_or(0), str(*ob, "current").empty() ? "" : "  now " + str(*ob, "current"));
    if (std::string r = str(*ob, "last_retry"); !r.empty()) fmt::print("           last retry: {}\n", r);
  }
  if (const msgpack::object* list = find(ds, "datasets");
      list && list->type == msgpack::type::ARRAY &&
      (list->via.array.size > 1 || get_int(ds, "eval_samples").value_or(0) > 0)) {
    for (uint32_t i = 0; i < list->via.array.size; ++i) {
      const msgpack::object& e = list->via.array.ptr[i];
      const bool eval = str(e, "split") == "eval";
      const int64_t held = get_int(e, "held_out").value_or(0);
      fmt::print("  [{}]      {}  {} shard(s), {} valid, {} bad, {} samples per {}{}\n", i, str(e, "name"),
                 get_int(e, "shards").value_or(0), get_int(e, "valid").value_or(0), get_int(e, "bad").value_or(0),
                 get_int(e, "samples_per_epoch").value_or(0), eval ? "evaluation pass" : "epoch",
                 held ? fmt::format(", {} held out for evaluation", held) : "");
    }
  }
  for (const char* list : {"bad_records", "poisoned"}) {
    const msgpack::object* b = find(ds, list);
    if (b && b->type == msgpack::type::ARRAY)
      for (uint32_t i = 0; i < b->via.array.size; ++i)
        if (b->via.array.ptr[i].type == msgpack::type::STR)
          fmt::print("           {}\n", b->via.array.ptr[i].as<std::string>());
  }
  if (int64_t n = get_int(ds, "eval_samples").value_or(0))
    fmt::print("eval       {} samples per pass (held out and [[eval.datasets]])\n", n);
  if (const msgpack::object* c = find(s, "cache"))
    fmt::print("cache      {}  {}\n", str(*c, "summary"), str(*c, "path"));
  fmt::print("\n{:>5} {:>5} {:>6} {:>8} {:>10} {:>9} {:>8} {:>8} {:>5} {:>6}  {:<12} {}\n", "rank", "split", "worker",
             "pid", "state", "batches", "restarts", "cpu_s", "nice", "policy", "cpus", "last exit");
  if (const msgpack::object* ws = find(s, "workers"); ws && ws->type == msgpack::type::ARRAY) {
    for (uint32_t i = 0; i < ws->via.array.size; ++i) {
      const msgpack::object& w = ws->via.array.ptr[i];
      fmt::print("{:>5} {:>5} {:>6} {:>8} {:>10} {:>9} {:>8} {:>8.1f} {:>5} {:>6}  {:<12} {}\n",
                 get_int(w, "rank").value_or(0), split_of(w), get_int(w, "worker").value_or(0),
                 get_int(w, "pid").value_or(0), str(w, "state"), get_int(w, "batches").value_or(0),
                 get_int(w, "restarts").value_or(0), get_num(w, "cpu_s"), get_int(w, "nice").value_or(0),
                 str(w, "policy"), str(w, "cpus"), str(w, "last_exit"));
    }
  }
  // The evaluation stream's "epoch" is its pass; passes repeat, so no total.
  fmt::print("\n{:>5} {:>5} {:>9} {:>9} {:>7} {:>7} {:>9} {:>7}\n", "rank", "split", "attached", "ring", "epoch",
             "step", "consumed", "stall");
  if (const msgpack::object* rs = find(s, "ranks"); rs && rs->type == msgpack::type::ARRAY) {
    for (uint32_t i = 0; i < rs->via.array.size; ++i) {
      const msgpack::object& r = rs->via.array.ptr[i];
      std::string att = get_num(r, "attached") ? fmt::format("pid {}", get_int(r, "client_pid").value_or(0)) : "no";
      const bool eval = split_of(r) == "eval";
      fmt::print("{:>5} {:>5} {:>9} {:>9} {:>7} {:>7} {:>9} {:>6.1f}%\n", get_int(r, "rank").value_or(0), split_of(r),
                 att,
                 fmt::format("{}/{}", get_int(r, "ring_fill").value_or(0), get_int(r, "ring_capacity").value_or(0)),
                 eval ? fmt::format("pass {}", get_int(r, "epoch").value_or(0))
                      : fmt::format("{}/{}", get_int(r, "epoch").value_or(0), get_int(r, "epochs").value_or(0)),
                 fmt::format("{}/{}", get_int(r, "step").value_or(0), get_int(r, "batches_per_epoch").value_or(0)),
                 get_int(r, "consumed").value_or(0), 100 * get_num(r, "stall_fraction"));
    }
  }
  const msgpack::object& t = find(s, "throughput") ? *find(s, "throughput") : empty;
  fmt::print("\nthroughput {:.0f} samples/s  {:.0f} tokens/s  {:.0f} real tokens/s  pad {:.1f}%\n",
             get_num(t, "samples_per_s"), get_num(t, "tokens_per_s"), get_num(t, "real_tokens_per_s"),
             100 * get_num(t, "pad_fraction"));
  fmt::print("totals     {} batches  {} samples  {} tokens  {} truncated  {} dropped  {} all-masked\n",
             get_int(t, "batches").value_or(0), get_int(t, "samples").value_or(0), get_int(t, "tokens").value_or(0),
             get_int(t, "truncated").value_or(0), get_int(t, "dropped").value_or(0),
             get_int(t, "all_masked").value_or(0));
}

}  // namespace

void append_json_string(std::string& out, std::string_view s) {
  msgpack::zone z;
  msgpack::object o(s, z);
  out += proto::to_json(o);
}

int status(const std::string& socket, bool json) {
  msgpack::object_handle reply;
  std::string error;
  if (!proto::call(socket, proto::encode_frame(proto::encode_request(proto::Op::kStatus)), reply, error)) {
    std::fprintf(stderr, "tokfeedctl: status: %s\n", error.c_str());
    return 1;
  }
  if (json) std::printf("%s\n", proto::to_json(reply.get()).c_str());
  else print_table(reply.get());
  return 0;
}

int shutdown(const std::string& socket) {
  msgpack::object_handle reply;
  std::string error;
  if (!proto::call(socket, proto::encode_frame(proto::encode_request(proto::Op::kShutdown)), reply, error)) {
    std::fprintf(stderr, "tokfeedctl: shutdown: %s\n", error.c_str());
    return 1;
  }
  return 0;
}

}  // namespace tokfeed::ctl
