// A split pattern as the general matcher (general_split.hpp) reads it: an
// alternation of branches, each a sequence of items (single-char atoms with
// greedy quantifiers, groups of alternatives once or with `?`, lookaheads,
// the line anchors), parsed from the pattern as Regex hands it to PCRE2; and
// the same lowered to the program its automaton runs (split_automaton.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/hf/split_automaton.hpp"

namespace tokfeed::text::hf {

struct SplitItem {
  enum Kind : uint8_t { kAtom, kGroup, kAhead, kNotAhead, kLineStart, kLineEnd };
  static constexpr uint32_t kMany = UINT32_MAX;  // no upper bound
  Kind kind = kAtom;
  uint64_t bit = 0;  // kAtom: its bit; kAhead, kNotAhead: the bit of their one atom, if that is all they hold
  uint32_t min = 1, max = 1;
  std::vector<std::vector<SplitItem>> alts;  // kGroup, kAhead, kNotAhead
};
using SplitSeq = std::vector<SplitItem>;

// An atom as PCRE2 reads it: its pattern text and whether caseless. Atom k
// of a pattern has bit 1 << k.
struct SplitAtom {
  std::string text;
  bool caseless;
  bool operator<(const SplitAtom& o) const { return caseless != o.caseless ? caseless < o.caseless : text < o.text; }
};

struct SplitPattern {
  std::vector<SplitSeq> branches;
  std::vector<SplitAtom> atoms;  // at most 64
};

// Parses `pcre2_pattern`, or returns false with the reason in `why` (what
// the grammar above does not take, as general_split.hpp lists it).
bool parse_split_pattern(std::string_view pcre2_pattern, SplitPattern& out, std::string& why);

// The program of `branches` for the automaton, or false with the reason in
// `why`: a lookahead of more than one char, an anchor, more than 4096 nodes.
bool lower_split_pattern(const std::vector<SplitSeq>& branches, SplitProgram& program, std::string& why);

}  // namespace tokfeed::text::hf
