#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/hf/regex_unicode.hpp"

#include <fmt/format.h>
#include <pcre2.h>
#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <map>
#include <mutex>
#include <vector>

#include "tokenizer/hf/unicode.hpp"

namespace tokfeed::text::hf {

namespace {

constexpr std::array<std::string_view, 30> kCategories = {"Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl",
                                                          "No", "Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "Sm", "Sc",
                                                          "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Co", "Cn"};

std::string squeeze(std::string_view name) {
  std::string out;
  for (char c : name)
    if (c != '_' && c != ' ' && c != '-') out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  return out;
}

// Long names of the categories, squeezed, as Unicode's PropertyValueAliases.
const std::map<std::string, std::string>& aliases() {
  static const std::map<std::string, std::string> m = [] {
    std::map<std::string, std::string> a = {
        {"letter", "L"},
        {"casedletter", "LC"},
        {"l&", "LC"},
        {"uppercaseletter", "Lu"},
        {"lowercaseletter", "Ll"},
        {"titlecaseletter", "Lt"},
        {"modifierletter", "Lm"},
        {"otherletter", "Lo"},
        {"mark", "M"},
        {"combiningmark", "M"},
        {"nonspacingmark", "Mn"},
        {"spacingmark", "Mc"},
        {"enclosingmark", "Me"},
        {"number", "N"},
        {"decimalnumber", "Nd"},
        {"digit", "Nd"},
        {"letternumber", "Nl"},
        {"othernumber", "No"},
        {"punctuation", "P"},
        {"punct", "P"},
        {"connectorpunctuation", "Pc"},
        {"dashpunctuation", "Pd"},
        {"openpunctuation", "Ps"},
        {"closepunctuation", "Pe"},
        {"initialpunctuation", "Pi"},
        {"finalpunctuation", "Pf"},
        {"otherpunctuation", "Po"},
        {"symbol", "S"},
        {"mathsymbol", "Sm"},
        {"currencysymbol", "Sc"},
        {"modifiersymbol", "Sk"},
        {"othersymbol", "So"},
        {"separator", "Z"},
        {"spaceseparator", "Zs"},
        {"lineseparator", "Zl"},
        {"paragraphseparator", "Zp"},
        {"other", "C"},
        {"control", "Cc"},
        {"cntrl", "Cc"},
        {"format", "Cf"},
        {"surrogate", "Cs"},
        {"privateuse", "Co"},
        {"unassigned", "Cn"},
    };
    for (std::string_view c : kCategories) a.emplace(squeeze(c), std::string(c));
    for (const char* major : {"L", "M", "N", "P", "S", "Z", "C"}) a.emplace(squeeze(major), major);
    a.emplace("lc", "LC");
    return a;
  }();
  return m;
}

// Does `category` (one or two letters, or LC) take a character of the
// two-letter category `cat`?
bool takes(const std::string& category, std::string_view cat) {
  if (category == "LC") return cat == "Lu" || cat == "Ll" || cat == "Lt";
  return category.size() == 1 ? cat[0] == category[0] : cat == category;
}

void append_range(std::string& out, char32_t first, char32_t last) {
  out += fmt::format("\\x{{{:X}}}", static_cast<uint32_t>(first));
  if (last != first) out += fmt::format("-\\x{{{:X}}}", static_cast<uint32_t>(last));
}

using Missing = std::map<std::string, std::vector<char32_t>, std::less<>>;

struct Additions {
  explicit Additions(Missing m) : missing(std::move(m)) {}
  // Per two-letter category: the code points utf8proc gives it and PCRE2 does not.
  Missing missing;
  std::map<std::string, std::string> classes;  // per asked category, built on demand
  std::mutex mu;
};

// The Unicode version "15.0.0" as (15, 0, 0); missing parts are 0.
std::array<int, 3> version_of(std::string_view v) {
  std::array<int, 3> out{};
  std::size_t part = 0;
  for (char c : v) {
    if (c == '.') {
      if (++part == out.size()) break;
    } else if (c >= '0' && c <= '9') {
      out[part] = out[part] * 10 + (c - '0');
    }
  }
  return out;
}

Missing find_missing() {
  // Each category's assigned characters (utf8proc's) as one UTF-8 text, in
  // code point order; \P{Xx} over it finds those PCRE2 gives another category.
  // By utf8proc's category number (UTF8PROC_CATEGORY_LU = 1 ... CO = 29,
  // kCategories' order; 0 is Cn).
  std::array<std::string, kCategories.size()> texts;
  for (char32_t cp = 0; cp < 0x110000; ++cp) {
    if (cp == 0xD800) cp = 0xE000;
    const int c = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
    if (c <= UTF8PROC_CATEGORY_CN || c >= UTF8PROC_CATEGORY_CO) continue;  // unassigned or private use in both
    append_utf8(texts[std::size_t(c - 1)], cp);
  }
  static_assert(UTF8PROC_CATEGORY_LU == 1 && UTF8PROC_CATEGORY_CO == 29 && UTF8PROC_CATEGORY_ZS == 23);
  Missing missing;
  pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
  for (std::size_t i = 0; i < texts.size(); ++i) {
    const std::string_view cat = kCategories[i];
    const std::string& text = texts[i];
    if (text.empty()) continue;
    const std::string p = fmt::format("\\P{{{}}}", cat);
    int err = 0;
    PCRE2_SIZE off = 0;
    pcre2_code* code =
        pcre2_compile(reinterpret_cast<PCRE2_SPTR>(p.data()), p.size(), PCRE2_UTF | PCRE2_UCP, &err, &off, nullptr);
    if (!code) continue;
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    for (PCRE2_SIZE at = 0;
         at < text.size() && pcre2_match(code, subject, text.size(), at, PCRE2_NO_UTF_CHECK, md, nullptr) > 0;) {
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      const DecodedChar d = decode_utf8(text, ov[0]);
      missing[std::string(cat)].push_back(d.cp);
      at = ov[0] + d.len;
    }
    pcre2_code_free(code);
  }
  pcre2_match_data_free(md);
  return missing;
}

Additions& additions() {
  static Additions a(find_missing());
  return a;
}

}  // namespace

bool utf8proc_covers_pcre2() {
  static const bool covers = [] {
    char buf[32] = {};
    if (pcre2_config(PCRE2_CONFIG_UNICODE_VERSION, buf) < 0) return false;
    return version_of(buf) <= version_of(utf8proc_unicode_version());
  }();
  return covers;
}

std::optional<std::string> general_category(std::string_view name) {
  const auto& a = aliases();
  auto it = a.find(squeeze(name));
  if (it == a.end()) return std::nullopt;
  return it->second;
}

const std::string& pcre2_category_additions(const std::string& category) {
  Additions& a = additions();
  std::lock_guard lock(a.mu);
  auto [it, fresh] = a.classes.try_emplace(category);
  if (!fresh) return it->second;
  std::vector<char32_t> cps;
  for (const auto& [cat, list] : a.missing)
    if (takes(category, cat)) cps.insert(cps.end(), list.begin(), list.end());
  std::sort(cps.begin(), cps.end());
  for (std::size_t i = 0; i < cps.size();) {
    std::size_t j = i;
    while (j + 1 < cps.size() && cps[j + 1] == cps[j] + 1) ++j;
    append_range(it->second, cps[i], cps[j]);
    i = j + 1;
  }
  return it->second;
}

}  // namespace tokfeed::text::hf
