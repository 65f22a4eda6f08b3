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

// A list of ends that split_ends writes in place: room for the most it may
// add, then the list's end set where the writing stopped.
class EndList {
 public:
  void clear() { size_ = 0; }
  size_t size() const { return size_; }
  const uint32_t* data() const { return data_.get(); }
  uint32_t operator[](size_t i) const { return data_[i]; }
  void push_back(uint32_t end) {
    *room(1) = end;
    ++size_;
  }
  // Where n more ends may be written, after the list's last.
  uint32_t* room(size_t n) {
    if (size_ + n > capacity_) grow(size_ + n);
    return data_.get() + size_;
  }
  // The list ends at `last` (within the room made).
  void end_at(const uint32_t* last) { size_ = size_t(last - data_.get()); }

 private:
  void grow(size_t need);
  std::unique_ptr<uint32_t[]> data_;
  size_t size_ = 0, capacity_ = 0;
};

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

  // Where the pattern is one atom repeated, X{1,m} or X+: m (SplitItem::kMany
  // for +), else 0.
  uint32_t run_max() const;
  // The atom's chars, where run_max() is not 0: whether a valid char's code point is one.
  bool in_run(char32_t cp) const { return (bits_[table_.get(cp)] & 1) != 0; }
  // The chars of `in` the split leaves every text of whole (no match in it,
  // or one match that is all of it): whole set ids of chars, taken from the
  // set id with the most chars in `in` down, each where the ones taken
  // before and it still leave such texts whole (none where there is no
  // automaton).
  std::vector<bool> kept_whole_within(const std::vector<bool>& in) const;

  // "7 branches, 10 atoms, automaton of 23 states[, ASCII three bytes a step (8 classes)]",
  // or "..., backtracking (why)".
  std::string summary() const;

  struct Cont;

 private:
  GeneralSplit() = default;
  // The char at p: its set id (0: the end, or a byte of invalid UTF-8), its length.
  uint8_t id_at(const unsigned char* s, size_t p, size_t n, uint32_t& len) const;
  uint8_t id_at_rare(const unsigned char* s, size_t p, size_t n, uint32_t& len) const;
  // By backtracking: calls emit(begin, end, after_last) for every match in
  // `subject`; after_last: true where the match begins where the last one ended.
  template <class Emit>
  void scan(std::string_view subject, Emit&& emit) const;
  // By the automaton: the matches to a sink (general_split.cpp says what it takes).
  template <class Sink>
  void scan_automaton(const unsigned char* s, size_t n, Sink& sink) const;
  size_t last_match_end(const unsigned char* s, size_t n, size_t begin, size_t pos) const;
  // The first byte from i on a match may start at, or n.
  size_t skip_to_start(const unsigned char* s, size_t n, size_t i) const;
  template <int kRanges>
  size_t skip_16(const unsigned char* s, size_t n, size_t i) const;
  // The end of the match that starts at pos, or SIZE_MAX, by backtracking from `it`.
  size_t match(const SplitItem* it, const SplitItem* end, const Cont* k, const unsigned char* s, size_t n,
               size_t pos) const;
  // The bits of the atoms the char at p is in (0 at the end, or a byte of invalid UTF-8).
  uint64_t bits_at(const unsigned char* s, size_t p, size_t n) const;
  // Whether no text made of chars of the set ids `ids` holds a match.
  bool matches_none_within_ids(std::vector<bool> ids) const;
  // Whether every text of one char or more of the set ids `ids` is one match.
  bool one_match_within_ids(const std::vector<bool>& ids) const;

  std::vector<SplitSeq> branches_;
  uint64_t ascii_bits_[128] = {};
  uint8_t ascii_id_[128] = {};
  uint64_t ascii_starts_[128] = {};  // the branches an ASCII char may start
  bool ascii_starts_none_ = false;   // no ASCII char starts a match
  bool starts_none_[256] = {};       // the bytes no match starts at
  // Where the ASCII bytes a match may start at are 1..3 ranges: those ranges
  // and the lead bytes from 0xC0, for skip_to_start to find 16 bytes at a
  // time (lo, hi - lo, each 16 times); skip_ranges_ 0: a byte at a time.
  alignas(16) uint8_t skip_lo_[4][16] = {};
  alignas(16) uint8_t skip_span_[4][16] = {};
  int skip_ranges_ = 0;
  std::vector<uint64_t> bits_;    // the atoms of each set id
  std::vector<uint64_t> starts_;  // the branches a char of each set id may start
  CodePointTable table_;          // set id of each code point
  size_t atoms_ = 0;
  std::unique_ptr<SplitAutomaton> automaton_;  // null: backtracking
  std::string backtracking_why_;
};

// The splits before the last of a pipeline of Isolated splits (DeepSeek-V3's
// digits, then CJK runs), where each is one atom repeated (X{1,m} or X+) and
// no two atoms share a char: their pieces in one pass over the text. Each
// split's matches are then the runs of its atom's chars, cut every m chars
// from the run's start (the split before it leaves every such run whole, and
// a run ends at a char of no atom or of another's), and the pieces between
// are the stretches of chars in no atom.
class RunSplits {
 public:
  // Null where `levels` are not all of that shape, their atoms share a char,
  // or their ASCII chars do not fall in three ranges at most.
  static std::unique_ptr<RunSplits> build(const std::vector<const GeneralSplit*>& levels, const GeneralSplit& last);

  // Calls piece(begin, end, whole) for each piece of `subject` in order;
  // whole: a piece the last split is known to leave whole (a run of chars
  // it matches nothing within or all of, or a stretch of one char).
  template <class Piece>
  void pieces(std::string_view subject, Piece&& piece) const;
  // Whether the last split leaves every run of level's atom whole.
  bool whole(size_t level) const { return whole_[level]; }
  // Whether cp is one of the chars of its atom whose runs the last split
  // leaves whole (DeepSeek-V3's Han, kana letters and marks; not U+30FB or
  // U+309B).
  bool kept_whole(char32_t cp) const { return (table_.get(cp) & kSplitAgain) == 0; }

 private:
  RunSplits() = default;
  // The first byte from i on that may be a char of an atom (lead bytes from
  // 0xC0 included), or n.
  size_t skip(const unsigned char* s, size_t n, size_t i) const;
  // The level + 1 of the char at i (0: in no atom), with kSplitAgain where
  // the last split may cut a run it is in; its length.
  uint8_t level_at(const unsigned char* s, size_t i, size_t n, uint32_t& len) const;
  uint8_t level_at_rare(const unsigned char* s, size_t i, size_t n, uint32_t& len) const;
  // Whether the k bytes at s are one char (a byte, or a valid char of two or
  // three bytes): a split leaves it whole.
  static bool one_char(const unsigned char* s, size_t k) {
    if (k == 1) return true;
    if (k == 2) return s[0] >= 0xC2 && s[0] <= 0xDF && (s[1] & 0xC0) == 0x80;
    return k == 3 && (s[0] & 0xF0) == 0xE0 && (s[1] & 0xC0) == 0x80 && (s[2] & 0xC0) == 0x80 &&
           (s[0] != 0xE0 || s[1] >= 0xA0);
  }

  static constexpr uint8_t kSplitAgain = 0x80;
  static constexpr uint8_t kLevel = 0x7F;

  uint8_t ascii_[128] = {};  // level + 1 of each ASCII char (and kSplitAgain), 0: none
  bool maybe_[256] = {};     // the bytes a char of an atom may start with
  alignas(16) uint8_t lo_[4][16] = {};
  alignas(16) uint8_t span_[4][16] = {};
  int ranges_ = 0;             // of ASCII chars in an atom, and lead bytes from 0xC0
  CodePointTable table_;       // level + 1 of each code point, and kSplitAgain
  std::vector<uint32_t> max_;  // per level: m
  std::vector<bool> whole_;    // per level: the last split leaves all its runs whole
};

[[gnu::always_inline]] inline uint8_t RunSplits::level_at(const unsigned char* s, size_t i, size_t n,
                                                          uint32_t& len) const {
  const unsigned char b0 = s[i];
  if (b0 < 0x80) {
    len = 1;
    return ascii_[b0];
  }
  if ((b0 & 0xF0) == 0xE0 && n - i >= 3) {                        // the chars of a Han or kana run
    const uint32_t c1 = s[i + 1] ^ 0x80u, c2 = s[i + 2] ^ 0x80u;  // a continuation byte's 6 bits, else >= 0x40
    const char32_t cp = char32_t(b0 & 0x0F) << 12 | c1 << 6 | c2;
    if ((c1 | c2) < 0x40 && cp >= 0x800) {  // surrogates are in no atom
      len = 3;
      return table_.get(cp);
    }
  }
  return level_at_rare(s, i, n, len);
}

template <class Piece>
void RunSplits::pieces(std::string_view subject, Piece&& piece) const {
  const auto* s = reinterpret_cast<const unsigned char*>(subject.data());
  const size_t n = subject.size();
  size_t begin = 0;  // of the stretch under way
  for (size_t i = 0;;) {
    // Mostly (between Han runs) a char of an atom is right there.
    if (i >= n || !maybe_[s[i]]) i = skip(s, n, i);
    if (i >= n) break;
    uint32_t len;
    const uint8_t level = level_at(s, i, n, len);
    if (level == 0) {
      i += len;
      continue;
    }
    if (begin < i) piece(begin, i, one_char(s + begin, i - begin));
    // The run, cut every m chars; a piece is whole where none of its chars
    // has kSplitAgain.
    const uint32_t m = max_[(level & kLevel) - 1];
    uint8_t split = level;
    size_t run = i;
    uint32_t chars = 0;
    for (;;) {
      i += len;
      if (++chars == m) {
        piece(run, i, (split & kSplitAgain) == 0);
        run = i;
        chars = 0;
        split = 0;
      }
      if (i >= n) break;
      const uint8_t next = level_at(s, i, n, len);
      if (((next ^ level) & kLevel) != 0) break;
      split |= next;
    }
    if (run < i) piece(run, i, (split & kSplitAgain) == 0);
    begin = i;
  }
  if (begin < n) piece(begin, n, one_char(s + begin, n - begin));
}

}  // namespace tokfeed::text::hf
