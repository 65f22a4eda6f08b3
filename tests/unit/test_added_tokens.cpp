// AddedTokenMatcher::split (text/hf/added_vocab.hpp) against the plainest
// reading of leftmost-longest matching: at each position, the longest token
// that starts there, else the next position. Token sets whose tokens start
// with one byte (memchr), a few (16 bytes at a time) and many (a byte at a
// time), on random strings with the tokens near every position, the ends of
// 16-byte blocks included.
#include <doctest/doctest.h>

#include <random>
#include <string>
#include <vector>

#include "tokenizer/hf/added_vocab.hpp"

using tokfeed::text::hf::AddedSplit;
using tokfeed::text::hf::AddedToken;
using tokfeed::text::hf::AddedTokenMatcher;

namespace {

std::vector<AddedSplit> plain_split(const std::vector<std::string>& tokens, const std::string& text) {
  std::vector<AddedSplit> out;
  uint32_t text_from = 0;
  for (size_t pos = 0; pos < text.size();) {
    int best = -1;
    for (size_t t = 0; t < tokens.size(); ++t)
      if (text.compare(pos, tokens[t].size(), tokens[t]) == 0 &&
          (best < 0 || tokens[t].size() > tokens[size_t(best)].size()))
        best = int(t);
    if (best < 0) {
      ++pos;
      continue;
    }
    if (text_from < pos) out.push_back({-1, text_from, uint32_t(pos)});
    const uint32_t end = uint32_t(pos + tokens[size_t(best)].size());
    out.push_back({100 + best, uint32_t(pos), end});
    text_from = end;
    pos = end;
  }
  if (text_from < text.size() || out.empty()) out.push_back({-1, text_from, uint32_t(text.size())});
  return out;
}

}  // namespace

TEST_CASE("added tokens: split finds every token, with one, a few or many first bytes") {
  const std::vector<std::vector<std::string>> sets = {
      {"<s>", "</s>", "<|im_start|>", "<|im_end|>"},                   // one first byte
      {"<s>", "[INST]", "[/INST]", "<SPECIAL_1>", "<SPECIAL_12>"},     // two
      {"<a>", "[b]", "{c}", "|d|"},                                    // four
      {"<a>", "[b]", "{c}", "|d|", "~e", "\xEF\xBD\x9C", "x", "xyz"},  // eight, a multi-byte one
  };
  std::mt19937_64 rng(20261206);
  for (const auto& tokens : sets) {
    std::vector<AddedToken> added;
    for (size_t t = 0; t < tokens.size(); ++t)
      added.push_back({tokens[t], int32_t(100 + t), false, false, false, false, true});
    AddedTokenMatcher m;
    m.build(added, tokens);
    const std::string filler = "ab <[{|~x \xEF\xBD";
    size_t found = 0;
    for (int round = 0; round < 3000; ++round) {
      std::string text;
      const size_t pieces = rng() % 12;
      for (size_t k = 0; k < pieces; ++k) {
        text.append(rng() % 24, filler[rng() % filler.size()]);
        if (rng() % 2) text += tokens[rng() % tokens.size()];
      }
      std::vector<AddedSplit> got;
      m.split(text, got);
      const std::vector<AddedSplit> want = plain_split(tokens, text);
      CAPTURE(text);
      REQUIRE(got.size() == want.size());
      for (size_t k = 0; k < got.size(); ++k) {
        CHECK(got[k].id == want[k].id);
        CHECK(got[k].begin == want[k].begin);
        CHECK(got[k].end == want[k].end);
        found += got[k].id >= 0;
      }
    }
    CHECK(found > 3000);
  }
}
