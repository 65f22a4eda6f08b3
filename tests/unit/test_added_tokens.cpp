// AddedTokenMatcher::split (text/hf/added_vocab.hpp) against the plainest
// reading of leftmost-longest matching: at each position, the longest token
// that starts there, else the next position. Token sets whose tokens start
// with one byte (memchr), a few (64 bytes at a time, then 16) and many (a
// byte at a time), on random strings with the tokens near every position,
// and on long runs with no first byte and a token after them at every
// offset of a 64-byte step; and the scan for first bytes itself
// (next_first_byte), from every position of texts whose first bytes are far
// apart.
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

// A matcher of `tokens`, special, with ids from 100 in their order.
AddedTokenMatcher matcher_of(const std::vector<std::string>& tokens) {
  std::vector<AddedToken> added;
  for (size_t t = 0; t < tokens.size(); ++t)
    added.push_back({tokens[t], int32_t(100 + t), false, false, false, false, true});
  AddedTokenMatcher m;
  m.build(added, tokens);
  return m;
}

// The matcher's split of `text` equals the plain one, piece by piece;
// returns how many pieces are added tokens.
size_t check_split(const AddedTokenMatcher& m, const std::vector<std::string>& tokens, const std::string& text) {
  std::vector<AddedSplit> got;
  m.split(text, got);
  const std::vector<AddedSplit> want = plain_split(tokens, text);
  CAPTURE(text);
  REQUIRE(got.size() == want.size());
  size_t found = 0;
  for (size_t k = 0; k < got.size(); ++k) {
    CHECK(got[k].id == want[k].id);
    CHECK(got[k].begin == want[k].begin);
    CHECK(got[k].end == want[k].end);
    found += got[k].id >= 0;
  }
  return found;
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
    const AddedTokenMatcher m = matcher_of(tokens);
    const std::string filler = "ab <[{|~x \xEF\xBD";
    size_t found = 0;
    for (int round = 0; round < 3000; ++round) {
      std::string text;
      const size_t pieces = rng() % 12;
      for (size_t k = 0; k < pieces; ++k) {
        text.append(rng() % 24, filler[rng() % filler.size()]);
        if (rng() % 2) text += tokens[rng() % tokens.size()];
      }
      found += check_split(m, tokens, text);
    }
    CHECK(found > 3000);
  }
}

TEST_CASE("added tokens: a few first bytes, the first one found at every offset of a 64-byte step") {
  const std::vector<std::vector<std::string>> sets = {
      {"<s>", "[INST]"},            // two first bytes
      {"<a>", "[b]", "{c}"},        // three
      {"<a>", "[b]", "{c}", "|d|"}  // four
  };
  for (const auto& tokens : sets) {
    const AddedTokenMatcher m = matcher_of(tokens);
    size_t checked = 0;
    for (size_t before = 0; before < 200; ++before)
      for (size_t t = 0; t < tokens.size(); ++t)
        for (const bool decoy : {false, true}) {
          // A first byte that starts no token (a decoy) a little after the
          // run, and a token after that: the scan stops at the decoy first.
          std::string text(before, 'a');
          if (decoy) text += std::string(1, tokens[(t + 1) % tokens.size()][0]) + "zz" + std::string(before % 70, 'b');
          text += tokens[t];
          text.append(before % 37, 'c');
          check_split(m, tokens, text);
          std::vector<AddedSplit> got;
          m.split(text, got);
          REQUIRE(got[got.size() - (before % 37 ? 2 : 1)].id == int32_t(100 + t));
          ++checked;
        }
    CHECK(checked == 200 * tokens.size() * 2);
  }
}

TEST_CASE("added tokens: next_first_byte is the first position with a token's first byte, from any position") {
  const std::vector<std::vector<std::string>> sets = {{"<s>"},
                                                      {"<s>", "[INST]"},
                                                      {"<a>", "[b]", "{c}"},
                                                      {"<a>", "[b]", "{c}", "|d|"},
                                                      {"<a>", "[b]", "{c}", "|d|", "~e"}};
  std::mt19937_64 rng(7);
  for (const auto& tokens : sets) {
    std::vector<AddedToken> added;
    std::string firsts;
    for (size_t t = 0; t < tokens.size(); ++t) {
      added.push_back({tokens[t], int32_t(100 + t), false, false, false, false, true});
      firsts += tokens[t][0];
    }
    AddedTokenMatcher m;
    m.build(added, tokens);
    size_t checked = 0, bad = 0;
    for (int round = 0; round < 400; ++round) {
      // First bytes far apart (up to 300 bytes of others between them).
      std::string text;
      while (text.size() < 600) {
        text.append(rng() % 300, "abc xyz"[rng() % 7]);
        text += firsts[rng() % firsts.size()];
      }
      text.resize(rng() % 600);
      for (size_t pos = 0; pos <= text.size(); ++pos) {
        size_t want = pos;
        while (want < text.size() && firsts.find(text[want]) == std::string::npos) ++want;
        if (m.next_first_byte(text, pos) != want && bad++ < 3) FAIL_CHECK("at " << pos << " of " << text.size());
        ++checked;
      }
    }
    CHECK(bad == 0);
    CHECK(checked > 100000);
  }
}
