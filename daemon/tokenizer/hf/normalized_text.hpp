// NormalizedText: a text being normalized, with the map from its bytes back
// to the bytes of the original input (HF's NormalizedString, kept coarser).
//
// Alignment model. The text is a sequence of segments. An identity segment
// maps byte for byte onto the original; any other segment (text a normalizer
// rewrote or inserted) maps as a whole onto one original range, so every
// token touching it covers that whole range. HF tracks alignments per char;
// ours differ from HF only inside rewritten spans (NFC compositions, Replace),
// where we are wider, never narrower: a label assigned by overlap can only
// gain coverage. Inserted text (Prepend, Metaspace, a ByteLevel prefix space)
// maps onto the original range of the char it was put before, as in HF.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tokfeed::text::hf {

struct Segment {
  uint32_t norm_begin;  // first byte in the normalized text; segment ends at the next one
  uint32_t orig_begin;
  uint32_t orig_end;
  bool identity;  // then orig_end - orig_begin equals the segment's length
};

struct OrigRange {
  uint32_t begin, end;
};

// A rewrite of [begin, end) of the current text into `replacement`; begin ==
// end inserts. Edits passed to apply_edits are sorted and do not overlap.
struct Edit {
  uint32_t begin, end;
  std::string replacement;
};

class NormalizedText {
 public:
  NormalizedText() = default;
  // Identity view of original[begin, end); `original` must outlive this.
  NormalizedText(std::string_view original, uint32_t begin, uint32_t end);

  std::string_view text() const { return owns_ ? std::string_view(owned_) : ext_; }
  bool empty() const { return text().empty(); }
  size_t size() const { return text().size(); }

  // Original byte range covered by normalized bytes [nb, ne), nb < ne.
  OrigRange to_original(uint32_t nb, uint32_t ne) const;
  // True when the whole text is one identity segment: then normalized byte
  // nb is original byte identity_base() + nb.
  bool is_identity() const { return segs_.size() == 1 && segs_[0].identity; }
  uint32_t identity_base() const { return segs_[0].orig_begin - segs_[0].norm_begin; }
  // Original offset where this text starts (HF's offsets_original().0).
  uint32_t original_begin() const { return segs_.empty() ? empty_at_ : segs_.front().orig_begin; }

  // Normalized bytes [nb, ne) as a text of their own.
  NormalizedText slice(uint32_t nb, uint32_t ne) const;
  // Rewrites the text; a no-op for an empty edit list.
  void apply_edits(const std::vector<Edit>& edits);
  // Replaces the text with `text` whose segments are given relative to the
  // old text (used by NFC); `map` lists (old begin, old len, new len, changed).
  struct Piece {
    uint32_t old_begin, old_len, new_len;
    bool changed;
  };
  void replace_all(std::string text, const std::vector<Piece>& pieces);

 private:
  size_t segment_at(uint32_t nb) const;
  OrigRange map_range(uint32_t nb, uint32_t ne) const;  // ne may equal nb
  void push_segment(std::vector<Segment>& out, Segment s) const;
  void own(std::string text);

  std::string owned_;     // the text, once a normalizer rewrote it
  std::string_view ext_;  // otherwise a view of the original input
  bool owns_ = false;
  std::vector<Segment> segs_;
  uint32_t empty_at_ = 0;  // original_begin() of an empty text
};

}  // namespace tokfeed::text::hf
