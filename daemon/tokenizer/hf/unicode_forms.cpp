#include "tokenizer/hf/unicode_forms.hpp"

#include <unicode/uchar.h>
#include <unicode/ustring.h>
#include <utf8proc.h>

#include <algorithm>
#include <cstring>

namespace tokfeed::text::hf {

namespace {

utf8proc_option_t form_options(NormalForm form) {
  switch (form) {
    case NormalForm::kNfd: return utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE);
    case NormalForm::kNfkd: return utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
    case NormalForm::kNfkc: break;
  }
  return utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
}

// Writes form(s) to `normal` (s: valid UTF-8 of chars HF's normalizer
// knows): decomposed and ordered by utf8proc into a local buffer, composed
// in place for NFKC. False when utf8proc rejects s.
bool map_cluster(NormalForm form, std::string_view s, std::string& normal) {
  utf8proc_int32_t local[64];
  std::vector<utf8proc_int32_t> heap;
  utf8proc_int32_t* buf = local;
  const auto options = form_options(form);
  auto decompose = [&](utf8proc_ssize_t size) {
    return utf8proc_decompose(reinterpret_cast<const utf8proc_uint8_t*>(s.data()), utf8proc_ssize_t(s.size()), buf,
                              size, options);
  };
  utf8proc_ssize_t n = decompose(64);
  if (n > 64) {
    heap.resize(size_t(n));
    buf = heap.data();
    n = decompose(n);
  }
  if (n < 0) return false;
  if (form == NormalForm::kNfkc) n = utf8proc_normalize_utf32(buf, n, options);
  if (n < 0) return false;
  normal.clear();
  for (utf8proc_ssize_t k = 0; k < n; ++k) append_utf8(normal, char32_t(buf[k]));
  return true;
}

// Per form, a byte of bits per code point. `boundary`: a text may be cut
// before the char (form(a + b) == form(a) + form(b)), because its
// decomposition starts with a char of combining class 0 which, for NFKC, is
// never the second half of a composition. `inert`: a boundary that the form
// maps to itself. `unknown`: a char HF's normalizer does not know
// (nfc_unknown), or an unassigned code point: inert, and a text may be cut
// after it too, since to HF it is a starter that composes with nothing.
class FormTable {
 public:
  static constexpr uint8_t kBoundary = 1, kInert = 2, kUnknown = 4;

  explicit FormTable(NormalForm form) : bits_(0x110000, 0) {
    const bool compat = form != NormalForm::kNfd;
    const auto options = utf8proc_option_t(UTF8PROC_DECOMPOSE | (compat ? UTF8PROC_COMPAT : 0));
    std::vector<uint64_t> second;
    if (form == NormalForm::kNfkc) second = composition_seconds();
    utf8proc_int32_t buf[32];
    for (utf8proc_int32_t cp = 0; cp < 0x110000; ++cp) {
      if (cp >= 0xD800 && cp <= 0xDFFF) continue;
      const utf8proc_property_t* p = utf8proc_get_property(cp);
      if (p->category == UTF8PROC_CATEGORY_CN || nfc_unknown(char32_t(cp))) {
        bits_[size_t(cp)] = kBoundary | kInert | kUnknown;
        continue;
      }
      int boundclass = 0;
      auto n = utf8proc_decompose_char(cp, buf, 32, options, &boundclass);
      if (n < 1 || n > 32) continue;
      const utf8proc_int32_t first = buf[0];
      bool boundary = utf8proc_get_property(first)->combining_class == 0;
      if (!second.empty() && ((second[size_t(first) >> 6] >> (first & 63)) & 1)) boundary = false;
      if (!boundary) continue;
      bits_[size_t(cp)] = kBoundary;
      // Inert when the form gives the char back (é under NFKC, a Hangul
      // syllable: decomposed, then composed again).
      if ((n == 1 && first == cp) || (form == NormalForm::kNfkc && maps_to_itself(cp, form)))
        bits_[size_t(cp)] |= kInert;
    }
    // Three-byte lead bytes all of whose chars are inert and known (CJK).
    for (unsigned lead = 0xE0; lead <= 0xEF; ++lead) {
      const char32_t lo = char32_t(lead & 0x0F) << 12;
      bool all = true;
      for (char32_t cp = std::max<char32_t>(lo, 0x800); cp < lo + 0x1000 && all; ++cp)
        all = (cp >= 0xD800 && cp <= 0xDFFF) || bits_[cp] == (kBoundary | kInert);
      lead3_plain_[lead - 0xE0] = all;
    }
  }
  // Bits of a decoded char; an invalid one is unknown.
  uint8_t bits(char32_t cp) const { return cp > 0x10FFFF ? kBoundary | kInert | kUnknown : bits_[cp]; }
  // Every well-formed three-byte char with this lead byte (0xE0..0xEF) is
  // inert and known.
  bool lead3_plain(unsigned char lead) const { return lead3_plain_[lead - 0xE0]; }

 private:
  // Every non-first char of a canonical decomposition (Hangul included): it
  // may compose with what precedes it.
  static std::vector<uint64_t> composition_seconds() {
    std::vector<uint64_t> second((0x110000 + 63) / 64, 0);
    utf8proc_int32_t buf[16];
    for (utf8proc_int32_t cp = 0; cp < 0x110000; ++cp) {
      if (cp >= 0xD800 && cp <= 0xDFFF) continue;
      int boundclass = 0;
      auto n = utf8proc_decompose_char(cp, buf, 16, UTF8PROC_DECOMPOSE, &boundclass);
      for (utf8proc_ssize_t k = 1; k < n && k < 16; ++k) second[size_t(buf[k]) >> 6] |= uint64_t(1) << (buf[k] & 63);
    }
    return second;
  }
  static bool maps_to_itself(utf8proc_int32_t cp, NormalForm form) {
    std::string in, normal;
    append_utf8(in, char32_t(cp));
    return map_cluster(form, in, normal) && normal == in;
  }
  std::vector<uint8_t> bits_;
  bool lead3_plain_[16] = {};
};

const FormTable& form_table(NormalForm form) {
  static const FormTable nfd(NormalForm::kNfd), nfkd(NormalForm::kNfkd), nfkc(NormalForm::kNfkc);
  switch (form) {
    case NormalForm::kNfd: return nfd;
    case NormalForm::kNfkd: return nfkd;
    case NormalForm::kNfkc: break;
  }
  return nfkc;
}

}  // namespace

void normal_form_prepare(NormalForm form) { form_table(form); }

bool normal_form_append(NormalForm form, std::string_view s, std::string& out, std::vector<NfcRegion>& regions) {
  const FormTable& table = form_table(form);
  std::string result;
  std::vector<NfcRegion> found;
  size_t flushed = 0;  // s[0, flushed) is described by result and found
  // Unchanged text is copied lazily, when a change follows it.
  auto flush = [&](size_t end) {
    if (end <= flushed) return;
    result.append(s.substr(flushed, end - flushed));
    if (!found.empty() && !found.back().changed)
      found.back().in_len += uint32_t(end - flushed), found.back().out_len += uint32_t(end - flushed);
    else found.push_back({uint32_t(flushed), uint32_t(end - flushed), uint32_t(end - flushed), false});
    flushed = end;
  };
  // A cluster: a boundary char and the non-boundary chars after it; the form
  // of the text is the concatenation of the forms of its clusters.
  std::string normal;
  auto cluster = [&](size_t begin, size_t end) {
    if (!map_cluster(form, s.substr(begin, end - begin), normal) || normal == s.substr(begin, end - begin)) return;
    flush(begin);
    result.append(normal);
    found.push_back({uint32_t(begin), uint32_t(end - begin), uint32_t(normal.size()), true});
    flushed = end;
  };
  size_t start = 0;        // of the cluster being read
  bool lone_inert = true;  // the cluster so far is one inert char (or empty)
  bool cut_after = true;   // the last char allows a cut after it whatever follows
  // Starts a cluster at s[i], closing the one before.
  auto cut = [&](size_t i, bool inert) {
    if (!lone_inert) cluster(start, i);
    start = i;
    lone_inert = inert;
  };
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    uint64_t v;
    if (i + 8 <= s.size() && (std::memcpy(&v, s.data() + i, 8), (v & 0x8080808080808080ull) == 0)) {
      // Eight ASCII chars: each inert, known and a boundary.
      cut(i, true);
      start = i + 7;
      cut_after = false;
      i += 8;
      continue;
    }
    if ((b & 0xF0) == 0xE0 && i + 3 <= s.size() && table.lead3_plain(b) &&
        (static_cast<unsigned char>(s[i + 1]) & 0xC0) == 0x80 &&
        (static_cast<unsigned char>(s[i + 2]) & 0xC0) == 0x80) {
      // A CJK char, say: inert and known, as all of its block. (E0 and ED
      // with a bad second byte are invalid, and so inert too.)
      cut(i, true);
      cut_after = false;
      i += 3;
      continue;
    }
    DecodedChar d = b < 0x80 ? DecodedChar{b, 1} : decode_utf8(s, i);
    const uint8_t bits = table.bits(d.cp);
    if (cut_after || (bits & FormTable::kBoundary)) cut(i, bits & FormTable::kInert);
    else lone_inert = false;
    cut_after = bits & FormTable::kUnknown;
    i += d.len;
  }
  if (!lone_inert) cluster(start, s.size());
  if (found.empty()) return false;
  flush(s.size());
  out.append(result);
  regions.insert(regions.end(), found.begin(), found.end());
  return true;
}

bool append_lowercase(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    if (cp < 'A' || cp > 'Z') return false;
    out.push_back(char(cp + ('a' - 'A')));
    return true;
  }
  if (cp > 0x10FFFF || !u_hasBinaryProperty(UChar32(cp), UCHAR_CHANGES_WHEN_LOWERCASED)) return false;
  // The full mapping of the char alone: no context, so a lone capital sigma
  // maps to σ, as char::to_lowercase does.
  UChar in[2];
  int32_t n = 0;
  U16_APPEND_UNSAFE(in, n, UChar32(cp));
  UChar lower[8];
  UErrorCode err = U_ZERO_ERROR;
  int32_t m = u_strToLower(lower, 8, in, n, "", &err);
  if (U_FAILURE(err)) return false;
  for (int32_t i = 0; i < m;) {
    UChar32 c;
    U16_NEXT(lower, i, m, c);
    append_utf8(out, char32_t(c));
  }
  return true;
}

namespace {

// One byte of class bits per code point.
class ClassTable {
 public:
  static constexpr uint8_t kMark9 = 1, kPunct8 = 2, kWord = 4;
  ClassTable() : bits_(0x110000, 0) {
    for (UChar32 cp = 0; cp < 0x110000; ++cp) {
      const int8_t type = u_charType(cp);
      if (type == U_UNASSIGNED) continue;
      UVersionInfo age;
      u_charAge(cp, age);
      const uint32_t mask = U_MASK(type);
      uint8_t v = 0;
      if ((mask & U_GC_M_MASK) && age[0] <= 9) v |= kMark9;
      if ((mask & U_GC_P_MASK) && age[0] <= 8) v |= kPunct8;
      if ((mask & (U_GC_M_MASK | U_GC_ND_MASK | U_GC_PC_MASK)) || u_hasBinaryProperty(cp, UCHAR_ALPHABETIC) ||
          u_hasBinaryProperty(cp, UCHAR_JOIN_CONTROL))
        v |= kWord;
      bits_[size_t(cp)] = v;
    }
    // General categories that changed after the versions HF's crates know:
    // U+1CF2 and U+1CF3 were Mc until Unicode 10.0 made them Lo; U+111C9 was
    // Po until 11.0 made it Mn; U+166D was Po until 12.0 made it So.
    bits_[0x1CF2] |= kMark9;
    bits_[0x1CF3] |= kMark9;
    bits_[0x111C9] = uint8_t((bits_[0x111C9] & ~kMark9) | kPunct8);
    bits_[0x166D] |= kPunct8;
    for (char c : std::string_view("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")) bits_[size_t(c)] |= kPunct8;
  }
  bool has(char32_t cp, uint8_t bit) const { return cp <= 0x10FFFF && (bits_[cp] & bit); }

 private:
  std::vector<uint8_t> bits_;
};

const ClassTable& class_table() {
  static const ClassTable table;
  return table;
}

}  // namespace

void char_classes_prepare() { class_table(); }
bool is_hf_combining_mark(char32_t cp) { return class_table().has(cp, ClassTable::kMark9); }
bool is_hf_punctuation(char32_t cp) { return class_table().has(cp, ClassTable::kPunct8); }
bool is_onig_word(char32_t cp) { return class_table().has(cp, ClassTable::kWord); }

}  // namespace tokfeed::text::hf
