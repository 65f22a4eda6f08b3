// A PCRE2 (UTF, UCP, JIT) regex that behaves like the Oniguruma regexes HF
// tokenizers compiles, for the patterns tokenizer.json files use.
//
// Differences handled: Oniguruma's \s is [\t-\r\x85\p{Z}] while PCRE2's also
// matches U+180E, so \s and \S outside classes and \s inside classes are
// rewritten; ^ and $ are line anchors as in Ruby syntax. Matches are iterated
// as the Rust onig crate does: an empty match right after the previous match
// is skipped. Invalid UTF-8 is allowed in subjects and matches nothing.
//
// The split patterns of Qwen2/3 and Llama-3 run through a hand-written
// matcher with the same results (fast_split.hpp); other patterns of the
// shape split patterns have through a general matcher with the same results
// (general_split.hpp); the rest through PCRE2's JIT. `engine` narrows the
// choice (tests compare the paths).
//
// Thread safety: match() uses per-object match data; not for concurrent use.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

struct pcre2_real_code_8;
struct pcre2_real_match_data_8;
struct pcre2_real_match_context_8;
struct pcre2_real_jit_stack_8;

namespace tokfeed::text::hf {

class FastSplit;
class GeneralSplit;

enum class RegexEngine {
  kAny,                  // the hand-written matcher, else the general one, else PCRE2
  kGeneral,              // the general matcher, else PCRE2
  kGeneralBacktracking,  // the general matcher by backtracking alone, else PCRE2
  kPcre2,
};

class Regex {
 public:
  // Throws TokenizerError with `where` in the message if the pattern is bad.
  Regex(const std::string& pattern, const std::string& where, RegexEngine engine = RegexEngine::kAny);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends the [begin, end) of every match in `subject`.
  void find_all(std::string_view subject, std::vector<std::pair<uint32_t, uint32_t>>& out) const;
  // The hand-written matcher behind find_all, or null (PCRE2).
  const FastSplit* fast() const { return fast_.get(); }
  // The general matcher behind find_all, or null.
  const GeneralSplit* general() const { return general_.get(); }
  // Which path matches and why, for the load log: "hand-written",
  // "matcher (7 branches, 10 atoms, automaton of 23 states, ASCII three bytes a step (8 classes))",
  // "PCRE2 JIT (lazy quantifier at offset 12)".
  const std::string& path() const { return path_; }

 private:
  pcre2_real_code_8* code_ = nullptr;
  pcre2_real_match_data_8* match_data_ = nullptr;
  pcre2_real_match_context_8* match_context_ = nullptr;
  pcre2_real_jit_stack_8* jit_stack_ = nullptr;
  bool jit_ = false;
  std::unique_ptr<FastSplit> fast_;  // set for a pattern with a hand-written matcher
  std::unique_ptr<GeneralSplit> general_;
  std::string path_;
};

// Rewrites an Oniguruma pattern into the PCRE2 equivalent (see above).
std::string onig_to_pcre2(std::string_view pattern);

// Escapes a literal string for use as a regex.
std::string regex_escape(std::string_view literal);

}  // namespace tokfeed::text::hf
