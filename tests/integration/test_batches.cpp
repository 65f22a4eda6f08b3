// Batches a trainer can always take (DESIGN.md contract 8, docs/data_model.md
// 4.1): a sample dropped as too long or without a trained token takes no row,
// the next samples of the plan fill its batch, so no batch is empty and only
// an epoch's last may be short. The stream stays equal to the independent
// reference, whatever the worker count, the cache, or a resume.
#include <doctest/doctest.h>
#include <signal.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "harness.hpp"

using namespace tokfeed::testing;

namespace {

std::string job(const std::string& truncation, bool keep_untrained, uint32_t workers, const std::string& more = "",
                uint32_t max_length = 96) {
  return "[dataset]\npath = \"" + data_path("sft/mixed-300.jsonl") +
         "\"\n[tokenizer]\ntype = \"sentencepiece\"\npath = \"" + data_path("tokenizers/sp32k/tokenizer.model") +
         "\"\ntemplate = \"chatml\"\n[batch]\nsize = 3\nmax_length = " + std::to_string(max_length) +
         "\ntruncation = \"" + truncation + "\"\nkeep_untrained = " + (keep_untrained ? "true" : "false") +
         "\n[schedule]\nepochs = 2\nseed = 11\n[ranks]\nworld_size = 2\n[workers]\ncount = " + std::to_string(workers) +
         "\n" + more;
}

// One dump line's rows: per row, its labels.
std::vector<std::vector<long>> label_rows(const std::string& line) {
  std::vector<std::vector<long>> rows;
  std::size_t at = line.find("\"labels\":[");
  REQUIRE(at != std::string::npos);
  at += 10;
  int depth = 1;
  while (depth > 0 && at < line.size()) {
    char c = line[at];
    if (c == '[') {
      ++depth;
      rows.emplace_back();
      ++at;
    } else if (c == ']') {
      --depth;
      ++at;
    } else if (c == ',' || c == ' ') {
      ++at;
    } else {
      char* end = nullptr;
      long v = std::strtol(line.c_str() + at, &end, 10);
      REQUIRE(end != line.c_str() + at);
      rows.back().push_back(v);
      at = static_cast<std::size_t>(end - line.c_str());
    }
  }
  return rows;
}

int epoch_of(const std::string& line) { return std::atoi(line.c_str() + line.find("\"epoch\":") + 8); }

struct Shape {
  std::size_t short_batches = 0;  // batches of fewer rows than the size, epochs' last excluded
  std::size_t empty = 0;
  std::size_t untrained_rows = 0;
  std::size_t rows = 0;
};

Shape shape(const std::vector<std::string>& lines, std::size_t size) {
  Shape s;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    auto rows = label_rows(lines[i]);
    bool last = i + 1 == lines.size() || epoch_of(lines[i + 1]) != epoch_of(lines[i]);
    s.rows += rows.size();
    s.empty += rows.empty();
    s.short_batches += !last && rows.size() < size;
    for (const auto& r : rows) {
      bool trained = false;
      for (long v : r) trained |= v != -100;
      s.untrained_rows += !trained;
    }
  }
  return s;
}

}  // namespace

TEST_CASE("drop and right truncation at max_length 96: full batches, trained samples, equal to the reference") {
  struct Case {
    const char* truncation;
    bool keep;
  };
  for (Case c : {Case{"drop", false}, Case{"right", false}, Case{"right", true}}) {
    INFO("truncation " << std::string(c.truncation) << ", keep_untrained " << c.keep);
    TempDir dir;
    std::string cfg = write_job(dir, job(c.truncation, c.keep, 2));
    Daemon d(cfg, socket_of(dir));
    std::size_t untrained = 0;
    for (uint32_t r : {0u, 1u}) {
      auto ours = dump(d.socket(), r);
      require_equal(ours, reference(cfg, r), "rank " + std::to_string(r));
      Shape s = shape(ours, 3);
      CHECK(s.empty == 0);
      CHECK(s.short_batches == 0);
      if (!c.keep) CHECK(s.untrained_rows == 0);
      untrained += s.untrained_rows;
    }
    // The data has such samples: keep_untrained shows them.
    if (c.keep) CHECK(untrained > 0);
    Output st = run(bin("tokfeedctl") + " -s '" + d.socket() + "' status --json");
    if (std::string(c.truncation) == "drop") {
      CHECK(st.out.find("\"too_long\":0,") == std::string::npos);
      CHECK(d.log().find("are left out (truncation = \"drop\")") != std::string::npos);
    } else {
      CHECK(st.out.find("\"untrained\":0}") == std::string::npos);
      CHECK(d.log().find(c.keep ? "no trained token after truncation: kept"
                                : "no trained token after truncation: left out") != std::string::npos);
    }
    CHECK(d.stop(SIGTERM) == 0);
  }
}

TEST_CASE("left-out samples: the same stream with 1 and 3 workers, the cache off, and resumed at (epoch, step)") {
  TempDir dir;
  std::string base = write_job(dir, job("drop", false, 1, "", 256), "one");
  std::vector<std::string> expected[2];
  {
    Daemon d(base, socket_of(dir, "one"));
    for (uint32_t r : {0u, 1u}) expected[r] = dump(d.socket(), r);
  }
  REQUIRE(expected[0].size() > 10);
  for (const char* variant : {"three", "off"}) {
    INFO(variant);
    std::string more = std::string(variant) == "off" ? "[cache]\nenabled = false\n" : "";
    std::string cfg = write_job(dir, job("drop", false, std::string(variant) == "three" ? 3 : 2, more, 256), variant);
    Daemon d(cfg, socket_of(dir, variant));
    for (uint32_t r : {0u, 1u}) require_equal(dump(d.socket(), r), expected[r], "rank " + std::to_string(r));
    if (std::string(variant) == "off")
      CHECK(d.log().find("token cache off: tokenizing every record once") != std::string::npos);
    // Resume rank 1 at epoch 1, step 2: the rest of the stream, nothing else.
    std::size_t from = 0;
    while (from < expected[1].size() && expected[1][from].find("\"epoch\":1,\"step\":2,") == std::string::npos) ++from;
    REQUIRE(from < expected[1].size());
    auto resumed = dump(d.socket(), 1, "--epoch 1 --step 2");
    require_equal(resumed,
                  std::vector<std::string>(expected[1].begin() + static_cast<std::ptrdiff_t>(from), expected[1].end()),
                  "resumed rank 1");
    CHECK(d.stop(SIGTERM) == 0);
  }
}
