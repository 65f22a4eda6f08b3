#include "tokenizer/hf/components.hpp"

#include <algorithm>

#include "tokenizer/hf/unicode.hpp"

namespace tokfeed::text::hf {

// ---- normalizers ----

NfcNormalizer::NfcNormalizer() { nfc_prepare(); }

void NfcNormalizer::normalize(NormalizedText& text) const {
  std::string out;
  std::vector<NfcRegion> regions;
  if (!nfc_append(text.text(), out, regions)) return;  // already NFC: keep the cheap view
  std::vector<NormalizedText::Piece> pieces;
  pieces.reserve(regions.size());
  for (const auto& r : regions) pieces.push_back({r.in_begin, r.in_len, r.out_len, r.changed});
  text.replace_all(std::move(out), pieces);
}

void PrependNormalizer::normalize(NormalizedText& text) const {
  // HF prepends only to non-empty text.
  if (text.empty()) return;
  text.apply_edits({Edit{0, 0, prepend_}});
}

void ReplaceNormalizer::normalize(NormalizedText& text) const {
  std::string_view s = text.text();
  std::vector<Edit> edits;
  if (regex_) {
    matches_.clear();
    regex_->find_all(s, matches_);
    for (auto [b, e] : matches_) edits.push_back({b, e, content_});
  } else if (!literal_.empty()) {
    for (size_t at = s.find(literal_); at != std::string_view::npos; at = s.find(literal_, at + literal_.size()))
      edits.push_back({uint32_t(at), uint32_t(at + literal_.size()), content_});
  }
  text.apply_edits(edits);
}

// ---- pre-tokenizers ----

void split_by_matches(PreTokenized& pt, const PreSpan& span, const std::vector<std::pair<uint32_t, uint32_t>>& matches,
                      SplitBehavior behavior, bool invert) {
  struct Piece {
    uint32_t b, e;
    bool is_match;
  };
  const uint32_t len = span.end - span.begin;
  // Fast path for the common case: every piece is kept as it is.
  if (behavior == SplitBehavior::kIsolated) {
    uint32_t prev = 0;
    for (auto [b, e] : matches) {
      if (prev < b) pt.next.push_back({span.text, span.begin + prev, span.begin + b});
      if (b < e) pt.next.push_back({span.text, span.begin + b, span.begin + e});
      prev = e;
    }
    if (prev < len) pt.next.push_back({span.text, span.begin + prev, span.end});
    return;
  }
  std::vector<Piece> pieces;
  pieces.reserve(matches.size() * 2 + 1);
  uint32_t prev = 0;
  for (auto [b, e] : matches) {
    if (prev != b) pieces.push_back({prev, b, invert});
    pieces.push_back({b, e, !invert});
    prev = e;
  }
  if (prev != len) pieces.push_back({prev, len, invert});

  // The folds below follow HF's SplitDelimiterBehavior; `is_match` of an
  // output piece means "remove it" only for kRemoved.
  std::vector<Piece> out;
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kIsolated: break;
    case SplitBehavior::kRemoved: out = pieces; break;
    case SplitBehavior::kContiguous:
      for (const Piece& p : pieces) {
        if (p.is_match == previous_match && !out.empty()) out.back().e = p.e;
        else out.push_back({p.b, p.e, false});
        previous_match = p.is_match;
      }
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const Piece& p : pieces) {
        if (p.is_match && !previous_match && !out.empty()) out.back().e = p.e;
        else out.push_back({p.b, p.e, false});
        previous_match = p.is_match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto it = pieces.rbegin(); it != pieces.rend(); ++it) {
        if (it->is_match && !previous_match && !out.empty()) out.back().b = it->b;
        else out.push_back({it->b, it->e, false});
        previous_match = it->is_match;
      }
      std::reverse(out.begin(), out.end());
      break;
  }
  for (const Piece& p : out)
    if (!p.is_match && p.b < p.e) pt.next.push_back({span.text, span.begin + p.b, span.begin + p.e});
}

namespace {

std::string_view span_text(const PreTokenized& pt, const PreSpan& s) {
  return pt.texts[s.text].text().substr(s.begin, s.end - s.begin);
}

// Runs `split_one(span)` over all spans, collecting the pieces in pt.next.
template <class F>
void for_each_span(PreTokenized& pt, F&& split_one) {
  pt.next.clear();
  for (size_t i = 0; i < pt.spans.size(); ++i) split_one(PreSpan(pt.spans[i]));
  pt.spans.swap(pt.next);
}

}  // namespace

void SplitPreTokenizer::pre_tokenize(PreTokenized& pt) const {
  for_each_span(pt, [&](const PreSpan& span) {
    pt.matches.clear();
    regex_->find_all(span_text(pt, span), pt.matches);
    split_by_matches(pt, span, pt.matches, behavior_, invert_);
  });
}

void DigitsPreTokenizer::pre_tokenize(PreTokenized& pt) const {
  for_each_span(pt, [&](const PreSpan& span) {
    std::string_view s = span_text(pt, span);
    pt.matches.clear();
    for (size_t i = 0; i < s.size();) {
      DecodedChar d = decode_utf8(s, i);
      if (is_numeric(d.cp)) pt.matches.emplace_back(uint32_t(i), uint32_t(i + d.len));
      i += d.len;
    }
    split_by_matches(pt, span, pt.matches, individual_ ? SplitBehavior::kIsolated : SplitBehavior::kContiguous, false);
  });
}

void MetaspacePreTokenizer::pre_tokenize(PreTokenized& pt) const {
  for_each_span(pt, [&](const PreSpan& span) {
    NormalizedText t = pt.texts[span.text].slice(span.begin, span.end);
    std::string_view s = t.text();
    std::vector<Edit> edits;
    bool starts_with_replacement = s.substr(0, replacement_.size()) == replacement_ || (!s.empty() && s[0] == ' ');
    bool prepend = !starts_with_replacement &&
                   (scheme_ == PrependScheme::kAlways || (scheme_ == PrependScheme::kFirst && t.original_begin() == 0));
    if (prepend) edits.push_back({0, 0, replacement_});
    for (size_t i = 0; i < s.size(); ++i)
      if (s[i] == ' ') edits.push_back({uint32_t(i), uint32_t(i + 1), replacement_});
    t.apply_edits(edits);
    const auto index = uint32_t(pt.texts.size());
    pt.texts.push_back(std::move(t));
    PreSpan whole{index, 0, uint32_t(pt.texts.back().size())};
    if (!split_) {
      if (whole.end > 0) pt.next.push_back(whole);
      return;
    }
    std::string_view r = pt.texts.back().text();
    pt.matches.clear();
    for (size_t at = r.find(replacement_); at != std::string_view::npos;
         at = r.find(replacement_, at + replacement_.size()))
      pt.matches.emplace_back(uint32_t(at), uint32_t(at + replacement_.size()));
    split_by_matches(pt, whole, pt.matches, SplitBehavior::kMergedWithNext, false);
  });
}

const FastSplit* SequencePreTokenizer::word_split() const {
  const FastSplit* split = nullptr;
  for (const auto& s : steps_) {
    if (s->passes_through()) continue;
    if (split != nullptr || (split = s->word_split()) == nullptr) return nullptr;
  }
  return split;
}

bool SequencePreTokenizer::passes_through() const {
  for (const auto& s : steps_)
    if (!s->passes_through()) return false;
  return true;
}

void ByteLevelPreTokenizer::pre_tokenize(PreTokenized& pt) const {
  if (!add_prefix_space_ && !regex_) return;  // bytes are mapped by the model
  for_each_span(pt, [&](const PreSpan& in) {
    PreSpan span = in;
    if (add_prefix_space_ && span_text(pt, span)[0] != ' ') {
      NormalizedText t = pt.texts[span.text].slice(span.begin, span.end);
      t.apply_edits({Edit{0, 0, " "}});
      span = {uint32_t(pt.texts.size()), 0, uint32_t(t.size())};
      pt.texts.push_back(std::move(t));
    }
    if (!regex_) {
      pt.next.push_back(span);
      return;
    }
    pt.matches.clear();
    regex_->find_all(span_text(pt, span), pt.matches);
    split_by_matches(pt, span, pt.matches, SplitBehavior::kIsolated, false);
  });
}

// ---- normalizers and pre-tokenizers of unicode_forms.hpp ----

NormalFormNormalizer::NormalFormNormalizer(NormalForm form) : form_(form) { normal_form_prepare(form); }

void NormalFormNormalizer::normalize(NormalizedText& text) const {
  std::string out;
  std::vector<NfcRegion> regions;
  if (!normal_form_append(form_, text.text(), out, regions)) return;
  std::vector<NormalizedText::Piece> pieces;
  pieces.reserve(regions.size());
  for (const auto& r : regions) pieces.push_back({r.in_begin, r.in_len, r.out_len, r.changed});
  text.replace_all(std::move(out), pieces);
}

void LowercaseNormalizer::normalize(NormalizedText& text) const {
  const std::string_view s = text.text();
  size_t i = 0;
  std::string scratch;
  // Most text has no capital: look for the first char that changes.
  for (; i < s.size(); i += utf8_char_len(s, i)) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x80 ? (b >= 'A' && b <= 'Z') : append_lowercase(decode_utf8(s, i).cp, scratch)) break;
  }
  if (i == s.size()) return;
  // A char whose lowercase has as many bytes keeps a byte-for-byte
  // alignment; any other becomes a rewritten piece of its own.
  std::string out(s.substr(0, i));
  std::vector<NormalizedText::Piece> pieces;
  auto add = [&](uint32_t begin, uint32_t in_len, uint32_t out_len, bool changed) {
    if (!changed && !pieces.empty() && !pieces.back().changed) {
      pieces.back().old_len += in_len, pieces.back().new_len += out_len;
      return;
    }
    pieces.push_back({begin, in_len, out_len, changed});
  };
  if (i > 0) add(0, uint32_t(i), uint32_t(i), false);
  while (i < s.size()) {
    DecodedChar d = decode_utf8(s, i);
    const size_t before = out.size();
    if (!append_lowercase(d.cp, out)) out.append(s.substr(i, d.len));
    const auto out_len = uint32_t(out.size() - before);
    add(uint32_t(i), d.len, out_len, out_len != d.len);
    i += d.len;
  }
  text.replace_all(std::move(out), pieces);
}

void StripNormalizer::normalize(NormalizedText& text) const {
  const std::string_view s = text.text();
  size_t begin = 0, end = s.size();
  if (left_) {
    while (begin < end) {
      DecodedChar d = decode_utf8(s, begin);
      if (!is_whitespace(d.cp)) break;
      begin += d.len;
    }
  }
  if (right_) {
    while (end > begin) {
      size_t at = end - 1;
      while (at > begin && (static_cast<unsigned char>(s[at]) & 0xC0) == 0x80) --at;
      DecodedChar d = decode_utf8(s, at);
      if (at + d.len != end || !is_whitespace(d.cp)) break;
      end = at;
    }
  }
  std::vector<Edit> edits;
  if (begin > 0) edits.push_back({0, uint32_t(begin), ""});
  if (end < s.size()) edits.push_back({uint32_t(end), uint32_t(s.size()), ""});
  text.apply_edits(edits);
}

void StripAccentsNormalizer::normalize(NormalizedText& text) const {
  const std::string_view s = text.text();
  std::vector<Edit> edits;
  size_t prev = 0;  // start of the last char kept
  bool have_prev = false;
  for (size_t i = 0; i < s.size();) {
    DecodedChar d = decode_utf8(s, i);
    if (!is_hf_combining_mark(d.cp)) {
      prev = i, have_prev = true;
      i += d.len;
      continue;
    }
    size_t end = i + d.len;
    while (end < s.size()) {
      DecodedChar m = decode_utf8(s, end);
      if (!is_hf_combining_mark(m.cp)) break;
      end += m.len;
    }
    // The marks go; the char before them stays, aligned with the whole span.
    if (have_prev) edits.push_back({uint32_t(prev), uint32_t(end), std::string(s.substr(prev, i - prev))});
    else edits.push_back({uint32_t(i), uint32_t(end), ""});
    have_prev = false;
    i = end;
  }
  text.apply_edits(edits);
}

CharSplitPreTokenizer::CharSplitPreTokenizer(Kind kind, char32_t delimiter, SplitBehavior behavior)
    : kind_(kind), delimiter_(delimiter), behavior_(behavior) {
  if (kind == Kind::kPunctuation) char_classes_prepare();
}

bool CharSplitPreTokenizer::matches(char32_t cp) const {
  switch (kind_) {
    case Kind::kWhitespace: return is_whitespace(cp);
    case Kind::kDelimiter: return cp == delimiter_;
    case Kind::kPunctuation: break;
  }
  return is_hf_punctuation(cp);
}

void CharSplitPreTokenizer::pre_tokenize(PreTokenized& pt) const {
  for_each_span(pt, [&](const PreSpan& span) {
    std::string_view s = span_text(pt, span);
    pt.matches.clear();
    for (size_t i = 0; i < s.size();) {
      DecodedChar d = decode_utf8(s, i);
      if (matches(d.cp)) pt.matches.emplace_back(uint32_t(i), uint32_t(i + d.len));
      i += d.len;
    }
    split_by_matches(pt, span, pt.matches, behavior_, false);
  });
}

void WhitespacePreTokenizer::pre_tokenize(PreTokenized& pt) const {
  for_each_span(pt, [&](const PreSpan& span) {
    std::string_view s = span_text(pt, span);
    // Runs of word chars and runs of other non-space chars; spaces go.
    enum { kSpace, kWord, kOther } run = kSpace;
    uint32_t run_begin = 0;
    for (size_t i = 0; i <= s.size();) {
      auto cls = kSpace;
      uint32_t len = 1;
      if (i < s.size()) {
        DecodedChar d = decode_utf8(s, i);
        len = d.len;
        cls = is_onig_word(d.cp) ? kWord : is_whitespace(d.cp) ? kSpace : kOther;
      }
      if (cls != run || i == s.size()) {
        if (run != kSpace && run_begin < i)
          pt.next.push_back({span.text, span.begin + run_begin, span.begin + uint32_t(i)});
        run = cls;
        run_begin = uint32_t(i);
      }
      i += len;
    }
  });
}

}  // namespace tokfeed::text::hf
