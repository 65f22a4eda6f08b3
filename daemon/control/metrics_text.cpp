#include "control/metrics_text.hpp"

#include <fmt/format.h>

#include <iterator>
#include <optional>
#include <string_view>

#include "tokfeed/proto/frame.hpp"

namespace tokfeed {

namespace {

double field(const msgpack::object& m, std::string_view a, std::string_view b = {}) {
  const msgpack::object* o = proto::find(m, a);
  if (o && !b.empty()) o = proto::find(*o, b);
  return proto::as_number(o);
}

template <class F>
void each(const msgpack::object& m, std::string_view list, F&& f) {
  const msgpack::object* o = proto::find(m, list);
  if (!o || o->type != msgpack::type::ARRAY) return;
  for (uint32_t i = 0; i < o->via.array.size; ++i) f(o->via.array.ptr[i]);
}

// A rank's labels: its number, and split="eval" for its evaluation stream
// (the training stream keeps the labels it always had).
std::string rank_labels(const msgpack::object& r) {
  std::optional<std::string_view> split = proto::get_str(r, "split");
  return fmt::format("rank=\"{:.0f}\"{}", field(r, "rank"), split && *split == "eval" ? ",split=\"eval\"" : "");
}

void metric(std::string& out, const char* name, const char* type, const char* help) {
  fmt::format_to(std::back_inserter(out), "# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

}  // namespace

std::string prometheus_text(const msgpack::object& s) {
  std::string out;
  struct Counter {
    const char* name;
    const char* help;
    double value;
  };
  double tokens = field(s, "throughput", "tokens"), real = field(s, "throughput", "real_tokens");
  double restarts = 0, alive = 0;
  each(s, "workers", [&](const msgpack::object& w) {
    restarts += field(w, "restarts");
    alive += field(w, "pid") > 0;
  });
  const Counter counters[] = {
      {"tokfeed_batches_total", "Batches built by the workers.", field(s, "throughput", "batches")},
      {"tokfeed_samples_total", "Samples (rows) built.", field(s, "throughput", "samples")},
      {"tokfeed_tokens_total", "Tokens built, padding included.", tokens},
      {"tokfeed_padding_tokens_total", "Padding tokens built.", tokens - real},
      {"tokfeed_bad_records_total", "Dataset records skipped as bad.", field(s, "dataset", "bad")},
      {"tokfeed_worker_restarts_total", "Worker processes restarted after dying.", restarts},
      {"tokfeed_truncated_samples_total", "Samples cut to max_length.", field(s, "throughput", "truncated")},
      {"tokfeed_dropped_samples_total", "Samples dropped as too long.", field(s, "throughput", "dropped")},
  };
  for (const Counter& c : counters) {
    metric(out, c.name, "counter", c.help);
    fmt::format_to(std::back_inserter(out), "{} {:.0f}\n", c.name, c.value);
  }
  metric(out, "tokfeed_workers_alive", "gauge", "Worker processes running.");
  fmt::format_to(std::back_inserter(out), "tokfeed_workers_alive {:.0f}\n", alive);
  double attached = 0;
  each(s, "ranks", [&](const msgpack::object& r) { attached += field(r, "attached"); });
  metric(out, "tokfeed_clients_attached", "gauge", "Trainer clients attached.");
  fmt::format_to(std::back_inserter(out), "tokfeed_clients_attached {:.0f}\n", attached);
  metric(out, "tokfeed_ring_fill", "gauge", "Batches ready in a rank's rings.");
  each(s, "ranks", [&](const msgpack::object& r) {
    fmt::format_to(std::back_inserter(out), "tokfeed_ring_fill{{{}}} {:.0f}\n", rank_labels(r), field(r, "ring_fill"));
  });
  metric(out, "tokfeed_client_wait_seconds", "histogram", "Time a trainer's next() waited for its batch.");
  static const char* kLe[] = {"1e-06", "1e-05", "0.0001", "0.001", "0.01", "0.1", "1", "10", "100", "+Inf"};
  each(s, "ranks", [&](const msgpack::object& r) {
    const std::string rank = rank_labels(r);
    double cumulative = 0;
    const msgpack::object* h = proto::find(r, "wait_hist");
    for (int i = 0; i < 10; ++i) {
      if (h && h->type == msgpack::type::ARRAY && uint32_t(i) < h->via.array.size)
        cumulative += proto::as_number(&h->via.array.ptr[i]);
      fmt::format_to(std::back_inserter(out), "tokfeed_client_wait_seconds_bucket{{{},le=\"{}\"}} {:.0f}\n", rank,
                     kLe[i], cumulative);
    }
    fmt::format_to(std::back_inserter(out), "tokfeed_client_wait_seconds_sum{{{}}} {:.6f}\n", rank, field(r, "wait_s"));
    fmt::format_to(std::back_inserter(out), "tokfeed_client_wait_seconds_count{{{}}} {:.0f}\n", rank, cumulative);
  });
  return out;
}

}  // namespace tokfeed
