// The added_tokens of tokenizer.json and how HF splits them out of a text:
// leftmost-longest matching (a byte trie here, Aho-Corasick in HF), then the
// single_word / lstrip / rstrip rules applied to each match.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tokfeed::text::hf {

struct AddedToken {
  std::string content;
  int32_t id;
  bool single_word, lstrip, rstrip, normalized, special;
};

// A piece of a split text: an added token (id >= 0) or text (id == -1).
struct AddedSplit {
  int32_t id;
  uint32_t begin, end;
};

class AddedTokenMatcher {
 public:
  // `patterns[i]` is the string to find for tokens[i] (its content, or for
  // normalized tokens the normalized content).
  void build(std::vector<AddedToken> tokens, const std::vector<std::string>& patterns);
  bool empty() const { return tokens_.empty(); }

  // Splits `text` into pieces covering all of it, in order.
  void split(std::string_view text, std::vector<AddedSplit>& out) const;
  // The first position from pos whose byte some token starts with, or text.size().
  size_t next_first_byte(std::string_view text, size_t pos) const;

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> children;  // sorted by byte
    int32_t token = -1;                                       // index into tokens_
  };
  // Longest token matching at text[pos]: its index and length, or -1.
  int32_t longest_at(std::string_view text, size_t pos, size_t* len) const;

  static constexpr int kFewFirstBytes = 4;  // up to this many, scanned for 64 bytes at a time
  std::vector<AddedToken> tokens_;
  std::vector<Node> nodes_;
  bool first_byte_[256] = {};
  unsigned char first_bytes_[kFewFirstBytes] = {};  // the bytes tokens start with, where they are few
  int first_byte_count_ = 0;
};

}  // namespace tokfeed::text::hf
