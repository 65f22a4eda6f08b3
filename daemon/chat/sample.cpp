#include "chat/sample.hpp"

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
  emit_tokens(scratch, first, count, r.trained, out);
}

void emit_tokens(const std::vector<Token>& tokens, std::size_t first, std::size_t count,
                 const std::vector<Span>& trained, EncodedSample& out) {
  out.ids.resize(count);
  out.labels.resize(count);
  SpanCursor cursor(trained);
  bool any = false;
  // A token's label depends on its own range alone (the cursor only skips
  // spans that end before it), so a cut cannot change which tokens are trained.
  for (std::size_t i = first; i < first + count; ++i) {
    const Token& t = tokens[i];
    bool is_trained = cursor.trained(t.begin, t.end);
    out.ids[i - first] = t.id;
    out.labels[i - first] = is_trained ? t.id : kIgnoreIndex;
    any |= is_trained;
  }
  out.all_masked = !any;
}

}  // namespace tokfeed::text
