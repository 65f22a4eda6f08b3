// Hardening: a bound on one record's bytes, CPU placement of the workers
// (read back from the kernel), the cache folder --check-config insists on,
// and a flooding client that cannot fill the log.
#include <doctest/doctest.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "harness.hpp"
#include "tokfeed/proto/frame.hpp"

using namespace tokfeed::testing;

namespace {

std::string sp_tok() {
  return "[tokenizer]\ntype = \"sentencepiece\"\npath = \"" + data_path("tokenizers/sp32k/tokenizer.model") +
         "\"\ntemplate = \"mistral\"\n";
}

std::string record(std::size_t content_bytes) {
  return R"({"messages":[{"role":"user","content":"q"},{"role":"assistant","content":")" +
         std::string(content_bytes, 'x') + "\"}]}";
}

std::vector<int> affinity(pid_t pid) {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> out;
  if (sched_getaffinity(pid, sizeof set, &set) != 0) return out;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) out.push_back(c);
  return out;
}

std::string status_line(pid_t pid, const std::string& key) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string l; std::getline(in, l);)
    if (l.rfind(key + ":", 0) == 0) return l.substr(l.find_first_not_of(" \t", key.size() + 1));
  return "";
}

}  // namespace

TEST_CASE("max_record_bytes: a longer record is a bad record naming file:line, per dataset entry") {
  TempDir dir;
  {
    std::ofstream f(dir.file("a.jsonl"));
    f << record(10) << "\n" << record(5000) << "\n" << record(20) << "\n";
    std::ofstream g(dir.file("b.jsonl"));
    g << record(5000) << "\n" << record(30) << "\n";
  }
  // Each entry its own bound: a.jsonl's 5 KB record is over 1000 bytes, b.jsonl's under 10000.
  std::string cfg = write_job(dir, "[[datasets]]\npath = \"" + dir.file("a.jsonl") +
                                       "\"\nmax_record_bytes = 1000\n[[datasets]]\npath = \"" + dir.file("b.jsonl") +
                                       "\"\nmax_record_bytes = 10000\n" + sp_tok());
  Output o = run(bin("tokfeedd") + " --check-config '" + cfg + "'");
  REQUIRE_MESSAGE(o.status == 0, o.err);
  CHECK_MESSAGE(o.out.find(dir.file("a.jsonl") + ":2: record of 5078 bytes is longer than max_record_bytes = 1000") !=
                    std::string::npos,
                o.out);
  CHECK(o.out.find("a.jsonl: 1 shard(s), 3 records, 2 valid, 1 bad") != std::string::npos);
  CHECK(o.out.find("b.jsonl: 1 shard(s), 2 records, 2 valid, 0 bad") != std::string::npos);
  CHECK(o.out.find("max_record_bytes = 1000\n") != std::string::npos);

  // The default (8 MiB) applies where the key is absent; "fail" refuses the start, naming file:line.
  std::string fail = write_job(dir,
                               "[dataset]\npath = \"" + dir.file("a.jsonl") +
                                   "\"\nmax_record_bytes = 100\non_bad_record = \"fail\"\n" + sp_tok(),
                               "fail");
  Output f = run(bin("tokfeedd") + " --check-config '" + fail + "'");
  CHECK(f.status != 0);
  CHECK_MESSAGE(f.err.find(dir.file("a.jsonl") + ":2: bad record: record of 5078 bytes is longer than "
                                                 "max_record_bytes = 100") != std::string::npos,
                f.err);
  std::string dflt = write_job(dir, "[dataset]\npath = \"" + dir.file("a.jsonl") + "\"\n" + sp_tok(), "dflt");
  CHECK(run(bin("tokfeedd") + " --check-config '" + dflt + "'").out.find("max_record_bytes = 8388608\n") !=
        std::string::npos);
  std::string neg =
      write_job(dir, "[dataset]\npath = \"" + dir.file("a.jsonl") + "\"\nmax_record_bytes = -1\n" + sp_tok(), "neg");
  CHECK(run(bin("tokfeedd") + " --check-config '" + neg + "'")
            .err.find("[dataset] max_record_bytes: -1 is out of "
                      "range") != std::string::npos);
}

TEST_CASE("[workers] cpus, nice and policy: each worker's affinity, nice and SCHED_BATCH as the kernel reports them") {
  std::vector<int> mine = affinity(0);
  REQUIRE(!mine.empty());
  const int core = mine.back();
  TempDir dir;
  std::string cfg = write_job(dir, "[dataset]\npath = \"" + data_path("sft/mixed-300.jsonl") + "\"\n" + sp_tok() +
                                       "[workers]\ncount = 2\ncpus = \"" + std::to_string(core) +
                                       "\"\nnice = 7\npolicy = \"batch\"\n");
  Daemon d(cfg, socket_of(dir));
  REQUIRE(dump(d.socket(), 0, "--count 2").size() == 2);
  std::vector<pid_t> workers = d.worker_pids();
  REQUIRE(workers.size() == 2);
  for (pid_t w : workers) {
    INFO("worker ", w);
    CHECK(affinity(w) == std::vector<int>{core});
    CHECK(status_line(w, "Cpus_allowed_list") == std::to_string(core));
    errno = 0;
    CHECK(getpriority(PRIO_PROCESS, static_cast<id_t>(w)) == 7);
    CHECK(sched_getscheduler(w) == SCHED_BATCH);
  }
  // The supervisor itself is left where it was.
  CHECK(affinity(d.pid()) == mine);
  CHECK(sched_getscheduler(d.pid()) == SCHED_OTHER);
  CHECK(d.log().find("workers and cache builders: pinned to " + std::to_string(core) + "; nice 7, policy batch") !=
        std::string::npos);
  // Status shows each worker's cores, CPU seconds, nice and policy.
  Output st = run(bin("tokfeedctl") + " -s '" + d.socket() + "' status --json");
  CHECK(st.out.find("\"cpus\":\"" + std::to_string(core) + "\",\"nice\":7,\"policy\":\"batch\"") != std::string::npos);
  CHECK(st.out.find("\"cpu_s\":") != std::string::npos);
  Output table = run(bin("tokfeedctl") + " -s '" + d.socket() + "' status");
  CHECK(table.out.find("cpus") != std::string::npos);
  CHECK(table.out.find(" batch  " + std::to_string(core)) != std::string::npos);
}

TEST_CASE("[workers] cpus = \"auto\" says what it chose; a bad list is a config error") {
  TempDir dir;
  std::string cfg = write_job(dir, "[dataset]\npath = \"" + data_path("sft/mixed-300.jsonl") + "\"\n" + sp_tok() +
                                       "[workers]\ncpus = \"auto\"\n");
  Daemon d(cfg, socket_of(dir));
  REQUIRE(dump(d.socket(), 0, "--count 1").size() == 1);
  std::string log = d.log();
  CHECK_MESSAGE(log.find("workers and cache builders: auto: rank 0: ") != std::string::npos, log);
  if (log.find("unpinned (") != std::string::npos) {
    for (pid_t w : d.worker_pids()) CHECK(affinity(w) == affinity(d.pid()));  // unpinned, and it said why
  } else {
    CHECK(log.find("on NUMA node") != std::string::npos);  // a GPU machine: its node's cores
  }
  for (const char* bad : {"16-", "a-b", "3-1", "", "1,,2"}) {
    INFO(bad);
    std::string c = write_job(dir,
                              "[dataset]\npath = \"" + data_path("sft/mixed-300.jsonl") + "\"\n" + sp_tok() +
                                  "[workers]\ncpus = \"" + bad + "\"\n",
                              "bad");
    Output o = run(bin("tokfeedd") + " --check-config '" + c + "'");
    if (std::string(bad).empty()) {
      CHECK(o.status == 0);  // "": unpinned
      continue;
    }
    CHECK(o.status != 0);
    CHECK_MESSAGE(o.err.find("[workers] cpus: ") != std::string::npos, o.err);
  }
}

TEST_CASE("--check-config fails when the cache folder cannot be created or written, naming it") {
  TempDir dir;
  { std::ofstream(dir.file("plain")) << "not a folder\n"; }
  std::string cfg = write_job(dir, "[dataset]\npath = \"" + data_path("sft/mixed-300.jsonl") + "\"\n" + sp_tok() +
                                       "[cache]\ndir = \"" + dir.file("plain") + "/cache\"\n");
  Output o = run(bin("tokfeedd") + " --check-config '" + cfg + "'");
  CHECK(o.status != 0);
  CHECK_MESSAGE(o.err.find("[cache] dir " + dir.file("plain") + "/cache: cannot create it") != std::string::npos,
                o.err);
  // And the daemon refuses to start the same way, before it serves.
  Output s = run(bin("tokfeedd") + " --config '" + cfg + "'");
  CHECK(s.status == 1);
  CHECK(s.err.find("cannot create it") != std::string::npos);
}

TEST_CASE("a client that floods requests and never reads the replies costs the log a line or two, not hundreds") {
  TempDir dir;
  Daemon d(write_job(dir, "[dataset]\npath = \"" + data_path("sft/mixed-300.jsonl") + "\"\n" + sp_tok()),
           socket_of(dir));
  std::string error;
  int fd = tokfeed::proto::connect_unix(d.socket(), error);
  REQUIRE(fd >= 0);
  int small = 4096;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  // A status request, many times over, in one go; the replies (kilobytes
  // each) are never read, so the daemon's sends fail once buffers fill.
  std::string status_req = tokfeed::proto::make_request("status");
  std::string flood;
  for (int i = 0; i < 2000; ++i) flood += status_req;
  std::thread writer([&] {
    std::size_t off = 0;
    while (off < flood.size()) {
      ssize_t n = ::send(fd, flood.data() + off, flood.size() - off, MSG_NOSIGNAL);
      if (n <= 0) break;
      off += static_cast<std::size_t>(n);
    }
  });
  std::this_thread::sleep_for(std::chrono::seconds(3));
  ::shutdown(fd, SHUT_RDWR);
  writer.join();
  ::close(fd);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::string log = d.log();
  std::size_t lines = 0;
  for (std::size_t p = 0; (p = log.find("cannot reply", p)) != std::string::npos; ++p) ++lines;
  CHECK_MESSAGE(lines <= 1, log.substr(0, 2000));
  // The daemon still answers.
  CHECK(run(bin("tokfeedctl") + " -s '" + d.socket() + "' status --json").status == 0);
}
