// Splitting text on a tokenizer's special strings, leftmost-longest, as HF
// fast tokenizers split out added tokens before the model sees the text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tokfeed::text {

class SpecialSplitter {
 public:
  SpecialSplitter() = default;
  explicit SpecialSplitter(std::vector<std::pair<std::string, int32_t>> specials);

  // Calls on_text(begin, end) for each text piece and on_special(id, begin,
  // end) for each special match, in order. Empty text pieces are skipped.
  template <class OnText, class OnSpecial>
  void split(std::string_view text, OnText&& on_text, OnSpecial&& on_special) const {
    std::size_t piece = 0, i = 0;
    while (i < text.size()) {
      if (!first_byte_[static_cast<unsigned char>(text[i])]) {
        ++i;
        continue;
      }
      int best = longest_at(text, i);
      if (best < 0) {
        ++i;
        continue;
      }
      if (i > piece) on_text(piece, i);
      std::size_t len = specials_[best].first.size();
      on_special(specials_[best].second, i, i + len);
      i += len;
      piece = i;
    }
    if (text.size() > piece) on_text(piece, text.size());
  }

  const std::vector<std::pair<std::string, int32_t>>& specials() const { return specials_; }
  // The id of an exact special string.
  bool find(std::string_view s, int32_t& id) const;

 private:
  int longest_at(std::string_view text, std::size_t i) const;
  std::vector<std::pair<std::string, int32_t>> specials_;
  bool first_byte_[256] = {};
};

}  // namespace tokfeed::text
