#include "tokenizer/hf/unicode_forms.hpp"

#include <unicode/uchar.h>
#include <unicode/ustring.h>
#include <utf8proc.h>

#include <cstdlib>
#include <memory>

namespace tokfeed::text::hf {

namespace {

// Per form, two bits per code point. `boundary`: a text may be cut before
// the char (form(a + b) == form(a) + form(b)), because its decomposition
// starts with a char of combining class 0 which, for NFKC, is never the
// second half of a composition. `inert`: a boundary that the form maps to
// itself. A char HF's normalizer does not know (nfc_unknown) is inert, and
// a text may be cut after it too: to HF it is a starter that composes with
// nothing.
class FormTable {
 public:
  explicit FormTable(NormalForm form) : bits_((0x110000 + 15) / 16, 0) {
    const bool compat = form != NormalForm::kNfd;
    const auto options = utf8proc_option_t(UTF8PROC_DECOMPOSE | (compat ? UTF8PROC_COMPAT : 0));
    std::vector<uint64_t> second;
    if (form == NormalForm::kNfkc) second = composition_seconds();
    utf8proc_int32_t buf[32];
    for (utf8proc_int32_t cp = 0; cp < 0x110000; ++cp) {
      if (cp >= 0xD800 && cp <= 0xDFFF) continue;
      const utf8proc_property_t* p = utf8proc_get_property(cp);
      if (p->category == UTF8PROC_CATEGORY_CN || nfc_unknown(char32_t(cp))) {
        set(char32_t(cp), kBoundary | kInert);
        continue;
      }
      int boundclass = 0;
      auto n = utf8proc_decompose_char(cp, buf, 32, options, &boundclass);
      if (n < 1 || n > 32) continue;
      const utf8proc_int32_t first = buf[0];
      bool boundary = utf8proc_get_property(first)->combining_class == 0;
      if (!second.empty() && ((second[size_t(first) >> 6] >> (first & 63)) & 1)) boundary = false;
      if (!boundary) continue;
      set(char32_t(cp), n == 1 && first == cp ? kBoundary | kInert : kBoundary);
    }
  }
  bool boundary(char32_t cp) const { return cp > 0x10FFFF || (get(cp) & kBoundary); }
  bool inert(char32_t cp) const { return cp > 0x10FFFF || (get(cp) & kInert); }

 private:
  static constexpr unsigned kBoundary = 1, kInert = 2;
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
  void set(char32_t cp, unsigned v) { bits_[cp >> 4] |= uint32_t(v) << ((cp & 15) * 2); }
  unsigned get(char32_t cp) const { return (bits_[cp >> 4] >> ((cp & 15) * 2)) & 3; }
  std::vector<uint32_t> bits_;
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

utf8proc_option_t form_options(NormalForm form) {
  switch (form) {
    case NormalForm::kNfd: return utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE);
    case NormalForm::kNfkd: return utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
    case NormalForm::kNfkc: break;
  }
  return utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
}

}  // namespace

void normal_form_prepare(NormalForm form) { form_table(form); }

bool normal_form_append(NormalForm form, std::string_view s, std::string& out, std::vector<NfcRegion>& regions) {
  const FormTable& table = form_table(form);
  std::string result;
  std::vector<NfcRegion> found;
  bool any_change = false;
  auto keep = [&](size_t begin, size_t end) {
    if (end <= begin) return;
    result.append(s.substr(begin, end - begin));
    if (!found.empty() && !found.back().changed)
      found.back().in_len += uint32_t(end - begin), found.back().out_len += uint32_t(end - begin);
    else found.push_back({uint32_t(begin), uint32_t(end - begin), uint32_t(end - begin), false});
  };
  // A cluster: a boundary char and the non-boundary chars after it; the form
  // of the text is the concatenation of the forms of its clusters.
  auto cluster = [&](size_t begin, size_t end) {
    utf8proc_uint8_t* mapped = nullptr;
    auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + begin), utf8proc_ssize_t(end - begin),
                          &mapped, form_options(form));
    std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> guard(mapped, &std::free);
    std::string_view normal =
        n >= 0 ? std::string_view(reinterpret_cast<char*>(mapped), size_t(n)) : std::string_view();
    if (n < 0 || normal == s.substr(begin, end - begin)) return keep(begin, end);
    result.append(normal);
    found.push_back({uint32_t(begin), uint32_t(end - begin), uint32_t(normal.size()), true});
    any_change = true;
  };
  size_t start = 0;        // of the cluster being read
  bool lone_inert = true;  // the cluster so far is one inert char (or empty)
  bool cut_after = true;   // the last char allows a cut after it whatever follows
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    DecodedChar d = b < 0x80 ? DecodedChar{b, 1} : decode_utf8(s, i);
    const bool unknown = d.cp == kInvalidChar || (d.cp >= 0x80 && nfc_unknown(d.cp));
    if (cut_after || unknown || table.boundary(d.cp)) {
      if (lone_inert) keep(start, i);
      else cluster(start, i);
      start = i;
      lone_inert = unknown || table.inert(d.cp);
    } else {
      lone_inert = false;
    }
    cut_after = unknown;
    i += d.len;
  }
  if (lone_inert) keep(start, s.size());
  else cluster(start, s.size());
  if (!any_change) return false;
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
