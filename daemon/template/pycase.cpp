// Python's str case mapping and character classes, from ICU's Unicode data:
// full mappings (ß → SS, ﬃ → FFI, İ → i̇), the final-sigma rule as CPython
// applies it, and str.isalpha/isdigit/... as CPython's unicodedata defines
// them.
#include <unicode/uchar.h>
#include <unicode/ucasemap.h>

#include <cstdint>
#include <cstdlib>
#include <memory>

#include "template/pystr.hpp"

namespace tokfeed::tmpl {

namespace {

bool ascii_only(std::string_view s) {
  for (unsigned char c : s)
    if (c >= 0x80) return false;
  return true;
}

struct CaseMaps {
  UCaseMap* plain = nullptr;  // root locale
  UCaseMap* title = nullptr;  // one code point titlecased, nothing lowered
  CaseMaps() {
    UErrorCode err = U_ZERO_ERROR;
    plain = ucasemap_open("", U_FOLD_CASE_DEFAULT, &err);
    err = U_ZERO_ERROR;
    title =
        ucasemap_open("", U_TITLECASE_WHOLE_STRING | U_TITLECASE_NO_LOWERCASE | U_TITLECASE_NO_BREAK_ADJUSTMENT, &err);
  }
  ~CaseMaps() {
    ucasemap_close(plain);
    ucasemap_close(title);
  }
};

const CaseMaps& maps() {
  thread_local CaseMaps m;
  return m;
}

enum class Map : uint8_t { kUpper, kLower, kTitle, kFold };

// ICU's full mapping of UTF-8 text (for one code point: its full mapping).
void icu_map(Map how, std::string_view s, std::string& out) {
  const CaseMaps& m = maps();
  std::size_t at = out.size();
  out.resize(at + s.size() * 3 + 16);
  for (int attempt = 0; attempt < 2; ++attempt) {
    UErrorCode err = U_ZERO_ERROR;
    char* dst = out.data() + at;
    auto cap = static_cast<int32_t>(out.size() - at);
    auto len = static_cast<int32_t>(s.size());
    int32_t n = 0;
    switch (how) {
      case Map::kUpper: n = ucasemap_utf8ToUpper(m.plain, dst, cap, s.data(), len, &err); break;
      case Map::kLower: n = ucasemap_utf8ToLower(m.plain, dst, cap, s.data(), len, &err); break;
      case Map::kTitle: n = ucasemap_utf8ToTitle(m.title, dst, cap, s.data(), len, &err); break;
      case Map::kFold: n = ucasemap_utf8FoldCase(m.plain, dst, cap, s.data(), len, &err); break;
    }
    if (err == U_BUFFER_OVERFLOW_ERROR) {
      out.resize(at + static_cast<std::size_t>(n));
      continue;
    }
    if (U_FAILURE(err)) {  // not expected for any input; keep the text as it is
      out.resize(at);
      out.append(s);
      return;
    }
    out.resize(at + static_cast<std::size_t>(n));
    return;
  }
}

bool cased(uint32_t c) { return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_CASED); }
bool case_ignorable(uint32_t c) { return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_CASE_IGNORABLE); }
bool is_upper(uint32_t c) { return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_UPPERCASE); }
bool is_lower(uint32_t c) { return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_LOWERCASE); }
bool is_title(uint32_t c) { return u_charType(static_cast<UChar32>(c)) == U_TITLECASE_LETTER; }

// U+03A3 lowercased at cps[i]: ς in the Final_Sigma context, as CPython's
// handle_capital_sigma decides it, else σ.
uint32_t sigma_at(const std::vector<uint32_t>& cps, std::size_t i) {
  std::size_t j = i;
  while (j > 0 && case_ignorable(cps[j - 1])) --j;
  bool final = j > 0 && cased(cps[j - 1]);
  if (final) {
    std::size_t k = i + 1;
    while (k < cps.size() && case_ignorable(cps[k])) ++k;
    final = k == cps.size() || !cased(cps[k]);
  }
  return final ? 0x3c2 : 0x3c3;
}

// One code point's full mapping; cps[i] lowercased in its context.
void map_cp(Map how, const std::vector<uint32_t>& cps, std::size_t i, std::string& out) {
  uint32_t c = cps[i];
  if (c < 0x80) {
    bool up = how == Map::kUpper || how == Map::kTitle;
    out += static_cast<char>(up ? (c >= 'a' && c <= 'z' ? c - 32 : c) : (c >= 'A' && c <= 'Z' ? c + 32 : c));
    return;
  }
  if (how == Map::kLower && c == 0x3a3) {
    utf8_append(sigma_at(cps, i), out);
    return;
  }
  if (c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)) {  // a byte of invalid UTF-8, kept
    out += static_cast<char>(c);
    return;
  }
  std::string one;
  utf8_append(c, one);
  icu_map(how, one, out);
}

template <class F>
bool all_of(std::string_view s, F f) {
  if (s.empty()) return false;
  for (uint32_t c : code_points(s))
    if (!f(c)) return false;
  return true;
}

}  // namespace

std::string py_upper(std::string_view s) {
  std::string out;
  if (ascii_only(s)) {
    out.reserve(s.size());
    for (char c : s) out += (c >= 'a' && c <= 'z') ? static_cast<char>(c - 32) : c;
    return out;
  }
  std::vector<uint32_t> cps = code_points(s);
  for (std::size_t i = 0; i < cps.size(); ++i) map_cp(Map::kUpper, cps, i, out);
  return out;
}

std::string py_lower(std::string_view s) {
  std::string out;
  if (ascii_only(s)) {
    out.reserve(s.size());
    for (char c : s) out += (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c;
    return out;
  }
  std::vector<uint32_t> cps = code_points(s);
  for (std::size_t i = 0; i < cps.size(); ++i) map_cp(Map::kLower, cps, i, out);
  return out;
}

std::string py_casefold(std::string_view s) {
  if (ascii_only(s)) return py_lower(s);
  std::string out;
  std::vector<uint32_t> cps = code_points(s);
  for (std::size_t i = 0; i < cps.size(); ++i) map_cp(Map::kFold, cps, i, out);
  return out;
}

std::string py_capitalize(std::string_view s) {
  std::string out;
  std::vector<uint32_t> cps = code_points(s);
  for (std::size_t i = 0; i < cps.size(); ++i) map_cp(i == 0 ? Map::kTitle : Map::kLower, cps, i, out);
  return out;
}

std::string py_title(std::string_view s) {
  std::string out;
  std::vector<uint32_t> cps = code_points(s);
  bool prev_cased = false;
  for (std::size_t i = 0; i < cps.size(); ++i) {
    map_cp(prev_cased ? Map::kLower : Map::kTitle, cps, i, out);
    prev_cased = cased(cps[i]);
  }
  return out;
}

std::string py_swapcase(std::string_view s) {
  std::string out;
  std::vector<uint32_t> cps = code_points(s);
  for (std::size_t i = 0; i < cps.size(); ++i) {
    if (is_upper(cps[i])) map_cp(Map::kLower, cps, i, out);
    else if (is_lower(cps[i])) map_cp(Map::kUpper, cps, i, out);
    else utf8_append(cps[i], out);
  }
  return out;
}

bool py_isupper(std::string_view s) {
  bool any = false;
  for (uint32_t c : code_points(s)) {
    if (is_lower(c) || is_title(c)) return false;
    any = any || is_upper(c);
  }
  return any;
}

bool py_islower(std::string_view s) {
  bool any = false;
  for (uint32_t c : code_points(s)) {
    if (is_upper(c) || is_title(c)) return false;
    any = any || is_lower(c);
  }
  return any;
}

bool py_istitle(std::string_view s) {
  bool any = false, prev = false;
  for (uint32_t c : code_points(s)) {
    if (is_upper(c) || is_title(c)) {
      if (prev) return false;
      prev = any = true;
    } else if (is_lower(c)) {
      if (!prev) return false;
      prev = any = true;
    } else {
      prev = false;
    }
  }
  return any;
}

namespace {

bool alpha(uint32_t c) {
  switch (u_charType(static_cast<UChar32>(c))) {
    case U_UPPERCASE_LETTER:
    case U_LOWERCASE_LETTER:
    case U_TITLECASE_LETTER:
    case U_MODIFIER_LETTER:
    case U_OTHER_LETTER: return true;
    default: return false;
  }
}
int numeric_type(uint32_t c) { return u_getIntPropertyValue(static_cast<UChar32>(c), UCHAR_NUMERIC_TYPE); }
bool decimal(uint32_t c) { return numeric_type(c) == U_NT_DECIMAL; }
bool digit(uint32_t c) { return numeric_type(c) == U_NT_DECIMAL || numeric_type(c) == U_NT_DIGIT; }
bool numeric(uint32_t c) { return numeric_type(c) != U_NT_NONE; }

}  // namespace

bool py_isalpha(std::string_view s) { return all_of(s, alpha); }
bool py_isdecimal(std::string_view s) { return all_of(s, decimal); }
bool py_isdigit(std::string_view s) { return all_of(s, digit); }
bool py_isnumeric(std::string_view s) { return all_of(s, numeric); }
bool py_isalnum(std::string_view s) {
  return all_of(s, [](uint32_t c) { return alpha(c) || numeric(c); });
}
bool py_isspace_str(std::string_view s) { return all_of(s, py_isspace); }
bool py_isidentifier(std::string_view s) {
  // CPython: XID_Start or '_', then XID_Continue (no normalization).
  bool first = true;
  for (uint32_t c : code_points(s)) {
    const auto ch = static_cast<UChar32>(c);
    if (!(first ? c == '_' || u_hasBinaryProperty(ch, UCHAR_XID_START) : u_hasBinaryProperty(ch, UCHAR_XID_CONTINUE)))
      return false;
    first = false;
  }
  return !first;
}
bool py_is_word_char(uint32_t cp) { return cp == '_' || alpha(cp) || numeric(cp); }

namespace {

// The text between Python's whitespace, its decimal digits (any script)
// as ASCII; false when another non-ASCII character is in it. int() and
// float() strip what str.isspace() calls whitespace but U+001C-U+001F
// (`float('7\x1f')` fails).
bool ascii_number_text(std::string_view s, std::string& out) {
  std::vector<uint32_t> cps = code_points(s);
  auto space = [](uint32_t c) { return py_isspace(c) && !(c >= 0x1c && c <= 0x1f); };
  std::size_t b = 0, e = cps.size();
  while (b < e && space(cps[b])) ++b;
  while (e > b && space(cps[e - 1])) --e;
  for (std::size_t k = b; k < e; ++k) {
    const uint32_t c = cps[k];
    if (c < 0x80) out += static_cast<char>(c);
    else if (decimal(c)) out += static_cast<char>('0' + u_charDigitValue(static_cast<UChar32>(c)));
    else return false;
  }
  return !out.empty();
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Digits with single underscores between them (PEP 515), from t[i]; the
// digits are appended to `out`. Returns how many digits.
std::size_t digits(const std::string& t, std::size_t& i, std::string& out) {
  std::size_t n = 0;
  while (i < t.size()) {
    if (is_digit(t[i])) {
      out += t[i++];
      ++n;
    } else if (t[i] == '_' && n && i + 1 < t.size() && is_digit(t[i + 1])) {
      ++i;
    } else {
      break;
    }
  }
  return n;
}

}  // namespace

NumParse py_parse_int(std::string_view s, int64_t& out, int64_t base) {
  std::string t;
  if ((base != 0 && (base < 2 || base > 36)) || !ascii_number_text(s, t)) return NumParse::kInvalid;
  std::size_t i = 0;
  bool neg = false;
  if (t[i] == '+' || t[i] == '-') neg = t[i++] == '-';
  // A prefix that names the base (0x, 0o, 0b: the base itself, or base 0,
  // which takes it from the prefix and is decimal without one).
  const auto prefix = [&](char c) { return i + 1 < t.size() && t[i] == '0' && (t[i + 1] | 0x20) == c; };
  const bool auto_decimal = base == 0 && !prefix('x') && !prefix('o') && !prefix('b');
  for (const auto& [c, b] : {std::pair{'x', 16}, {'o', 8}, {'b', 2}}) {
    if ((base == 0 || base == b) && prefix(c)) {
      base = b;
      i += 2;
      if (i < t.size() && t[i] == '_') ++i;  // PEP 515: one underscore may follow the prefix
    }
  }
  if (auto_decimal) base = 10;
  const auto value = [](char c) {
    const int l = c | 0x20;
    return c >= '0' && c <= '9' ? c - '0' : l >= 'a' && l <= 'z' ? l - 'a' + 10 : 99;
  };
  const std::size_t first = i;
  uint64_t v = 0;
  std::size_t n = 0;
  while (i < t.size()) {  // digits, with single underscores between them
    if (value(t[i]) < base) {
      const auto d = static_cast<uint64_t>(value(t[i++]));
      if (v > (UINT64_MAX - d) / static_cast<uint64_t>(base)) return NumParse::kTooBig;
      v = v * static_cast<uint64_t>(base) + d;
      ++n;
    } else if (t[i] == '_' && n && i + 1 < t.size() && value(t[i + 1]) < base) {
      ++i;
    } else {
      break;
    }
  }
  if (!n || i != t.size()) return NumParse::kInvalid;
  if (auto_decimal && t[first] == '0' && v != 0) return NumParse::kInvalid;  // base 0: no leading zeros
  if (v > static_cast<uint64_t>(INT64_MAX) + (neg ? 1 : 0)) return NumParse::kTooBig;
  out = neg ? static_cast<int64_t>(0 - v) : static_cast<int64_t>(v);
  return NumParse::kOk;
}

bool py_parse_float(std::string_view s, double& out) {
  std::string t, clean;
  if (!ascii_number_text(s, t)) return false;
  std::size_t i = 0;
  if (t[i] == '+' || t[i] == '-') clean += t[i++];
  std::string rest = py_lower(std::string_view(t).substr(i));
  if (rest == "inf" || rest == "infinity" || rest == "nan") {
    out = std::strtod((clean + rest).c_str(), nullptr);
    return true;
  }
  std::size_t whole = digits(t, i, clean), frac = 0;
  if (i < t.size() && t[i] == '.') {
    clean += t[i++];
    frac = digits(t, i, clean);
  }
  if (!whole && !frac) return false;
  if (i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
    clean += t[i++];
    if (i < t.size() && (t[i] == '+' || t[i] == '-')) clean += t[i++];
    if (!digits(t, i, clean)) return false;
  }
  if (i != t.size()) return false;
  out = std::strtod(clean.c_str(), nullptr);
  return true;
}

}  // namespace tokfeed::tmpl
