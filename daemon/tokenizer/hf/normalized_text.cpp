#include "tokenizer/hf/normalized_text.hpp"

#include <algorithm>

namespace tokfeed::text::hf {

NormalizedText::NormalizedText(std::string_view original, uint32_t begin, uint32_t end)
    : ext_(original.substr(begin, end - begin)), empty_at_(begin) {
  if (end > begin) segs_.push_back({0, begin, end, true});
}

void NormalizedText::own(std::string text) {
  owned_ = std::move(text);
  owns_ = true;
}

size_t NormalizedText::segment_at(uint32_t nb) const {
  if (segs_.size() == 1) return 0;
  auto it =
      std::upper_bound(segs_.begin(), segs_.end(), nb, [](uint32_t v, const Segment& s) { return v < s.norm_begin; });
  return size_t(it - segs_.begin()) - 1;
}

OrigRange NormalizedText::to_original(uint32_t nb, uint32_t ne) const {
  const Segment& a = segs_[segment_at(nb)];
  const Segment& b = segs_[segment_at(ne - 1)];
  uint32_t begin = a.identity ? a.orig_begin + (nb - a.norm_begin) : a.orig_begin;
  uint32_t end = b.identity ? b.orig_begin + (ne - b.norm_begin) : b.orig_end;
  return {begin, std::max(begin, end)};
}

OrigRange NormalizedText::map_range(uint32_t nb, uint32_t ne) const {
  const std::string_view norm = text();
  if (segs_.empty()) return {empty_at_, empty_at_};
  if (ne > nb) return to_original(nb, ne);
  // Empty range: an insertion takes the range of the char after it (HF's
  // prepend), or at the very end the empty range after the last char.
  if (nb < norm.size()) {
    const Segment& s = segs_[segment_at(nb)];
    if (!s.identity) return {s.orig_begin, s.orig_end};
    uint32_t o = s.orig_begin + (nb - s.norm_begin);
    uint32_t len = 1;
    // One char: up to the next UTF-8 lead byte within the segment.
    uint32_t seg_end = s.orig_end;
    while (o + len < seg_end && (static_cast<unsigned char>(norm[nb + len]) & 0xC0) == 0x80) ++len;
    return {o, o + len};
  }
  return {segs_.back().orig_end, segs_.back().orig_end};
}

void NormalizedText::push_segment(std::vector<Segment>& out, Segment s) const {
  if (!out.empty()) {
    Segment& last = out.back();
    // Merge adjacent identity segments that continue each other.
    if (last.identity && s.identity && last.orig_end == s.orig_begin) {
      last.orig_end = s.orig_end;
      return;
    }
  }
  out.push_back(s);
}

NormalizedText NormalizedText::slice(uint32_t nb, uint32_t ne) const {
  NormalizedText r;
  if (owns_) r.own(std::string(text().substr(nb, ne - nb)));
  else r.ext_ = ext_.substr(nb, ne - nb);
  r.empty_at_ = map_range(nb, nb).begin;
  if (ne <= nb) return r;
  for (size_t i = segment_at(nb); i < segs_.size() && segs_[i].norm_begin < ne; ++i) {
    const Segment& s = segs_[i];
    uint32_t s_end = i + 1 < segs_.size() ? segs_[i + 1].norm_begin : uint32_t(size());
    uint32_t b = std::max(nb, s.norm_begin), e = std::min(ne, s_end);
    Segment c{b - nb, s.orig_begin, s.orig_end, s.identity};
    if (s.identity) c.orig_begin = s.orig_begin + (b - s.norm_begin), c.orig_end = c.orig_begin + (e - b);
    r.segs_.push_back(c);
  }
  return r;
}

void NormalizedText::apply_edits(const std::vector<Edit>& edits) {
  if (edits.empty()) return;
  const std::string_view norm = text();
  std::string text;
  std::vector<Segment> segs;
  text.reserve(norm.size() + 16);
  uint32_t pos = 0;
  auto copy_until = [&](uint32_t end) {
    if (end <= pos) return;
    for (size_t i = segment_at(pos); i < segs_.size() && segs_[i].norm_begin < end; ++i) {
      const Segment& s = segs_[i];
      uint32_t s_end = i + 1 < segs_.size() ? segs_[i + 1].norm_begin : uint32_t(norm.size());
      uint32_t b = std::max(pos, s.norm_begin), e = std::min(end, s_end);
      Segment c{uint32_t(text.size() + (b - pos)), s.orig_begin, s.orig_end, s.identity};
      if (s.identity) c.orig_begin = s.orig_begin + (b - s.norm_begin), c.orig_end = c.orig_begin + (e - b);
      push_segment(segs, c);
    }
    text.append(norm.substr(pos, end - pos));
    pos = end;
  };
  for (const Edit& e : edits) {
    copy_until(e.begin);
    OrigRange o = map_range(e.begin, e.end);
    if (!e.replacement.empty()) segs.push_back({uint32_t(text.size()), o.begin, o.end, false});
    text.append(e.replacement);
    pos = e.end;
  }
  copy_until(uint32_t(norm.size()));
  if (segs.empty()) empty_at_ = original_begin();
  segs_ = std::move(segs);
  own(std::move(text));
}

void NormalizedText::replace_all(std::string new_text, const std::vector<Piece>& pieces) {
  const std::string_view norm = text();
  std::vector<Segment> segs;
  uint32_t out = 0;
  for (const Piece& p : pieces) {
    if (p.new_len == 0) continue;
    if (!p.changed) {
      // Unchanged bytes keep their own alignment, possibly several segments.
      for (size_t i = segment_at(p.old_begin); i < segs_.size() && segs_[i].norm_begin < p.old_begin + p.old_len; ++i) {
        const Segment& s = segs_[i];
        uint32_t s_end = i + 1 < segs_.size() ? segs_[i + 1].norm_begin : uint32_t(norm.size());
        uint32_t b = std::max(p.old_begin, s.norm_begin), e = std::min(p.old_begin + p.old_len, s_end);
        Segment c{out + (b - p.old_begin), s.orig_begin, s.orig_end, s.identity};
        if (s.identity) c.orig_begin = s.orig_begin + (b - s.norm_begin), c.orig_end = c.orig_begin + (e - b);
        push_segment(segs, c);
      }
    } else {
      OrigRange o = map_range(p.old_begin, p.old_begin + p.old_len);
      segs.push_back({out, o.begin, o.end, false});
    }
    out += p.new_len;
  }
  segs_ = std::move(segs);
  own(std::move(new_text));
}

}  // namespace tokfeed::text::hf
