#include "tokenizer/hf/added_vocab.hpp"

#include <algorithm>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "tokenizer/hf/unicode.hpp"

namespace tokfeed::text::hf {

void AddedTokenMatcher::build(std::vector<AddedToken> tokens, const std::vector<std::string>& patterns) {
  tokens_ = std::move(tokens);
  nodes_.assign(1, Node{});
  for (size_t t = 0; t < tokens_.size(); ++t) {
    const std::string& p = patterns[t];
    if (p.empty()) continue;  // HF never matches an empty token
    first_byte_[static_cast<unsigned char>(p[0])] = true;
    int32_t node = 0;
    for (char ch : p) {
      auto c = static_cast<unsigned char>(ch);
      auto& kids = nodes_[size_t(node)].children;
      auto it =
          std::lower_bound(kids.begin(), kids.end(), c,
                           [](const std::pair<unsigned char, int32_t>& e, unsigned char v) { return e.first < v; });
      if (it != kids.end() && it->first == c) {
        node = it->second;
      } else {
        auto child = int32_t(nodes_.size());
        kids.insert(it, {c, child});
        nodes_.push_back(Node{});
        node = child;
      }
    }
    // Two tokens with one string: the first listed wins, like HF's pattern order.
    if (nodes_[size_t(node)].token < 0) nodes_[size_t(node)].token = int32_t(t);
  }
  first_byte_count_ = 0;
  for (int b = 0; b < 256; ++b)
    if (first_byte_[b]) {
      if (first_byte_count_ < kFewFirstBytes) first_bytes_[first_byte_count_] = static_cast<unsigned char>(b);
      ++first_byte_count_;
    }
}

#if defined(__SSE2__)
namespace {

// Where in text[pos, n) the first of the K bytes of `firsts` is, 64 bytes a
// step (then 16), or past the last step's end (the caller scans the rest).
template <int K>
size_t find_first_of(const char* text, size_t pos, size_t n, const unsigned char* firsts, bool* found) {
  __m128i f[K];
  for (int k = 0; k < K; ++k) f[k] = _mm_set1_epi8(static_cast<char>(firsts[k]));
  const auto hits = [&](size_t at) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(text + at));
    __m128i hit = _mm_cmpeq_epi8(v, f[0]);
    for (int k = 1; k < K; ++k) hit = _mm_or_si128(hit, _mm_cmpeq_epi8(v, f[k]));
    return hit;
  };
  for (; pos + 64 <= n; pos += 64) {
    const __m128i h0 = hits(pos), h1 = hits(pos + 16), h2 = hits(pos + 32), h3 = hits(pos + 48);
    if (_mm_movemask_epi8(_mm_or_si128(_mm_or_si128(h0, h1), _mm_or_si128(h2, h3))) == 0) continue;
    const uint64_t m = uint64_t(unsigned(_mm_movemask_epi8(h0))) | uint64_t(unsigned(_mm_movemask_epi8(h1))) << 16 |
                       uint64_t(unsigned(_mm_movemask_epi8(h2))) << 32 |
                       uint64_t(unsigned(_mm_movemask_epi8(h3))) << 48;
    *found = true;
    return pos + size_t(__builtin_ctzll(m));
  }
  for (; pos + 16 <= n; pos += 16)
    if (const int mask = _mm_movemask_epi8(hits(pos))) {
      *found = true;
      return pos + size_t(__builtin_ctz(unsigned(mask)));
    }
  *found = false;
  return pos;
}

}  // namespace
#endif

size_t AddedTokenMatcher::next_first_byte(std::string_view text, size_t pos) const {
  const size_t n = text.size();
  if (first_byte_count_ == 1) {
    const void* at = std::memchr(text.data() + pos, first_bytes_[0], n - pos);
    return at ? size_t(static_cast<const char*>(at) - text.data()) : n;
  }
#if defined(__SSE2__)
  static_assert(kFewFirstBytes == 4);
  bool found = false;
  switch (first_byte_count_) {
    case 2: pos = find_first_of<2>(text.data(), pos, n, first_bytes_, &found); break;
    case 3: pos = find_first_of<3>(text.data(), pos, n, first_bytes_, &found); break;
    case 4: pos = find_first_of<4>(text.data(), pos, n, first_bytes_, &found); break;
    default: break;
  }
  if (found) return pos;
#endif
  while (pos < n && !first_byte_[static_cast<unsigned char>(text[pos])]) ++pos;
  return pos;
}

int32_t AddedTokenMatcher::longest_at(std::string_view text, size_t pos, size_t* len) const {
  int32_t node = 0, best = -1;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto& kids = nodes_[size_t(node)].children;
    auto c = static_cast<unsigned char>(text[i]);
    auto it = std::lower_bound(kids.begin(), kids.end(), c,
                               [](const std::pair<unsigned char, int32_t>& e, unsigned char v) { return e.first < v; });
    if (it == kids.end() || it->first != c) break;
    node = it->second;
    if (nodes_[size_t(node)].token >= 0) best = nodes_[size_t(node)].token, *len = i + 1 - pos;
  }
  return best;
}

namespace {

char32_t last_char(std::string_view s) {
  if (s.empty()) return kInvalidChar;
  size_t i = s.size() - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80 && s.size() - i < 4) --i;
  DecodedChar d = decode_utf8(s, i);
  return i + d.len == s.size() ? d.cp : kInvalidChar;
}

}  // namespace

void AddedTokenMatcher::split(std::string_view text, std::vector<AddedSplit>& out) const {
  size_t start_offset = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    pos = next_first_byte(text, pos);
    if (pos == text.size()) break;
    size_t len = 0;
    int32_t t = longest_at(text, pos, &len);
    if (t < 0) {
      ++pos;
      continue;
    }
    const AddedToken& tok = tokens_[size_t(t)];
    size_t start = pos, stop = pos + len;
    if (tok.single_word) {
      // A whole word only: no word char just before or just after.
      bool start_space = start == 0 || !is_word_char(last_char(text.substr(0, start)));
      bool stop_space = stop == text.size() || !is_word_char(decode_utf8(text, stop).cp);
      if (!start_space || !stop_space) {
        // HF's matcher then resumes after this match, not inside it.
        pos = stop;
        continue;
      }
    }
    if (tok.lstrip) {
      size_t s = start;
      while (s > start_offset) {
        size_t p = s - 1;
        while (p > 0 && (static_cast<unsigned char>(text[p]) & 0xC0) == 0x80 && s - p < 4) --p;
        DecodedChar d = decode_utf8(text, p);
        if (p + d.len != s || !is_whitespace(d.cp)) break;
        s = p;
      }
      start = s;
    }
    if (tok.rstrip) {
      while (stop < text.size()) {
        DecodedChar d = decode_utf8(text, stop);
        if (!is_whitespace(d.cp)) break;
        stop += d.len;
      }
    }
    if (start_offset < start) out.push_back({-1, uint32_t(start_offset), uint32_t(start)});
    out.push_back({tok.id, uint32_t(start), uint32_t(stop)});
    start_offset = stop;
    pos = stop;
  }
  if (start_offset < text.size() || out.empty()) out.push_back({-1, uint32_t(start_offset), uint32_t(text.size())});
}

}  // namespace tokfeed::text::hf
