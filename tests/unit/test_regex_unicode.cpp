// The characters PCRE2's tables leave out of each general category
// (regex_unicode.hpp), against a per-character check: PCRE2 asked about every
// assigned code point alone.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <pcre2.h>
#include <utf8proc.h>

#include <set>
#include <string>

#include "tokenizer/hf/regex_unicode.hpp"
#include "tokenizer/hf/unicode.hpp"

using tokfeed::text::hf::pcre2_category_additions;

namespace {

// The code points of a class body "\x{1F6DC}\x{31350}-\x{313A0}...".
std::set<char32_t> parse_ranges(const std::string& body) {
  std::set<char32_t> out;
  size_t i = 0;
  auto hex = [&] {
    REQUIRE(body.compare(i, 3, "\\x{") == 0);
    const size_t close = body.find('}', i);
    const auto v = static_cast<char32_t>(std::stoul(body.substr(i + 3, close - i - 3), nullptr, 16));
    i = close + 1;
    return v;
  };
  while (i < body.size()) {
    const char32_t first = hex();
    char32_t last = first;
    if (i < body.size() && body[i] == '-') ++i, last = hex();
    for (char32_t cp = first; cp <= last; ++cp) out.insert(cp);
  }
  return out;
}

// Each assigned code point that utf8proc gives `cat` and PCRE2 does not, asked one at a time.
std::set<char32_t> missing_one_by_one(const std::string& cat) {
  const std::string p = "^\\p{" + cat + "}";
  int err = 0;
  PCRE2_SIZE off = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(p.data()), p.size(), PCRE2_UTF | PCRE2_UCP, &err, &off, nullptr);
  REQUIRE(code);
  pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
  std::set<char32_t> out;
  std::string utf8;
  for (char32_t cp = 0; cp < 0x110000; ++cp) {
    if (cp == 0xD800) cp = 0xE000;
    if (utf8proc_category_string(static_cast<utf8proc_int32_t>(cp)) != cat) continue;
    utf8.clear();
    tokfeed::text::hf::append_utf8(utf8, cp);
    if (pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(utf8.data()), utf8.size(), 0, 0, md, nullptr) < 0)
      out.insert(cp);
  }
  pcre2_match_data_free(md);
  pcre2_code_free(code);
  return out;
}

}  // namespace

TEST_CASE("regex unicode: the characters PCRE2 leaves out of each category are those it refuses one by one") {
  size_t total = 0;
  for (const char* cat : {"Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No", "Pc", "Pd", "Ps",
                          "Pe", "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf"}) {
    INFO(cat);
    const std::set<char32_t> want = missing_one_by_one(cat);
    CHECK(parse_ranges(pcre2_category_additions(cat)) == want);
    total += want.size();
  }
  // A one-letter category takes those of its two-letter ones.
  const auto letters = parse_ranges(pcre2_category_additions("L"));
  CHECK(letters.size() ==
        parse_ranges(pcre2_category_additions("Lu")).size() + parse_ranges(pcre2_category_additions("Ll")).size() +
            parse_ranges(pcre2_category_additions("Lt")).size() + parse_ranges(pcre2_category_additions("Lm")).size() +
            parse_ranges(pcre2_category_additions("Lo")).size());
  // Where utf8proc's Unicode is newer than PCRE2's there is something to add.
  char buf[32] = {};
  REQUIRE(pcre2_config(PCRE2_CONFIG_UNICODE_VERSION, buf) >= 0);
  if (std::string(buf) != utf8proc_unicode_version()) CHECK(total > 0);
}
