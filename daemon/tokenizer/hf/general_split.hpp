// A matcher for the shape split regexes of tokenizer.json files have, for
// any pattern of that shape (fast_split.hpp takes Qwen's and Llama-3's
// alone): an alternation of branches, each a sequence of
//   - single-char atoms: a literal char, a [...] set, \p{..}, \s, \d, \w
//     and the like, `.`; caseless inside (?i:...);
//   - each with a greedy quantifier (?, *, +, {m}, {m,}, {m,n});
//   - groups (?:...), (...) or (?i:...) of alternatives of the same, once
//     or with `?`;
//   - lookaheads (?=...) and (?!...) of the same;
//   - the line anchors ^ and $ (PCRE2_MULTILINE, newline LF).
// It works on the pattern as Regex hands it to PCRE2 (onig_to_pcre2's
// output) and gives the matches PCRE2 gives: leftmost-first alternation,
// greedy quantifiers that give back chars one by one, invalid UTF-8 matched
// by nothing, matches iterated as Regex::find_all does. Which code points
// each atom matches is read from PCRE2 itself, once per atom, into a table
// of class sets per code point, so both paths agree on every code point
// (caseless sets included: `(?i:s)` matches U+017F).
//
// Two ways to match. Where the pattern looks ahead one char at most and has
// no anchors (every tokenizer's split pattern today), a deterministic
// automaton over the class-set ids built at compile time: a table look-up
// per char, no backtracking (split_automaton.hpp says why its matches are
// PCRE2's). Otherwise, or where the automaton would have more than 1024
// states, backtracking as PCRE2 does, with a call per choice point, not per
// char. summary() says which.
//
// compile() declines (Regex then keeps PCRE2) a pattern with anything else:
// lazy or possessive quantifiers, quantified groups but `?`, lookbehinds,
// backreferences, \b and the other escapes of no single char, inline flags
// but (?i:...), a pattern that can match the empty string, more than 64
// distinct atoms or branches, more than 255 distinct sets of atoms.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/hf/code_point_table.hpp"
#include "tokenizer/hf/split_automaton.hpp"
#include "tokenizer/hf/split_pattern.hpp"

namespace tokfeed::text::hf {

// An allocator that leaves the elements resize() adds uninitialized, for
// lists written in place after a resize to their most.
template <class T>
struct UninitializedAllocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = UninitializedAllocator<U>;
  };
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};
using EndList = std::vector<uint32_t, UninitializedAllocator<uint32_t>>;

class GeneralSplit {
 public:
  enum class Method {
    kAny,           // the automaton where the pattern allows, else backtracking
    kBacktracking,  // backtracking alone (tests hold both to PCRE2)
  };
  // The matcher for `pcre2_pattern`, or null with the reason in `why`.
  static std::unique_ptr<GeneralSplit> compile(std::string_view pcre2_pattern, std::string& why,
                                               Method method = Method::kAny);
  ~GeneralSplit();

  // Appends the [begin, end) of every match in `subject`, as Regex::find_all.
  void find_all(std::string_view subject, std::vector<std::pair<uint32_t, uint32_t>>& out) const;
  // Appends base + the end of every piece a split with HF's Isolated
  // behaviour cuts `subject` into: each match, and each stretch of text
  // between two matches, before the first or after the last.
  void split_ends(std::string_view subject, uint32_t base, EndList& ends) const;

  // "7 branches, 10 atoms, automaton of 12 states", or "..., backtracking (why)".
  std::string summary() const;

  struct Cont;

 private:
  GeneralSplit() = default;
  // The char at p: its set id (0: the end, or a byte of invalid UTF-8), its length.
  uint8_t id_at(const unsigned char* s, size_t p, size_t n, uint32_t& len) const;
  uint8_t id_at_rare(const unsigned char* s, size_t p, size_t n, uint32_t& len) const;
  // Calls emit(begin, end) for every match in `subject`.
  template <class Emit>
  void scan(std::string_view subject, Emit&& emit) const;
  template <class Emit>
  void scan_automaton(const unsigned char* s, size_t n, Emit&& emit) const;
  // Moves i past the bytes no match starts at.
  void skip_to_start(const unsigned char* s, size_t n, size_t& i) const;
  // The end of the match that starts at pos, or SIZE_MAX, by backtracking from `it`.
  size_t match(const SplitItem* it, const SplitItem* end, const Cont* k, const unsigned char* s, size_t n,
               size_t pos) const;
  // The bits of the atoms the char at p is in (0 at the end, or a byte of invalid UTF-8).
  uint64_t bits_at(const unsigned char* s, size_t p, size_t n) const;

  std::vector<SplitSeq> branches_;
  uint64_t ascii_bits_[128] = {};
  uint8_t ascii_id_[128] = {};
  uint64_t ascii_starts_[128] = {};  // the branches an ASCII char may start
  bool ascii_starts_none_ = false;   // no ASCII char starts a match
  bool starts_none_[256] = {};       // the bytes no match starts at
  std::vector<uint64_t> bits_;       // the atoms of each set id
  std::vector<uint64_t> starts_;     // the branches a char of each set id may start
  CodePointTable table_;             // set id of each code point
  size_t atoms_ = 0;
  std::unique_ptr<SplitAutomaton> automaton_;  // null: backtracking
  std::string backtracking_why_;
};

}  // namespace tokfeed::text::hf
