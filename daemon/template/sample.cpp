#include "template/sample.hpp"

#include <algorithm>

namespace tokfeed::text {

namespace {

// Spans are ascending; tokens arrive in ascending order too, so one cursor
// walks both.
class SpanCursor {
 public:
  explicit SpanCursor(const std::vector<Span>& spans) : spans_(spans) {}
  // Token begins never decrease, so spans that end before one are done.
  bool trained(uint32_t b, uint32_t e) {
    while (i_ < spans_.size() && spans_[i_].end <= b) ++i_;
    if (i_ == spans_.size()) return false;
    const Span& s = spans_[i_];  // s.end > b
    return b == e ? s.begin <= b : s.begin < e;
  }

 private:
  const std::vector<Span>& spans_;
  std::size_t i_ = 0;
};

}  // namespace

void encode_sample(const Tokenizer& tok, const Rendered& r, uint32_t max_length, Truncation trunc, EncodedSample& out,
                   std::vector<Token>& scratch) {
  scratch.clear();
  tok.encode(r.text, scratch);
  out.ids.clear();
  out.labels.clear();
  out.truncated = out.dropped = out.all_masked = false;

  std::size_t n = scratch.size();
  std::size_t first = 0, count = n;
  if (n > max_length) {
    if (trunc == Truncation::kDrop) {
      out.dropped = true;
      return;
    }
    out.truncated = true;
    count = max_length;
    if (trunc == Truncation::kLeft) first = n - max_length;
  }
  out.ids.resize(count);
  out.labels.resize(count);
  SpanCursor cursor(r.trained);
  bool any = false;
  // Labels are decided on the whole encoding, then cut, so a left cut cannot
  // change which tokens are trained.
  for (std::size_t i = 0; i < n; ++i) {
    const Token& t = scratch[i];
    bool trained = cursor.trained(t.begin, t.end);
    if (i < first || i >= first + count) continue;
    out.ids[i - first] = t.id;
    out.labels[i - first] = trained ? t.id : kIgnoreIndex;
    any |= trained;
  }
  out.all_masked = !any;
}

}  // namespace tokfeed::text
