// The tokenizer's huge-page tables (tokenizer/hf/huge_table.hpp): contents
// written and read back through growth, with the advice on and off; large
// blocks 2 MiB-aligned and accounted while alive; and Qwen3 loaded with its
// tables on ordinary pages gives the golden ids, as the default load does
// (test_hf_tokenizer.cpp).
#include <doctest/doctest.h>
#include <simdjson.h>

#include <cstdint>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "tokenizer/hf/hf_model.hpp"
#include "tokenizer/hf/huge_table.hpp"

using namespace tokfeed::text::hf;

namespace {

// Restores the process-wide setting at the end of a test.
struct HugePagesSetting {
  bool was = huge_pages_on();
  explicit HugePagesSetting(bool on) { set_huge_pages(on); }
  ~HugePagesSetting() { set_huge_pages(was); }
};

std::string thp_mode() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string s;
  std::getline(in, s);
  const size_t a = s.find('['), b = s.find(']');
  return a == std::string::npos || b == std::string::npos ? "" : s.substr(a + 1, b - a - 1);
}

void check_contents(bool on) {
  HugePagesSetting setting(on);
  const size_t before = huge_page_use().mapped;
  std::mt19937_64 rng(on ? 7 : 8);
  for (size_t n : {size_t(1000), (kHugeMin / 8) - 1, kHugeMin / 8, size_t(3) << 18, size_t(1) << 20}) {
    CAPTURE(n);
    HugeVector<uint64_t> v(n, ~uint64_t(0));
    for (uint64_t x : v) REQUIRE(x == ~uint64_t(0));
    const bool mapped = n * 8 >= kHugeMin;
    CHECK(reinterpret_cast<uintptr_t>(v.data()) % 64 == 0);
    if (mapped) {
      CHECK(reinterpret_cast<uintptr_t>(v.data()) % kHugePage == 0);
      CHECK(huge_page_use().mapped == before + (n * 8 + kHugePage - 1) / kHugePage * kHugePage);
    }
    std::vector<uint64_t> want(n);
    for (size_t i = 0; i < n; ++i) v[i] = want[i] = rng();
    // Random probes, then growth past the threshold keeps every element.
    for (int k = 0; k < 10000; ++k) {
      const size_t i = rng() % n;
      REQUIRE(v[i] == want[i]);
    }
    for (size_t i = 0; i < n / 2 + 1; ++i) {
      const uint64_t x = rng();
      v.push_back(x);
      want.push_back(x);
    }
    REQUIRE(v.size() == want.size());
    for (size_t i = 0; i < v.size(); ++i)
      if (v[i] != want[i]) REQUIRE(v[i] == want[i]);
    if (!on) CHECK(huge_page_use().huge == 0);
  }
  CHECK(huge_page_use().mapped == before);
}

}  // namespace

TEST_CASE("huge table: contents are what was written, on huge pages or ordinary ones") {
  check_contents(true);
  check_contents(false);
  // What the kernel grants is not ours to promise: say it, don't require it.
  HugePagesSetting setting(true);
  HugeVector<uint64_t> v(size_t(4) << 17, 1);  // 4 MiB
  const HugePageUse use = huge_page_use();
  CHECK(use.mapped >= (size_t(4) << 20));
  const std::string mode = thp_mode();
  if (mode == "always" || mode == "madvise")
    WARN_MESSAGE(use.huge > 0, "transparent huge pages are '" << mode << "' but none backs a 4 MiB block");
  MESSAGE("THP '" << mode << "': " << describe_huge_page_use());
}

TEST_CASE("huge table: qwen3 on ordinary pages and on huge pages gives the golden ids") {
  const std::string data = TOKFEED_TEST_BUILD_DATA;
  std::string path = data + "/qwen3/tokenizer.json";
  if (!std::ifstream(path).good()) path = data + "/qwen3/qwen3/tokenizer.json";
  REQUIRE_MESSAGE(std::ifstream(path).good(), "tokenizer qwen3 not extracted; see tests/CMakeLists.txt");
  simdjson::dom::parser parser;
  std::ifstream in(std::string(TOKFEED_TEST_DATA) + "/golden/qwen3.jsonl");
  std::vector<std::string> texts;
  std::vector<std::vector<int32_t>> golden;
  for (std::string line; std::getline(in, line);) {
    simdjson::dom::element doc = parser.parse(line).value();
    texts.emplace_back(std::string_view(doc["text"].get_string().value()));
    golden.emplace_back();
    simdjson::dom::array ids = doc["ids"].get_array().value();
    for (auto v : ids) golden.back().push_back(int32_t(v.get_int64().value()));
  }
  REQUIRE(texts.size() == 3011);
  for (bool on : {false, true}) {
    CAPTURE(on);
    HugePagesSetting setting(on);
    HfTokenizer tok(load_hf_parts(path));
    if (!on) CHECK(describe_huge_page_use() == "huge pages: off");
    size_t equal = 0;
    std::vector<int32_t> ids;
    // Twice: the second pass reads the word cache the first one filled.
    for (int pass = 0; pass < 2; ++pass)
      for (size_t i = 0; i < texts.size(); ++i) {
        ids.clear();
        tok.encode_ids(texts[i], ids);
        equal += ids == golden[i];
      }
    CHECK(equal == 2 * texts.size());
  }
}
