// Fault soak: real daemons, real workers killed with SIGKILL, a real trainer
// process killed mid-epoch, the daemon itself killed. Every case compares
// the stream it gets with a no-fault run of the same config, batch by batch
// (the slot checksums, verified by the client), and asserts the figures
// docs/reliability.md quotes.
//
// TOKFEED_FAULT_LONG=1 (or TOKFEED_LONG=1, set by `scripts/test.sh --long`)
// runs the long version: 1,000 worker kills instead of 200.
#include <doctest/doctest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <thread>

#include "harness.hpp"
#include "tokfeed/client.hpp"
#include "tokfeed/proto/frame.hpp"

using namespace tokfeed::testing;
using Clock = std::chrono::steady_clock;

namespace {

bool long_mode() {
  for (const char* v : {"TOKFEED_FAULT_LONG", "TOKFEED_LONG"})
    if (const char* s = getenv(v); s && std::string(s) == "1") return true;
  return false;
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// `copies` concatenated copies of mixed-300 (300 records each), one sample
// per batch, three workers with two slots each.
std::string job(const TempDir& dir, int copies = 1, const std::string& extra = "") {
  std::string src = data_path("sft/mixed-300.jsonl"), path = dir.file("data.jsonl");
  {
    std::ifstream in(src);
    std::string all((std::istreambuf_iterator<char>(in)), {});
    std::ofstream out(path);
    for (int i = 0; i < copies; ++i) out << all;
  }
  return "[dataset]\npath = \"" + path + "\"\n[tokenizer]\ntype = \"sentencepiece\"\npath = \"" +
         data_path("tokenizers/sp32k/tokenizer.model") +
         "\"\ntemplate = \"chatml\"\n[batch]\nsize = 1\n[workers]\ncount = 3\nslots = 2\n" + extra;
}

tokfeed::ClientOptions options(const std::string& socket, uint64_t epoch = 0, uint64_t step = 0) {
  tokfeed::ClientOptions opt;
  opt.socket = socket;
  opt.verify_checksums = true;
  opt.start = {epoch, step};
  return opt;
}

// Attaches, retrying while the daemon still holds the rank for a client
// whose death it has not yet seen.
std::unique_ptr<tokfeed::Client> attach(const tokfeed::ClientOptions& opt) {
  std::unique_ptr<tokfeed::Client> c;
  tokfeed::Status st;
  for (int i = 0; i < 300; ++i) {
    st = tokfeed::Client::connect(opt, c);
    if (st.ok()) return c;
    if (st.message().find("already attached") == std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  FAIL("attach: " << st.message());
  return nullptr;
}

// Reads up to `count` batches (all when 0), releasing each: their checksums.
std::vector<uint64_t> read(tokfeed::Client& c, std::size_t count = 0) {
  std::vector<uint64_t> out;
  tokfeed::Batch b;
  tokfeed::Status st;
  while ((count == 0 || out.size() < count) && (st = c.next(b)).ok()) {
    out.push_back(b.checksum());
    b.release();
  }
  if (count == 0) REQUIRE_MESSAGE(st.code() == tokfeed::Code::kEndOfStream, st.message());
  return out;
}

// The stream of a config with no fault.
std::vector<uint64_t> clean_stream(const std::string& cfg, const std::string& socket) {
  Daemon d(cfg, socket);
  auto c = attach(options(socket));
  return read(*c);
}

struct WorkerInfo {
  int64_t pid, restarts, last_restart_ms;
};

std::vector<WorkerInfo> workers(const std::string& socket) {
  msgpack::object_handle h;
  std::string error;
  std::vector<WorkerInfo> out;
  if (!tokfeed::proto::call(socket, tokfeed::proto::make_request("status"), h, error)) return out;
  const msgpack::object* ws = tokfeed::proto::find(h.get(), "workers");
  if (!ws || ws->type != msgpack::type::ARRAY) return out;
  for (uint32_t i = 0; i < ws->via.array.size; ++i) {
    const msgpack::object& w = ws->via.array.ptr[i];
    out.push_back({tokfeed::proto::get_int(w, "pid").value_or(-1), tokfeed::proto::get_int(w, "restarts").value_or(-1),
                   tokfeed::proto::get_int(w, "last_restart_ms").value_or(-1)});
  }
  return out;
}

// The daemon's open descriptors once the control connections the test just
// made are closed on its side too.
int settled_fds(pid_t pid, int expect) {
  int n = open_fds(pid);
  for (int i = 0; i < 40 && n != expect; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    n = open_fds(pid);
  }
  return n;
}

}  // namespace

TEST_CASE("worker kills: 200 kill -9 at random moments in one epoch change no batch, each restart < 1 s") {
  const int kills = long_mode() ? 1000 : 200;
  TempDir dir;
  std::string cfg = write_job(dir, job(dir, long_mode() ? 4 : 1));
  std::vector<uint64_t> clean = clean_stream(cfg, socket_of(dir));
  // One record of mixed-300 has no trained token within max_length (left out).
  REQUIRE(clean.size() == (long_mode() ? 1196u : 299u));

  Daemon d(cfg, socket_of(dir));
  auto c = attach(options(d.socket()));
  const int shm_before = shm_entries();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const int fds_before = open_fds(d.pid());

  // The trainer reads up to `target`, so the kills are spread over the epoch.
  std::atomic<std::size_t> target{0};
  std::vector<uint64_t> got;
  tokfeed::Status end;
  std::thread trainer([&] {
    tokfeed::Batch b;
    for (;;) {
      if (got.size() >= target.load()) {
        std::this_thread::sleep_for(std::chrono::microseconds(500));
        continue;
      }
      if (!(end = c->next(b)).ok()) return;
      got.push_back(b.checksum());
      b.release();
    }
  });

  std::mt19937 rng(20261202);
  double max_restart = 0, total_restart = 0;
  int64_t max_reported_ms = 0;
  for (int i = 0; i < kills; ++i) {
    target = (i + 1) * clean.size() / kills;
    std::vector<WorkerInfo> before = workers(d.socket());
    REQUIRE(before.size() == 3);
    std::size_t victim = rng() % before.size();
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 20000));  // a random moment
    REQUIRE(before[victim].pid > 0);
    auto t0 = Clock::now();
    REQUIRE(::kill(static_cast<pid_t>(before[victim].pid), SIGKILL) == 0);
    // Restarted: a new pid in the worker's place, one more restart counted.
    for (;;) {
      auto now = workers(d.socket());
      if (now.size() == 3 && now[victim].restarts == before[victim].restarts + 1 && now[victim].pid > 0) {
        max_reported_ms = std::max(max_reported_ms, now[victim].last_restart_ms);
        break;
      }
      REQUIRE_MESSAGE(seconds_since(t0) < 5.0, "worker " << victim << " not restarted after kill " << i);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    double took = seconds_since(t0);
    max_restart = std::max(max_restart, took);
    total_restart += took;
  }
  target = clean.size() + 1;
  trainer.join();

  MESSAGE(kills << " kills: restart (kill to new worker in status) max " << max_restart * 1000 << " ms, mean "
                << total_restart * 1000 / kills << " ms; supervisor-reported max " << max_reported_ms << " ms");
  CHECK(end.code() == tokfeed::Code::kEndOfStream);
  CHECK(max_restart < 1.0);
  CHECK(max_reported_ms < 1000);
  REQUIRE(got.size() == clean.size());
  CHECK(got == clean);
  int64_t restarts = 0;
  for (const WorkerInfo& w : workers(d.socket())) restarts += w.restarts;
  CHECK(restarts == kills);
  CHECK(d.log().find("skipping it") == std::string::npos);  // no good record poisoned by the kills
  CHECK(shm_entries() == shm_before);
  CHECK(settled_fds(d.pid(), fds_before) == fds_before);
}

TEST_CASE(
    "client death: a trainer killed with -9 mid-epoch; a new client resumes exactly and its slots are reclaimed") {
  TempDir dir;
  std::string cfg = write_job(dir, job(dir));
  std::vector<uint64_t> clean = clean_stream(cfg, socket_of(dir));
  Daemon d(cfg, socket_of(dir));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the start-up probe connection closes
  const int fds_idle = open_fds(d.pid());

  // The trainer takes every slot of every ring (3 workers x 2 slots) and
  // holds them: the producers are blocked on it when it dies.
  const int held = 6;
  int out[2];
  REQUIRE(pipe(out) == 0);
  pid_t child = fork();
  if (child == 0) {
    dup2(out[1], 1);
    execl((std::string(TOKFEED_BIN_DIR) + "/tests/fault/fault_trainer").c_str(), "fault_trainer", d.socket().c_str(),
          std::to_string(held).c_str(), nullptr);
    _exit(127);
  }
  ::close(out[1]);
  FILE* f = fdopen(out[0], "r");
  std::vector<uint64_t> first;
  char line[128];
  while (fgets(line, sizeof line, f) && std::string(line) != "held\n") {
    unsigned long long idx, sum;
    REQUIRE(sscanf(line, "%llu %llu", &idx, &sum) == 2);
    CHECK(idx == first.size());
    first.push_back(sum);
  }
  fclose(f);
  REQUIRE(first.size() == held);
  CHECK(std::equal(first.begin(), first.end(), clean.begin()));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  for (const WorkerInfo& w : workers(d.socket())) CHECK(w.pid > 0);

  ::kill(child, SIGKILL);
  int st;
  waitpid(child, &st, 0);
  REQUIRE(WIFSIGNALED(st));

  // The saved position is the next batch: (epoch 0, step 6).
  auto c = attach(options(d.socket(), 0, held));
  std::vector<uint64_t> rest = read(*c);
  REQUIRE(rest.size() == clean.size() - held);  // the producers went on past the dead client's slots
  CHECK(std::equal(rest.begin(), rest.end(), clean.begin() + held));
  CHECK(settled_fds(d.pid(), fds_idle + 1) == fds_idle + 1);  // the new client's connection, nothing of the dead one
  c.reset();
  CHECK(settled_fds(d.pid(), fds_idle) == fds_idle);
}

TEST_CASE("daemon death: kill -9 while streaming, 'daemon lost' < 2 s, a restart sweeps and resumes exactly") {
  const int shm_before = shm_entries();
  TempDir dir;
  std::string cfg = write_job(dir, job(dir, 1, "[schedule]\nepochs = 2\n"));
  std::vector<uint64_t> clean = clean_stream(cfg, socket_of(dir));
  REQUIRE(clean.size() == 598);  // 299 trained samples a copy, two epochs
  std::vector<uint64_t> got;
  tokfeed::Position saved;
  {
    Daemon d(cfg, socket_of(dir));
    auto c = attach(options(d.socket()));
    got = read(*c, 350);  // into the second epoch
    saved = c->position();
    CHECK(saved.epoch == 1);
    CHECK(saved.step == 51);  // 350 - 299
    d.stop(SIGKILL);
    auto t0 = Clock::now();
    tokfeed::Batch b;
    tokfeed::Status st;
    uint64_t after = 0;
    while ((st = c->next(b)).ok()) b.release(), ++after;  // what was published before the kill
    double lost = seconds_since(t0);
    MESSAGE("daemon lost after " << lost * 1000 << " ms (" << after << " published batches read first)");
    CHECK(st.code() == tokfeed::Code::kDaemonLost);
    CHECK(lost < 2.0);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // orphaned workers notice and exit
  Daemon again(cfg, socket_of(dir));
  CHECK(again.log().find("removed stale socket") != std::string::npos);
  auto c = attach(options(again.socket(), saved.epoch, saved.step));
  std::vector<uint64_t> rest = read(*c);
  got.insert(got.end(), rest.begin(), rest.end());
  CHECK(got == clean);
  c.reset();
  CHECK(again.stop(SIGTERM) == 0);
  CHECK(shm_entries() == shm_before);
}

TEST_CASE("samples of 10x max_length are truncated (or dropped) and counted; none reaches a batch over max_length") {
  TempDir dir;
  // 2,560 words: at least 10x the 256-token max_length in any tokenizer.
  std::string text;
  for (int i = 0; i < 2560; ++i) text += "word ";
  std::string data = dir.file("long.jsonl");
  {
    std::ofstream out(data);
    for (int i = 0; i < 10; ++i)
      out << R"({"messages":[{"role":"user","content":"q"},{"role":"assistant","content":")" << (i % 2 ? text : "a")
          << "\"}]}\n";
  }
  for (std::string trunc : {"right", "drop"}) {
    std::string body = "[dataset]\npath = \"" + data + "\"\n[tokenizer]\ntype = \"sentencepiece\"\npath = \"" +
                       data_path("tokenizers/sp32k/tokenizer.model") +
                       "\"\n[batch]\nsize = 2\nmax_length = 256\ntruncation = \"" + trunc +
                       "\"\n[schedule]\nshuffle = false\n";
    Daemon d(write_job(dir, body, trunc), socket_of(dir, trunc));
    auto c = attach(options(d.socket()));
    tokfeed::Batch b;
    uint64_t rows = 0;
    while (c->next(b).ok()) {
      CHECK(b.seq_len() <= 256);
      rows += b.rows();
      b.release();
    }
    Output st = run(bin("tokfeedctl") + " -s '" + d.socket() + "' status --json");
    if (trunc == "right") {
      CHECK(rows == 10);
      CHECK(st.out.find("\"truncated\":5") != std::string::npos);
    } else {
      // Left out of the plan (docs/data_model.md 4.1): the five short samples fill three batches
      CHECK(rows == 5);
      CHECK(st.out.find("\"too_long\":5,") != std::string::npos);
    }
  }
}
