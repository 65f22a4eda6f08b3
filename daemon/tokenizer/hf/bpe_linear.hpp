// BPE merges of a byte-level vocabulary in time linear in the word, with the
// same result as applying the merges one by one (bpe.cpp's heap loop).
//
// The idea (backtracking over a vocabulary trie, kept exact by a test on
// adjacent tokens) follows GitHub's rust-gems `bpe` crate; this is our own
// derivation for HF's merge lists, where a pair's priority is its merge rank.
//
// Preconditions, checked at load (build() says which failed): every byte
// has a unit token, and the vocabulary is byte-level.
//
// A token is "reachable" when BPE of its own bytes is the token itself
// (other tokens can never be produced, in any context); its "canonical
// split" is the last merge of that BPE, its "birth" that merge's rank. A
// token may be made by several merges (vocabularies converted from tiktoken
// list every split of a token whose parts are tokens); only the canonical
// split matters. Two reachable tokens a, b are "compatible" when BPE of
// bytes(a) + bytes(b) is [a, b]. A sequence of reachable tokens covering a
// word is the BPE of the word iff every adjacent pair is compatible (until
// the first merge across any of their boundaries, each token's bytes evolve
// as they do alone and each boundary as it does in the pair), so the BPE of
// every prefix of a word is unique, and a depth-first search that tries the
// longest token first and marks dead-end positions finds it in about linear
// time.
//
// A token is "regular" when its canonical split has a rank above its parts'
// births and the parts are regular: BPE of its bytes then applies merges in
// rank order, and so does BPE of two regular tokens side by side until a
// merge joins them. Compatibility of two regular tokens is a walk (below);
// a pair with an irregular token (Llama-3 has 107, e.g. '.:.:',
// made last from '.:.', whose own merge is ranked later) runs the heap loop
// on the pair's bytes. Both answers are kept in a small table.
//
// Compatibility walks the two canonical trees down from (a, b): at each step
// the pair at the boundary is the one that existed just before the later-born
// of the two was made; BPE would have merged it across the boundary iff its
// rank is below the time that pair ended (a pair whose rank is below the time
// it appears merges at once).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "tokenizer/hf/huge_table.hpp"
#include "tokenizer/hf/merge_table.hpp"
#include "tokenizer/hf/word_cache.hpp"

namespace tokfeed::text::hf {

class LinearBpe {
 public:
  // raw[id]: the bytes token `id` stands for (empty: not a byte-level token);
  // merges: (left, right, new id) at their rank, as MergeTable holds them
  // (left -1: an entry a later repeat of the same pair replaced).
  // heap(bytes, out, last): the heap loop (bpe.cpp) on `bytes`, appending
  // its pieces to `out` and setting `last` to the parts its last merge
  // joined ({-1, -1} if none); asked at load for a token that no merge makes
  // by the compatibility walk's judgment while some merge is out of its
  // reach, and for pairs with an irregular token.
  // Returns null and sets `why` when a precondition fails.
  struct MergeSpec {
    int32_t left, right, new_id;
  };
  using Heap = std::function<void(std::string_view bytes, std::vector<WordPiece>& out, int32_t (&last)[2])>;
  static std::unique_ptr<LinearBpe> build(const std::vector<std::string>& raw, const std::vector<MergeSpec>& merges,
                                          const MergeTable& table, const int32_t (&byte_unit_id)[256], Heap heap,
                                          std::string& why);
  // BPE of the token's bytes is the token.
  bool reachable(int32_t id) const { return trees_[size_t(id)].birth != INT32_MAX; }
  // How many reachable tokens are not regular.
  size_t irregular_tokens() const { return irregular_count_; }

  // Appends the BPE of `word` (non-empty) as (id, byte length) pairs via
  // emit(id, len). Returns false (emitting nothing) only if the search found
  // no tokenization, which the preconditions rule out.
  template <class Emit>
  bool encode(std::string_view word, Emit&& emit) const {
    if (!search(word)) return false;
    for (const Piece& p : stack_) emit(p.id, p.len);
    return true;
  }

  // Words up to kShortMax bytes: the merges applied one at a time, the
  // lowest rank first (the leftmost among equals), as the heap loop does.
  // Each pair's merge is kept as rank << 32 | new id (ranks are the merges'
  // places in the list, so no two pairs share one, and the lowest such
  // value is the lowest rank); a byte pair's comes from a dense table, a
  // later pair's from the merge table, and the two lookups after a merge do
  // not depend on each other. Nearly all words the cache misses are this
  // short (unseen English: 94% up to 12 bytes, 99% up to 16); up to 24
  // bytes its scans of the pairs, quadratic in the word, cost less than the
  // search's cache misses.
  static constexpr size_t kShortMax = 24;
  template <class Emit>
  void encode_short(std::string_view word, Emit&& emit) const {
    const size_t n = word.size();
    const auto* w = reinterpret_cast<const uint8_t*>(word.data());
    int32_t id[kShortMax];
    uint32_t len[kShortMax];
    uint64_t pair[kShortMax];  // the merge of (id[i], id[i + 1]), or kNoMerge
    for (size_t i = 0; i < n; ++i) {
      id[i] = unit_[w[i]];
      len[i] = 1;
    }
    for (size_t i = 0; i + 1 < n; ++i) pair[i] = byte_pairs_[size_t(w[i]) << 8 | w[i + 1]];
    size_t m = n;
    while (m > 1) {
      size_t best = 0;
      uint64_t low = pair[0];
      for (size_t i = 1; i + 1 < m; ++i) {
        const bool lt = pair[i] < low;
        low = lt ? pair[i] : low;
        best = lt ? i : best;
      }
      if (low == kNoMerge) break;
      id[best] = int32_t(uint32_t(low));
      len[best] += len[best + 1];
      for (size_t i = best + 1; i + 1 < m; ++i) {
        id[i] = id[i + 1];
        len[i] = len[i + 1];
        pair[i] = pair[i + 1];
      }
      --m;
      if (best > 0) pair[best - 1] = merge_of(id[best - 1], id[best]);
      if (best + 1 < m) pair[best] = merge_of(id[best], id[best + 1]);
    }
    for (size_t i = 0; i < m; ++i) emit(id[i], len[i]);
  }

  // BPE of bytes(a) + bytes(b) is [a, b] (both reachable). Answers are kept
  // in a small direct-mapped table: text repeats its token pairs.
  bool compatible(int32_t a, int32_t b) const {
    const uint64_t key = MergeTable::key(a, b);
    uint64_t& slot = pair_memo_[memo_index(key)];
    if ((slot >> 1) == key) return slot & 1;
    const bool ok = irregular(a) | irregular(b) ? heap_pair(a, b) : walk(a, b, INT32_MAX, false);
    slot = key << 1 | uint64_t(ok);
    return ok;
  }

 private:
  static constexpr uint64_t kNoMerge = ~uint64_t(0);
  uint64_t merge_of(int32_t a, int32_t b) const {
    const Merge* m = canonical_.find(a, b);
    return m != nullptr ? uint64_t(uint32_t(m->rank)) << 32 | uint32_t(m->new_id) : kNoMerge;
  }
  struct Tree {
    int32_t birth;        // rank of its canonical split; -1 for a unit
    int32_t left, right;  // the canonical split's parts (-1 for a unit)
  };
  // Trie of the reachable tokens' bytes, one record per node in trie_, in
  // preorder (the order sorted insertion creates them): a node's descendants
  // follow it, so past a path's first few bytes (hot nodes) the records it
  // visits sit a few cache lines apart, where a hash table would miss at
  // every byte. A record is [token or kNone, children] and, for up to
  // kSparse children, their bytes, sorted, packed four to a word, then their
  // records in the same order; a node with more (the root, ' ', a UTF-8 lead
  // byte) has a table of 256 in dense_ instead, its index marked with
  // kDenseBit. trie_ ends with kPadding words, so that a record's bytes can
  // be read as 16 and a child looked up with no hit reads a word in it.
  static constexpr uint32_t kNone = ~uint32_t(0);
  static constexpr uint32_t kSparse = 16, kDenseBit = 1u << 31, kPadding = 2 * kSparse;
  uint32_t child(const uint32_t* record, uint8_t byte) const {
    const uint32_t kids = record[1];
    if (kids & kDenseBit) return dense_[size_t(kids & ~kDenseBit) * 256 + byte];
#if defined(__SSE2__)
    // All the bytes compared at once: no branch on where the match is.
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(record + 2));
    const uint32_t hit =
        uint32_t(_mm_movemask_epi8(_mm_cmpeq_epi8(bytes, _mm_set1_epi8(char(byte))))) & ((1u << kids) - 1);
#else
    uint32_t hit = 0;
    const auto* bytes = reinterpret_cast<const uint8_t*>(record + 2);
    for (uint32_t i = 0; i < kids; ++i) hit |= uint32_t(bytes[i] == byte) << i;
#endif
    // With no hit, a word past the record (within the padding) is read and dropped.
    const uint32_t found = record[2 + (kids + 3) / 4 + uint32_t(__builtin_ctz(hit | 1u << kSparse))];
    return hit != 0 ? found : kNone;
  }
  struct Piece {
    int32_t id;
    uint32_t len;
  };
  bool build_trie(const std::vector<std::string>& raw, const std::vector<bool>& reachable, std::string& why);
  // The reachable tokens that start `word` at `pos`, shorter than max_len,
  // into cands_ by increasing length; returns how many.
  size_t matches(std::string_view word, size_t pos, size_t max_len) const;
  bool walk(int32_t x, int32_t y, int32_t limit, bool inclusive) const;
  bool heap_pair(int32_t a, int32_t b) const;
  bool search(std::string_view word) const;
  static size_t memo_index(uint64_t key) { return (key * 0x9E3779B97F4A7C15ull) >> (64 - kPairMemoBits); }

  const MergeTable* merges_ = nullptr;
  HugeVector<Tree> trees_;
  // A bit per token: reachable, not regular (a bit rather than a byte: the
  // table, read for every pair the memo does not answer, stays in the cache).
  std::vector<uint64_t> irregular_;
  bool irregular(int32_t id) const { return irregular_[size_t(id) / 64] >> (size_t(id) % 64) & 1; }
  size_t irregular_count_ = 0;
  Heap heap_;
  std::string bytes_;              // every token's bytes, one after another
  std::vector<uint32_t> offsets_;  // token id's bytes: [offsets_[id], offsets_[id + 1])
  HugeVector<uint32_t> trie_;      // node records; the root's at 0
  HugeVector<uint32_t> dense_;     // 256 children (or kNone) per node with many
  int32_t unit_[256];              // the token of each byte
  std::vector<uint32_t> top2_;     // the node of each first two bytes (b0 << 8 | b1), or kNone
  // Each reachable token's canonical split only: the only merges the heap
  // loop ever applies (a piece it forms is the BPE of its own bytes, so its
  // last merge is its canonical split), so the lowest of these pairs is the
  // lowest of all. Llama-3 lists 280,147 merges for 128,000 tokens.
  MergeTable canonical_;
  HugeVector<uint64_t> byte_pairs_;  // merge_of(unit_[b0], unit_[b1]) at b0 << 8 | b1

  // 4096 answers (32 KiB, in the cache): the pairs asked again are mostly
  // those of the last few words; a table of 65,536 answered hardly more of
  // them and missed the cache on most lookups (callgrind, unseen Qwen3
  // English: 12% fewer L2 read misses at 2^12 than at 2^16).
  static constexpr int kPairMemoBits = 12;
  // key << 1 | compatible; keys are below 2^63, so all ones is never a key.
  mutable HugeVector<uint64_t> pair_memo_ = HugeVector<uint64_t>(size_t(1) << kPairMemoBits, ~uint64_t(0));
  mutable std::vector<Piece> stack_;
  mutable std::vector<Piece> cands_;    // one per byte of the longest token
  mutable std::vector<uint64_t> dead_;  // bit p: no tokenization of the rest starts at byte p
  mutable std::string pair_bytes_;
  mutable std::vector<WordPiece> pair_pieces_;
};

}  // namespace tokfeed::text::hf
