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

Missing find_missing() {
  Missing missing;
  {
    // One compiled \p{Xx} per category; each assigned character is tried
    // against the one its utf8proc category names.
    std::map<std::string_view, pcre2_code*> re;
    for (std::string_view c : kCategories) {
      std::string p = fmt::format("^\\p{{{}}}", c);
      int err = 0;
      PCRE2_SIZE off = 0;
      pcre2_code* code =
          pcre2_compile(reinterpret_cast<PCRE2_SPTR>(p.data()), p.size(), PCRE2_UTF | PCRE2_UCP, &err, &off, nullptr);
      if (code) pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
      re[c] = code;
    }
    pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
    std::string utf8;
    for (char32_t cp = 0; cp < 0x110000; ++cp) {
      if (cp == 0xD800) cp = 0xE000;
      const std::string_view cat = utf8proc_category_string(static_cast<utf8proc_int32_t>(cp));
      if (cat == "Cn" || cat == "Co") continue;  // unassigned or private use in both
      pcre2_code* code = re[cat];
      if (!code) continue;
      utf8.clear();
      append_utf8(utf8, cp);
      if (pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(utf8.data()), utf8.size(), 0, 0, md, nullptr) < 0)
        missing[std::string(cat)].push_back(cp);
    }
    pcre2_match_data_free(md);
    for (auto& [c, code] : re) pcre2_code_free(code);
  }
  return missing;
}

Additions& additions() {
  static Additions a(find_missing());
  return a;
}

}  // namespace

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
