// A token cache build stopped by kill -9 keeps what it wrote: the next start
// with the same key keeps every record whose tokens and facts were whole,
// builds only the rest, and serves the stream of a build that never
// stopped (padded and packed), and, padded, of a run with the cache off. The
// test-only hook TOKFEED_FAULT_BUILD_RECORD_US slows each record's build so
// that the kill lands mid-build.
#include <doctest/doctest.h>
#include <signal.h>

#include <chrono>
#include <fstream>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "harness.hpp"

using namespace tokfeed::testing;

namespace {

// mixed-300 four times over: 1,200 records.
std::string dataset(const TempDir& dir) {
  std::string text = slurp(data_path("sft/mixed-300.jsonl"));
  std::ofstream out(dir.file("mixed-1200.jsonl"));
  for (int i = 0; i < 4; ++i) out << text;
  return dir.file("mixed-1200.jsonl");
}

std::string body(const std::string& data, const std::string& padding, const std::string& cache,
                 const std::string& batch = "") {
  return "[dataset]\npath = \"" + data + "\"\n[tokenizer]\ntype = \"sentencepiece\"\npath = \"" +
         data_path("tokenizers/sp32k/tokenizer.model") + "\"\ntemplate = \"chatml\"\n[batch]\nsize = 4\n" +
         "max_length = 256\npadding = \"" + padding + "\"\n" + batch + "[workers]\ncount = 2\n" +
         (cache.empty() ? "[cache]\nenabled = false\n" : "[cache]\ndir = \"" + cache + "\"\n");
}

}  // namespace

TEST_CASE("kill -9 mid-build: the next start keeps the parts written and builds only the rest; streams equal") {
  TempDir dir;
  const std::string data = dataset(dir);
  for (const char* padding : {"longest", "packed"}) {
    CAPTURE(padding);
    const std::string p = padding;
    std::vector<std::string> off, cold;
    if (p != "packed") {  // packing needs the cache's token counts
      Daemon d(write_job(dir, body(data, p, ""), p + "-off"), socket_of(dir, p + "-off"));
      off = dump(d.socket());
    }
    {
      Daemon d(write_job(dir, body(data, p, dir.file(p + "-cold")), p + "-cold"), socket_of(dir, p + "-cold"));
      cold = dump(d.socket());
    }
    REQUIRE(!cold.empty());
    if (p != "packed") CHECK(cold == off);
    const std::string cache = dir.file(p + "-killed");
    const std::string cfg = write_job(dir, body(data, p, cache), p + "-killed");
    uint64_t at_kill = 0;
    {
      // 600 records per builder at 4 ms each: about 2.4 s of build.
      Daemon d(cfg, socket_of(dir, p + "-killed"), "TOKFEED_FAULT_BUILD_RECORD_US=4000");
      for (int i = 0; i < 400 && at_kill < 256; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        at_kill = json_int(run(bin("tokfeedctl") + " -s '" + d.socket() + "' status --json").out, "records_done");
      }
      REQUIRE(at_kill >= 256);
      REQUIRE(at_kill < 1200);
      d.stop(SIGKILL);
    }
    CHECK(files_ending(cache, ".part") == 2);
    CHECK(files_ending(cache, ".idx") == 0);
    Daemon again(cfg, socket_of(dir, p + "-killed"));
    std::vector<std::string> got = dump(again.socket());
    CHECK(got == cold);
    std::smatch m;
    const std::string log = again.log();
    REQUIRE(
        std::regex_search(log, m, std::regex("token cache: ([0-9]+) of 1200 records kept from an interrupted build")));
    // Every record counted done at the kill was kept (and maybe a few
    // written after the last status).
    CHECK(std::stoull(m[1]) >= at_kill);
    CHECK(files_ending(cache, ".part") == 0);
    CHECK(files_ending(cache, ".facts") == 0);
    CHECK(files_ending(cache, ".idx") == 1);
  }
}

TEST_CASE("keep_untrained with right truncation is served while the cache builds; streams equal cold, warm and off") {
  TempDir dir;
  const std::string data = dataset(dir);
  // keep_untrained and right truncation leave nothing out (but a record
  // that crashes the builders): the plan grows over the build's prefix.
  const std::string keep = "keep_untrained = true\n";
  std::vector<std::string> off;
  {
    Daemon d(write_job(dir, body(data, "longest", "", keep), "off"), socket_of(dir, "off"));
    off = dump(d.socket());
  }
  REQUIRE(off.size() == 300);
  const std::string cache = dir.file("cache-cold");
  const std::string cfg = write_job(dir, body(data, "longest", cache, keep), "cold");
  {
    Daemon d(cfg, socket_of(dir, "cold"), "TOKFEED_FAULT_BUILD_RECORD_US=10000");
    REQUIRE(run(bin("tokfeedctl") + " -s '" + d.socket() + "' drain --count 1").status == 0);
    // The first batch came while the build (at least 6 s) still ran.
    std::string st = run(bin("tokfeedctl") + " -s '" + d.socket() + "' status --json").out;
    CHECK(st.find("\"cache\":{\"state\":\"building\"") != std::string::npos);
    CHECK(st.find("\"plan_order\":true") != std::string::npos);
    CHECK(json_int(st, "records_done") < 1200);
    CHECK(dump(d.socket()) == off);
    // The build goes on to the end and publishes the store.
    for (int i = 0; i < 1000 && files_ending(cache, ".idx") == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    CHECK(files_ending(cache, ".idx") == 1);
    CHECK(d.log().find("the token cache builds: serving while it builds") != std::string::npos);
  }
  Daemon warm(cfg, socket_of(dir, "cold"));
  CHECK(dump(warm.socket()) == off);
  CHECK(warm.log().find("reused in") != std::string::npos);
}
