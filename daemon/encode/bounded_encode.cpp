#include "encode/bounded_encode.hpp"

#include <algorithm>

namespace tokfeed {

namespace {

// Tokens kept from a part lie at least this far from its cut: well beyond
// the longest token and the regex look-ahead of the tokenizers in use.
constexpr std::size_t kMargin = 1024;
// Bytes first tried per kept token (doubled until enough tokens come out).
constexpr std::size_t kBytesPerToken = 8;
// A part is only worth it when the whole text is at least this many times
// longer (the part is tokenized twice: once, and once longer to check it).
constexpr std::size_t kWorthFactor = 3;

bool is_alpha(unsigned char c) { return (c | 0x20) >= 'a' && (c | 0x20) <= 'z'; }
bool is_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

bool is_cut(std::string_view t, std::size_t c) {
  if (c < 2 || c + 1 >= t.size()) return false;
  const auto a = static_cast<unsigned char>(t[c - 1]), b = static_cast<unsigned char>(t[c]);
  if (b == ' ') return is_alpha(a) && is_alpha(static_cast<unsigned char>(t[c + 1]));
  return a == '\n' && !is_space(b);
}

bool same(const text::Token& a, const text::Token& b) { return a.id == b.id && a.begin == b.begin && a.end == b.end; }

// Right (and drop): the first `need` tokens from the part [0, c).
bool head(const text::Tokenizer& tok, std::string_view t, std::size_t need, std::vector<text::Token>& scratch,
          std::vector<text::Token>& check) {
  const std::size_t n = t.size();
  std::size_t want = need * kBytesPerToken + kMargin;
  for (;;) {
    if (want * kWorthFactor > n) return false;
    std::size_t c = next_cut(t.substr(0, n / kWorthFactor), want);
    if (c == std::string_view::npos) return false;
    scratch.clear();
    tok.encode(t.substr(0, c), scratch);
    std::size_t safe = 0;
    while (safe < scratch.size() && scratch[safe].end + kMargin <= c) ++safe;
    if (safe >= need) {
      // The check: a part longer by a margin gives the same first tokens.
      std::size_t c2 = next_cut(t.substr(0, 2 * n / kWorthFactor), c + 2 * kMargin);
      if (c2 == std::string_view::npos) return false;
      check.clear();
      tok.encode(t.substr(0, c2), check);
      if (check.size() < need || !std::equal(scratch.begin(), scratch.begin() + need, check.begin(), same))
        return false;
      scratch.resize(need);
      return true;
    }
    want *= 2;
  }
}

// Left: the last `need` tokens from the part [s, n), offsets made whole.
bool tail(const text::Tokenizer& tok, std::string_view t, std::size_t need, std::vector<text::Token>& scratch,
          std::vector<text::Token>& check) {
  const std::size_t n = t.size();
  std::size_t want = need * kBytesPerToken + kMargin;
  auto encode_from = [&](std::size_t s, std::vector<text::Token>& out) {
    out.clear();
    tok.encode(t.substr(s), out);
    for (text::Token& k : out) k.begin += static_cast<uint32_t>(s), k.end += static_cast<uint32_t>(s);
  };
  for (;;) {
    if (want * kWorthFactor > n) return false;
    std::size_t s = prev_cut(t, n - want, n - n / kWorthFactor);
    if (s == std::string_view::npos) return false;
    encode_from(s, scratch);
    std::size_t safe = 0;
    while (safe < scratch.size() && scratch[scratch.size() - 1 - safe].begin >= s + kMargin) ++safe;
    if (safe >= need) {
      std::size_t s2 =
          s > 2 * kMargin ? prev_cut(t, s - 2 * kMargin, n - 2 * n / kWorthFactor) : std::string_view::npos;
      if (s2 == std::string_view::npos) return false;
      encode_from(s2, check);
      if (check.size() < need || !std::equal(scratch.end() - need, scratch.end(), check.end() - need, same))
        return false;
      scratch.erase(scratch.begin(), scratch.end() - need);
      return true;
    }
    want *= 2;
  }
}

}  // namespace

std::size_t next_cut(std::string_view t, std::size_t from) {
  for (std::size_t c = std::max<std::size_t>(from, 2); c + 1 < t.size(); ++c)
    if (is_cut(t, c)) return c;
  return std::string_view::npos;
}

std::size_t prev_cut(std::string_view t, std::size_t from, std::size_t lowest) {
  if (t.size() < 3) return std::string_view::npos;
  for (std::size_t c = std::min(from, t.size() - 2); c >= std::max<std::size_t>(lowest, 2); --c)
    if (is_cut(t, c)) return c;
  return std::string_view::npos;
}

bool encode_bounded(const text::Tokenizer& tok, const text::Rendered& r, uint32_t max_length, text::Truncation trunc,
                    text::EncodedSample& out, std::vector<text::Token>& scratch, std::vector<text::Token>& check) {
  // A prompt is matched against the whole tokenization.
  if (r.prompt) return false;
  static const text::SequenceSpecials kNone;
  const text::SequenceSpecials& specials = r.plain ? tok.sequence_specials() : kNone;
  // The special tokens on the kept side: the text gives the rest.
  const std::size_t kept_specials = trunc == text::Truncation::kLeft ? specials.after.size() : specials.before.size();
  if (kept_specials >= max_length) return false;
  // One token more than is kept: it proves the whole is longer.
  const std::size_t need = std::size_t{max_length} + 1 - kept_specials;
  const bool ok = trunc == text::Truncation::kLeft ? tail(tok, r.text, need, scratch, check)
                                                   : head(tok, r.text, need, scratch, check);
  if (!ok) return false;
  out.ids.clear();
  out.labels.clear();
  out.truncated = out.dropped = out.all_masked = false;
  if (trunc == text::Truncation::kDrop) {
    out.dropped = true;
    return true;
  }
  out.truncated = true;
  if (r.plain) {
    // The kept tokens: the specials before and the text's first ones
    // (right), or the text's last ones and the specials after (left).
    const auto end = static_cast<uint32_t>(r.text.size());
    if (trunc == text::Truncation::kLeft) {
      scratch.erase(scratch.begin());
      for (int32_t id : specials.after) scratch.push_back({id, end, end});
    } else {
      scratch.pop_back();
      for (std::size_t i = specials.before.size(); i-- > 0;)
        scratch.insert(scratch.begin(), {specials.before[i], 0, 0});
    }
    text::emit_plain_tokens(scratch, 0, max_length, 0, out);
    return true;
  }
  text::emit_tokens(scratch, trunc == text::Truncation::kLeft ? 1 : 0, max_length, r.trained, out);
  return true;
}

}  // namespace tokfeed
