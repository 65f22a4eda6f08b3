#include "template/pystr.hpp"

#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace tokfeed::tmpl {

bool py_isspace(uint32_t cp) noexcept {
  if (cp >= 0x09 && cp <= 0x0d) return true;
  if (cp >= 0x1c && cp <= 0x20) return true;
  switch (cp) {
    case 0x85:
    case 0xa0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202f:
    case 0x205f:
    case 0x3000: return true;
    default: return cp >= 0x2000 && cp <= 0x200a;
  }
}

std::size_t utf8_decode(std::string_view s, std::size_t i, uint32_t& cp) noexcept {
  auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = b(i);
  std::size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (n <= 1 || i + n > s.size()) {
    cp = c;
    return 1;
  }
  uint32_t v = n == 2 ? (c & 0x1f) : n == 3 ? (c & 0x0f) : (c & 0x07);
  for (std::size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xc0) != 0x80) {
      cp = c;
      return 1;
    }
    v = (v << 6) | (b(i + k) & 0x3f);
  }
  cp = v;
  return n;
}

void utf8_append(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

std::vector<uint32_t> code_points(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    uint32_t cp;
    i += utf8_decode(s, i, cp);
    out.push_back(cp);
  }
  return out;
}

std::size_t py_len(std::string_view s) noexcept {
  std::size_t n = 0;
  for (unsigned char c : s) n += (c & 0xc0) != 0x80;
  return n;
}

std::string_view py_strip(std::string_view s, const std::optional<std::string_view>& chars, bool left, bool right) {
  // An ASCII set (the usual '\n') is looked up in its bytes: no code points made.
  const bool ascii_set =
      chars && std::all_of(chars->begin(), chars->end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
  std::vector<uint32_t> set;
  if (chars && !ascii_set) set = code_points(*chars);
  // Python's whitespace among ASCII, looked up rather than asked each time.
  static const std::array<bool, 128> kAsciiSpace = [] {
    std::array<bool, 128> t{};
    for (uint32_t c = 0; c < 128; ++c) t[c] = py_isspace(c);
    return t;
  }();
  auto strip_it = [&](uint32_t cp) {
    if (!chars) return cp < 0x80 ? kAsciiSpace[cp] : py_isspace(cp);
    if (ascii_set) return cp < 0x80 && chars->find(static_cast<char>(cp)) != std::string_view::npos;
    for (uint32_t c : set)
      if (c == cp) return true;
    return false;
  };
  std::size_t begin = 0, end = s.size();
  if (left) {
    while (begin < end) {
      uint32_t cp = static_cast<unsigned char>(s[begin]);
      const std::size_t n = cp < 0x80 ? 1 : utf8_decode(s, begin, cp);
      if (!strip_it(cp)) break;
      begin += n;
    }
  }
  if (right) {
    while (end > begin) {
      std::size_t start = end - 1;
      if (static_cast<unsigned char>(s[start]) < 0x80) {  // ASCII: its own code point
        if (!strip_it(static_cast<unsigned char>(s[start]))) break;
        end = start;
        continue;
      }
      while (start > begin && (static_cast<unsigned char>(s[start]) & 0xc0) == 0x80 && end - start < 4) --start;
      uint32_t cp;
      std::size_t n = utf8_decode(s, start, cp);
      if (n != end - start) start = end - 1, cp = static_cast<unsigned char>(s[start]);
      if (!strip_it(cp)) break;
      end = start;
    }
  }
  return s.substr(begin, end - begin);
}

namespace {

// Whitespace-run splitting, Python's str.split() with no separator.
std::vector<std::string> split_ws(std::string_view s, int64_t maxsplit, bool from_right) {
  struct Piece {
    std::size_t b, e;
  };
  std::vector<Piece> words;
  std::size_t i = 0, start = std::string_view::npos;
  while (i < s.size()) {
    uint32_t cp;
    std::size_t n = utf8_decode(s, i, cp);
    if (py_isspace(cp)) {
      if (start != std::string_view::npos) words.push_back({start, i}), start = std::string_view::npos;
    } else if (start == std::string_view::npos) {
      start = i;
    }
    i += n;
  }
  if (start != std::string_view::npos) words.push_back({start, s.size()});
  std::vector<std::string> out;
  // Python splits maxsplit times, then keeps what is left after the
  // whitespace that follows (before, from the right) as one piece, its other
  // end untrimmed: "a b ".split(maxsplit=1) is ['a', 'b '].
  if (maxsplit < 0 || static_cast<std::size_t>(maxsplit) >= words.size()) {
    for (auto w : words) out.emplace_back(s.substr(w.b, w.e - w.b));
    return out;
  }
  std::size_t keep = static_cast<std::size_t>(maxsplit);
  if (!from_right) {
    for (std::size_t k = 0; k < keep; ++k) out.emplace_back(s.substr(words[k].b, words[k].e - words[k].b));
    out.emplace_back(s.substr(words[keep].b));  // the remainder keeps its trailing whitespace
  } else {
    std::size_t first = words.size() - keep;
    out.emplace_back(s.substr(0, words[first - 1].e));
    for (std::size_t k = first; k < words.size(); ++k) out.emplace_back(s.substr(words[k].b, words[k].e - words[k].b));
  }
  return out;
}

}  // namespace

std::vector<std::string> py_split(std::string_view s, std::optional<std::string_view> sep, int64_t maxsplit,
                                  bool from_right) {
  if (!sep) return split_ws(s, maxsplit, from_right);
  std::vector<std::string> out;
  const std::string_view d = *sep;
  if (!from_right) {
    std::size_t pos = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      std::size_t at = s.find(d, pos);
      if (at == std::string_view::npos) break;
      out.emplace_back(s.substr(pos, at - pos));
      pos = at + d.size();
    }
    out.emplace_back(s.substr(pos));
    return out;
  }
  std::vector<std::string> rev;
  std::size_t end = s.size();
  while (maxsplit < 0 || static_cast<int64_t>(rev.size()) < maxsplit) {
    if (end < d.size()) break;
    std::size_t at = s.rfind(d, end - d.size());
    if (at == std::string_view::npos) break;
    rev.emplace_back(s.substr(at + d.size(), end - at - d.size()));
    end = at;
  }
  out.emplace_back(s.substr(0, end));
  for (auto it = rev.rbegin(); it != rev.rend(); ++it) out.push_back(*it);
  return out;
}

std::vector<std::string> py_splitlines(std::string_view s, bool keepends) {
  std::vector<std::string> out;
  std::size_t b = 0, i = 0;
  while (i < s.size()) {
    uint32_t cp;
    std::size_t n = utf8_decode(s, i, cp);
    bool brk = cp == '\n' || cp == '\r' || cp == 0x0b || cp == 0x0c || (cp >= 0x1c && cp <= 0x1e) || cp == 0x85 ||
               cp == 0x2028 || cp == 0x2029;
    if (!brk) {
      i += n;
      continue;
    }
    std::size_t e = i + n;
    if (cp == '\r' && e < s.size() && s[e] == '\n') ++e;
    out.emplace_back(s.substr(b, (keepends ? e : i) - b));
    b = i = e;
  }
  if (b < s.size()) out.emplace_back(s.substr(b));
  return out;
}

std::string py_replace(std::string_view s, std::string_view from, std::string_view to, int64_t count) {
  std::string out;
  if (from.empty()) {
    // Python inserts `to` between code points and at both ends.
    int64_t done = 0;
    std::size_t i = 0;
    while (i <= s.size()) {
      if (count < 0 || done < count) out.append(to), ++done;
      if (i == s.size()) break;
      uint32_t cp;
      std::size_t n = utf8_decode(s, i, cp);
      out.append(s.substr(i, n));
      i += n;
    }
    return out;
  }
  std::size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    std::size_t at = s.find(from, pos);
    if (at == std::string_view::npos) break;
    out.append(s.substr(pos, at - pos)).append(to);
    pos = at + from.size();
    ++done;
  }
  out.append(s.substr(pos));
  return out;
}

namespace {

bool printable(uint32_t cp) {
  if (cp == ' ') return true;
  if (cp < 0x20 || cp == 0x7f) return false;
  if (cp < 0x7f) return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS: return false;
    default: return true;
  }
}

}  // namespace

bool py_isprintable(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    uint32_t cp;
    i += utf8_decode(s, i, cp);
    if (!printable(cp)) return false;
  }
  return true;
}

void py_repr(std::string_view s, std::string& out) {
  char q = (s.find('\'') != std::string_view::npos && s.find('"') == std::string_view::npos) ? '"' : '\'';
  out += q;
  for (std::size_t i = 0; i < s.size();) {
    uint32_t cp;
    std::size_t n = utf8_decode(s, i, cp);
    if (cp == static_cast<uint32_t>(q) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (!printable(cp)) {
      char b[16];
      if (cp < 0x100) std::snprintf(b, sizeof b, "\\x%02x", cp);
      else if (cp < 0x10000) std::snprintf(b, sizeof b, "\\u%04x", cp);
      else std::snprintf(b, sizeof b, "\\U%08x", cp);
      out += b;
    } else {
      out.append(s.substr(i, n));
    }
    i += n;
  }
  out += q;
}

void json_quote(std::string_view s, std::string& out, bool ensure_ascii) {
  static constexpr char kHex[] = "0123456789abcdef";
  auto u4 = [&](uint32_t v) {
    out += "\\u";
    for (int shift = 12; shift >= 0; shift -= 4) out += kHex[(v >> shift) & 15];
  };
  // Per byte: 1 where json.dumps escapes it (control characters, '"', '\\'),
  // 2 where only ensure_ascii does (DEL, which is outside ' '..'~', and every
  // byte of a non-ASCII character).
  static constexpr auto kEscape = [] {
    std::array<uint8_t, 256> t{};
    for (int c = 0; c < 256; ++c) t[c] = c < 0x20 || c == '"' || c == '\\' ? 1 : c >= 0x7F ? 2 : 0;
    return t;
  }();
  const uint8_t stop = ensure_ascii ? 3 : 1;  // the table bits that end a run
  out.reserve(out.size() + s.size() + 2);
  out += '"';
  std::size_t run = 0;  // start of the bytes copied as they are
  // Eight bytes at a time while none needs escaping: no byte below 0x20,
  // '"' or '\\' (nor, under ensure_ascii, DEL or one at or above 0x80).
  constexpr uint64_t kOnes = 0x0101010101010101ull, kHighs = 0x8080808080808080ull;
  const uint64_t high_mask = ensure_ascii ? kHighs : 0;
  const uint64_t del = ensure_ascii ? kOnes * 0x7F : 0;  // found below only under high_mask
  auto has_zero = [](uint64_t w) { return (w - kOnes) & ~w & kHighs; };
  for (std::size_t i = 0; i < s.size();) {
#if defined(__SSE2__)
    // Sixteen bytes at a time: a byte to escape sets its bit in the mask
    // (at most 0x1f, '"', '\\', and under ensure_ascii DEL or the high bit).
    if (i + 16 <= s.size()) {
      const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s.data() + i));
      const __m128i control = _mm_cmpeq_epi8(_mm_max_epu8(x, _mm_set1_epi8(0x1f)), _mm_set1_epi8(0x1f));
      const __m128i quote = _mm_or_si128(_mm_cmpeq_epi8(x, _mm_set1_epi8('"')), _mm_cmpeq_epi8(x, _mm_set1_epi8('\\')));
      unsigned mask = static_cast<unsigned>(_mm_movemask_epi8(_mm_or_si128(control, quote)));
      if (ensure_ascii)
        mask |= static_cast<unsigned>(_mm_movemask_epi8(_mm_or_si128(x, _mm_cmpeq_epi8(x, _mm_set1_epi8(0x7f)))));
      if (!mask) {
        i += 16;
        continue;
      }
      i += static_cast<std::size_t>(__builtin_ctz(mask));  // the first byte to escape
    }
#endif
    if (i + 8 <= s.size()) {
      uint64_t w;
      std::memcpy(&w, s.data() + i, 8);
      if (!(((w - kOnes * 0x20) & ~w & kHighs) | has_zero(w ^ (kOnes * '"')) | has_zero(w ^ (kOnes * '\\')) |
            (w & high_mask) | (has_zero(w ^ del) & high_mask))) {
        i += 8;
        continue;
      }
    }
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (!(kEscape[c] & stop)) {
      ++i;
      continue;
    }
    out.append(s.data() + run, i - run);
    if (c >= 0x80) {  // ensure_ascii: the code point as \uXXXX, a surrogate pair above the BMP
      uint32_t cp;
      std::size_t n = utf8_decode(s, i, cp);
      if (cp >= 0x10000) {
        uint32_t v = cp - 0x10000;
        u4(0xd800 + (v >> 10)), u4(0xdc00 + (v & 0x3ff));
      } else {
        u4(cp);
      }
      i += n;
    } else {
      switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        default: u4(c);
      }
      ++i;
    }
    run = i;
  }
  out.append(s.data() + run, s.size() - run);
  out += '"';
}

}  // namespace tokfeed::tmpl
