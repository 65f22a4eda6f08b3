#include "tokenizer/sp_bpe.hpp"

#include <algorithm>

#include "tokenizer/hf/unicode.hpp"

namespace tokfeed::text {

namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's whitespace
constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

using Type = SpModelSpec::PieceType;

size_t char_count(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); i += hf::utf8_char_len(s, i)) ++n;
  return n;
}

// Why the model is outside what SpBpe does exactly, or "".
std::string unsupported(const SpModelSpec& spec, const hf::Vocab& normal) {
  if (spec.model_type != 2) return "not a BPE model";
  if (spec.normalizer_name != "identity" || !spec.precompiled_charsmap.empty())
    return "normalizer '" + spec.normalizer_name + "' has a character map";
  if (spec.remove_extra_whitespaces) return "remove_extra_whitespaces is on";
  if (!spec.escape_whitespaces) return "escape_whitespaces is off";
  if (spec.treat_whitespace_as_suffix) return "treat_whitespace_as_suffix is on";
  if (!spec.byte_fallback) return "byte_fallback is off";
  size_t bytes = 0, unknown = 0;
  for (const auto& p : spec.pieces) {
    if (p.type == Type::kUserDefined || p.type == Type::kUnused)
      return "it has user-defined or unused pieces ('" + p.piece + "')";
    if (p.type == Type::kByte) ++bytes;
    if (p.type == Type::kUnknown) ++unknown;
    if (p.type != Type::kNormal && char_count(p.piece) == 1) return "special piece '" + p.piece + "' is a single char";
    if (p.type != Type::kNormal) continue;
    bool other_seen = false;
    for (size_t i = 0; i < p.piece.size();) {
      const hf::DecodedChar d = hf::decode_utf8(p.piece, i);
      if (d.cp == hf::kInvalidChar) return "piece '" + p.piece + "' is not valid UTF-8";
      const uint32_t len = d.len;
      const std::string_view c(p.piece.data() + i, len);
      if (!normal.count(c)) return "piece '" + p.piece + "' has a char that is not a piece";
      if (c == kSpace && other_seen) return "piece '" + p.piece + "' has '▁' after another char";
      other_seen |= c != kSpace;
      i += len;
    }
  }
  if (bytes != 256) return "it has " + std::to_string(bytes) + " byte pieces, not 256";
  if (unknown != 1) return "it has " + std::to_string(unknown) + " unknown pieces";
  return "";
}

}  // namespace

std::unique_ptr<SpBpe> SpBpe::build(const SpModelSpec& spec, const std::string& where, std::string& why) {
  hf::BpeConfig c;
  hf::Vocab normal;
  for (size_t id = 0; id < spec.pieces.size(); ++id)
    if (spec.pieces[id].type == Type::kNormal) normal.emplace(spec.pieces[id].piece, int32_t(id));
  why = unsupported(spec, normal);
  if (!why.empty()) return nullptr;

  auto sp = std::unique_ptr<SpBpe>(new SpBpe());
  sp->is_byte_.assign(spec.pieces.size(), false);
  std::vector<float> scores;
  for (size_t id = 0; id < spec.pieces.size(); ++id) {
    const auto& p = spec.pieces[id];
    if (p.type == Type::kNormal) scores.push_back(p.score);
    if (p.type == Type::kNormal || p.type == Type::kByte || p.type == Type::kUnknown)
      c.vocab.emplace(p.piece, int32_t(id));
    if (p.type == Type::kByte) sp->is_byte_[id] = true;
    if (p.type == Type::kUnknown) c.unk_token = p.piece;
  }
  // A merge per way of cutting a normal piece into two normal pieces, ranked
  // by the piece's score (higher first, equal scores equal ranks).
  std::sort(scores.begin(), scores.end(), std::greater<float>());
  scores.erase(std::unique(scores.begin(), scores.end()), scores.end());
  for (const auto& [piece, id] : normal) {
    const int32_t rank =
        int32_t(std::lower_bound(scores.begin(), scores.end(), spec.pieces[size_t(id)].score, std::greater<float>()) -
                scores.begin());
    for (size_t cut = hf::utf8_char_len(piece, 0); cut < piece.size(); cut += hf::utf8_char_len(piece, cut)) {
      const std::string_view l(piece.data(), cut), r(piece.data() + cut, piece.size() - cut);
      if (normal.count(l) && normal.count(r)) {
        c.merges.emplace_back(std::string(l), std::string(r));
        c.merge_ranks.push_back(rank);
      }
    }
  }
  c.byte_fallback = true;
  sp->add_dummy_prefix_ = spec.add_dummy_prefix;
  sp->model_ = std::make_unique<hf::BpeModel>(std::move(c), where);
  return sp;
}

void SpBpe::encode(std::string_view text, uint32_t base, std::vector<Token>& out) const {
  if (text.empty()) return;
  norm_.clear();
  to_orig_.clear();
  if (add_dummy_prefix_) {
    norm_ += kSpace;
    to_orig_.insert(to_orig_.end(), kSpace.size(), 0);
  }
  for (size_t i = 0; i < text.size();) {
    const auto b = static_cast<unsigned char>(text[i]);
    if (b < 0x80 && b != ' ') {
      norm_.push_back(char(b));
      to_orig_.push_back(uint32_t(i++));
      continue;
    }
    const hf::DecodedChar d = hf::decode_utf8(text, i);
    std::string_view c = text.substr(i, d.len);
    if (d.cp == hf::kInvalidChar) c = kReplacement;
    else if (c == " ") c = kSpace;
    norm_ += c;
    to_orig_.insert(to_orig_.end(), c.size(), uint32_t(i));
    i += d.len;
  }
  to_orig_.push_back(uint32_t(text.size()));

  const std::string_view norm = norm_;
  size_t w = 0;
  while (w < norm.size()) {
    // The word: a run of "▁", then chars up to the next "▁".
    size_t e = w;
    while (e < norm.size() && norm.compare(e, kSpace.size(), kSpace) == 0) e += kSpace.size();
    while (e < norm.size() && norm.compare(e, kSpace.size(), kSpace) != 0) e += hf::utf8_char_len(norm, e);
    pieces_.clear();
    model_->tokenize(norm.substr(w, e - w), pieces_);
    size_t nb = w, group_begin = w, char_end = w;
    for (const hf::WordPiece& p : pieces_) {
      if (is_byte_[size_t(p.id)]) {
        if (nb >= char_end) {
          group_begin = nb;
          char_end = nb + hf::utf8_char_len(norm, nb);
        }
        const uint32_t b = to_orig_[group_begin];
        const uint32_t end = nb + 1 == char_end ? to_orig_[char_end] : b;
        out.push_back({p.id, base + b, base + end});
      } else {
        out.push_back({p.id, base + to_orig_[nb], base + to_orig_[nb + p.len]});
      }
      nb += p.len;
    }
    w = e;
  }
}

}  // namespace tokfeed::text
