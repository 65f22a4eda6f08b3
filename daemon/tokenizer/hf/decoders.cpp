#include "tokenizer/hf/decoders.hpp"

#include "tokenizer/hf/unicode.hpp"

namespace tokfeed::text::hf {

namespace {
constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  if (from.empty()) return std::string(s);
  size_t pos = 0;
  for (size_t at = s.find(from); at != std::string_view::npos; at = s.find(from, pos)) {
    out.append(s.substr(pos, at - pos)).append(to);
    pos = at + from.size();
  }
  out.append(s.substr(pos));
  return out;
}
}  // namespace

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    DecodedChar d = decode_utf8(bytes, i);
    if (d.cp == kInvalidChar) {
      // Rust replaces each maximal invalid prefix of a sequence with one U+FFFD.
      size_t n = 1;
      auto b0 = static_cast<unsigned char>(bytes[i]);
      size_t need = b0 >= 0xF0 && b0 <= 0xF4 ? 4 : b0 >= 0xE0 && b0 <= 0xEF ? 3 : b0 >= 0xC2 && b0 <= 0xDF ? 2 : 1;
      while (n < need && i + n < bytes.size() && (static_cast<unsigned char>(bytes[i + n]) & 0xC0) == 0x80) {
        // The second byte's range is restricted for E0/ED/F0/F4 leads.
        auto b1 = static_cast<unsigned char>(bytes[i + 1]);
        if (n == 1 && ((b0 == 0xE0 && b1 < 0xA0) || (b0 == 0xED && b1 > 0x9F) || (b0 == 0xF0 && b1 < 0x90) ||
                       (b0 == 0xF4 && b1 > 0x8F)))
          break;
        ++n;
      }
      out.append(kReplacementChar);
      i += n;
    } else {
      out.append(bytes.substr(i, d.len));
      i += d.len;
    }
  }
  return out;
}

void ByteLevelDecoder::decode_chain(std::vector<std::string>& tokens) const {
  std::string bytes;
  for (const std::string& t : tokens) {
    // A token with a char outside the alphabet (an added token, say) stays as it is.
    std::string raw;
    bool ok = true;
    for (size_t i = 0; i < t.size() && ok;) {
      DecodedChar d = decode_utf8(t, i);
      int b = unicode_to_byte(d.cp);
      ok = b >= 0;
      raw.push_back(char(b));
      i += d.len;
    }
    bytes.append(ok ? raw : t);
  }
  tokens.assign(1, utf8_lossy(bytes));
}

void MetaspaceDecoder::decode_chain(std::vector<std::string>& tokens) const {
  for (size_t i = 0; i < tokens.size(); ++i) {
    // HF drops every replacement char of the first token, not only a leading one.
    tokens[i] = replace_all(tokens[i], replacement_, i == 0 && strip_first_ ? "" : " ");
  }
}

void ByteFallbackDecoder::decode_chain(std::vector<std::string>& tokens) const {
  std::vector<std::string> out;
  std::string pending;
  size_t pending_count = 0;
  auto flush = [&] {
    if (pending_count == 0) return;
    bool valid = true;
    for (size_t i = 0; i < pending.size() && valid;) {
      DecodedChar d = decode_utf8(pending, i);
      valid = d.cp != kInvalidChar;
      i += d.len;
    }
    if (valid) {
      out.push_back(pending);
    } else {
      for (size_t k = 0; k < pending_count; ++k) out.emplace_back(kReplacementChar);
    }
    pending.clear();
    pending_count = 0;
  };
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (std::string& t : tokens) {
    if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && hex(t[3]) >= 0 && hex(t[4]) >= 0) {
      pending.push_back(char(hex(t[3]) * 16 + hex(t[4])));
      ++pending_count;
    } else {
      flush();
      out.push_back(std::move(t));
    }
  }
  flush();
  tokens = std::move(out);
}

void FuseDecoder::decode_chain(std::vector<std::string>& tokens) const {
  std::string all;
  for (const auto& t : tokens) all += t;
  tokens.clear();
  tokens.push_back(std::move(all));
}

void StripDecoder::decode_chain(std::vector<std::string>& tokens) const {
  const size_t w = content_.size();
  for (std::string& t : tokens) {
    size_t chars = 0;
    for (size_t i = 0; i < t.size(); i += utf8_char_len(t, i)) ++chars;
    size_t start_cut = 0, stop_cut = 0;
    while (start_cut < start_ && start_cut < chars && t.compare(start_cut * w, w, content_) == 0) ++start_cut;
    while (stop_cut < stop_ && start_cut + stop_cut < chars && t.size() >= (stop_cut + 1) * w &&
           t.compare(t.size() - (stop_cut + 1) * w, w, content_) == 0)
      ++stop_cut;
    t = t.substr(start_cut * w, t.size() - (start_cut + stop_cut) * w);
  }
}

void ReplaceDecoder::decode_chain(std::vector<std::string>& tokens) const {
  for (std::string& t : tokens) t = replace_all(t, pattern_, content_);
}

}  // namespace tokfeed::text::hf
