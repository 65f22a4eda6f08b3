// Slow and many clients: 64 that connect and send nothing, 64 that send
// garbage, 64 that ask for status in a loop, all at once, while a trainer
// streams. The data plane keeps its throughput (measured against an idle
// control plane in the same run), status keeps answering, idle connections
// are closed by the daemon, and connections past the limit are refused.
#include <doctest/doctest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <random>
#include <thread>

#include "harness.hpp"
#include "tokfeed/client.hpp"
#include "tokfeed/proto/frame.hpp"

using namespace tokfeed::testing;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kEach = 64;
constexpr std::size_t kMaxConnections = 256;  // the daemon's limit (daemon/control/control.hpp)

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string job() {
  return "[dataset]\npath = \"" + data_path("sft/mixed-300.jsonl") +
         "\"\n[tokenizer]\ntype = \"sentencepiece\"\npath = \"" + data_path("tokenizers/sp32k/tokenizer.model") +
         "\"\ntemplate = \"chatml\"\n[batch]\nsize = 1\n[workers]\ncount = 2\n[schedule]\nepochs = 50\n";
}

// Batches per second over `n` batches, each followed by an 8 ms training
// step: the trainer, not the workers, sets the pace when the daemon is
// healthy, so a control plane that stalls the data plane shows as a drop.
double stream_rate(tokfeed::Client& c, int n) {
  tokfeed::Batch b;
  auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) {
    tokfeed::Status st = c.next(b);
    REQUIRE_MESSAGE(st.ok(), st.message());
    b.release();
    std::this_thread::sleep_for(std::chrono::milliseconds(8));
  }
  return n / seconds_since(t0);
}

double status_latency(const std::string& socket) {
  msgpack::object_handle h;
  std::string error;
  auto t0 = Clock::now();
  bool ok = tokfeed::proto::call(socket, tokfeed::proto::make_request("status"), h, error, 10000);
  return ok ? seconds_since(t0) : 1e9;
}

// Whether the daemon closed `fd` (EOF, possibly after an error frame) within `ms`.
bool closed_within(int fd, int ms) {
  auto t0 = Clock::now();
  char buf[4096];
  while (seconds_since(t0) * 1000 < ms) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) > 0) {
      ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN)) return true;
    }
  }
  return false;
}

}  // namespace

TEST_CASE("192 idle, garbage and status-looping clients: data plane within 10%, status answers, idle ones closed") {
  TempDir dir;
  Daemon d(write_job(dir, job()), socket_of(dir));
  tokfeed::ClientOptions opt;
  opt.socket = d.socket();
  std::unique_ptr<tokfeed::Client> c;
  REQUIRE(tokfeed::Client::connect(opt, c).ok());
  const int n = 250;
  stream_rate(*c, 20);  // warm
  double idle_before = stream_rate(*c, n);

  std::atomic<bool> stop{false};
  std::atomic<uint64_t> statuses{0}, garbage_replies{0};
  std::vector<int> idle;
  for (int i = 0; i < kEach; ++i) {
    std::string error;
    int fd = tokfeed::proto::connect_unix(d.socket(), error);
    REQUIRE_MESSAGE(fd >= 0, error);
    idle.push_back(fd);
  }
  auto idle_since = Clock::now();
  std::vector<std::thread> threads;
  for (int i = 0; i < kEach; ++i) {
    threads.emplace_back([&, i] {  // garbage: random bytes, a reconnect after each disconnect
      std::mt19937 rng(i);
      while (!stop) {
        std::string error;
        int fd = tokfeed::proto::connect_unix(d.socket(), error);
        if (fd < 0) continue;
        std::string junk(1 + rng() % 512, '\0');
        for (char& ch : junk) ch = static_cast<char>(rng());
        if (tokfeed::proto::send_all(fd, junk, error)) {
          std::string payload;
          if (tokfeed::proto::recv_frame(fd, payload, nullptr, 2000, error)) ++garbage_replies;
        }
        ::close(fd);
      }
    });
    threads.emplace_back([&] {  // status in a loop
      while (!stop) {
        msgpack::object_handle h;
        std::string error;
        if (tokfeed::proto::call(d.socket(), tokfeed::proto::make_request("status"), h, error)) ++statuses;
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  double max_latency = 0;
  std::thread probe([&] {
    while (!stop) {
      max_latency = std::max(max_latency, status_latency(d.socket()));
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  double loaded = stream_rate(*c, n);
  stop = true;
  probe.join();
  for (auto& t : threads) t.join();
  double idle_after = stream_rate(*c, n);
  double idle_rate = (idle_before + idle_after) / 2;

  MESSAGE("data plane: " << idle_rate << " batches/s idle control plane, " << loaded << " batches/s under load (ratio "
                         << loaded / idle_rate << "); " << statuses.load() << " status replies and "
                         << garbage_replies.load() << " garbage rejections served; max status " << max_latency * 1000
                         << " ms");
  CHECK(loaded >= 0.9 * idle_rate);
  CHECK(max_latency < 1.0);
  CHECK(statuses.load() > 0);
  CHECK(garbage_replies.load() > 0);

  // The idle clients are closed after the idle timeout (5 s), not held forever.
  int closed = 0;
  for (int fd : idle) {
    int left = 5000 + 3000 - static_cast<int>(seconds_since(idle_since) * 1000);
    closed += closed_within(fd, std::max(left, 100));
    ::close(fd);
  }
  CHECK(closed == kEach);
  CHECK(d.log().find("sent no request for 5000 ms") != std::string::npos);
  // The attached trainer is not idle-timed out: it still streams.
  tokfeed::Batch b;
  CHECK(c->next(b).ok());
}

TEST_CASE("connections past the limit are refused with an error; the daemon keeps serving") {
  TempDir dir;
  Daemon d(write_job(dir, job()), socket_of(dir));
  std::vector<int> fds;
  for (std::size_t i = 0; i < kMaxConnections + 40; ++i) {
    std::string error;
    int fd = tokfeed::proto::connect_unix(d.socket(), error);
    REQUIRE_MESSAGE(fd >= 0, error);
    fds.push_back(fd);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // all accepted by now
  int refused = 0;
  for (int fd : fds) {
    std::string payload, error;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 0) == 1 && tokfeed::proto::recv_frame(fd, payload, nullptr, 1000, error) &&
        payload.find("too many connections") != std::string::npos)
      ++refused;
  }
  CHECK(refused == 40);
  for (int fd : fds) ::close(fd);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CHECK(status_latency(d.socket()) < 1.0);
  CHECK(d.log().find("connections open (the limit)") != std::string::npos);
}
