// Fork-safe children: a worker or cache builder that ends in any way (an
// error out of its work, exit() with the process's atexit handlers, abort,
// SIGSEGV) leaves the supervisor's control socket, its segments and the
// token cache as they were, and the daemon serving. Real daemons, real
// forked children, the test-only fault hook TOKFEED_FAULT_CRASH_LINE/HOW.
#include <doctest/doctest.h>
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <string>
#include <vector>

#include "harness.hpp"

using namespace tokfeed::testing;
using Clock = std::chrono::steady_clock;

namespace {

std::string body() {
  return "[dataset]\npath = \"" + data_path("sft/mixed-300.jsonl") +
         "\"\n[tokenizer]\ntype = \"sentencepiece\"\npath = \"" + data_path("tokenizers/sp32k/tokenizer.model") +
         "\"\ntemplate = \"mistral\"\n[batch]\nsize = 2\n[schedule]\nshuffle = false\n[workers]\ncount = 2\n";
}

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// Files under `dir` whose name holds `part` (e.g. ".tmp.": a build's parts).
int files_with(const std::string& dir, const std::string& part) {
  int n = 0;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) n += std::string(e->d_name).find(part) != std::string::npos;
    closedir(d);
  }
  return n;
}

}  // namespace

TEST_CASE("every way a child ends leaves the socket, the segments and the cache intact, and the daemon serving") {
  TempDir dir;
  std::vector<std::string> clean;
  {
    Daemon d(write_job(dir, body() + "[cache]\nenabled = false\n", "clean"), socket_of(dir, "clean"));
    clean = dump(d.socket());
  }
  REQUIRE(clean.size() == 150);
  for (const char* how : {"throw", "exit", "abort", "segv"}) {
    for (bool cache : {true, false}) {
      std::string name = std::string(how) + (cache ? "-cache" : "-workers");
      std::string cache_dir = dir.file("cache-" + name);
      std::string cfg = write_job(
          dir, body() + (cache ? "[cache]\ndir = \"" + cache_dir + "\"\n" : "[cache]\nenabled = false\n"), name);
      CAPTURE(name);
      // Line 5 ends the child that builds it, every time: a cache builder
      // when the cache is on, a worker when it is off.
      Daemon d(cfg, socket_of(dir, name), std::string("TOKFEED_FAULT_CRASH_LINE=5 TOKFEED_FAULT_CRASH_HOW=") + how);
      std::vector<std::string> got = dump(d.socket());
      // The daemon is still there, reachable through the same socket file.
      CHECK(d.running());
      CHECK(exists(d.socket()));
      Output st = run(bin("tokfeedctl") + " -s '" + d.socket() + "' status --json");
      CHECK(st.status == 0);
      CHECK(st.out.find("mixed-300.jsonl:5: record crashed a worker 3 times; skipping it") != std::string::npos);
      // Batch for batch the stream of a run without the fault, but for the
      // batch that held line 5 (records 4 and 5: only line 6 remains).
      REQUIRE(got.size() == clean.size());
      for (std::size_t k = 0; k < clean.size(); ++k) {
        INFO("batch " << k);
        if (k == 2) CHECK(got[k] != clean[k]);
        else CHECK(got[k] == clean[k]);
      }
      if (cache) {
        CHECK(files_with(cache_dir, ".idx") == 1);  // the store was published
        CHECK(files_with(cache_dir, ".tmp.") == 0);
      }
      auto t0 = Clock::now();
      CHECK(d.stop(SIGTERM) == 0);
      CHECK(std::chrono::duration<double>(Clock::now() - t0).count() < 2.0);
      CHECK(!exists(d.socket()));  // removed by the daemon itself, once
      if (cache) {
        // The next start finds the store: nothing of it was removed.
        Daemon again(cfg, socket_of(dir, name));
        CHECK(dump(again.socket()) == got);
        CHECK(again.log().find("reused in") != std::string::npos);
      }
    }
  }
}
