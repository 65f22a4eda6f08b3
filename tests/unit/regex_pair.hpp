// What the tests that hold a split matcher to PCRE2 share
// (test_fast_split.cpp, test_general_split.cpp): one pattern through two of
// Regex's engines at once, and the texts they compare on.
#pragma once

#include <simdjson.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/hf/regex.hpp"

namespace tokfeed::text::hf::testing {

using Matches = std::vector<std::pair<uint32_t, uint32_t>>;

struct RegexPair {
  Regex matcher, pcre;
  std::string name;  // the matcher's, in a difference's description
  RegexPair(const std::string& pattern, RegexEngine engine, std::string matcher_name)
      : matcher(pattern, matcher_name, engine),
        pcre(pattern, "pcre2", RegexEngine::kPcre2),
        name(std::move(matcher_name)) {}
  // Empty when both give the same matches, else a description of the first difference.
  std::string diff(std::string_view s) const {
    Matches a, b;
    matcher.find_all(s, a);
    pcre.find_all(s, b);
    if (a == b) return "";
    size_t i = 0;
    while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
    auto show = [&](const Matches& m) {
      return i < m.size() ? std::to_string(m[i].first) + "-" + std::to_string(m[i].second) : std::string("none");
    };
    return "match " + std::to_string(i) + ": " + name + " " + show(a) + ", PCRE2 " + show(b);
  }
};

// Every string of every line of a JSONL file, nested ones included.
inline std::vector<std::string> jsonl_texts(const std::filesystem::path& path) {
  std::vector<std::string> texts;
  std::ifstream in(path);
  simdjson::dom::parser parser;
  std::string line;
  std::function<void(simdjson::dom::element)> leaves = [&](simdjson::dom::element e) {
    if (e.is_string()) texts.emplace_back(std::string_view(e.get_string()));
    else if (e.is_array())
      for (auto x : e.get_array()) leaves(x);
    else if (e.is_object())
      for (auto kv : e.get_object()) leaves(kv.value);
  };
  while (std::getline(in, line))
    if (auto doc = parser.parse(line); !doc.error()) leaves(doc.value());
  return texts;
}

// The golden texts and SFT data of the repository, and ../shared's golden texts where it has them.
inline std::vector<std::filesystem::path> golden_and_sft_files() {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  for (const char* name : {"qwen3", "sp32k"})
    files.push_back(fs::path(TOKFEED_TEST_DATA) / "golden" / (name + std::string(".jsonl")));
  for (const auto& e : fs::directory_iterator(fs::path(TOKFEED_TEST_DATA) / "sft"))
    if (e.path().extension() == ".jsonl") files.push_back(e.path());
  const fs::path shared = fs::path(TOKFEED_SHARED_DIR) / "golden";
  if (fs::exists(shared))
    for (const auto& e : fs::directory_iterator(shared)) files.push_back(e.path());
  return files;
}

}  // namespace tokfeed::text::hf::testing
