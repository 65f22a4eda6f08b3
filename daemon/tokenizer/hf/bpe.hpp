// The BPE model of tokenizer.json, with the speed-ups HF lacks: merges in a
// flat hash table keyed by the id pair, a per-process word cache, and no
// allocation per word once the scratch buffers have grown.
//
// Thread safety: tokenize() mutates the cache and scratch buffers; one
// BpeModel must not be used by two threads at once (see tokenizer.hpp).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/hf/bpe_linear.hpp"
#include "tokenizer/hf/char_cuts.hpp"
#include "tokenizer/hf/merge_table.hpp"
#include "tokenizer/hf/token_index.hpp"
#include "tokenizer/hf/word_cache.hpp"

namespace tokfeed::text::hf {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept;
};
using Vocab = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

struct BpeConfig {
  Vocab vocab;                                              // token string (as in the json) -> id
  std::vector<std::pair<std::string, std::string>> merges;  // in rank order
  // When not empty, merges[i] has rank merge_ranks[i] instead of i; equal
  // ranks merge leftmost first (SentencePiece's equal scores).
  std::vector<int32_t> merge_ranks;
  bool byte_level = false;  // units are bytes shown in the GPT-2 alphabet
  bool byte_fallback = false;
  bool ignore_merges = false;
  bool fuse_unk = false;
  std::string unk_token;  // empty: none
};

class BpeModel {
 public:
  // Throws TokenizerError (prefixed with `where`) on inconsistent data.
  BpeModel(BpeConfig config, const std::string& where);
  BpeModel(BpeModel&&) = delete;  // the linear merges call back into it

  // Appends the pieces of `word` (non-empty) to `out`.
  void tokenize(std::string_view word, std::vector<WordPiece>& out) const {
    if (word.empty()) return;
    for_each_piece(word, [&](int32_t id, uint32_t len) { out.push_back({id, len}); });
  }
  // Calls emit(id, len) for each piece of `word` (non-empty), in order.
  // Bytes from `word` up to `readable_end` may be read (not used), which
  // spares the cache's key a copy of variable length.
  template <class Emit>
  [[gnu::always_inline]] void for_each_piece(std::string_view word, Emit&& emit,
                                             const char* readable_end = nullptr) const {
    WordCache::Lookup at;
    const bool cacheable = word.size() <= WordCache::kMaxWordLen;
    if (cacheable && cache_.find(word, at, emit, readable_end)) return;
    // The lookup goes by value: on a hit it stays in registers.
    for (const WordPiece& p : merge_and_keep(word, at, cacheable)) emit(p.id, p.len);
  }

  // As for_each_piece, with the word's cache key computed (WordCache::key_of
  // or key16); a word found in the cache past its home slot moves there.
  template <class Emit>
  void for_each_piece_keyed(std::string_view word, const WordCache::Key& key, Emit&& emit) const {
    WordCache::Lookup at{key.lo, key.hi, key.hash, SIZE_MAX};
    const bool cacheable = word.size() <= WordCache::kMaxWordLen;
    if (cacheable && cache_.find_keyed(word, at, emit)) return;
    for (const WordPiece& p : merge_and_keep(word, at, cacheable)) emit(p.id, p.len);
  }
  // The word cache, whose home slots the fused path's batch loop reads
  // (hf_tokenizer.cpp); words it does not find there go to for_each_piece.
  const WordCache& word_cache() const { return cache_; }

  // Token string of an id as written in the json, or nullptr.
  const std::string* id_to_token(int32_t id) const {
    return id >= 0 && size_t(id) < id_to_token_.size() && id_valid_[size_t(id)] ? &id_to_token_[size_t(id)] : nullptr;
  }
  int32_t token_to_id(std::string_view token) const;  // -1 if absent
  bool byte_level() const { return byte_level_; }
  bool ignore_merges() const { return ignore_merges_; }
  // True when no merge can join a char to a "▁" (U+2581) after it: every
  // merge whose right part starts with "▁" has a left part ending with one,
  // "▁" is a unit, and whole words are not looked up (ignore_merges). Then
  // the BPE of a text is the BPE of its words cut before each run of "▁",
  // each on its own (SentencePiece-style vocabularies).
  bool words_end_before_metaspace() const { return words_end_before_metaspace_; }
  size_t max_id_plus_one() const { return id_to_token_.size(); }

  // Which merge algorithm words not in the cache take: "linear" (see
  // bpe_linear.hpp), or "heap: <why the linear one does not apply>".
  const std::string& merge_algorithm() const { return merge_algorithm_; }
  // The heap loop alone, whatever merge_algorithm() says (for tests).
  void tokenize_heap(std::string_view word, std::vector<WordPiece>& out) const { merge_word(word, out); }
  // The linear merges, or null where they do not apply (for tests).
  const LinearBpe* linear() const { return linear_.get(); }

 private:
  // last: where given, the parts the last merge joined ({-1, -1} if none).
  void merge_word(std::string_view word, std::vector<WordPiece>& out, int32_t (*last)[2] = nullptr) const;
  // A word the cache missed: its pieces, kept in the cache if `cacheable`.
  [[gnu::noinline]] const std::vector<WordPiece>& merge_and_keep(std::string_view word, WordCache::Lookup at,
                                                                 bool cacheable) const;
  // A word not in the cache (`key`, its key where it is at most
  // kMaxWordLen bytes): a token as it is, else the linear or the heap
  // merges. True where it was cut in parts (char_cuts.hpp).
  bool merge_uncached(std::string_view word, const WordCache::Key& key, std::vector<WordPiece>& out) const;
  // A part of a word cut where no token spans (char_cuts.hpp), but one char
  // that is a reachable token: its BPE, from the cache where it can be kept there.
  void merge_part(std::string_view part, std::vector<WordPiece>& out) const;
  void merge_linear(std::string_view word, std::vector<WordPiece>& out) const;
  // `raw`: each id's bytes (byte-level vocabularies; empty where none).
  void init_linear(const std::vector<std::string>& raw);

  std::vector<std::string> id_to_token_;
  std::vector<bool> id_valid_;
  Vocab raw_vocab_;             // unit bytes -> id (for byte-level: the bytes the token stands for)
  TokenIndex raw_index_;        // the same, for the lookups made per word
  WordTokenIndex whole_words_;  // words that are one token: reachable ones up to kInlineKey bytes, or every token
  TokenIndex not_bpe_words_;    // ignore_merges: the tokens a word may be whole that its BPE does not give
  MergeTable merges_;
  std::vector<std::pair<int32_t, int32_t>> merge_pairs_;  // load only
  std::unique_ptr<LinearBpe> linear_;                     // null where its preconditions fail
  CharCuts cuts_;                                         // with linear_ only
  std::string merge_algorithm_;
  bool words_end_before_metaspace_ = false;
  int32_t byte_unit_id_[256];      // byte-level: id of each single byte
  int32_t ascii_unit_id_[128];     // otherwise: id of each ASCII char, or -1
  int32_t byte_fallback_id_[256];  // id of "<0xXX>", or -1
  bool byte_level_, byte_fallback_, ignore_merges_, fuse_unk_;
  int32_t unk_id_ = -1;

  struct Symbol {
    int32_t id;
    int32_t prev, next;
    uint32_t len;
  };
  struct Candidate {
    int32_t rank, pos, new_id;
  };
  mutable std::vector<Symbol> symbols_;
  mutable std::vector<Candidate> heap_;
  mutable WordCache cache_;
  mutable bool parts_kept_ = false;  // merge_uncached put parts of its word in the cache
  mutable std::vector<WordPiece> scratch_;
};

}  // namespace tokfeed::text::hf
