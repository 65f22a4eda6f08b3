// SentencePiece BPE models (.model) on tokfeed's own BPE (hf/bpe.hpp), with
// libsentencepiece's results: ids and original byte ranges, piece for piece.
//
// What libsentencepiece does, and what this does the same way:
//  - normalize: "identity" (no character map); a dummy "▁" in front when
//    add_dummy_prefix; each space becomes "▁"; a byte that starts no valid
//    UTF-8 char becomes U+FFFD. Every normalized byte maps back to the start
//    of the original char it came from, the end to the text's end.
//  - merge: symbols start as chars; the adjacent pair whose concatenation is
//    a normal piece of the highest score merges first, the leftmost among
//    equal scores. Here each such pair is a merge of rank = the place of its
//    piece's score among all scores (equal scores share a rank), which the
//    heap loop applies leftmost first among equal ranks.
//  - a char that is not a piece becomes its UTF-8 bytes as <0xXX> pieces
//    (byte_fallback); all but the last cover no original bytes.
// Words: a piece never has "▁" after another char, so the text is cut before
// each "▁" that follows another char, and words go through the word cache.
//
// Models outside this (Unigram, a character map such as nmt_nfkc, extra
// whitespace removal, whitespace as suffix, no byte fallback, user-defined
// or unused pieces, a piece with a char that is not a piece) are refused by
// build(), which says why; they keep libsentencepiece.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/hf/bpe.hpp"
#include "tokenizer/sp_model.hpp"
#include "tokenizer/tokenizer.hpp"

namespace tokfeed::text {

class SpBpe {
 public:
  static std::unique_ptr<SpBpe> build(const SpModelSpec& spec, const std::string& where, std::string& why);

  // Appends the pieces of `text` (no control pieces in it: the caller splits
  // those out), offsets plus `base`.
  void encode(std::string_view text, uint32_t base, std::vector<Token>& out) const;

 private:
  std::unique_ptr<hf::BpeModel> model_;
  std::vector<bool> is_byte_;  // by id
  bool add_dummy_prefix_ = true;
  mutable std::string norm_;
  mutable std::vector<uint32_t> to_orig_;  // normalized byte -> original byte; one more for the end
  mutable std::vector<hf::WordPiece> pieces_;
};

}  // namespace tokfeed::text
