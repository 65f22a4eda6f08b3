// Datasets as users have them (docs/data_model.md 1.1): mixing with counts
// and weights, shards from globs and directories, gzip and zstd shards, the
// index cache, column renames, and the errors bad files give.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <map>
#include <sstream>

#include "harness.hpp"

using namespace tokfeed::testing;
namespace fs = std::filesystem;

namespace {

std::string tok_and_batch(const std::string& batch = "size = 4\nmax_length = 512\n") {
  return "[tokenizer]\ntype = \"sentencepiece\"\npath = \"" + data_path("tokenizers/sp32k/tokenizer.model") +
         "\"\ntemplate = \"mistral\"\n[batch]\n" + batch;
}

// The cache off with nothing to find before serving (keep_untrained, right
// truncation): the workers read and tokenize the records as they serve.
std::string lazy_batch() { return tok_and_batch("size = 4\nmax_length = 512\nkeep_untrained = true\n"); }

// One `[[datasets]]` table: its path, then `rest` (more keys and subtables).
std::string entry(const std::string& path, const std::string& rest = "") {
  return "[[datasets]]\npath = \"" + path + "\"\n" + rest;
}

Output check(const std::string& config) { return run(bin("tokfeedd") + " --check-config '" + config + "'"); }

void copy(const std::string& from, const std::string& to) {
  fs::create_directories(fs::path(to).parent_path());
  fs::copy_file(from, to, fs::copy_options::overwrite_existing);
}

// The first `n` lines of a bundled file, written to `to`.
void head(const std::string& from, std::size_t n, const std::string& to) {
  std::ifstream in(from);
  std::ofstream out(to);
  std::string line;
  for (std::size_t i = 0; i < n && std::getline(in, line); ++i) out << line << "\n";
}

// `copies` of the bundled mixed-300.jsonl (525 KB) in one file of `dir`.
std::string repeated(const TempDir& dir, const std::string& name, int copies) {
  std::string part = slurp(data_path("sft/mixed-300.jsonl"));
  std::string path = dir.file(name);
  std::ofstream out(path);
  for (int i = 0; i < copies; ++i) out << part;
  return path;
}

// `max_gb = ` for a bound of `bytes`.
std::string fmt_max(uint64_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "max_gb = %.9f\n", static_cast<double>(bytes) / 1e9);
  return buf;
}

std::string status_json(const Daemon& d) {
  return run(bin("tokfeedctl") + " -s '" + d.socket() + "' status --json").out;
}

}  // namespace

TEST_CASE("a mix with samples below and above each dataset's size equals the reference over two epochs") {
  TempDir dir;
  std::string body = entry(data_path("sft/messages-100.jsonl"), "samples = 30\n") +
                     entry(data_path("sft/alpaca-100.jsonl"), "samples = 250\n") +
                     entry(data_path("sft/sharegpt-100.jsonl")) +
                     tok_and_batch("size = 4\nmax_length = 512\nkeep_untrained = true\n") +
                     "[schedule]\nepochs = 2\n[ranks]\nworld_size = 2\n";
  std::string cfg = write_job(dir, body);
  Daemon d(cfg, socket_of(dir));
  for (uint32_t r = 0; r < 2; ++r) {
    std::vector<std::string> ours = dump(d.socket(), r);
    // 30 + 250 + 100 samples an epoch (untrained ones kept), over 2 ranks in
    // batches of 4: 48 batches per rank per epoch.
    CHECK(ours.size() == 96);
    require_equal(ours, reference(cfg, r), "rank " + std::to_string(r));
  }
  std::string st = status_json(d);
  CHECK(st.find("\"samples_per_epoch\":380") != std::string::npos);
  for (const char* per : {"\"samples_per_epoch\":30,", "\"samples_per_epoch\":250,", "\"samples_per_epoch\":100,"})
    CHECK_MESSAGE(st.find(per) != std::string::npos, per);
  CHECK(d.stop(SIGTERM) == 0);
}

TEST_CASE("a mix packs like any epoch: repeated records are packed as often as drawn, equal to the reference") {
  TempDir dir;
  std::string body = entry(data_path("sft/alpaca-100.jsonl"), "samples = 170\n") +
                     entry(data_path("sft/sharegpt-100.jsonl"), "samples = 45\n") +
                     tok_and_batch("size = 2\nmax_length = 512\npadding = \"packed\"\npack_window = 64\n") +
                     "[schedule]\nepochs = 2\n[ranks]\nworld_size = 2\n";
  std::string cfg = write_job(dir, body);
  Daemon d(cfg, socket_of(dir));
  for (uint32_t r = 0; r < 2; ++r) require_equal(dump(d.socket(), r), reference(cfg, r), "rank " + std::to_string(r));
  CHECK(d.stop(SIGTERM) == 0);
}

TEST_CASE("weights share the epoch with fixed counts, as the reference reads them") {
  TempDir dir;
  std::string body = entry(data_path("sft/query_response-100.jsonl"), "samples = 60\n") +
                     entry(data_path("sft/alpaca-100.jsonl"), "weight = 0.25\n") +
                     entry(data_path("sft/messages-100.jsonl"), "weight = 0.15\n") + tok_and_batch() +
                     "[schedule]\nepochs = 2\n";
  std::string cfg = write_job(dir, body);
  // T = floor(60 / 0.6 + 0.5) = 100: 40 weighted samples, 25 and 15.
  Output o = check(cfg);
  REQUIRE_MESSAGE(o.status == 0, o.err);
  CHECK(o.out.find("alpaca-100.jsonl: 1 shard(s), 100 records, 100 valid, 0 bad, 25 samples per epoch") !=
        std::string::npos);
  CHECK(o.out.find("messages-100.jsonl: 1 shard(s), 100 records, 100 valid, 0 bad, 15 samples per epoch") !=
        std::string::npos);
  Daemon d(cfg, socket_of(dir));
  require_equal(dump(d.socket()), reference(cfg), "weighted mix");
}

TEST_CASE("shards from a directory and a glob: sorted, gzip and zstd read as the plain files") {
  TempDir dir;
  // Three shards; their sorted order is a.jsonl.gz, b.jsonl, sub/c.jsonl.zst.
  const std::string m = data_path("sft/mixed-300.jsonl");
  fs::create_directories(dir.file("parts/sub"));
  head(m, 120, dir.file("parts/a.jsonl"));
  {
    std::ifstream in(m);
    std::ofstream b(dir.file("parts/b.jsonl")), c(dir.file("c.jsonl"));
    std::string line;
    for (int i = 0; std::getline(in, line); ++i) {
      if (i >= 120 && i < 200) b << line << "\n";
      if (i >= 200) c << line << "\n";
    }
  }
  REQUIRE(run("gzip -n '" + dir.file("parts/a.jsonl") + "'").status == 0);
  REQUIRE(run("zstd -q --rm '" + dir.file("c.jsonl") + "' -o '" + dir.file("parts/sub/c.jsonl.zst") + "'").status == 0);
  std::ofstream(dir.file("parts/notes.txt")) << "not a dataset\n";

  std::string plain = write_job(dir, "[dataset]\npath = \"" + m + "\"\n" + tok_and_batch(), "plain");
  std::string by_dir = write_job(dir, "[dataset]\npath = \"" + dir.file("parts") + "\"\n" + tok_and_batch(), "dir");
  std::vector<std::string> want;
  {
    Daemon d(plain, socket_of(dir, "plain"));
    want = dump(d.socket());
  }
  {
    Daemon d(by_dir, socket_of(dir, "dir"));
    require_equal(dump(d.socket()), want, "directory of shards");
    CHECK(status_json(d).find("\"shards\":3") != std::string::npos);
  }
  // The decompressed spools are kept in the cache directory for the next start.
  int spools = 0;
  for (const auto& e : fs::directory_iterator(dir.file("cache/spool"))) spools += e.path().extension() == ".jsonl";
  CHECK(spools == 2);
  // The same shards through a glob, compressed ones only matched by their names.
  std::string glob =
      write_job(dir, "[dataset]\npath = \"" + dir.file("parts/*.jsonl*") + "\"\n" + tok_and_batch(), "glob");
  Output o = check(glob);
  REQUIRE_MESSAGE(o.status == 0, o.err);
  CHECK(o.out.find("2 shard(s), 200 records") != std::string::npos);
  // And the reference reads the directory the same way.
  require_equal(want, reference(by_dir), "reference over the directory");
}

// The token cache store `--check-config` names ("# token cache: PATH ...").
std::string token_store(const Output& o) {
  std::size_t at = o.out.find("# token cache: ");
  return at == std::string::npos ? "" : o.out.substr(at + 15, o.out.find(' ', at + 15) - at - 15);
}

TEST_CASE("the index cache: a second start indexes nothing; a changed shard is indexed again") {
  TempDir dir;
  head(data_path("sft/mixed-300.jsonl"), 100, dir.file("a.jsonl"));
  head(data_path("sft/alpaca-100.jsonl"), 50, dir.file("b.jsonl"));
  std::string cfg = write_job(dir, "[dataset]\npath = \"" + dir.file("*.jsonl") + "\"\n" + tok_and_batch());
  Output first = check(cfg), second = check(cfg);
  REQUIRE_MESSAGE(first.status == 0, first.err);
  CHECK(first.out.find("(2 of 2 shards indexed") != std::string::npos);
  CHECK(second.out.find("(0 of 2 shards indexed") != std::string::npos);
  CHECK(second.out.find("150 records") != std::string::npos);
  // Append one record to b: only b is indexed again, and the count follows.
  std::string extra;
  {
    std::ifstream in(data_path("sft/alpaca-100.jsonl"));
    for (int i = 0; i < 60; ++i) std::getline(in, extra);
  }
  std::ofstream(dir.file("b.jsonl"), std::ios::app) << extra << "\n";
  Output third = check(cfg);
  CHECK(third.out.find("(1 of 2 shards indexed") != std::string::npos);
  CHECK(third.out.find("151 records") != std::string::npos);
  // The token cache follows the index: the same store while nothing changed,
  // another one for the changed shard.
  REQUIRE(!token_store(first).empty());
  CHECK(token_store(second) == token_store(first));
  CHECK(token_store(third) != token_store(first));
  // A same-size edit in the middle of a: indexed again, another store.
  std::string a = slurp(dir.file("a.jsonl"));
  std::size_t mid = a.find("\"content\": \"", a.size() / 2) + 12;
  REQUIRE(mid > 12);
  a[mid] = a[mid] == 'x' ? 'y' : 'x';
  std::ofstream(dir.file("a.jsonl"), std::ios::trunc) << a;
  Output fourth = check(cfg);
  CHECK(fourth.out.find("(1 of 2 shards indexed") != std::string::npos);
  CHECK(fourth.out.find("151 records") != std::string::npos);
  CHECK(token_store(fourth) != token_store(third));
}

namespace {

// Sets a file's access and modification times to `age` seconds ago.
void age_file(const std::string& path, int age) {
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  struct timespec t[2] = {{now.tv_sec - age, 0}, {now.tv_sec - age, 0}};
  REQUIRE(::utimensat(AT_FDCWD, path.c_str(), t, 0) == 0);
}

uint64_t bytes_under(const std::string& dir) {
  uint64_t n = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) n += e.file_size();
  return n;
}

}  // namespace

TEST_CASE("[cache] max_gb: a start removes the least recently used entries, never its own or one in use") {
  TempDir dir;
  const std::string cache = dir.file("cache");
  std::vector<std::string> cfgs, stores;
  for (int j = 0; j < 3; ++j) {
    std::string name = "job" + std::to_string(j), data = dir.file(name + ".jsonl");
    head(data_path("sft/mixed-300.jsonl"), 40 + 10 * j, data);
    cfgs.push_back(write_job(
        dir, "[dataset]\npath = \"" + data + "\"\n" + tok_and_batch() + "[cache]\ndir = \"" + cache + "\"\n", name));
    Daemon d(cfgs[j], socket_of(dir, name));
    REQUIRE(run(bin("tokfeedctl") + " -s '" + d.socket() + "' drain --count 1").status == 0);
    d.wait_cache_built();  // the first batch may come before the store is built
    CHECK(d.stop(SIGTERM) == 0);
    stores.push_back(token_store(check(cfgs[j])));
    REQUIRE(fs::exists(stores[j]));
  }
  auto bin_of = [](const std::string& idx) { return idx.substr(0, idx.size() - 4) + ".bin"; };
  // Oldest first: the saved indexes, then job 0's store, then job 1's.
  for (const auto& e : fs::directory_iterator(cache + "/index")) age_file(e.path(), 3000);
  for (int j = 0; j < 2; ++j) age_file(stores[j], 2000 - 1000 * j), age_file(bin_of(stores[j]), 2000 - 1000 * j);
  // Room for job 1's and job 2's stores and job 2's index: the other
  // indexes and job 0's store go, in that order.
  uint64_t room = 0;
  for (int j = 1; j < 3; ++j) room += fs::file_size(stores[j]) + fs::file_size(bin_of(stores[j]));
  room += 4096;  // job 2's index (a few hundred bytes)
  auto with_max = [&](uint64_t bytes) {
    std::string body = slurp(cfgs[2]);
    std::ofstream(cfgs[2] + ".max.toml") << body.insert(body.find("[cache]\n") + 8, fmt_max(bytes));
    return cfgs[2] + ".max.toml";
  };
  {
    Daemon d(with_max(room), socket_of(dir, "job2"));
    REQUIRE(run(bin("tokfeedctl") + " -s '" + d.socket() + "' drain --count 1").status == 0);
    d.wait_cache_built();
    CHECK(d.stop(SIGTERM) == 0);
    CHECK_MESSAGE(
        d.log().find("cache trim: removed " + fs::path(bin_of(stores[0])).filename().string()) != std::string::npos,
        d.log());
  }
  CHECK_FALSE(fs::exists(stores[0]));
  CHECK_FALSE(fs::exists(bin_of(stores[0])));
  CHECK(fs::exists(stores[1]));
  CHECK(fs::exists(stores[2]));
  CHECK(bytes_under(cache) <= room);
  // Job 2's index stayed: its next start indexes nothing.
  CHECK(check(cfgs[2]).out.find("(0 of 1 shards indexed") != std::string::npos);
  // With job 1 served, a bound of 1 byte still leaves its store and job 2's own.
  Daemon one(cfgs[1], socket_of(dir, "job1"));
  REQUIRE(run(bin("tokfeedctl") + " -s '" + one.socket() + "' drain --count 1").status == 0);
  {
    Daemon d(with_max(1), socket_of(dir, "job2"));
    REQUIRE(run(bin("tokfeedctl") + " -s '" + d.socket() + "' drain --count 1").status == 0);
    CHECK(d.stop(SIGTERM) == 0);
    CHECK_MESSAGE(d.log().find("still over, what is left is in use (1 token store(s) held by other daemons)") !=
                      std::string::npos,
                  d.log());
  }
  CHECK(fs::exists(stores[1]));
  CHECK(fs::exists(stores[2]));
  CHECK(run(bin("tokfeedctl") + " -s '" + one.socket() + "' drain --count 4").status == 0);  // still serving
}

TEST_CASE("columns rename fields before detection, and each dataset has its own placeholders") {
  TempDir dir;
  // Alpaca records with their fields renamed, and the self-cognition set twice with other names.
  {
    std::ifstream in(data_path("sft/alpaca-100.jsonl"));
    std::ofstream out(dir.file("renamed.jsonl"));
    std::string line;
    for (int i = 0; i < 40 && std::getline(in, line); ++i) {
      for (auto [from, to] : {std::pair{"\"instruction\":", "\"ask\":"}, {"\"output\":", "\"answer\":"}})
        if (auto at = line.find(from); at != std::string::npos) line.replace(at, std::string(from).size(), to);
      out << line << "\n";
    }
  }
  std::string sc = data_path("sft/self_cognition.json");
  std::string body =
      entry(dir.file("renamed.jsonl"), "columns = { ask = \"instruction\", answer = \"output\" }\n") +
      entry(sc, "samples = 20\n[datasets.placeholders]\nNAME = \"tokfeed-bot\"\nAUTHOR = \"the tokfeed team\"\n") +
      entry(sc, "samples = 20\n[datasets.placeholders]\nNAME = \"Other\"\nAUTHOR = \"someone else\"\n") +
      tok_and_batch() + "[schedule]\nseed = 7\n";
  std::string cfg = write_job(dir, body);
  Output o = check(cfg);
  REQUIRE_MESSAGE(o.status == 0, o.err);
  CHECK(o.out.find("renamed.jsonl: 1 shard(s), 40 records, 40 valid, 0 bad") != std::string::npos);
  Daemon d(cfg, socket_of(dir));
  std::vector<std::string> ours = dump(d.socket());
  require_equal(ours, reference(cfg), "columns and placeholders");
  // Without the renames no record has a format.
  std::string bare =
      write_job(dir, "[dataset]\npath = \"" + dir.file("renamed.jsonl") + "\"\n" + tok_and_batch(), "bare");
  Output b = check(bare);
  CHECK(b.status != 0);
  CHECK(b.err.find("no valid records") != std::string::npos);
}

TEST_CASE("damaged files: truncated gzip, invalid UTF-8, a trailing comma in a JSON array") {
  TempDir dir;
  const std::string m = data_path("sft/mixed-300.jsonl");
  SUBCASE("a truncated gzip shard names the file and the compressed byte offset") {
    copy(m, dir.file("d/a.jsonl"));
    REQUIRE(run("gzip -n '" + dir.file("d/a.jsonl") + "'").status == 0);
    fs::resize_file(dir.file("d/a.jsonl.gz"), fs::file_size(dir.file("d/a.jsonl.gz")) / 2);
    Output o = check(write_job(dir, "[dataset]\npath = \"" + dir.file("d") + "\"\n" + tok_and_batch()));
    CHECK(o.status != 0);
    CHECK_MESSAGE(o.err.find(dir.file("d/a.jsonl.gz") + ": byte ") != std::string::npos, o.err);
    CHECK(o.err.find("truncated gzip stream") != std::string::npos);
    // Nothing half-written is left as a spool.
    for (const auto& e : fs::recursive_directory_iterator(dir.file("cache")))
      CHECK(e.path().string().find(".jsonl") == std::string::npos);
  }
  SUBCASE("gzip members one after another, with zero padding after the last, read as one file") {
    head(m, 30, dir.file("one.jsonl"));
    std::string text = slurp(dir.file("one.jsonl"));
    std::ofstream(dir.file("p1.jsonl")) << text.substr(0,
                                                       text.size() / 2 + 1 + text.substr(text.size() / 2).find('\n'));
    std::ofstream(dir.file("p2.jsonl")) << text.substr(text.size() / 2 + 1 + text.substr(text.size() / 2).find('\n'));
    REQUIRE(run("cd '" + dir.path() +
                "' && gzip -nc p1.jsonl > g/two.jsonl.gz 2>/dev/null || (mkdir -p g && gzip -nc "
                "p1.jsonl > g/two.jsonl.gz) && gzip -nc p2.jsonl >> g/two.jsonl.gz && head -c 512 /dev/zero >> "
                "g/two.jsonl.gz")
                .status == 0);
    Output o = check(write_job(dir, "[dataset]\npath = \"" + dir.file("g") + "\"\n" + tok_and_batch()));
    REQUIRE_MESSAGE(o.status == 0, o.err);
    CHECK(o.out.find("1 shard(s), 30 records, 30 valid, 0 bad") != std::string::npos);
  }
  SUBCASE("a shard with invalid UTF-8: counted under skip, named by file and line under fail") {
    head(m, 10, dir.file("u.jsonl"));
    std::string text = slurp(dir.file("u.jsonl"));
    std::size_t line4 = 0;
    for (int i = 0; i < 3; ++i) line4 = text.find('\n', line4) + 1;
    std::size_t q = text.find("\": \"", line4);  // the first string value on line 4
    REQUIRE(q != std::string::npos);
    text.insert(q + 4, "\xC3\x28");
    std::ofstream(dir.file("u.jsonl"), std::ios::trunc) << text;
    Output skip = check(write_job(dir, "[dataset]\npath = \"" + dir.file("u.jsonl") + "\"\n" + tok_and_batch(), "s"));
    REQUIRE_MESSAGE(skip.status == 0, skip.err);
    CHECK(skip.out.find("10 records, 9 valid, 1 bad") != std::string::npos);
    CHECK(skip.out.find(dir.file("u.jsonl") + ":4: malformed JSON") != std::string::npos);
    Output fail = check(write_job(
        dir, "[dataset]\npath = \"" + dir.file("u.jsonl") + "\"\non_bad_record = \"fail\"\n" + tok_and_batch(), "f"));
    CHECK(fail.status != 0);
    CHECK(fail.err.find(dir.file("u.jsonl") + ":4: bad record: malformed JSON") != std::string::npos);
  }
  SUBCASE("a JSON array with a trailing comma names the file, line and byte") {
    std::ofstream(dir.file("arr.json")) << "[\n  {\"query\": \"q\", \"response\": \"r\"},\n]\n";
    Output o = check(write_job(dir, "[dataset]\npath = \"" + dir.file("arr.json") + "\"\n" + tok_and_batch()));
    CHECK(o.status != 0);
    CHECK_MESSAGE(
        o.err.find(dir.file("arr.json") + ":3: byte 37: broken JSON array: trailing comma") != std::string::npos,
        o.err);
  }
  SUBCASE("config errors name the dataset entry") {
    std::string both = entry(m, "samples = 5\nweight = 0.5\n") + tok_and_batch();
    Output o = check(write_job(dir, both, "both"));
    CHECK(o.err.find("[datasets.0] weight: give samples or weight, not both") != std::string::npos);
    std::string over = entry(m) + entry(m, "weight = 1.5\n") + tok_and_batch();
    o = check(write_job(dir, over, "over"));
    CHECK(o.err.find("must add up to less than 1") != std::string::npos);
    o = check(write_job(dir, "[dataset]\npath = \"" + dir.file("none/*.jsonl") + "\"\n" + tok_and_batch(), "none"));
    CHECK(o.err.find("the glob matches no file") != std::string::npos);
  }
}

namespace {

// Summed proportional set size (KiB) of a daemon and its workers: all of
// it, or one part ("Pss_Anon:").
uint64_t summed_pss_kib(Daemon& d, const std::string& part = "Pss:") {
  std::vector<pid_t> pids = d.worker_pids();
  pids.push_back(d.pid());
  uint64_t total = 0;
  for (pid_t p : pids) {
    std::istringstream in(slurp("/proc/" + std::to_string(p) + "/smaps_rollup"));
    std::string key;
    uint64_t kib;
    while (in >> key) {
      if (key == part && in >> kib) total += kib;
      in.ignore(1 << 20, '\n');
    }
  }
  return total;
}

// Serves `data` with 1 and then 4 workers (no token cache: the workers read
// the records from the mapping), drains 64 batches and calls look(daemon,
// workers) while it serves.
void with_1_and_4_workers(const TempDir& dir, const std::string& data, const std::function<void(Daemon&, int)>& look) {
  for (int workers : {1, 4}) {
    CAPTURE(workers);
    std::string name = "w" + std::to_string(workers);
    std::string cfg = write_job(dir,
                                "[dataset]\npath = \"" + data + "\"\n" + lazy_batch() +
                                    "[workers]\ncount = " + std::to_string(workers) + "\n[cache]\nenabled = false\n",
                                name);
    Daemon d(cfg, socket_of(dir, name));
    // Every worker builds batches from all over the file.
    REQUIRE(run(bin("tokfeedctl") + " -s '" + d.socket() + "' drain --count 64").status == 0);
    look(d, workers);
    CHECK(d.stop(SIGTERM) == 0);
  }
}

}  // namespace

TEST_CASE("a 200 MB file is indexed once, with progress, and workers share it: PSS does not grow per worker") {
  TempDir dir;
  std::string big = repeated(dir, "big.jsonl", 400);
  const uint64_t bytes = fs::file_size(big);
  std::map<int, uint64_t> pss;
  with_1_and_4_workers(dir, big, [&](Daemon& d, int workers) {
    std::string st = status_json(d);
    CHECK(st.find("\"state\":\"ready\"") != std::string::npos);
    CHECK(st.find("\"bytes_done\":" + std::to_string(bytes) + ",\"bytes_total\":" + std::to_string(bytes)) !=
          std::string::npos);
    CHECK(st.find("\"records\":120000") != std::string::npos);
    CHECK(d.log().find("datasets indexed in ") != std::string::npos);
    pss[workers] = summed_pss_kib(d);
  });
  MESSAGE("summed PSS: 1 worker " << pss[1] / 1024 << " MiB, 4 workers " << pss[4] / 1024 << " MiB, file "
                                  << bytes / (1 << 20) << " MiB");
  // Three more workers that each held a copy of the file would add 600 MiB.
  CHECK(pss[4] < pss[1] + 3 * 40 * 1024);
  CHECK(pss[4] * 1024 < bytes + 200ull * 1024 * 1024);
}

TEST_CASE("a million small records: the epoch's order is held once, not once per worker") {
  TempDir dir;
  const int records = 1'000'000;
  std::string data = dir.file("small.jsonl");
  {
    std::ofstream out(data);
    for (int i = 0; i < records; ++i) out << "{\"query\": \"q" << i << "\", \"response\": \"r\"}\n";
  }
  std::map<int, uint64_t> anon;
  with_1_and_4_workers(dir, data, [&](Daemon& d, int workers) { anon[workers] = summed_pss_kib(d, "Pss_Anon:"); });
  MESSAGE("summed anonymous PSS: 1 worker " << anon[1] / 1024 << " MiB, 4 workers " << anon[4] / 1024 << " MiB");
  // The epoch's order is 4 MB (4 bytes a sample): a copy in every worker
  // would add 12 MB for three more workers on top of their own heaps (3-4 MiB
  // each as measured, more while they fill their ring slots), so above 21 MiB.
  CHECK(anon[4] < anon[1] + 3 * 5 * 1024);
}

TEST_CASE("a dataset file truncated while served stops the daemon, naming it, instead of a crash loop") {
  TempDir dir;
  std::string data = repeated(dir, "big.jsonl", 8);  // 2,400 records, 4.2 MB
  // Without the token cache the workers read the records from the mapping.
  std::string cfg = write_job(
      dir, "[dataset]\npath = \"" + data + "\"\n" + lazy_batch() + "[workers]\ncount = 2\n[cache]\nenabled = false\n");
  Daemon d(cfg, socket_of(dir));
  const std::string drain = bin("tokfeedctl") + " -s '" + d.socket() + "' drain --count ";
  REQUIRE(run(drain + "8").status == 0);  // serving
  const uint64_t before = fs::file_size(data);
  fs::resize_file(data, before / 4);
  // The shuffled epoch soon needs a record past the new end.
  Output o = run(drain + "600");
  CHECK(o.status != 0);
  CHECK(d.wait() == 1);
  const std::string log = d.log();
  CHECK_MESSAGE(log.find(data + ": the file shrank from " + std::to_string(before) + " to " +
                         std::to_string(before / 4) + " bytes while tokfeedd served it") != std::string::npos,
                log);
  CHECK_MESSAGE(log.find("restarting it") == std::string::npos, log);
  CHECK_MESSAGE(log.find("skipping it") == std::string::npos, log);
  CHECK_FALSE(fs::exists(socket_of(dir)));
}

TEST_CASE("a bad record under on_bad_record = \"fail\" stops the daemon at start, naming the file and line") {
  TempDir dir;
  head(data_path("sft/mixed-300.jsonl"), 6, dir.file("d.jsonl"));
  std::ofstream(dir.file("d.jsonl"), std::ios::app) << "{\"query\": \"q\"}\n";
  std::string cfg =
      write_job(dir, "[dataset]\npath = \"" + dir.file("d.jsonl") + "\"\non_bad_record = \"fail\"\n" + tok_and_batch());
  // The socket answers while the datasets are indexed (for so small a file,
  // too briefly to catch); then the daemon exits and removes it.
  Output o = run(bin("tokfeedd") + " --config '" + cfg + "'");
  CHECK(o.status == 1);
  CHECK_MESSAGE(
      o.err.find("error: " + dir.file("d.jsonl") + ":7: bad record: unrecognized record") != std::string::npos, o.err);
  CHECK_FALSE(fs::exists(socket_of(dir)));
}

namespace {

// `tokfeedctl status --json`, parsed only as far as this test needs.
uint64_t json_number(const std::string& json, const std::string& key) {
  std::size_t at = json.find("\"" + key + "\":");
  REQUIRE_MESSAGE(at != std::string::npos, key);
  return std::stoull(json.substr(at + key.size() + 3));
}

}  // namespace

TEST_CASE("indexing shows its progress in status while the socket answers, and a stop cancels it") {
  TempDir dir;
  // 6 chunks of the index, each slowed to 600 ms by the test-only hook: the
  // index takes at least 1.8 s on 2 threads.
  std::string big = repeated(dir, "big.jsonl", 90);
  std::string cfg = write_job(dir, "[dataset]\npath = \"" + big + "\"\n" + lazy_batch() + "[cache]\nenabled = false\n");
  const std::string hook = "TOKFEED_FAULT_INDEX_CHUNK_MS=600";
  {
    Daemon d(cfg, socket_of(dir), hook);
    std::string st = status_json(d);
    CHECK(st.find("\"state\":\"indexing\"") != std::string::npos);
    CHECK(json_number(st, "bytes_total") == fs::file_size(big));
    CHECK(json_number(st, "bytes_done") < fs::file_size(big));
    CHECK(run(bin("tokfeedctl") + " -s '" + d.socket() + "' status").out.find("dataset    indexing: shard 0/1") !=
          std::string::npos);
    // A client attaching now waits for the index, then gets the whole epoch.
    Output drained = run(bin("tokfeedctl") + " -s '" + d.socket() + "' drain");
    REQUIRE(drained.status == 0);
    CHECK(drained.out.find("\"samples\":27000") != std::string::npos);
    st = status_json(d);
    CHECK(st.find("\"state\":\"ready\"") != std::string::npos);
    CHECK(json_number(st, "bytes_done") == fs::file_size(big));
  }
  {
    Daemon d(cfg, socket_of(dir), hook);
    auto t0 = std::chrono::steady_clock::now();
    CHECK(d.stop(SIGTERM) == 0);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    MESSAGE("stopped during indexing in " << s << " s");
    CHECK(s < 1.5);  // not the whole index (1.8 s): the chunks being indexed finish, the others are not started
  }
  // Decompressing stops too, between two 1 MiB pieces (each slowed to 600
  // ms: 15 of them, 9 s in all), and leaves no spool behind.
  for (const std::string compress : {"gzip -n -c", "zstd -q -c"}) {
    CAPTURE(compress);
    TempDir zdir;
    std::string plain = repeated(zdir, "big.jsonl", 30);
    std::string packed = plain + (compress[0] == 'g' ? ".gz" : ".zst");
    REQUIRE(run(compress + " '" + plain + "' > '" + packed + "' && rm '" + plain + "'").status == 0);
    std::string zcfg = write_job(zdir, "[dataset]\npath = \"" + packed + "\"\n" + tok_and_batch());
    Daemon d(zcfg, socket_of(zdir), hook);
    CHECK(status_json(d).find("\"state\":\"indexing\"") != std::string::npos);
    auto t0 = std::chrono::steady_clock::now();
    CHECK(d.stop(SIGTERM) == 0);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    MESSAGE("stopped during decompression in " << s << " s");
    CHECK(s < 1.5);
    std::size_t left = 0;
    std::error_code ec;
    for (auto it = fs::directory_iterator(zdir.file("cache/spool"), ec); !ec && it != fs::directory_iterator(); ++it)
      ++left;
    CHECK(left == 0);
  }
}
