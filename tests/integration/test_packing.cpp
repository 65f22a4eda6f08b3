// Packing, the token cache, resume, one daemon per node, and elastic resume
// (docs/data_model.md sections 4.1-4.3, 5 and 6): the daemon's batches equal
// the independent reference's byte for byte.
#include <doctest/doctest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <tuple>
#include <thread>

#include "harness.hpp"

using namespace tokfeed::testing;
namespace fs = std::filesystem;

namespace {

std::string job(const std::string& batch, const std::string& rest = "",
                const std::string& dataset = data_path("sft/mixed-300.jsonl")) {
  return "[dataset]\npath = \"" + dataset + "\"\n[tokenizer]\ntype = \"sentencepiece\"\npath = \"" +
         data_path("tokenizers/sp32k/tokenizer.model") + "\"\ntemplate = \"mistral\"\n[batch]\n" + batch + rest;
}

// Samples in a packed dump line: cu_seqlens has one more entry.
std::size_t samples_in(const std::string& line) {
  auto at = line.find("\"cu_seqlens\":[");
  REQUIRE(at != std::string::npos);
  auto end = line.find(']', at);
  return static_cast<std::size_t>(std::count(line.begin() + at, line.begin() + end, ','));
}

std::string status_json(const Daemon& d) {
  return run(bin("tokfeedctl") + " -s '" + d.socket() + "' status --json").out;
}

int cache_files(const std::string& dir, const std::string& ext) {
  int n = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) n += e.path().extension() == ext;
  return n;
}

}  // namespace

TEST_CASE("packed and padding_free batches equal the reference on two ranks, over two epochs") {
  for (std::string batch : {"size = 2\nmax_length = 512\npadding = \"packed\"\npack_window = 64\n",
                            "max_length = 512\npadding = \"padding_free\"\ntokens = 1536\npack_window = 50\n"}) {
    CAPTURE(batch);
    TempDir dir;
    std::string cfg = write_job(dir, job(batch, "[schedule]\nepochs = 2\n[ranks]\nworld_size = 2\n"));
    Daemon d(cfg, socket_of(dir));
    for (uint32_t r = 0; r < 2; ++r) require_equal(dump(d.socket(), r), reference(cfg, r), "rank " + std::to_string(r));
    CHECK(d.stop(SIGTERM) == 0);
  }
}

TEST_CASE("the token cache: identical batches cold, warm and off; a changed template or tokenizer builds another") {
  TempDir dir;
  std::string body = job("size = 3\nmax_length = 400\n", "[ranks]\nworld_size = 2\n");
  std::string cache = dir.file("cache");
  std::vector<std::string> cold, warm, off;
  {
    Daemon d(write_job(dir, body), socket_of(dir));
    cold = dump(d.socket(), 1);
    CHECK(status_json(d).find("\"state\":\"built\"") != std::string::npos);
  }
  CHECK(cache_files(cache, ".idx") == 1);
  CHECK(cache_files(cache, ".bin") == 1);
  {
    Daemon d(write_job(dir, body), socket_of(dir));
    warm = dump(d.socket(), 1);
    CHECK(status_json(d).find("\"state\":\"reused\"") != std::string::npos);
  }
  {
    Daemon d(write_job(dir, body + "[cache]\nenabled = false\n", "off"), socket_of(dir, "off"));
    off = dump(d.socket(), 1);
  }
  require_equal(cold, reference(write_job(dir, body), 1), "cold");
  CHECK(warm == cold);
  CHECK(off == cold);
  // Another template, another key: a second store, never the first one.
  std::string llama2 = body;
  llama2.replace(llama2.find("mistral"), 7, "llama2");
  {
    Daemon d(write_job(dir, llama2, "llama2"), socket_of(dir, "llama2"));
    std::vector<std::string> other = dump(d.socket(), 1);
    CHECK(status_json(d).find("\"state\":\"built\"") != std::string::npos);
    require_equal(other, reference(write_job(dir, llama2, "llama2"), 1), "llama2");
  }
  CHECK(cache_files(cache, ".idx") == 2);
  // Another tokenizer, another key: the same vocabulary as a tokenizer.json
  // (tokfeed's own BPE) builds a third store, with the very same tokens.
  std::string hf = body;
  std::string model = data_path("tokenizers/sp32k/tokenizer.model");
  hf.replace(hf.find(model), model.size(), std::string(TOKFEED_TEST_BUILD_DATA) + "/sp32k-hf/tokenizer.json");
  hf.replace(hf.find("\"sentencepiece\""), 15, "\"hf\"");
  {
    Daemon d(write_job(dir, hf, "hf"), socket_of(dir, "hf"));
    std::vector<std::string> other = dump(d.socket(), 1);
    CHECK(status_json(d).find("\"state\":\"built\"") != std::string::npos);
    CHECK(other == cold);
  }
  CHECK(cache_files(cache, ".idx") == 3);
}

TEST_CASE("kill -9 while the token cache is built leaves no store; the next start builds it and serves the same") {
  std::string big = shared_path("data/sft/mixed-10k.jsonl");
  if (big.empty()) {
    MESSAGE("skipped: ../shared/data/sft/mixed-10k.jsonl is absent");
    return;
  }
  TempDir dir;
  std::string cfg = write_job(dir, job("size = 4\npadding = \"packed\"\nmax_length = 1024\n", "", big));
  std::string cache = dir.file("cache");
  {
    Daemon d(cfg, socket_of(dir));
    // Kill it mid-build: once some records are done but not all.
    bool building = false;
    for (int i = 0; i < 600 && !building; ++i) {
      std::string st = status_json(d);
      building =
          st.find("\"state\":\"building\"") != std::string::npos && st.find("\"records_done\":0,") == std::string::npos;
      if (!building) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    REQUIRE(building);
    CHECK(d.stop(SIGKILL) == 128 + SIGKILL);
  }
  CHECK(cache_files(cache, ".idx") == 0);  // no half-valid store
  Daemon d(cfg, socket_of(dir));
  std::vector<std::string> first = dump(d.socket(), 0, "--count 5");
  d.wait_cache_built();  // the first batches may come before the store is built
  CHECK(status_json(d).find("\"state\":\"built\"") != std::string::npos);
  CHECK(cache_files(cache, ".idx") == 1);
  int leftovers = 0;
  for (const auto& e : fs::directory_iterator(cache)) leftovers += e.path().string().find(".tmp.") != std::string::npos;
  CHECK(leftovers == 0);
  REQUIRE(first.size() == 5);
  // The same first batches as an uninterrupted build in a fresh cache.
  Daemon fresh(write_job(dir,
                         job("size = 4\npadding = \"packed\"\nmax_length = 1024\n",
                             "[cache]\ndir = \"" + dir.file("cache2") + "\"\n", big),
                         "fresh"),
               socket_of(dir, "fresh"));
  CHECK(dump(fresh.socket(), 0, "--count 5") == first);
}

TEST_CASE("resume at 20 random positions equals the uninterrupted packed stream") {
  TempDir dir;
  std::string cfg = write_job(
      dir, job("size = 2\nmax_length = 512\npadding = \"packed\"\npack_window = 40\n", "[schedule]\nepochs = 3\n"));
  Daemon d(cfg, socket_of(dir));
  std::vector<std::string> all = dump(d.socket(), 0);
  require_equal(all, reference(cfg, 0), "stream");
  // Positions: (epoch, step) of every batch, read from the dump itself.
  std::vector<std::pair<int, int>> pos;
  for (const std::string& l : all) {
    int e = 0, s = 0;
    REQUIRE(std::sscanf(l.c_str(), "{\"epoch\":%d,\"step\":%d", &e, &s) == 2);
    pos.emplace_back(e, s);
  }
  std::mt19937 rng(20261202);
  for (int t = 0; t < 20; ++t) {
    std::size_t i = rng() % all.size();
    auto [e, s] = pos[i];
    INFO("resume at epoch " << e << " step " << s);
    std::vector<std::string> rest =
        dump(d.socket(), 0, "--epoch " + std::to_string(e) + " --step " + std::to_string(s) + " --count 3");
    std::vector<std::string> want(all.begin() + static_cast<std::ptrdiff_t>(i),
                                  all.begin() + static_cast<std::ptrdiff_t>(std::min(all.size(), i + 3)));
    CHECK(rest == want);
  }
}

TEST_CASE("two daemons, node 0 and node 1, with 2 local ranks each cover every sample once") {
  TempDir dir;
  std::string batch = "size = 2\nmax_length = 512\npadding = \"packed\"\n";
  std::vector<std::string> per_rank[4];
  std::string cfgs[2];
  for (int node = 0; node < 2; ++node) {
    std::string name = "node" + std::to_string(node);
    cfgs[node] = write_job(
        dir, job(batch, "[ranks]\nworld_size = 4\nlocal_ranks = 2\nnode_rank = " + std::to_string(node) + "\n"), name);
  }
  Daemon n0(cfgs[0], socket_of(dir, "node0")), n1(cfgs[1], socket_of(dir, "node1"));
  // Node 0 serves global ranks 0 and 1 only.
  CHECK(run(bin("tokfeedctl") + " -s '" + n0.socket() + "' dump --rank 2 --count 1").status != 0);
  std::size_t samples = 0, steps = 0;
  for (uint32_t r = 0; r < 4; ++r) {
    const Daemon& d = r < 2 ? n0 : n1;
    per_rank[r] = dump(d.socket(), r);
    if (r == 0) steps = per_rank[r].size();
    CHECK(per_rank[r].size() == steps);  // equal steps on every rank
    require_equal(per_rank[r], reference(cfgs[r / 2], r), "rank " + std::to_string(r));
    for (const std::string& l : per_rank[r]) samples += samples_in(l);
  }
  // Every valid record not left out exactly once: the reference checks
  // which; here the count, against the daemon's own record counts.
  std::string st = status_json(n0);
  auto at = st.find("\"valid\":"), untrained = st.find("\"untrained\":");
  REQUIRE(at != std::string::npos);
  REQUIRE(untrained != std::string::npos);
  CHECK(std::stoul(st.substr(untrained + 12)) > 0);
  CHECK(samples == std::stoul(st.substr(at + 8)) - std::stoul(st.substr(untrained + 12)));
}

TEST_CASE("elastic resume from 4 ranks to 2 continues the epoch with every remaining sample once") {
  TempDir dir;
  std::string batch = "size = 2\nmax_length = 512\npadding = \"packed\"\npack_window = 50\n";
  std::string cfg4 = write_job(dir, job(batch, "[schedule]\nepochs = 2\n[ranks]\nworld_size = 4\n"), "w4");
  std::string cfg2 = write_job(dir, job(batch, "[schedule]\nepochs = 2\n[ranks]\nworld_size = 2\n"), "w2");
  Daemon d4(cfg4, socket_of(dir, "w4"));
  std::vector<std::string> before[4];
  for (uint32_t r = 0; r < 4; ++r) before[r] = dump(d4.socket(), r);
  const std::size_t epoch0 = [&] {
    std::size_t n = 0;
    for (const auto& l : before[0]) n += l.rfind("{\"epoch\":0,", 0) == 0;
    return n;
  }();
  REQUIRE(epoch0 >= 4);
  Daemon d2(cfg2, socket_of(dir, "w2"));
  for (std::size_t step : {std::size_t{1}, epoch0 / 2, epoch0 - 1}) {
    CAPTURE(step);
    std::size_t seen = 0;
    for (uint32_t r = 0; r < 4; ++r)
      for (std::size_t k = 0; k < step; ++k) seen += samples_in(before[r][k]);
    std::size_t after = 0;
    for (uint32_t r = 0; r < 2; ++r) {
      // The position a world-size-4 trainer saved after `step` steps.
      auto t0 = std::chrono::steady_clock::now();
      std::vector<std::string> rest =
          dump(d2.socket(), r, "--epoch 0 --step " + std::to_string(step) + " --world-size 4 --base 0");
      double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      MESSAGE("elastic resume and drain of rank " << r << ": " << ms << " ms");
      require_equal(rest, reference(cfg2, r, "--elastic-from 0," + std::to_string(step) + ",4,0"),
                    "rank " + std::to_string(r));
      for (const auto& l : rest)
        if (l.rfind("{\"epoch\":0,", 0) == 0) after += samples_in(l);
    }
    // Epoch 0's samples: those 4 ranks saw before plus those 2 ranks get after.
    std::size_t epoch0_samples = 0;
    for (uint32_t r = 0; r < 4; ++r)
      for (const auto& l : before[r])
        if (l.rfind("{\"epoch\":0,", 0) == 0) epoch0_samples += samples_in(l);
    CHECK(seen + after == epoch0_samples);
  }
}

TEST_CASE("a last step with fewer samples than ranks gives every rank a batch: the segment's first samples repeat") {
  TempDir dir;
  // 3 records over 5 ranks, and 13 over 4 (a tail of 1 sample at size 3).
  std::istringstream all(slurp(data_path("sft/messages-100.jsonl")));
  std::string line, first[2];
  for (int i = 0; i < 13 && std::getline(all, line); ++i) {
    if (i < 3) first[0] += line + "\n";
    first[1] += line + "\n";
  }
  const std::string packed = "size = 1\nmax_length = 2048\npadding = \"packed\"\n";
  const std::string padding_free = "max_length = 2048\npadding = \"padding_free\"\n";
  for (auto [records, world, batch] : {std::tuple{first[0], 5, packed}, std::tuple{first[1], 4, padding_free}}) {
    CAPTURE(world);
    std::string data = dir.file("small-" + std::to_string(world) + ".jsonl");
    std::ofstream(data) << records;
    std::string name = "w" + std::to_string(world);
    std::string cfg = write_job(dir, job(batch, "[ranks]\nworld_size = " + std::to_string(world) + "\n", data), name);
    Daemon d(cfg, socket_of(dir, name));
    for (uint32_t r = 0; r < static_cast<uint32_t>(world); ++r) {
      std::vector<std::string> ours = dump(d.socket(), r);
      REQUIRE(!ours.empty());
      for (const std::string& l : ours) CHECK(samples_in(l) >= 1);  // no batch of 0 rows
      require_equal(ours, reference(cfg, r), "rank " + std::to_string(r));
    }
    CHECK(d.stop(SIGTERM) == 0);
  }
}
