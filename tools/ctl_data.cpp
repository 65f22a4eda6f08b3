// dump and drain: attach as a rank through libtokfeed.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>

#include "ctl.hpp"
#include "tokfeed/client.hpp"

namespace tokfeed::ctl {

namespace {

Status attach(const StreamArgs& a, std::unique_ptr<Client>& c, bool verify) {
  ClientOptions opt;
  opt.socket = a.socket;
  opt.rank = a.rank;
  opt.split = a.eval ? Split::kEval : Split::kTrain;
  opt.start = {a.epoch, a.step, a.world_size, a.base};
  opt.verify_checksums = verify;
  return Client::connect(opt, c);
}

// Batches to take: --count, else the rest of the stream; evaluation passes
// repeat without end, so there the rest of the pass.
std::optional<uint64_t> limit(const StreamArgs& a, const Client& c) {
  if (a.count || !a.eval) return a.count;
  uint64_t B = c.batches_per_epoch(), step = c.position().step;
  return B > step ? B - step : 0;
}

template <class T>
void append_flat(std::string& out, const TensorView& t) {
  const T* p = static_cast<const T*>(t.data);
  out += '[';
  for (int64_t k = 0; k < t.shape[0]; ++k) {
    if (k) out += ',';
    fmt::format_to(std::back_inserter(out), "{}", p[k]);
  }
  out += ']';
}

template <class T>
void append_rows(std::string& out, const TensorView& t) {
  const T* p = static_cast<const T*>(t.data);
  out += '[';
  for (int64_t r = 0; r < t.shape[0]; ++r) {
    if (r) out += ',';
    out += '[';
    for (int64_t k = 0; k < t.shape[1]; ++k) {
      if (k) out += ',';
      fmt::format_to(std::back_inserter(out), "{}", p[r * t.shape[1] + k]);
    }
    out += ']';
  }
  out += ']';
}

int finish(const Status& st) {
  if (st.code() == Code::kEndOfStream || st.ok()) return 0;
  std::fprintf(stderr, "tokfeedctl: %s: %s\n", std::string(st.code_name()).c_str(), st.message().c_str());
  return st.code() == Code::kDaemonLost ? 3 : 1;
}

}  // namespace

int dump(const StreamArgs& a) {
  std::unique_ptr<Client> c;
  if (Status st = attach(a, c, true); !st.ok()) return finish(st);
  Batch b;
  std::string line;
  Status st;
  const std::optional<uint64_t> count = limit(a, *c);
  for (uint64_t n = 0; !count || n < *count; ++n) {
    st = c->next(b);
    if (!st.ok()) break;
    line.clear();
    fmt::format_to(std::back_inserter(line), "{{\"epoch\":{},\"step\":{}", b.epoch(), b.step());
    for (std::size_t i = 0; i < b.tensor_count(); ++i) {
      const TensorView& t = b.tensor(i);
      line += ",\"";
      line += t.name;
      line += "\":";
      if (t.ndim == 1) {
        if (t.dtype == Dtype::kInt64) append_flat<int64_t>(line, t);
        else append_flat<int32_t>(line, t);
      } else if (t.ndim == 2) {
        if (t.dtype == Dtype::kInt64) append_rows<int64_t>(line, t);
        else append_rows<int32_t>(line, t);
      } else {
        line += "null";
      }
    }
    line += "}\n";
    std::fwrite(line.data(), 1, line.size(), stdout);
  }
  std::fflush(stdout);
  return finish(st);
}

int drain(const StreamArgs& a) {
  using clock = std::chrono::steady_clock;
  auto t0 = clock::now();
  std::unique_ptr<Client> c;
  if (Status st = attach(a, c, true); !st.ok()) return finish(st);
  Batch b;
  Status st;
  uint64_t batches = 0, samples = 0, tokens = 0, real = 0;
  double first_batch_s = 0;
  const std::optional<uint64_t> count = limit(a, *c);
  for (; !count || batches < *count; ++batches) {
    st = c->next(b);
    if (!st.ok()) break;
    if (batches == 0) first_batch_s = std::chrono::duration<double>(clock::now() - t0).count();
    samples += b.rows();
    tokens += uint64_t{b.rows()} * b.seq_len();
    real += b.real_tokens();
  }
  double secs = std::chrono::duration<double>(clock::now() - t0).count();
  std::printf(
      "{\"batches\":%llu,\"samples\":%llu,\"tokens\":%llu,\"real_tokens\":%llu,\"seconds\":%.3f,"
      "\"tokens_per_s\":%.0f,\"real_tokens_per_s\":%.0f,\"first_batch_s\":%.4f}\n",
      static_cast<unsigned long long>(batches), static_cast<unsigned long long>(samples),
      static_cast<unsigned long long>(tokens), static_cast<unsigned long long>(real), secs,
      secs > 0 ? tokens / secs : 0.0, secs > 0 ? real / secs : 0.0, first_batch_s);
  return finish(st);
}

}  // namespace tokfeed::ctl
