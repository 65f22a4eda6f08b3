// A deterministic automaton that finds the match PCRE2's backtracking finds,
// for the split patterns the general matcher (general_split.hpp) takes that
// look ahead one char at most and have no anchors.
//
// The pattern comes as a program of nodes (SplitProgram, a Thompson NFA):
// atoms that take one char of a set of char classes, forks that try their
// alternatives in order (a greedy quantifier tries one more char before it
// stops, a group its alternatives left to right), one-char lookaheads and the
// match. Chars are given as class ids: id c takes the atoms of `class_atoms[c]`,
// id 0 none (the end of the subject, or a byte of invalid UTF-8).
//
// Why it gives PCRE2's match. Backtracking tries the paths of the program in
// a fixed order and returns the first that reaches the match. The automaton
// runs all of them at once, as RE2's DFA does for leftmost-first matching: a
// state is the ordered list of nodes the live paths wait at, the order being
// the order backtracking would try them in. On the next char each path, in
// order, follows its forks (alternatives in order) and lookaheads (checked on
// that char) to its atoms or to the match:
//   - a node reached a second time is dropped: what follows it is what
//     followed it the first time, which backtracking tried first;
//   - reaching the match records a match that ends before the char, and drops
//     every later path, all of which backtracking would try only if this one
//     failed; the earlier ones, which it would have tried first, go on, and a
//     match they reach later replaces the one recorded.
// When no path is left, the last match recorded is PCRE2's. The program has
// no backreferences and no lookahead past the next char, so a path's future
// depends on its node and position alone: that is what makes dropping sound.
//
// The states are built once, when the pattern is compiled: every state and
// every class id, with the next state and whether a match ends before the
// char; and, so that ASCII text needs no class look-up, every state and
// every byte (the bytes from 0x80 say "decode the char"). A step that leaves
// no path but ends a match before a char the start state takes a path on
// goes on from where the start state goes on that char, flagged as a
// restart: the next match starts at the char that ended this one, which is
// stepped once, not twice, and the byte loop goes on through it with no
// stop. build() declines a program with more than `max_states` states.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tokfeed::text::hf {

struct SplitProgram {
  struct Node {
    enum Kind : uint8_t { kAtom, kFork, kAhead, kNotAhead, kMatch };
    Kind kind = kMatch;
    uint64_t atom = 0;           // kAtom: the atom's bit; kAhead, kNotAhead: the atom the next char is checked on
    uint32_t next = 0;           // kAtom, kAhead, kNotAhead: the node after
    std::vector<uint32_t> alts;  // kFork: the nodes to go on at, first first
  };
  std::vector<Node> nodes;
  uint32_t start = 0;
};

class SplitAutomaton {
 public:
  // The automaton of `program` over the class ids of `class_atoms`, or null
  // with the reason in `why`; `ascii_class` is the class id of each ASCII byte.
  static std::unique_ptr<SplitAutomaton> build(const SplitProgram& program, const std::vector<uint64_t>& class_atoms,
                                               const uint8_t (&ascii_class)[128], size_t max_states, std::string& why);

  // A transition: the row of the next state (its number times kRow) with
  // flags in the low bits. A step that goes on has no flag but
  //   - kMatchBefore: a match ends before the char;
  //   - kRestart (with kMatchBefore): no path was left, the match ends before
  //     the char, and the row is the start state's next on the char (the
  //     next match begins at the char).
  // kStop: leave the byte loop, for one of
  //   - kDecode (a byte from 0x80): decode the char, take its class's step;
  //   - else no path left (row 0), with kMatchBefore if a match ends before the char.
  using Step = uint32_t;
  static constexpr Step kMatchBefore = 1;
  static constexpr Step kRestart = 2;
  static constexpr Step kStop = 4;
  static constexpr Step kDecode = 8;
  static constexpr Step kFlags = 0xF;
  static constexpr Step kGoFlags = kMatchBefore | kRestart;  // the flags a step that goes on may have
  // A row: the steps on each byte, each four times (at row + 4 * byte and
  // the next three, so that a step that goes on indexes the next row as it
  // is, its flags included), then the steps on each class id.
  static constexpr uint32_t kClasses = 1024;  // the offset of the class steps in a row
  static constexpr uint32_t kRow = kClasses + 256;
  static constexpr uint32_t kStartRow = kRow;
  const Step* steps() const { return steps_.data(); }  // at row + 4 * byte (+ 0..3), row + kClasses + class id
  size_t states() const { return steps_.size() / kRow; }

  // Two or three ASCII bytes a step, where ASCII falls in few classes
  // (pairs() null otherwise): the byte loop's chain of loads is one a pair
  // or triple, not one a byte. A row is a state's number times `stride`; the
  // step on bytes a, b (and c) is at row + first[a] + second[b] (+ third[c])
  // in `next` (the next row) and `flags`: kPairStop, one of the steps stops
  // (take them one by one); else kPairRestarts, the steps that restart (bit
  // 4: on the first byte, 5: the second, 6: the third), kPairCount, how many
  // they are, and kPairMatchLast, the step on the last byte has
  // kMatchBefore. Three bytes where states × 2^⌈log2 k³⌉ fits, else two.
  struct Pairs {
    uint32_t first[256], second[256], third[256];
    uint32_t ascii_classes = 0;  // the class ids of ASCII bytes (a compact number each; one more for the rest)
    int width = 2;               // bytes a step: 2 or 3
    int shift = 0;               // stride = 1 << shift
    std::vector<uint32_t> next;
    std::vector<uint8_t> flags;
  };
  static constexpr uint8_t kPairCount = 0x03;
  static constexpr uint8_t kPairMatchLast = 0x08;
  static constexpr uint8_t kPairRestart1 = 0x10;
  static constexpr uint8_t kPairRestarts = 0x70;
  static constexpr uint8_t kPairStop = 0x80;
  const Pairs* pairs() const { return pairs_.get(); }

 private:
  SplitAutomaton() = default;
  void build_pairs(const uint8_t (&ascii_class)[128]);
  std::vector<Step> steps_;  // state 0: no path left
  std::unique_ptr<Pairs> pairs_;
};

}  // namespace tokfeed::text::hf
