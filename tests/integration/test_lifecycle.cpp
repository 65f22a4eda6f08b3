// Start, stop and crash: nothing is left in /dev/shm and no socket remains,
// whatever ends the daemon; a second daemon on the same socket or prefix is
// refused while the first lives.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "harness.hpp"
#include "tokfeed/client.hpp"

using namespace tokfeed::testing;

namespace {

std::string job() {
  return "[dataset]\npath = \"" + data_path("sft/mixed-300.jsonl") +
         "\"\n[tokenizer]\ntype = \"sentencepiece\"\npath = \"" + data_path("tokenizers/sp32k/tokenizer.model") +
         "\"\ntemplate = \"chatml\"\n[workers]\ncount = 3\n";
}

bool exists(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0;
}

// Running, not a zombie: a dead daemon's workers are reparented, and
// whoever adopts them may not reap them at once.
bool alive(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string pid_s, comm, state;
  if (!(in >> pid_s >> comm >> state)) return false;
  return state != "Z" && state != "X";
}

}  // namespace

TEST_CASE("shutdown, SIGTERM and SIGINT leave no socket and no shared memory") {
  int before = shm_entries();
  for (int how : {0, SIGTERM, SIGINT}) {
    TempDir dir;
    Daemon d(write_job(dir, job()), socket_of(dir));
    auto workers = d.worker_pids();
    REQUIRE(workers.size() == 3);
    CHECK(dump(d.socket(), 0, "--count 3").size() == 3);
    if (how == 0) CHECK(run(bin("tokfeedctl") + " -s '" + d.socket() + "' shutdown").status == 0);
    else ::kill(d.pid(), how);
    CHECK(d.wait() == 0);
    CHECK_FALSE(exists(d.socket()));
    for (pid_t w : workers) CHECK_FALSE(alive(w));
    CHECK(shm_entries() == before);
  }
}

TEST_CASE("kill -9 of the daemon: workers die with it, clients see it lost, a restart serves again") {
  int before = shm_entries();
  TempDir dir;
  std::string cfg = write_job(dir, job());
  std::vector<pid_t> workers;
  {
    Daemon d(cfg, socket_of(dir));
    workers = d.worker_pids();
    tokfeed::ClientOptions opt;
    opt.socket = d.socket();
    std::unique_ptr<tokfeed::Client> c;
    REQUIRE(tokfeed::Client::connect(opt, c).ok());
    tokfeed::Batch b;
    REQUIRE(c->next(b).ok());
    b.release();
    d.stop(SIGKILL);
    auto t0 = std::chrono::steady_clock::now();
    tokfeed::Status st;
    while ((st = c->next(b)).ok()) b.release();  // what was already published may still be read
    double lost_after = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CHECK(st.code() == tokfeed::Code::kDaemonLost);
    CHECK(lost_after < 2.0);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  for (pid_t w : workers) CHECK_FALSE(alive(w));
  CHECK(exists(socket_of(dir)));  // the dead daemon's socket file
  {
    Daemon again(cfg, socket_of(dir));  // sweeps the stale socket and serves
    CHECK(dump(again.socket(), 0, "--count 2").size() == 2);
    CHECK(again.stop(SIGTERM) == 0);
  }
  CHECK_FALSE(exists(socket_of(dir)));
  CHECK(shm_entries() == before);
}

TEST_CASE("a second daemon with the same socket or shm prefix is refused") {
  TempDir dir;
  std::string cfg = write_job(dir, job());
  Daemon first(cfg, socket_of(dir));
  Output o = run(bin("tokfeedd") + " --config '" + cfg + "'");
  CHECK(o.status != 0);
  CHECK(o.err.find("another tokfeedd is running") != std::string::npos);
  CHECK(first.running());
  CHECK(dump(first.socket(), 0, "--count 1").size() == 1);
}

TEST_CASE("one client per rank; an unknown rank is refused with the ranks served") {
  TempDir dir;
  Daemon d(write_job(dir, job()), socket_of(dir));
  tokfeed::ClientOptions opt;
  opt.socket = d.socket();
  std::unique_ptr<tokfeed::Client> a, b;
  REQUIRE(tokfeed::Client::connect(opt, a).ok());
  auto st = tokfeed::Client::connect(opt, b);
  CHECK(st.code() == tokfeed::Code::kRefused);
  CHECK(st.message().find("already attached") != std::string::npos);
  opt.rank = 5;
  st = tokfeed::Client::connect(opt, b);
  CHECK(st.code() == tokfeed::Code::kRefused);
  CHECK(st.message().find("not served") != std::string::npos);
}

TEST_CASE("resume at a position gives exactly the rest of the stream") {
  TempDir dir;
  Daemon d(write_job(dir, job() + "[schedule]\nepochs = 2\n"), socket_of(dir));
  auto all = dump(d.socket(), 0);
  REQUIRE(all.size() == 150);  // 75 batches x 2 epochs
  for (auto [e, s] : {std::pair{0, 0}, {0, 1}, {0, 37}, {0, 74}, {1, 0}, {1, 50}}) {
    auto rest = dump(d.socket(), 0, "--epoch " + std::to_string(e) + " --step " + std::to_string(s));
    std::size_t k = e * 75 + s;
    REQUIRE(rest.size() == all.size() - k);
    CHECK(rest.front() == all[k]);
    CHECK(rest.back() == all.back());
  }
}

TEST_CASE("kill -9 at random moments, start-up included, leaves nothing in /dev/shm") {
  int before = shm_entries();
  TempDir dir;
  std::string cfg = write_job(dir, job());
  std::srand(12345);
  for (int i = 0; i < 8; ++i) {
    pid_t pid = fork();
    if (pid == 0) {
      execl(bin("tokfeedd").c_str(), "tokfeedd", "--config", cfg.c_str(), nullptr);
      _exit(127);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(std::rand() % 120));
    ::kill(pid, SIGKILL);
    int st;
    waitpid(pid, &st, 0);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // orphaned workers die with their parent
  CHECK(shm_entries() == before);
  Daemon d(cfg, socket_of(dir));  // and the next start still serves
  CHECK(dump(d.socket(), 0, "--count 1").size() == 1);
}

TEST_CASE(
    "a stopped daemon: no error while stopped briefly or while its workers deliver, typed 'daemon lost' once all is "
    "stopped past the timeout, and next() resumes") {
  TempDir dir;
  Daemon d(write_job(dir, job() + "[schedule]\nepochs = 100\n"), socket_of(dir));
  tokfeed::ClientOptions opt;
  opt.socket = d.socket();
  opt.liveness_timeout = std::chrono::milliseconds(1500);
  std::unique_ptr<tokfeed::Client> c;
  REQUIRE(tokfeed::Client::connect(opt, c).ok());
  tokfeed::Batch b;
  REQUIRE(c->next(b).ok());
  // Brief stop: the client keeps working (what is built can be read, and it
  // waits for the rest).
  ::kill(d.pid(), SIGSTOP);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ::kill(d.pid(), SIGCONT);
  for (int i = 0; i < 20; ++i) REQUIRE_MESSAGE(c->next(b).ok(), "batch " << i);
  // The supervisor alone stopped past the timeout: its workers still
  // deliver, and a delivered batch is as good a sign of life as a heartbeat.
  std::vector<pid_t> workers = d.worker_pids();
  REQUIRE(!workers.empty());
  ::kill(d.pid(), SIGSTOP);
  auto t0 = std::chrono::steady_clock::now();
  auto since = [](auto t) { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count(); };
  int delivered = 0;
  while (since(t0) < 2.5) {
    REQUIRE_MESSAGE(c->next(b).ok(), "batch " << delivered << " with the supervisor stopped");
    ++delivered;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK(delivered > 20);
  // Workers stopped too: no heartbeat and no batch, and the client says so
  // within 2 s of its last batch.
  for (pid_t w : workers) ::kill(w, SIGSTOP);
  tokfeed::Status st;
  auto last = std::chrono::steady_clock::now();
  while ((st = c->next(b)).ok()) {
    last = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // a training step
  }
  double after = since(last);
  for (pid_t w : workers) ::kill(w, SIGCONT);
  ::kill(d.pid(), SIGCONT);
  CHECK(st.code() == tokfeed::Code::kDaemonLost);
  CHECK(st.message().find("no heartbeat and no batch") != std::string::npos);
  CHECK(st.message().find("calling next() again resumes") != std::string::npos);
  CHECK(after >= 1.4);
  CHECK(after < 2.0);
  // And it does, at once: nothing was consumed by the error.
  for (int i = 0; i < 5; ++i) REQUIRE_MESSAGE(c->next(b).ok(), "batch " << i << " after SIGCONT");
}
