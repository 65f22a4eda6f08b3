#include "tokenizer/hf_tokenizer.hpp"

#include <cstring>

#include "tokenizer/hf/fast_split.hpp"
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
  if (fused && (p_.normalizer == nullptr || nfc_) && p_.normalized_added.empty() && p_.pre_tokenizer)
    word_split_ = p_.pre_tokenizer->word_split();
  metaspace_words_ = fused && p_.model->words_end_before_metaspace();
}

std::string HfTokenizer::engine() const {
  std::string e = "hf; BPE merges: " + p_.model->merge_algorithm();
  if (word_split_) e += "; split and merges fused";
  if (metaspace_words_) e += "; words cut before each \u2581 run";
  e += "; " + describe_huge_page_use();  // of the process's tokenizer tables
  return e;
}

namespace {

// Where the fused path's pieces go: tokens with their byte ranges, or ids.
class TokenSink {
 public:
  explicit TokenSink(std::vector<Token>& out) : out_(out) {}
  void reserve(size_t n) { out_.reserve(out_.size() + n); }
  void word(uint32_t begin) {
    word_begin_ = begin;
    at_ = 0;
  }
  [[gnu::always_inline]] void operator()(int32_t id, uint32_t len) {
    // A zero-length byte-fallback piece shares the previous piece's byte.
    const uint32_t b = len == 0 ? (at_ > 0 ? at_ - 1 : at_) : at_;
    const uint32_t e = len == 0 ? b + 1 : at_ + len;
    out_.push_back({id, word_begin_ + b, word_begin_ + e});
    at_ += len;
  }

 private:
  std::vector<Token>& out_;
  uint32_t word_begin_ = 0;  // of the word being emitted, relative to the text
  uint32_t at_ = 0;          // its next piece, relative to the word
};

class IdSink {
 public:
  explicit IdSink(std::vector<int32_t>& out) : out_(out) {}
  void reserve(size_t n) { out_.reserve(out_.size() + n); }
  void word(uint32_t) {}
  [[gnu::always_inline]] void operator()(int32_t id, uint32_t) { out_.push_back(id); }

 private:
  std::vector<int32_t>& out_;
};

}  // namespace

void HfTokenizer::encode(std::string_view text, std::vector<Token>& out) const {
  // Added tokens that match the raw text come out first; HF does the same.
  raw_splits_.clear();
  if (p_.raw_added.empty()) raw_splits_.push_back({-1, 0, uint32_t(text.size())});
  else p_.raw_added.split(text, raw_splits_);
  // encode_piece may not touch raw_splits_, so iterate by index over a stable vector.
  TokenSink sink(out);
  for (size_t i = 0; i < raw_splits_.size(); ++i) {
    const AddedSplit s = raw_splits_[i];
    if (s.id >= 0) out.push_back({s.id, s.begin, s.end});
    else if (s.begin < s.end && !encode_words(text, s.begin, s.end, sink)) encode_piece(text, s.begin, s.end, out);
  }
}

void HfTokenizer::encode_ids(std::string_view text, std::vector<int32_t>& out) const {
  raw_splits_.clear();
  if (p_.raw_added.empty()) raw_splits_.push_back({-1, 0, uint32_t(text.size())});
  else p_.raw_added.split(text, raw_splits_);
  IdSink sink(out);
  for (size_t i = 0; i < raw_splits_.size(); ++i) {
    const AddedSplit s = raw_splits_[i];
    if (s.id >= 0) {
      out.push_back(s.id);
    } else if (s.begin < s.end && !encode_words(text, s.begin, s.end, sink)) {
      general_.clear();
      encode_piece(text, s.begin, s.end, general_);
      for (const Token& t : general_) out.push_back(t.id);
    }
  }
}

template <class Sink>
bool HfTokenizer::encode_words(std::string_view text, uint32_t begin, uint32_t end, Sink& sink) const {
  const std::string_view piece = text.substr(begin, end - begin);
  if (word_split_ == nullptr || (nfc_ && !nfc_quick_check(piece))) return false;
  // Byte-level BPE gives about one token per 4 bytes of text.
  sink.reserve(piece.size() / 3 + 16);
  const BpeModel& model = *p_.model;
  const char* const readable_end = text.data() + text.size();
  auto word = [&](size_t b, size_t e) __attribute__((always_inline)) {
    sink.word(begin + uint32_t(b));
    model.for_each_piece(std::string_view(piece.data() + b, e - b), sink, readable_end);
  };
  size_t prev = 0;
  word_split_->for_each(piece, [&](size_t b, size_t e) {
    if (prev < b) word(prev, b);  // bytes no alternative matches: a piece of their own
    word(b, e);
    prev = e;
  });
  if (prev < piece.size()) word(prev, piece.size());
  return true;
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

std::optional<int32_t> HfTokenizer::special_token_id(std::string_view text) const {
  auto it = p_.added_by_content.find(text);
  if (it == p_.added_by_content.end()) return std::nullopt;
  return it->second;
}

}  // namespace hf
}  // namespace tokfeed::text
