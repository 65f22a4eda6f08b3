// Serving while the token cache fills (docs/data_model.md 4.1 and 6): with
// the default rules (samples left out: truncation = "drop", no trained
// token) and packed, the builders take the records in the first epoch's plan
// order and the workers serve the batches the built prefix decides. The
// first batch comes while the build runs; every rank's stream equals a warm
// run's and a run with the cache off, batch counts arriving after attach.
// A record that crashes the builders is left out of the plan made while
// building as a warm plan leaves it out. The test-only hook
// TOKFEED_FAULT_BUILD_RECORD_US slows each record's build.
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
std::string dataset(const TempDir& dir, int skip_line = 0) {
  std::ifstream in(data_path("sft/mixed-300.jsonl"), std::ios::binary);
  std::vector<std::string> rows;
  for (std::string line; std::getline(in, line);) rows.push_back(line);
  const std::string path = dir.file(skip_line ? "mixed-1199.jsonl" : "mixed-1200.jsonl");
  std::ofstream out(path, std::ios::binary);
  int n = 0;
  for (int i = 0; i < 4; ++i)
    for (const std::string& row : rows)
      if (++n != skip_line) out << row << '\n';
  return path;
}

std::string body(const std::string& data, const std::string& padding, const std::string& cache,
                 const std::string& batch = "", const std::string& schedule = "seed = 5\n",
                 const std::string& truncation = "drop") {
  return "[dataset]\npath = \"" + data + "\"\n[tokenizer]\ntype = \"sentencepiece\"\npath = \"" +
         data_path("tokenizers/sp32k/tokenizer.model") + "\"\ntemplate = \"chatml\"\n[batch]\nsize = 4\n" +
         "max_length = 128\ntruncation = \"" + truncation + "\"\npack_window = 64\npadding = \"" + padding + "\"\n" +
         batch + "[schedule]\nepochs = 2\n" + schedule + "[ranks]\nworld_size = 2\n[workers]\ncount = 2\n" +
         (cache.empty() ? "[cache]\nenabled = false\n" : "[cache]\ndir = \"" + cache + "\"\n");
}

std::string status(const Daemon& d) { return run(bin("tokfeedctl") + " -s '" + d.socket() + "' status --json").out; }

// The sum of every worker's "cpu_s" in a status text.
double workers_cpu(const std::string& st) {
  double sum = 0;
  const std::string key = "\"cpu_s\":";
  for (std::size_t at = st.find(key); at != std::string::npos; at = st.find(key, at + 1))
    sum += std::stod(st.substr(at + key.size()));
  return sum;
}

int count_of(const std::string& text, const std::string& what) {
  int n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

void wait_for_store(const std::string& cache) {
  for (int i = 0; i < 1500 && files_ending(cache, ".idx") == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

}  // namespace

TEST_CASE("default rules: the first batch comes while the cache builds; cold, warm and off streams equal per rank") {
  TempDir dir;
  const std::string data = dataset(dir);
  for (const char* padding : {"longest", "packed"}) {
    CAPTURE(padding);
    const std::string p = padding;
    // Packing needs the cache: there the warm run is the reference.
    std::vector<std::string> off[2];
    if (p != "packed") {
      Daemon d(write_job(dir, body(data, p, ""), p + "-off"), socket_of(dir, p + "-off"));
      for (uint32_t r : {0u, 1u}) off[r] = dump(d.socket(), r);
      REQUIRE(!off[0].empty());
      REQUIRE(off[0].size() == off[1].size());
    }
    std::vector<std::string> cold[2];
    const std::string cache = dir.file(p + "-cache");
    const std::string cfg = write_job(dir, body(data, p, cache), p + "-cold");
    {
      // 300 records per builder at 5 ms each: about 1.5 s of build.
      Daemon d(cfg, socket_of(dir, p + "-cold"), "TOKFEED_FAULT_BUILD_RECORD_US=5000");
      REQUIRE(run(bin("tokfeedctl") + " -s '" + d.socket() + "' drain --count 1").status == 0);
      const std::string st = status(d);
      CHECK(st.find("\"cache\":{\"state\":\"building\"") != std::string::npos);
      CHECK(st.find("\"plan_order\":true") != std::string::npos);
      CHECK(st.find("\"counts_known\":false") != std::string::npos);
      CHECK(json_int(st, "records_done") < 1200);
      // Counts arrive after attach: both ranks' streams, to their ends.
      for (uint32_t r : {0u, 1u}) {
        cold[r] = dump(d.socket(), r);
        REQUIRE(!cold[r].empty());
        if (p != "packed") CHECK(cold[r] == off[r]);
      }
      CHECK(cold[0].size() == cold[1].size());
      wait_for_store(cache);
      CHECK(files_ending(cache, ".idx") == 1);
      CHECK(files_ending(cache, ".part") == 0);
      CHECK(d.log().find("serving while it builds, in the order the first epoch's plan takes the records") !=
            std::string::npos);
      CHECK(status(d).find("\"counts_known\":true") != std::string::npos);
      // Every worker of the grown plans has built its share: it shows done
      // and sleeps until a client repositions (it does not spin).
      for (int i = 0; i < 100 && status(d).find("\"counts_known\":false") != std::string::npos; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      const std::string before = status(d);
      CHECK(count_of(before, "\"state\":\"done\"") == 4);
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      const std::string after = status(d);
      CHECK(count_of(after, "\"state\":\"done\"") == 4);
      CHECK(workers_cpu(after) - workers_cpu(before) < 0.3);
    }
    Daemon warm(cfg, socket_of(dir, p + "-cold"));
    for (uint32_t r : {0u, 1u}) CHECK(dump(warm.socket(), r) == cold[r]);
    CHECK(warm.log().find("reused in") != std::string::npos);
  }
}

TEST_CASE("while the cache builds, a start elsewhere than (0, 0) waits for the counts and resumes exactly") {
  TempDir dir;
  const std::string data = dataset(dir);
  std::vector<std::string> full;
  {
    Daemon d(write_job(dir, body(data, "longest", ""), "off"), socket_of(dir, "off"));
    full = dump(d.socket());
  }
  REQUIRE(full.size() > 10);
  const std::string cfg = write_job(dir, body(data, "longest", dir.file("cache")), "cold");
  Daemon d(cfg, socket_of(dir, "cold"), "TOKFEED_FAULT_BUILD_RECORD_US=3000");
  // Epoch 1 step 2: the stream from there, after the daemon has the counts.
  std::vector<std::string> got = dump(d.socket(), 0, "--epoch 1 --step 2");
  REQUIRE(!got.empty());
  CHECK(got.back() == full.back());
  CHECK(full.size() >= got.size());
  CHECK(std::equal(got.begin(), got.end(), full.end() - static_cast<std::ptrdiff_t>(got.size())));
}

TEST_CASE("a record that crashes the builders is left out of the plan made while building, as warm leaves it out") {
  TempDir dir;
  const std::string data = dataset(dir);
  for (const char* keep : {"false", "true"}) {
    CAPTURE(keep);
    const std::string batch = std::string("keep_untrained = ") + keep + "\n";
    // keep_untrained with right truncation leaves nothing out by the rules:
    // only the isolated record (a plan that once needed no facts kept it).
    const std::string truncation = std::string(keep) == "true" ? "right" : "drop";
    // In file order, so that the data without the record is planned alike.
    const std::string order = "shuffle = false\n";
    // The stream without the record: the data without line 5, cache off.
    std::vector<std::string> without;
    {
      const std::string less = dataset(dir, 5);
      Daemon d(write_job(dir, body(less, "longest", "", batch, order, truncation), "without"),
               socket_of(dir, "without"));
      without = dump(d.socket());
    }
    REQUIRE(!without.empty());
    const std::string cache = dir.file(std::string("cache-") + keep);
    const std::string cfg = write_job(dir, body(data, "longest", cache, batch, order, truncation), "crash");
    std::vector<std::string> cold;
    {
      Daemon d(cfg, socket_of(dir, "crash"), "TOKFEED_FAULT_CRASH_LINE=5 TOKFEED_FAULT_BUILD_RECORD_US=1000");
      cold = dump(d.socket());
      CHECK(status(d).find("mixed-1200.jsonl:5: record crashed a worker 3 times; skipping it") != std::string::npos);
      wait_for_store(cache);
    }
    CHECK(cold == without);
    Daemon warm(cfg, socket_of(dir, "crash"));
    CHECK(dump(warm.socket()) == without);
    CHECK(warm.log().find("reused in") != std::string::npos);
  }
}

TEST_CASE("workers tokenize the records their batches wait for ahead of slow builders; kill -9 keeps a whole cache") {
  TempDir dir;
  const std::string data = dataset(dir);
  for (const char* padding : {"longest", "packed"}) {
    CAPTURE(padding);
    const std::string p = padding;
    // The reference: cache off (padded), or a build nothing slowed (packed).
    std::vector<std::string> ref[2];
    {
      const std::string c = p == "packed" ? dir.file(p + "-ref-cache") : "";
      Daemon d(write_job(dir, body(data, p, c), p + "-ref"), socket_of(dir, p + "-ref"));
      for (uint32_t r : {0u, 1u}) ref[r] = dump(d.socket(), r);
      REQUIRE(!ref[0].empty());
    }
    const std::string cache = dir.file(p + "-cache");
    const std::string cfg = write_job(dir, body(data, p, cache), p + "-cold");
    {
      // 300 records per builder at 10 ms each: about 3 s of build, while
      // the workers tokenize what their batches wait for in well under 1 ms
      // a record.
      Daemon d(cfg, socket_of(dir, p + "-cold"), "TOKFEED_FAULT_BUILD_RECORD_US=10000");
      std::vector<std::string> cold[2];
      cold[0] = dump(d.socket(), 0, "--count 6");
      const std::string st = status(d);
      CHECK(st.find("\"cache\":{\"state\":\"building\"") != std::string::npos);
      CHECK(json_int(st, "records_found") > 0);
      CHECK(json_int(st, "records_done") < 1200);
      // Workers killed while they tokenize ahead (a claim left incomplete
      // is tokenized by its builder): restarted, the streams are unchanged.
      const std::vector<pid_t> workers = d.worker_pids();
      CHECK(workers.size() == 4);
      for (pid_t w : workers) ::kill(w, SIGKILL);
      for (uint32_t r : {0u, 1u}) cold[r] = dump(d.socket(), r);
      for (uint32_t r : {0u, 1u}) CHECK(cold[r] == ref[r]);
      CHECK(json_int(status(d), "restarts") > 0);
      d.wait_cache_built();
      // The builders copied what the workers found instead of tokenizing it.
      std::smatch m;
      const std::string log = d.log();
      REQUIRE(std::regex_search(
          log, m,
          std::regex("([0-9]+) of 1200 records were tokenized first by the workers.*\\(([0-9]+) of them copied")));
      CHECK(std::stoull(m[1]) > 0);
      CHECK(std::stoull(m[2]) > 0);
    }
    Daemon warm(cfg, socket_of(dir, p + "-cold"));
    for (uint32_t r : {0u, 1u}) CHECK(dump(warm.socket(), r) == ref[r]);
    CHECK(warm.log().find("reused in") != std::string::npos);

    // kill -9 while the workers run ahead of the builders: the parts hold
    // only what the builders wrote, and the next start builds the rest.
    const std::string killed = dir.file(p + "-killed");
    const std::string kcfg = write_job(dir, body(data, p, killed), p + "-killed");
    {
      Daemon d(kcfg, socket_of(dir, p + "-killed"), "TOKFEED_FAULT_BUILD_RECORD_US=10000");
      REQUIRE(dump(d.socket(), 1, "--count 12").size() == 12);
      CHECK(json_int(status(d), "records_found") > 0);
      std::this_thread::sleep_for(std::chrono::milliseconds(300));  // some records built
      d.stop(SIGKILL);
    }
    CHECK(files_ending(killed, ".idx") == 0);
    CHECK(files_ending(killed, ".part") == 4);
    Daemon again(kcfg, socket_of(dir, p + "-killed"));
    for (uint32_t r : {0u, 1u}) CHECK(dump(again.socket(), r) == ref[r]);
    CHECK(again.log().find("kept from an interrupted build") != std::string::npos);
  }
}

TEST_CASE("while the cache builds, a resume inside epoch 0 is served once the plan's prefix before it is known") {
  TempDir dir;
  const std::string data = dataset(dir);
  for (const char* padding : {"longest", "packed"}) {
    CAPTURE(padding);
    const std::string p = padding;
    // The whole stream of each rank: cache off (padded) or warm (packed).
    std::vector<std::string> full[2];
    const std::string cache = dir.file(p + "-cache");
    {
      Daemon d(write_job(dir, body(data, p, p == "packed" ? cache : ""), p + "-full"), socket_of(dir, p + "-full"));
      for (uint32_t r : {0u, 1u}) full[r] = dump(d.socket(), r);
    }
    REQUIRE(full[0].size() > 12);
    const std::string cold_cache = dir.file(p + "-cold");
    Daemon d(write_job(dir, body(data, p, cold_cache), p + "-cold"), socket_of(dir, p + "-cold"),
             "TOKFEED_FAULT_BUILD_RECORD_US=10000");
    // Epoch 0 step 5 while most records are not built: its batches come,
    // then the rest of the stream as the counts arrive.
    for (uint32_t r : {0u, 1u}) {
      CAPTURE(r);
      const std::vector<std::string> first = dump(d.socket(), r, "--epoch 0 --step 5 --count 2");
      const std::string st = status(d);
      CHECK(json_int(st, "records_done") < 1200);
      CHECK(st.find("\"counts_known\":false") != std::string::npos);
      REQUIRE(first.size() == 2);
      CHECK(first[0] == full[r][5]);
      CHECK(first[1] == full[r][6]);
    }
    for (uint32_t r : {0u, 1u}) {
      const std::vector<std::string> got = dump(d.socket(), r, "--epoch 0 --step 5");
      CHECK(std::vector<std::string>(full[r].begin() + 5, full[r].end()) == got);
    }
  }
}

TEST_CASE("with [eval], training serves while the cache builds and evaluation passes once it is built") {
  TempDir dir;
  const std::string data = dataset(dir);
  const std::string eval = "[eval]\nsplit_ratio = 0.1\nbatch_size = 3\n";
  for (const char* padding : {"longest", "packed"}) {
    CAPTURE(padding);
    const std::string p = padding;
    std::vector<std::string> train[2], passes[2];
    const std::string cache = dir.file(p + "-cache");
    const std::string cfg = write_job(dir, body(data, p, cache) + eval, p + "-cold");
    {
      Daemon d(cfg, socket_of(dir, p + "-cold"), "TOKFEED_FAULT_BUILD_RECORD_US=5000");
      REQUIRE(run(bin("tokfeedctl") + " -s '" + d.socket() + "' drain --count 1").status == 0);
      const std::string st = status(d);
      CHECK(st.find("\"plan_order\":true") != std::string::npos);
      CHECK(json_int(st, "records_done") < 1200);
      for (uint32_t r : {0u, 1u}) {
        train[r] = dump(d.socket(), r);
        passes[r] = dump(d.socket(), r, "--split eval");
        REQUIRE(!passes[r].empty());
      }
      CHECK(d.log().find("evaluation stream: served once the token cache is built") != std::string::npos);
    }
    Daemon warm(cfg, socket_of(dir, p + "-cold"));
    for (uint32_t r : {0u, 1u}) {
      CHECK(dump(warm.socket(), r) == train[r]);
      CHECK(dump(warm.socket(), r, "--split eval") == passes[r]);
    }
    CHECK(warm.log().find("reused in") != std::string::npos);
    if (p == "packed") continue;
    Daemon off(write_job(dir, body(data, p, "") + eval, p + "-off"), socket_of(dir, p + "-off"));
    for (uint32_t r : {0u, 1u}) {
      CHECK(dump(off.socket(), r) == train[r]);
      CHECK(dump(off.socket(), r, "--split eval") == passes[r]);
    }
  }
}

TEST_CASE("check_rows = \"when_read\" on JSONL: bad lines found late are named and left out; cold, warm, off equal") {
  TempDir dir;
  // mixed-300 four times over, with three bad lines: broken JSON near the
  // end, a record with no assistant turn, and one longer than
  // max_record_bytes, each where a record was.
  std::ifstream in(data_path("sft/mixed-300.jsonl"), std::ios::binary);
  std::vector<std::string> rows;
  for (std::string line; std::getline(in, line);) rows.push_back(line);
  const std::string bad = dir.file("bad-1200.jsonl"), clean = dir.file("clean-1197.jsonl");
  {
    std::ofstream b(bad, std::ios::binary), c(clean, std::ios::binary);
    int n = 0;
    for (int i = 0; i < 4; ++i)
      for (const std::string& row : rows) {
        ++n;
        if (n == 1150) b << "{\"messages\": [{\"role\": \"user\", \"content\": \"cut\"}\n";
        else if (n == 700) b << "{\"messages\": [{\"role\": \"user\", \"content\": \"alone\"}]}\r\n";
        else if (n == 40) b << "{\"messages\": \"" << std::string(20000, 'x') << "\"}\n";
        else b << row << '\n', c << row << '\n';
      }
  }
  const std::string rules = "check_rows = \"when_read\"\nmax_record_bytes = 16384\n";
  auto job = [&](const std::string& data, const std::string& cache, const std::string& extra,
                 const std::string& schedule) {
    std::string b = body(data, "longest", cache, "", schedule);
    return b.replace(b.find("[tokenizer]"), 0, extra);
  };
  // In file order a bad record left out where the plan puts it is the same
  // as a file without it: the clean file, checked at start, is the reference.
  for (const char* order : {"shuffle = false\n", "seed = 11\n"}) {
    CAPTURE(order);
    const bool in_order = std::string(order).starts_with("shuffle");
    std::vector<std::string> ref[2], off[2], cold[2];
    if (in_order) {
      Daemon d(write_job(dir, job(clean, "", "max_record_bytes = 16384\n", order), "clean"), socket_of(dir, "clean"));
      for (uint32_t r : {0u, 1u}) ref[r] = dump(d.socket(), r);
    }
    {
      Daemon d(write_job(dir, job(bad, "", rules, order), "off"), socket_of(dir, "off"));
      for (uint32_t r : {0u, 1u}) off[r] = dump(d.socket(), r);
      const std::string log = d.log();
      CHECK(log.find("bad-1200.jsonl:1150: bad record: ") != std::string::npos);
      CHECK(log.find("bad-1200.jsonl:700: bad record: no assistant turn; left out") != std::string::npos);
      CHECK(log.find("bad-1200.jsonl:40: bad record: record of 20016 bytes is longer than max_record_bytes = 16384") !=
            std::string::npos);
      CHECK(json_int(status(d), "bad_when_read") == 3);
    }
    REQUIRE(!off[0].empty());
    if (in_order)
      for (uint32_t r : {0u, 1u}) CHECK(off[r] == ref[r]);
    const std::string cache = dir.file(std::string("cache-") + (in_order ? "a" : "b"));
    const std::string cfg = write_job(dir, job(bad, cache, rules, order), "cold");
    {
      Daemon d(cfg, socket_of(dir, "cold"), "TOKFEED_FAULT_BUILD_RECORD_US=5000");
      REQUIRE(run(bin("tokfeedctl") + " -s '" + d.socket() + "' drain --count 1").status == 0);
      CHECK(status(d).find("\"counts_known\":false") != std::string::npos);  // served before any record was checked
      for (uint32_t r : {0u, 1u}) CHECK((cold[r] = dump(d.socket(), r)) == off[r]);
      wait_for_store(cache);
      CHECK(json_int(status(d), "bad_when_read") == 3);
      CHECK(d.log().find("bad-1200.jsonl:1150: bad record: ") != std::string::npos);
    }
    {
      Daemon warm(cfg, socket_of(dir, "cold"));
      for (uint32_t r : {0u, 1u}) CHECK(dump(warm.socket(), r) == cold[r]);
      CHECK(warm.log().find("reused in") != std::string::npos);
      CHECK(warm.log().find("0 shard(s) indexed") != std::string::npos);
    }
    // The same cache dir under check_rows = "start": the unchecked index is
    // not taken for a checked one; the bad records leave the valid records.
    if (in_order) {
      Daemon start(
          write_job(dir, job(bad, cache, "check_rows = \"start\"\nmax_record_bytes = 16384\n", order), "start"),
          socket_of(dir, "start"));
      for (uint32_t r : {0u, 1u}) CHECK(dump(start.socket(), r) == ref[r]);
      CHECK(start.log().find("1 shard(s) indexed") != std::string::npos);
      CHECK(start.log().find("bad-1200.jsonl:1150: bad record skipped") != std::string::npos);
    }
  }
  // --check-config reads every record: it lists the bad ones by line.
  Output cc = run("timeout 120 " + bin("tokfeedd") + " --check-config '" +
                  write_job(dir, job(bad, "", rules, "seed = 1\n"), "cc") + "' 2>&1");
  CHECK(cc.out.find("bad-1200.jsonl:40: ") != std::string::npos);
  CHECK(cc.out.find("bad-1200.jsonl:700: ") != std::string::npos);
  CHECK(cc.out.find("bad-1200.jsonl:1150: ") != std::string::npos);
}
