#include "tokenizer/hf/nfc_check.hpp"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "tokenizer/hf/unicode.hpp"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace tokfeed::text::hf {

namespace {

bool is_hangul_syllable(char32_t cp) { return cp >= 0xAC00 && cp <= 0xD7A3; }

// NFC of one char, as utf8proc computes it.
std::u32string nfc_of(char32_t cp) {
  std::string utf8;
  append_utf8(utf8, cp);
  utf8proc_uint8_t* mapped = nullptr;
  const auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(utf8.data()), utf8proc_ssize_t(utf8.size()),
                              &mapped, utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> guard(mapped, &std::free);
  std::u32string out;
  const std::string_view s(reinterpret_cast<const char*>(mapped), n > 0 ? size_t(n) : 0);
  for (size_t i = 0; i < s.size();) {
    const DecodedChar d = decode_utf8(s, i);
    out.push_back(d.cp);
    i += d.len;
  }
  return out;
}

}  // namespace

NfcCheckTable::NfcCheckTable() {
  std::vector<uint8_t> full(0x110000, 0);
  std::vector<bool> maybe(0x110000, false);
  for (char32_t cp = 0; cp < 0x110000; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;  // never decoded: invalid UTF-8
    const utf8proc_property_t* p = utf8proc_get_property(utf8proc_int32_t(cp));
    full[cp] = uint8_t(p->combining_class);
    const bool canonical = (p->decomp_seqindex != UINT16_MAX && p->decomp_type == 0) || is_hangul_syllable(cp);
    if (!canonical) continue;
    // No: NFC does not keep the char (a composition exclusion, a singleton,
    // a decomposition that starts with a mark). Maybe: the last char of the
    // decomposition of a char NFC keeps, which composes with what precedes it.
    if (!is_hangul_syllable(cp) && nfc_of(cp) != std::u32string(1, cp)) {
      full[cp] = kNotYes;
      continue;
    }
    utf8proc_int32_t buf[16];
    int boundclass = 0;
    const auto n = utf8proc_decompose_char(utf8proc_int32_t(cp), buf, 16, UTF8PROC_DECOMPOSE, &boundclass);
    if (n >= 2 && n <= 16) maybe[size_t(buf[n - 1])] = true;
  }
  for (char32_t cp = 0; cp < 0x110000; ++cp)
    if (maybe[cp]) full[cp] = kNotYes;

  table_ = CodePointTable(full);
  auto all_zero = [&](char32_t first, char32_t count) {
    for (char32_t cp = first; cp < first + count; ++cp)
      if (full[cp] != 0) return false;
    return true;
  };
  for (unsigned lead = 0xC2; lead <= 0xDF; ++lead)
    if (all_zero(char32_t(lead & 0x1F) << 6, 64)) block2_ |= uint32_t(1) << (lead & 0x1F);
  for (char32_t first = 0x800; first < 0x10000; first += 64)
    if (all_zero(first, 64)) block3_[first >> 12] |= uint64_t(1) << (first >> 6 & 0x3F);
  // The two longest runs of lead bytes whose three-byte chars are all 0.
  for (unsigned lead = 0xE0; lead <= 0xEF;) {
    if (block3_[lead & 0x0F] != ~uint64_t(0)) {
      ++lead;
      continue;
    }
    unsigned end = lead;
    while (end <= 0xEF && block3_[end & 0x0F] == ~uint64_t(0)) ++end;
    const LeadRange r{uint8_t(lead), uint8_t(end - lead)};
    if (r.count > lead_ranges_[0].count) lead_ranges_[1] = lead_ranges_[0], lead_ranges_[0] = r;
    else if (r.count > lead_ranges_[1].count) lead_ranges_[1] = r;
    lead = end;
  }
}

const NfcCheckTable& nfc_check_table() {
  static const NfcCheckTable table;
  return table;
}

bool nfc_quick_check(std::string_view text) {
  const NfcCheckTable& t = nfc_check_table();
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  uint8_t last = 0;  // combining class of the previous char
  size_t i = 0;
#if defined(__SSE2__)
  // Sixteen bytes at a time (64 in a run of ASCII): ASCII, continuation bytes and lead bytes whose
  // chars are all Yes starters (most of CJK) pass as they are; the first
  // other lead byte is where the chunk stops and one char is looked at.
  const auto r0 = t.lead_range(0), r1 = t.lead_range(1);
  auto in_range = [](__m128i x, int lo, int k) {
    return _mm_cmplt_epi8(_mm_add_epi8(x, _mm_set1_epi8(char(0x80 - lo))), _mm_set1_epi8(char(-128 + k)));
  };
  auto ascii64 = [](const unsigned char* p) {
    const auto* q = reinterpret_cast<const __m128i*>(p);
    const __m128i any = _mm_or_si128(_mm_or_si128(_mm_loadu_si128(q), _mm_loadu_si128(q + 1)),
                                     _mm_or_si128(_mm_loadu_si128(q + 2), _mm_loadu_si128(q + 3)));
    return _mm_movemask_epi8(any) == 0;
  };
  auto stops_in = [&](__m128i v) {
    const __m128i lead = in_range(v, 0xC0, 64);
    const __m128i ok = _mm_or_si128(in_range(v, r0.lo, r0.count), in_range(v, r1.lo, r1.count));
    return uint32_t(_mm_movemask_epi8(_mm_andnot_si128(ok, lead)));
  };
  bool in_ascii = true;  // the last chunk was ASCII: try 64 bytes at once
#endif
  while (i < n) {
#if defined(__SSE2__)
    if (in_ascii && i + 64 <= n) {
      if (ascii64(s + i)) {
        i += 64;
        last = 0;
        continue;
      }
      in_ascii = false;
    }
    if (i + 16 <= n) {
      // Bytes before the stop are whole chars or the rest of one whose lead
      // byte passed: starters all (a stray continuation byte is invalid).
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
      in_ascii = _mm_movemask_epi8(v) == 0;
      const uint32_t stops = in_ascii ? 0 : stops_in(v);
      if (stops == 0) {
        i += 16;
        last = 0;
        continue;
      }
      if (const size_t k = size_t(__builtin_ctz(stops)); k > 0) {
        i += k;
        last = 0;
      }
    }
#endif
    const unsigned char c = s[i];
    if (c < 0x80) {
      last = 0;
      ++i;
      continue;
    }
    if ((c & 0xE0) == 0xC0 && i + 2 <= n && (s[i + 1] & 0xC0) == 0x80 && t.block2_yes(c)) {
      last = 0;
      i += 2;
      continue;
    }
    if ((c & 0xF0) == 0xE0 && i + 3 <= n && (s[i + 1] & 0xC0) == 0x80 && (s[i + 2] & 0xC0) == 0x80) {
      i += 3;
      if (t.block3_yes(c, s[i - 2])) {
        last = 0;
        continue;
      }
      // Decoded here as decode_utf8 does (CJK punctuation, general
      // punctuation): an overlong form is invalid, a char of its own (its
      // first byte) with class 0. (Surrogates, invalid too, are in blocks
      // of 0 in the table: they passed above, as invalid bytes would.)
      const char32_t cp = char32_t(c & 0x0F) << 12 | char32_t(s[i - 2] & 0x3F) << 6 | (s[i - 1] & 0x3F);
      if (cp < 0x800) {
        i -= 2;
        last = 0;
        continue;
      }
      const uint8_t ccc = t.get(cp);
      if (ccc == NfcCheckTable::kNotYes || (ccc != 0 && last > ccc)) return false;
      last = ccc;
      continue;
    }
    const DecodedChar d = decode_utf8(text, i);
    i += d.len;
    if (d.cp == kInvalidChar) {
      last = 0;
      continue;
    }
    const uint8_t ccc = t.get(d.cp);
    if (ccc == NfcCheckTable::kNotYes || (ccc != 0 && last > ccc)) return false;
    last = ccc;
  }
  return true;
}

}  // namespace tokfeed::text::hf
