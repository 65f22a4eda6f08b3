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

// `text` tokenized as a sample's text is, into `out` (emptied first): a
// plain-text record's between the special tokens the tokenizer adds around
// a sequence (empty ranges at its start and end).
void sample_tokens(const Tokenizer& tok, std::string_view text, bool plain, std::vector<Token>& out) {
  out.clear();
  if (!plain) {
    tok.encode(text, out);
    return;
  }
  const SequenceSpecials& s = tok.sequence_specials();
  for (int32_t id : s.before) out.push_back({id, 0, 0});
  tok.encode(text, out);
  const auto end = static_cast<uint32_t>(text.size());
  for (int32_t id : s.after) out.push_back({id, end, end});
}

// How many leading tokens of `tokens` the tokenization of `prompt` shares
// (TRL's common_prefix_length); `plain`: both are a plain-text record's.
std::size_t prompt_prefix(const Tokenizer& tok, const std::string& prompt, bool plain,
                          const std::vector<Token>& tokens) {
  static thread_local std::vector<Token> p;
  sample_tokens(tok, prompt, plain, p);
  std::size_t k = 0;
  while (k < p.size() && k < tokens.size() && p[k].id == tokens[k].id) ++k;
  return k;
}

}  // namespace

void encode_sample(const Tokenizer& tok, const Rendered& r, uint32_t max_length, Truncation trunc, EncodedSample& out,
                   std::vector<Token>& scratch) {
  sample_tokens(tok, r.text, r.plain, scratch);
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
  if (r.plain || r.prompt)
    emit_plain_tokens(scratch, first, count, r.prompt ? prompt_prefix(tok, *r.prompt, r.plain, scratch) : 0, out);
  else emit_tokens(scratch, first, count, r.trained, out);
}

std::vector<Span> trained_text(const Tokenizer& tok, const Rendered& r) {
  if (!r.prompt) return r.trained;
  std::vector<Token> tokens;
  sample_tokens(tok, r.text, r.plain, tokens);
  const std::size_t k = prompt_prefix(tok, *r.prompt, r.plain, tokens);
  if (k >= tokens.size()) return {};
  return {{tokens[k].begin, static_cast<uint32_t>(r.text.size())}};
}

void emit_plain_tokens(const std::vector<Token>& tokens, std::size_t first, std::size_t count, std::size_t untrained,
                       EncodedSample& out) {
  out.ids.resize(count);
  out.labels.resize(count);
  for (std::size_t i = first; i < first + count; ++i) {
    out.ids[i - first] = tokens[i].id;
    out.labels[i - first] = i >= untrained ? tokens[i].id : kIgnoreIndex;
  }
  out.all_masked = first + count <= untrained;
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
