#include "tokenizer/hf/unicode.hpp"

#include <unicode/uchar.h>
#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "tokenizer/hf/nfc_check.hpp"

namespace tokfeed::text::hf {

DecodedChar decode_utf8(std::string_view s, size_t i) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data()) + i;
  const size_t left = s.size() - i;
  const unsigned char b0 = p[0];
  if (b0 < 0x80) return {b0, 1};
  auto cont = [&](size_t k) { return k < left && (p[k] & 0xC0) == 0x80; };
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    if (cont(1)) return {char32_t((b0 & 0x1F) << 6 | (p[1] & 0x3F)), 2};
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    if (cont(1) && cont(2)) {
      char32_t cp = (b0 & 0x0F) << 12 | (p[1] & 0x3F) << 6 | (p[2] & 0x3F);
      // Overlong forms and surrogates are invalid.
      if (cp >= 0x800 && (cp < 0xD800 || cp > 0xDFFF)) return {cp, 3};
    }
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    if (cont(1) && cont(2) && cont(3)) {
      char32_t cp = (b0 & 0x07) << 18 | (p[1] & 0x3F) << 12 | (p[2] & 0x3F) << 6 | (p[3] & 0x3F);
      if (cp >= 0x10000 && cp <= 0x10FFFF) return {cp, 4};
    }
  }
  return {kInvalidChar, 1};
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(char(cp));
  } else if (cp < 0x800) {
    out.push_back(char(0xC0 | (cp >> 6)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(char(0xE0 | (cp >> 12)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(char(0xF0 | (cp >> 18)));
    out.push_back(char(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  }
}

static utf8proc_category_t category(char32_t cp) {
  if (cp > 0x10FFFF) return UTF8PROC_CATEGORY_CN;
  return utf8proc_category(utf8proc_int32_t(cp));
}

bool is_numeric(char32_t cp) {
  auto c = category(cp);
  return c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
}

bool is_whitespace(char32_t cp) {
  // The White_Space property, as Rust's char::is_whitespace lists it.
  switch (cp) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000: return true;
    default: return cp >= 0x2000 && cp <= 0x200A;
  }
}

bool is_word_char(char32_t cp) {
  auto c = category(cp);
  return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_ME) || c == UTF8PROC_CATEGORY_ND ||
         c == UTF8PROC_CATEGORY_PC;
}

const std::array<char32_t, 256>& byte_to_unicode() {
  // GPT-2: printable Latin-1 bytes stand for themselves; the other 68 bytes
  // take code points 256, 257, ... in byte order.
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> t{};
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      t[b] = printable ? char32_t(b) : next++;
    }
    return t;
  }();
  return table;
}

int unicode_to_byte(char32_t cp) {
  static const std::array<int16_t, 512> inverse = [] {
    std::array<int16_t, 512> t;
    t.fill(-1);
    for (int b = 0; b < 256; ++b) t[byte_to_unicode()[b]] = int16_t(b);
    return t;
  }();
  return cp < 512 ? inverse[cp] : -1;
}

bool nfc_unknown(char32_t cp) {
  UVersionInfo age;
  u_charAge(static_cast<UChar32>(cp), age);
  return age[0] > kHfNormalizerUnicode;
}

namespace {

// Bit per code point: true where NFC can never change the char or combine it
// with its neighbours to the left, so a text may be cut before it. A char
// that HF's normalizer does not know (nfc_unknown) is such a char: to it, an
// unassigned code point, a starter that composes with nothing.
class InertTable {
 public:
  InertTable() : bits_((0x110000 + 63) / 64, 0) {
    std::vector<uint64_t> second((0x110000 + 63) / 64, 0);
    utf8proc_int32_t buf[16];
    for (utf8proc_int32_t cp = 0; cp < 0x110000; ++cp) {
      if (cp >= 0xD800 && cp <= 0xDFFF) continue;
      const utf8proc_property_t* p = utf8proc_get_property(cp);
      bool canonical = (p->decomp_seqindex != UINT16_MAX && p->decomp_type == 0) || is_hangul(cp);
      if (!canonical) continue;
      int last_boundclass = 0;
      auto n = utf8proc_decompose_char(cp, buf, 16, UTF8PROC_DECOMPOSE, &last_boundclass);
      // Every non-first char of a canonical decomposition may recompose with
      // what precedes it; over-marking only costs speed, never exactness.
      for (utf8proc_ssize_t k = 1; k < n && k < 16; ++k) set(second, char32_t(buf[k]));
    }
    for (utf8proc_int32_t cp = 0; cp < 0x110000; ++cp) {
      if (cp >= 0xD800 && cp <= 0xDFFF) continue;
      const utf8proc_property_t* p = utf8proc_get_property(cp);
      bool canonical = p->decomp_seqindex != UINT16_MAX && p->decomp_type == 0;
      if ((p->combining_class == 0 && !get(second, char32_t(cp)) && (!canonical || is_hangul(cp))) ||
          (p->category != UTF8PROC_CATEGORY_CN && nfc_unknown(char32_t(cp))))
        set(bits_, char32_t(cp));
    }
  }
  bool inert(char32_t cp) const { return cp > 0x10FFFF || get(bits_, cp); }

 private:
  static bool is_hangul(utf8proc_int32_t cp) { return cp >= 0xAC00 && cp <= 0xD7A3; }
  static void set(std::vector<uint64_t>& v, char32_t cp) { v[cp >> 6] |= uint64_t(1) << (cp & 63); }
  static bool get(const std::vector<uint64_t>& v, char32_t cp) { return (v[cp >> 6] >> (cp & 63)) & 1; }
  std::vector<uint64_t> bits_;
};

const InertTable& inert_table() {
  static const InertTable table;
  return table;
}

bool inert(std::string_view s, size_t i, uint32_t* len) {
  auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) {
    *len = 1;
    return true;
  }
  DecodedChar d = decode_utf8(s, i);
  *len = d.len;
  return inert_table().inert(d.cp);
}

}  // namespace

void nfc_prepare() {
  inert_table();
  nfc_check_table();
}

bool nfc_append(std::string_view s, std::string& out, std::vector<NfcRegion>& regions) {
  // Fast path: most text is NFC by the quick check.
  if (nfc_quick_check(s)) return false;

  std::string result;
  std::vector<NfcRegion> found;
  result.reserve(s.size() + 16);
  size_t done = 0;       // s[0, done) is described by `found`
  size_t seg_start = 0;  // start of the last inert char seen
  auto keep = [&](size_t end) {
    if (end <= done) return;
    result.append(s.substr(done, end - done));
    if (!found.empty() && !found.back().changed)
      found.back().in_len += uint32_t(end - done), found.back().out_len += uint32_t(end - done);
    else found.push_back({uint32_t(done), uint32_t(end - done), uint32_t(end - done), false});
    done = end;
  };
  for (size_t i = 0; i < s.size();) {
    uint32_t len;
    if (inert(s, i, &len)) {
      seg_start = i;
      i += len;
      continue;
    }
    // A segment: the last inert char (when valid UTF-8) and the non-inert run after it.
    size_t begin = std::max(seg_start, done);
    if (begin < i) {
      // Nor is a char NFC does not know, as HF's normalizer sees it.
      const char32_t cp = decode_utf8(s, begin).cp;
      if (cp == kInvalidChar || nfc_unknown(cp)) begin = i;
    }
    size_t end = i + len;
    while (end < s.size()) {
      uint32_t l2;
      if (inert(s, end, &l2) || decode_utf8(s, end).cp == kInvalidChar) break;
      end += l2;
    }
    keep(begin);
    utf8proc_uint8_t* mapped = nullptr;
    auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + begin), utf8proc_ssize_t(end - begin),
                          &mapped, utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
    std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> guard(mapped, &std::free);
    std::string_view nfc =
        n >= 0 ? std::string_view(reinterpret_cast<char*>(mapped), size_t(n)) : s.substr(begin, end - begin);
    if (nfc == s.substr(begin, end - begin)) {
      keep(end);
    } else {
      result.append(nfc);
      found.push_back({uint32_t(begin), uint32_t(end - begin), uint32_t(nfc.size()), true});
      done = end;
    }
    seg_start = end;
    i = end;
  }
  keep(s.size());
  bool any_change = false;
  for (const auto& r : found) any_change |= r.changed;
  if (!any_change) return false;
  out.append(result);
  regions.insert(regions.end(), found.begin(), found.end());
  return true;
}

}  // namespace tokfeed::text::hf
