#include "tokenizer/hf_tokenizer.hpp"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "tokenizer/hf/fast_split.hpp"
#include "tokenizer/hf/general_split.hpp"
#include "tokenizer/hf/hf_model.hpp"
#include "tokenizer/hf/huge_table.hpp"
#include "tokenizer/hf/nfc_check.hpp"
#include "tokenizer/hf/unicode.hpp"

namespace tokfeed::text {

std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& tokenizer_json_path) {
  return std::make_unique<hf::HfTokenizer>(hf::load_hf_parts(tokenizer_json_path));
}

namespace hf {

HfTokenizer::HfTokenizer(HfParts parts, bool fused) : p_(std::move(parts)) {
  nfc_ = dynamic_cast<const NfcNormalizer*>(p_.normalizer.get()) != nullptr;
  // Text NFC leaves as it is, or any text where the normalizer does nothing:
  // added tokens matched after normalizing match it as it is.
  const bool as_is = p_.normalizer == nullptr || p_.normalizer->is_identity() || nfc_;
  if (fused && as_is && p_.pre_tokenizer) word_split_ = p_.pre_tokenizer->word_split();
  metaspace_words_ = fused && p_.model->words_end_before_metaspace();
  if (fused && word_split_ == nullptr && !metaspace_words_ && as_is && p_.pre_tokenizer &&
      !p_.pre_tokenizer->word_regexes(word_regexes_))
    word_regexes_.clear();
  level_matches_.resize(word_regexes_.size());
  if (word_regexes_.size() >= 2 && word_regexes_.back()->general() != nullptr) {
    std::vector<const GeneralSplit*> before;
    for (size_t l = 0; l + 1 < word_regexes_.size() && word_regexes_[l]->general() != nullptr; ++l)
      before.push_back(word_regexes_[l]->general());
    if (before.size() + 1 == word_regexes_.size())
      run_splits_ = RunSplits::build(before, *word_regexes_.back()->general());
  }
}

std::string HfTokenizer::engine() const {
  std::string e = "hf; BPE merges: " + p_.model->merge_algorithm();
  if (p_.pre_tokenizer) {
    std::vector<std::string> regexes;
    p_.pre_tokenizer->describe_regexes(regexes);
    for (const std::string& r : regexes) e += "; " + r;
  }
  if (word_split_) e += "; split and merges fused";
  if (!word_regexes_.empty()) e += "; splits and merges fused";
  if (run_splits_) e += "; the splits before the last in one pass";
  if (metaspace_words_) e += "; words cut before each \u2581 run";
  e += "; " + describe_huge_page_use();  // of the process's tokenizer tables
  return e;
}

namespace {

// Words per batch: the split fills a batch, then the words' keys are
// computed and their home slots prefetched, then the slots are read in order.
constexpr size_t kBatch = FastSplit::kWordBatch;

// All three pieces of e, an inline hit for the word at [wb, wb + len) of
// the text (the caller keeps e.n of them). Ids: the 16 bytes from e.ids,
// one int past the three.
[[gnu::always_inline]] inline void store_inline(int32_t* o, const WordCache::Entry& e, uint32_t, uint32_t) {
  std::memcpy(o, e.ids, 16);
}
[[gnu::always_inline]] inline void store_inline(Token* o, const WordCache::Entry& e, uint32_t wb, uint32_t len) {
  const uint32_t e0 = wb + e.lens[0], e1 = e0 + e.lens[1];
  o[0] = {int32_t(e.ids[0]), wb, e0};
  o[1] = {int32_t(e.ids[1]), e0, e1};
  o[2] = {int32_t(e.ids[2]), e1, wb + len};
}
// `count` pieces of a word that begins at wb.
[[gnu::always_inline]] inline void store_pieces(int32_t* o, const WordPiece* p, size_t count, uint32_t) {
  for (size_t i = 0; i < count; ++i) o[i] = p[i].id;
}
[[gnu::always_inline]] inline void store_pieces(Token* o, const WordPiece* p, size_t count, uint32_t wb) {
  uint32_t at = wb;  // the next piece's begin
  for (size_t i = 0; i < count; ++i) {
    // A zero-length byte-fallback piece shares the previous piece's byte.
    const uint32_t n = p[i].len, b = n == 0 ? (at > wb ? at - 1 : at) : at;
    o[i] = {p[i].id, b, n == 0 ? b + 1 : at + n};
    at += n;
  }
}

// A batch's pieces gather in a buffer on the stack, appended to the
// caller's vector when it fills and at the end. An inline hit stores its
// three pieces (and for ids one int more) with no check of room: the buffer
// has room for three a word and one more, made again after a word that is
// not one.
constexpr size_t kLongPieces = 64;  // more pieces than this skip the buffer
constexpr size_t kBufferRoom = 3 * kBatch + 1 + kLongPieces;

// Room for `n` more pieces at w in buf[0, kBufferRoom); the new w.
template <class T>
[[gnu::always_inline]] inline T* make_room(T* buf, T* w, size_t n, std::vector<T>& out) {
  if (size_t(buf + kBufferRoom - w) >= n) return w;
  out.insert(out.end(), buf, w);
  return buf;
}

// The pieces of the word at [b, b + len) of `piece`, which starts at `base`
// in the text, one by one, from the cache's full probe or the merges (any
// word but a hit in its home slot); the new w.
template <class T>
[[gnu::noinline]] T* word_pieces(const BpeModel& model, std::string_view piece, uint32_t base, uint32_t b, uint32_t len,
                                 const WordCache::Key& key, T* buf, T* w, std::vector<T>& out) {
  if constexpr (std::is_same_v<T, Token>) {
    const uint32_t wb = base + b;
    uint32_t at = wb;  // the next piece's begin
    model.for_each_piece_keyed(piece.substr(b, len), key, [&](int32_t id, uint32_t n) {
      // A zero-length byte-fallback piece shares the previous piece's byte.
      const uint32_t pb = n == 0 ? (at > wb ? at - 1 : at) : at;
      w = make_room(buf, w, 1, out);
      *w++ = {id, pb, n == 0 ? pb + 1 : at + n};
      at += n;
    });
  } else {
    model.for_each_piece_keyed(piece.substr(b, len), key, [&](int32_t id, uint32_t) {
      w = make_room(buf, w, 1, out);
      *w++ = id;
    });
  }
  return w;
}

// A word of a batch: its key (lo, hi as WordCache::Key's) and its home slot.
struct BatchWord {
  uint64_t key[2];
  const WordCache::Entry* slot;
};

// The keys of words[0, n) (word j is piece[ends[j - 1], ends[j]), with
// ends[-1] = first), their home slots prefetched. `all_readable`: 16 bytes
// may be read from every word's start. A word longer than
// WordCache::kInlineKey gets the key {hash, kMatchesNone}, which no slot holds.
template <bool all_readable>
[[gnu::always_inline]] inline void batch_keys(std::string_view piece, size_t readable, const char* readable_end,
                                              uint32_t first, const uint32_t* ends, size_t n,
                                              const WordCache::Entry* slots, uint64_t mask, BatchWord* words) {
  const char* const s = piece.data();
  for (size_t j = 0; j < n; ++j) {
    const uint32_t end = ends[j], len = end - first;
    BatchWord& wd = words[j];
    uint64_t hash;
    if (len <= WordCache::kInlineKey && (all_readable || first + 16 <= readable)) {
      hash = WordCache::key16(s + first, len, wd.key);
    } else {
      const WordCache::Key k = WordCache::key_of(piece.substr(first, len), readable_end);
      wd.key[0] = k.lo;
      wd.key[1] = len > WordCache::kInlineKey ? WordCache::kMatchesNone : k.hi;
      hash = k.hash;
    }
    wd.slot = WordCache::home_of(slots, mask, hash);
    __builtin_prefetch(wd.slot);
    first = end;
  }
}

// A batch: word j is piece[ends[j - 1], ends[j]), with ends[-1] = first;
// 1 <= n <= kBatch. The piece starts at `base` in the text, which goes on
// to `readable_end`.
template <class T>
struct Batch {
  const BpeModel& model;
  std::string_view piece;
  uint32_t base;
  const char* readable_end;
  uint32_t first;
  const uint32_t* ends;
  size_t n;
  std::vector<T>& out;
  T* buf;
  BatchWord* words;
  uint32_t generation;  // the word cache's when words' home slots were found
};

// Word j of batch b, which is not an inline hit in its home slot; its
// pieces go to w. The new w. Kept out of the loop over the words, whose
// registers it would take.
template <class T>
[[gnu::noinline]] T* batch_word(Batch<T>& b, size_t j, T* w) {
  const WordCache& cache = b.model.word_cache();
  const uint32_t begin = j > 0 ? b.ends[j - 1] : b.first, len = b.ends[j] - begin;
  const std::string_view word = b.piece.substr(begin, len);
  const WordCache::Key key = WordCache::key_again(b.words[j].key[0], b.words[j].key[1]);
  size_t count;
  const WordPiece* p = cache.pieces_at(*b.words[j].slot, key, word, count);
  if (p != nullptr && count <= kLongPieces) {  // out of line in its home slot
    w = make_room(b.buf, w, count + 3 * (b.n - j) + 1, b.out);
    store_pieces(w, p, count, b.base + begin);
    return w + count;
  }
  w = word_pieces(b.model, b.piece, b.base, begin, len, key, b.buf, w, b.out);
  w = make_room(b.buf, w, 3 * (b.n - j) + 1, b.out);
  if (cache.generation() != b.generation) {
    // An insert grew or cleared the table: the home slots of the words left
    // are found again.
    b.generation = cache.generation();
    const WordCache::Entry* slots = cache.slots();
    const uint64_t mask = cache.offset_mask();
    for (size_t k = j + 1; k < b.n; ++k)
      b.words[k].slot =
          WordCache::home_of(slots, mask, WordCache::key_again(b.words[k].key[0], b.words[k].key[1]).hash);
  }
  return w;
}

// The words of a batch (see Batch).
template <class T>
[[gnu::noinline]] void encode_batch(const BpeModel& model, std::string_view piece, uint32_t base,
                                    const char* readable_end, uint32_t first, const uint32_t* ends, size_t n,
                                    std::vector<T>& out) {
  const WordCache& cache = model.word_cache();
  const WordCache::Entry* slots = cache.slots();
  T buf[kBufferRoom];
  T* w = buf;
  if (slots == nullptr) {  // nothing cached yet
    for (size_t j = 0; j < n; first = ends[j++]) {
      const std::string_view word = piece.substr(first, ends[j] - first);
      w = word_pieces(model, piece, base, first, uint32_t(word.size()), WordCache::key_of(word, readable_end), buf, w,
                      out);
    }
    out.insert(out.end(), buf, w);
    return;
  }
  BatchWord words[kBatch];
  const size_t readable = size_t(readable_end - piece.data());  // bytes that may be read from the piece's start
  // Mostly every word of the batch is followed by 16 readable bytes: then
  // the loop checks only the length.
  if ((n > 1 ? ends[n - 2] : first) + 16 <= readable)
    batch_keys<true>(piece, readable, readable_end, first, ends, n, slots, cache.offset_mask(), words);
  else batch_keys<false>(piece, readable, readable_end, first, ends, n, slots, cache.offset_mask(), words);
  Batch<T> b{model, piece, base, readable_end, first, ends, n, out, buf, words, cache.generation()};
  for (size_t j = 0; j < n; ++j) {
    // A slot equal to the word's key holds it with its pieces inline.
    const WordCache::Entry& e = *words[j].slot;
    uint32_t begin = 0, len = 0;
    if constexpr (std::is_same_v<T, Token>) begin = j > 0 ? ends[j - 1] : first, len = ends[j] - begin;
    store_inline(w, e, base + begin, len);
    if (e.lo == words[j].key[0] && e.hi == words[j].key[1]) [[likely]]
      w += e.n;
    else w = batch_word(b, j, w);
  }
  out.insert(out.end(), buf, w);
}

}  // namespace

void HfTokenizer::encode(std::string_view text, std::vector<Token>& out) const {
  // Added tokens that match the raw text come out first; HF does the same.
  raw_splits_.clear();
  if (p_.raw_added.empty()) raw_splits_.push_back({-1, 0, uint32_t(text.size())});
  else p_.raw_added.split(text, raw_splits_);
  // encode_piece may not touch raw_splits_, so iterate by index over a stable vector.
  for (size_t i = 0; i < raw_splits_.size(); ++i) {
    const AddedSplit s = raw_splits_[i];
    if (s.id >= 0) out.push_back({s.id, s.begin, s.end});
    else if (s.begin < s.end && !encode_words(text, s.begin, s.end, out)) encode_piece(text, s.begin, s.end, out);
  }
}

void HfTokenizer::encode_ids(std::string_view text, std::vector<int32_t>& out) const {
  raw_splits_.clear();
  if (p_.raw_added.empty()) raw_splits_.push_back({-1, 0, uint32_t(text.size())});
  else p_.raw_added.split(text, raw_splits_);
  for (size_t i = 0; i < raw_splits_.size(); ++i) {
    const AddedSplit s = raw_splits_[i];
    if (s.id >= 0) {
      out.push_back(s.id);
    } else if (s.begin < s.end && !encode_words(text, s.begin, s.end, out)) {
      general_.clear();
      encode_piece(text, s.begin, s.end, general_);
      for (const Token& t : general_) out.push_back(t.id);
    }
  }
}

template <class T>
bool HfTokenizer::encode_words(std::string_view text, uint32_t begin, uint32_t end, std::vector<T>& out) const {
  const std::string_view piece = text.substr(begin, end - begin);
  if ((word_split_ == nullptr && word_regexes_.empty()) || (nfc_ && !nfc_quick_check(piece))) return false;
  if (p_.normalized_added.empty()) {
    encode_word_run(text, begin, end, out);
    return true;
  }
  // The text is its own normalized form: added tokens matched after
  // normalizing are matched in it.
  normalized_splits_.clear();
  p_.normalized_added.split(piece, normalized_splits_);
  for (const AddedSplit& s : normalized_splits_) {
    if (s.begin >= s.end) continue;
    if (s.id < 0) encode_word_run(text, begin + s.begin, begin + s.end, out);
    else if constexpr (std::is_same_v<T, Token>) out.push_back({s.id, begin + s.begin, begin + s.end});
    else out.push_back(s.id);
  }
  return true;
}

template <class T>
void HfTokenizer::encode_word_run(std::string_view text, uint32_t begin, uint32_t end, std::vector<T>& out) const {
  const std::string_view piece = text.substr(begin, end - begin);
  const BpeModel& model = *p_.model;
  if (word_split_ == nullptr) {
    // The regexes' words, all of them, then a batch at a time.
    word_ends_.clear();
    regex_word_ends(piece, 0, 0);
    uint32_t first = 0;
    for (size_t i = 0; i < word_ends_.size(); i += kBatch) {
      const size_t k = std::min(kBatch, word_ends_.size() - i);
      encode_batch(model, piece, begin, text.data() + text.size(), first, word_ends_.data() + i, k, out);
      first = word_ends_[i + k - 1];
    }
    return;
  }
  // A batch of words at a time: their ends from the split, then their pieces.
  uint32_t ends[kBatch];
  uint32_t first = 0;
  for (size_t pos = 0; pos < piece.size();) {
    const size_t k = word_split_->word_ends(piece, pos, ends);
    encode_batch(model, piece, begin, text.data() + text.size(), first, ends, k, out);
    first = ends[k - 1];
  }
}

void HfTokenizer::regex_word_ends(std::string_view s, size_t level, uint32_t base) const {
  if (level == 0 && run_splits_) {
    // The runs the splits before the last cut out, and the stretches between
    // them, each split by the last.
    const GeneralSplit& last = *word_regexes_.back()->general();
    run_splits_->pieces(s, [&](size_t b, size_t e, bool whole) {
      if (whole) word_ends_.push_back(base + uint32_t(e));
      else last.split_ends(s.substr(b, e - b), base + uint32_t(b), word_ends_);
    });
    return;
  }
  if (level == word_regexes_.size()) {
    word_ends_.push_back(base + uint32_t(s.size()));
    return;
  }
  if (const GeneralSplit* last = word_regexes_[level]->general(); last && level + 1 == word_regexes_.size()) {
    last->split_ends(s, base, word_ends_);  // the last split's pieces are the words
    return;
  }
  // Every match and every piece between two matches is a piece (Isolated);
  // empty ones are dropped.
  auto& m = level_matches_[level];
  m.clear();
  word_regexes_[level]->find_all(s, m);
  uint32_t prev = 0;
  for (auto [b, e] : m) {
    if (prev < b) regex_word_ends(s.substr(prev, b - prev), level + 1, base + prev);
    if (b < e) regex_word_ends(s.substr(b, e - b), level + 1, base + b);
    prev = e;
  }
  if (prev < s.size()) regex_word_ends(s.substr(prev), level + 1, base + prev);
}

void HfTokenizer::encode_piece(std::string_view text, uint32_t begin, uint32_t end, std::vector<Token>& out) const {
  PreTokenized& pt = pre_;
  pt.reset();
  pt.texts.emplace_back(text, begin, end);
  if (p_.normalizer) p_.normalizer->normalize(pt.texts[0]);
  const uint32_t n = uint32_t(pt.texts[0].size());
  if (n == 0) return;
  if (p_.normalized_added.empty()) {
    pt.spans.push_back({0, 0, n});
    encode_normalized(pt, out);
    return;
  }
  // Added tokens marked `normalized` match the normalized text; each text
  // piece between them is pre-tokenized on its own, as a slice.
  NormalizedText whole = std::move(pt.texts[0]);
  normalized_splits_.clear();
  p_.normalized_added.split(whole.text(), normalized_splits_);
  for (const AddedSplit& s : normalized_splits_) {
    if (s.begin >= s.end) continue;
    if (s.id >= 0) {
      OrigRange o = whole.to_original(s.begin, s.end);
      out.push_back({s.id, o.begin, o.end});
      continue;
    }
    pt.reset();
    pt.texts.push_back(whole.slice(s.begin, s.end));
    pt.spans.push_back({0, 0, s.end - s.begin});
    encode_normalized(pt, out);
  }
}

void HfTokenizer::encode_normalized(PreTokenized& pt, std::vector<Token>& out) const {
  if (p_.pre_tokenizer) p_.pre_tokenizer->pre_tokenize(pt);
  for (const PreSpan& span : pt.spans) {
    if (!metaspace_words_) {
      encode_span(pt, span, out);
      continue;
    }
    // Words: a run of "▁", then the chars up to the next one.
    static constexpr std::string_view kMeta = "\u2581";
    const std::string_view t = pt.texts[span.text].text();
    auto meta_at = [&](size_t i) { return i + kMeta.size() <= span.end && t.compare(i, kMeta.size(), kMeta) == 0; };
    for (size_t w = span.begin; w < span.end;) {
      size_t e = w;
      while (meta_at(e)) e += kMeta.size();
      while (e < span.end && !meta_at(e)) {
        const void* next = std::memchr(t.data() + e + 1, kMeta[0], span.end - e - 1);
        e = next ? size_t(static_cast<const char*>(next) - t.data()) : span.end;
      }
      encode_span(pt, {span.text, uint32_t(w), uint32_t(e)}, out);
      w = e;
    }
  }
}

void HfTokenizer::encode_span(const PreTokenized& pt, const PreSpan& span, std::vector<Token>& out) const {
  const NormalizedText& t = pt.texts[span.text];
  pieces_.clear();
  p_.model->tokenize(t.text().substr(span.begin, span.end - span.begin), pieces_);
  uint32_t nb = span.begin;
  if (t.is_identity()) {
    // The common case: offsets are the normalized ones shifted.
    const uint32_t base = t.identity_base();
    for (const WordPiece& w : pieces_) {
      // A zero-length byte-fallback piece shares the previous piece's byte.
      const uint32_t b = w.len == 0 ? (nb > span.begin ? nb - 1 : nb) : nb;
      const uint32_t e = w.len == 0 ? b + 1 : nb + w.len;
      out.push_back({w.id, base + b, base + e});
      nb += w.len;
    }
    return;
  }
  for (const WordPiece& w : pieces_) {
    if (w.len == 0) {
      // A byte-fallback piece after the first of a byte-level unit: it
      // shares the previous piece's range.
      OrigRange o = nb > span.begin ? t.to_original(nb - 1, nb) : t.to_original(nb, nb + 1);
      out.push_back({w.id, o.begin, o.end});
      continue;
    }
    OrigRange o = t.to_original(nb, nb + w.len);
    out.push_back({w.id, o.begin, o.end});
    nb += w.len;
  }
}

std::string HfTokenizer::decode(std::span<const int32_t> ids) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (auto it = p_.added_by_id.find(id); it != p_.added_by_id.end()) tokens.push_back(it->second);
    else if (const std::string* t = p_.model->id_to_token(id)) tokens.push_back(*t);
    // Unknown ids are skipped, as HF does.
  }
  if (p_.decoder) p_.decoder->decode_chain(tokens);
  std::string out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i > 0 && !p_.decoder) out.push_back(' ');
    out += tokens[i];
  }
  return out;
}

const SequenceSpecials& HfTokenizer::sequence_specials() const {
  if (!p_.specials_error.empty()) throw TokenizerError(p_.specials_error);
  return p_.specials;
}

std::optional<int32_t> HfTokenizer::special_token_id(std::string_view text) const {
  auto it = p_.added_by_content.find(text);
  if (it == p_.added_by_content.end()) return std::nullopt;
  return it->second;
}

}  // namespace hf
}  // namespace tokfeed::text
