// A hand-written matcher for the split regex of the Qwen2/Qwen3 and Llama-3
// tokenizer.json files, which most BPE tokenizers of today share:
//
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,K}|
//    ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// (K = 1 for Qwen, written \p{N}; K = 3 for Llama-3). It gives exactly the
// matches Regex gives through PCRE2 (see regex.hpp: Oniguruma's \s, invalid
// UTF-8 matched by nothing), in one forward pass with no backtracking. The
// Unicode classes (\p{L}, \p{N}, \s) come from PCRE2 itself, read once per
// process into a two-level table, so both paths agree on every code point.
// tests/unit/test_fast_split.cpp checks it against PCRE2 on the golden texts
// and on random strings.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

namespace tokfeed::text::hf {

class FastSplit {
 public:
  // The matcher for `pattern` (as written in tokenizer.json) when it is one
  // of the patterns above, else null.
  static std::unique_ptr<FastSplit> for_pattern(std::string_view pattern);

  // Appends the [begin, end) of every match in `subject`, as Regex::find_all.
  void find_all(std::string_view subject, std::vector<std::pair<uint32_t, uint32_t>>& out) const;

  int max_digits() const { return max_digits_; }

 private:
  explicit FastSplit(int max_digits) : max_digits_(max_digits) {}
  int max_digits_;
};

}  // namespace tokfeed::text::hf
