// One split pattern through two of Regex's engines at once, for the tests
// that hold a matcher to PCRE2 (test_fast_split.cpp, test_general_split.cpp).
#pragma once

#include <cstdint>
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

}  // namespace tokfeed::text::hf::testing
