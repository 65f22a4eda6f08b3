// HfTokenizer: the tokenizer.json pipeline put together (see hf_tokenizer.hpp).
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/hf/added_vocab.hpp"
#include "tokenizer/hf/bpe.hpp"
#include "tokenizer/hf/components.hpp"
#include "tokenizer/hf/decoders.hpp"
#include "tokenizer/hf/general_split.hpp"
#include "tokenizer/tokenizer.hpp"

namespace tokfeed::text::hf {

struct HfParts {
  std::unique_ptr<Normalizer> normalizer;       // may be null
  std::unique_ptr<PreTokenizer> pre_tokenizer;  // may be null
  std::unique_ptr<BpeModel> model;
  std::unique_ptr<Decoder> decoder;    // may be null: tokens joined with spaces
  AddedTokenMatcher raw_added;         // added tokens with normalized == false
  AddedTokenMatcher normalized_added;  // normalized == true, matched after normalizing
  Vocab added_by_content;
  std::unordered_map<int32_t, std::string> added_by_id;
  int32_t pad_id = 0;
  size_t vocab_size = 0;
  // The post_processor's special tokens around one sequence, or why they
  // cannot be read (only plain-text records need them).
  SequenceSpecials specials;
  std::string specials_error;
  std::optional<std::string> eos_token;  // tokenizer_config.json's
};

class HfTokenizer final : public Tokenizer {
 public:
  // `fused` false keeps every text on the general pipeline (for tests).
  explicit HfTokenizer(HfParts parts, bool fused = true);

  void encode(std::string_view text, std::vector<Token>& out) const override;
  void encode_ids(std::string_view text, std::vector<int32_t>& out) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  std::optional<int32_t> special_token_id(std::string_view text) const override;
  const SequenceSpecials& sequence_specials() const override;
  std::optional<std::string> eos_token() const override { return p_.eos_token; }
  int32_t pad_id() const override { return p_.pad_id; }
  size_t vocab_size() const override { return p_.vocab_size; }
  std::string_view kind() const override { return "hf"; }
  std::string engine() const override;

 private:
  void encode_piece(std::string_view text, uint32_t begin, uint32_t end, std::vector<Token>& out) const;
  void encode_normalized(PreTokenized& pt, std::vector<Token>& out) const;
  void encode_span(const PreTokenized& pt, const PreSpan& span, std::vector<Token>& out) const;
  // The fused path: split and tokenize a batch of words at a time, no span
  // lists; appends tokens (T = Token) or ids (T = int32_t) to `out`
  // (hf_tokenizer.cpp). False, having done nothing, where the text must take
  // the general path.
  template <class T>
  bool encode_words(std::string_view text, uint32_t begin, uint32_t end, std::vector<T>& out) const;
  // The fused path on text[begin, end), which holds no added token.
  template <class T>
  void encode_word_run(std::string_view text, uint32_t begin, uint32_t end, std::vector<T>& out) const;
  // Appends the ends (plus `base`) of the words of `s`, split by
  // word_regexes_ from `level` on.
  void regex_word_ends(std::string_view s, size_t level, uint32_t base) const;

  HfParts p_;
  // Set when the pipeline is NFC or nothing, then the hand-written split
  // alone: text that NFC leaves as it is takes encode_words (added tokens
  // matched after normalizing are matched in it as it is).
  const FastSplit* word_split_ = nullptr;
  // Else, with the same conditions, the regexes the pre-tokenizer amounts
  // to (pre_tokenizer.word_regexes): text that NFC leaves as it is takes
  // encode_words, its words those of the regexes one after the other.
  std::vector<const Regex*> word_regexes_;
  // The splits before the last, in one pass, where they allow (DeepSeek-V3's).
  std::unique_ptr<RunSplits> run_splits_;
  mutable std::vector<std::vector<std::pair<uint32_t, uint32_t>>> level_matches_;
  mutable EndList word_ends_;
  bool nfc_ = false;
  // Spans are cut before each run of "▁" (BpeModel::words_end_before_metaspace),
  // so that words repeat and the word cache holds them.
  bool metaspace_words_ = false;
  // Scratch reused across calls (encode is not reentrant, see hf_tokenizer.hpp).
  mutable std::vector<AddedSplit> raw_splits_, normalized_splits_;
  mutable PreTokenized pre_;
  mutable std::vector<WordPiece> pieces_;
  mutable std::vector<Token> general_;  // encode_ids: a piece on the general path
};

// Builds the parts from a parsed tokenizer.json (json_load.cpp).
HfParts load_hf_parts(const std::string& path);

}  // namespace tokfeed::text::hf
