// The NFC quick check (text/hf/nfc_check.hpp): its table against ICU's
// NFC_Quick_Check and combining classes on every code point, the check
// against ICU's own quick check and utf8proc's NFC on random strings that
// cross its 16-byte chunks, and on the golden and SFT texts.
#include <doctest/doctest.h>
#include <simdjson.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <utf8proc.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "tokenizer/hf/nfc_check.hpp"
#include "tokenizer/hf/unicode.hpp"

namespace fs = std::filesystem;
using namespace tokfeed::text::hf;

namespace {

// NFC (utf8proc) leaves s as it is, taking each run of valid UTF-8 between
// invalid bytes on its own, as nfc_append does.
bool utf8proc_keeps(const std::string& s) {
  auto keeps = [](std::string_view run) {
    utf8proc_uint8_t* mapped = nullptr;
    const auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(run.data()), utf8proc_ssize_t(run.size()),
                                &mapped, utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
    const bool same = n >= 0 && std::string_view(reinterpret_cast<const char*>(mapped), size_t(n)) == run;
    std::free(mapped);
    return same;
  };
  size_t run = 0;
  for (size_t i = 0; i < s.size();) {
    const DecodedChar d = decode_utf8(s, i);
    if (d.cp == kInvalidChar) {
      if (!keeps(std::string_view(s).substr(run, i - run))) return false;
      run = i + 1;
    }
    i += d.len;
  }
  return keeps(std::string_view(s).substr(run));
}

// ICU's quick check of valid UTF-8: true for UNORM_YES.
bool icu_yes(const std::string& s) {
  UErrorCode err = U_ZERO_ERROR;
  const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(err);
  REQUIRE(U_SUCCESS(err));
  const UNormalizationCheckResult r = nfc->quickCheck(icu::UnicodeString::fromUTF8(s), err);
  REQUIRE(U_SUCCESS(err));
  return r == UNORM_YES;
}

bool valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const DecodedChar d = decode_utf8(s, i);
    if (d.cp == kInvalidChar) return false;
    i += d.len;
  }
  return true;
}

}  // namespace

TEST_CASE("nfc check: the table is ICU's NFC_Quick_Check and combining class on every code point") {
  const NfcCheckTable& t = nfc_check_table();
  size_t yes = 0, not_yes = 0, marks = 0;
  for (char32_t cp = 0; cp < 0x110000; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    const auto qc = UNormalizationCheckResult(u_getIntPropertyValue(UChar32(cp), UCHAR_NFC_QUICK_CHECK));
    const uint8_t want = qc == UNORM_YES ? uint8_t(u_getCombiningClass(UChar32(cp))) : NfcCheckTable::kNotYes;
    if (t.get(cp) != want)
      FAIL_CHECK("U+" << std::hex << uint32_t(cp) << ": " << int(t.get(cp)) << ", ICU " << int(want));
    (want == NfcCheckTable::kNotYes ? not_yes : yes) += 1;
    marks += want != 0 && want != NfcCheckTable::kNotYes;
  }
  CHECK(not_yes > 1000);  // about 1,100 No and 110 Maybe in Unicode 15
  CHECK(marks > 500);
  // Blocks and lead ranges the fast paths skip hold only Yes starters.
  for (unsigned lead = 0xC2; lead <= 0xDF; ++lead)
    if (t.block2_yes(static_cast<unsigned char>(lead)))
      for (char32_t cp = char32_t(lead & 0x1F) << 6, k = 0; k < 64; ++k) REQUIRE(t.get(cp + k) == 0);
  for (unsigned lead = 0xE0; lead <= 0xEF; ++lead)
    for (unsigned second = 0x80; second <= 0xBF; ++second)
      if (t.block3_yes(static_cast<unsigned char>(lead), static_cast<unsigned char>(second)))
        for (char32_t cp = char32_t(lead & 0x0F) << 12 | char32_t(second & 0x3F) << 6, k = 0; k < 64; ++k)
          REQUIRE(t.get(cp + k) == 0);
  for (int r = 0; r < 2; ++r)
    for (unsigned lead = t.lead_range(r).lo; lead < unsigned(t.lead_range(r).lo + t.lead_range(r).count); ++lead)
      for (unsigned second = 0x80; second <= 0xBF; ++second)
        REQUIRE(t.block3_yes(static_cast<unsigned char>(lead), static_cast<unsigned char>(second)));
  CHECK(t.lead_range(0).count >= 6);  // U+4000-U+9FFF: CJK ideographs
}

TEST_CASE("nfc check: equals ICU's quick check on random strings, and what it passes NFC keeps") {
  // Chars of every kind the check tells apart: ASCII, CJK (whole chunks),
  // Latin precomposed (Yes, decomposable), marks of several classes in and
  // out of order, marks that compose (Maybe), Hangul syllables and jamo,
  // singletons and exclusions (No), chars past the BMP, invalid bytes.
  const char32_t pool[] = {'a',     'Z',     ' ',    '\n',   0x4E2D, 0x6587, 0x9FA5, 0x3002, 0xFF0C,
                           0x3042,  0x30AB,  0x00E9, 0x00C5, 0x0101, 0x1E09, 0x0301, 0x0308, 0x0316,
                           0x0327,  0x0345,  0x05B0, 0x093C, 0x0CD5, 0x3099, 0x309A, 0xAC00, 0xAC01,
                           0x1100,  0x1161,  0x11A8, 0x212B, 0x2126, 0x0958, 0x0F73, 0x0344, 0x1F600,
                           0x1D15E, 0x2F800, 0x0041, 0x0065, 0x0E3F, 0x00A0, 0x2028, 0x0640, 0x06F0};
  std::mt19937_64 rng(20261208);
  size_t passed = 0, rejected = 0;
  for (int round = 0; round < 30000; ++round) {
    std::string s;
    const int len = 1 + int(rng() % 40);
    for (int k = 0; k < len; ++k) {
      const uint64_t r = rng();
      if (r % 5 < 2) {  // runs that fill whole 16-byte chunks
        const char32_t base = r % 5 == 0 ? U'a' + char32_t(r >> 8) % 26 : 0x4E00 + char32_t(r >> 8) % 0x5000;
        for (int c = 0, m = 1 + int(r >> 32) % 12; c < m; ++c) append_utf8(s, base);
      } else if (r % 64 == 7) {
        s.push_back(char(0x80 + (r >> 8) % 0x80));  // a byte of invalid UTF-8
      } else {
        append_utf8(s, pool[(r >> 8) % std::size(pool)]);
      }
    }
    const bool yes = nfc_quick_check(s);
    (yes ? passed : rejected) += 1;
    if (yes && !utf8proc_keeps(s)) FAIL_CHECK("NFC changes a text the quick check passes, round " << round);
    if (valid_utf8(s) && yes != icu_yes(s)) FAIL_CHECK("ICU's quick check differs, round " << round << ": " << s);
  }
  CHECK(passed > 2000);
  CHECK(rejected > 5000);
}

TEST_CASE("nfc check: an overlong three-byte form is invalid bytes, not the char it spells") {
  // E0 8D 80 spells U+0340, which NFC replaces (No); as invalid UTF-8 it is
  // three chars of class 0 that NFC leaves. Alone, and after CJK text that
  // fills the 16-byte chunks; CJK punctuation (U+3002, in a block that is not
  // all Yes) and a combining mark out of order (U+093C after U+0316) for contrast.
  const std::string han = "\xe4\xb8\xad\xe6\x96\x87\xe4\xb8\xad\xe6\x96\x87\xe4\xb8\xad\xe6\x96\x87";
  for (const std::string& s :
       {std::string("\xe0\x8d\x80"), han + "\xe0\x8d\x80" + han, han + "\xe3\x80\x82\xe0\x8d\x80"}) {
    CHECK(nfc_quick_check(s));
    CHECK(utf8proc_keeps(s));
  }
  CHECK(nfc_quick_check(han + "\xe3\x80\x82" + han));
  CHECK_FALSE(nfc_quick_check(han + "\xcc\x96\xe0\xa4\xbc" + han));
  CHECK_FALSE(nfc_quick_check(han + "\xcd\x80" + han));
}

TEST_CASE("nfc check: the golden and SFT texts it passes are their own NFC") {
  std::vector<fs::path> files;
  for (const char* name : {"qwen3", "sp32k"})
    files.push_back(fs::path(TOKFEED_TEST_DATA) / "golden" / (name + std::string(".jsonl")));
  for (const auto& e : fs::directory_iterator(fs::path(TOKFEED_TEST_DATA) / "sft"))
    if (e.path().extension() == ".jsonl") files.push_back(e.path());
  size_t texts = 0, passed = 0;
  simdjson::dom::parser parser;
  for (const auto& f : files) {
    std::ifstream in(f);
    std::string line;
    while (std::getline(in, line)) {
      auto doc = parser.parse(line);
      if (doc.error()) continue;
      std::vector<simdjson::dom::element> stack = {doc.value()};
      while (!stack.empty()) {
        const simdjson::dom::element e = stack.back();
        stack.pop_back();
        if (e.is_string()) {
          const std::string s(std::string_view(e.get_string()));
          ++texts;
          const bool yes = nfc_quick_check(s);
          passed += yes;
          if (yes && !utf8proc_keeps(s)) FAIL_CHECK(f.filename().string() << ": NFC changes " << s.substr(0, 80));
          if (valid_utf8(s) && yes != icu_yes(s)) FAIL_CHECK(f.filename().string() << ": ICU differs on " << s);
        } else if (e.is_array()) {
          for (auto x : e.get_array()) stack.push_back(x);
        } else if (e.is_object()) {
          for (auto kv : e.get_object()) stack.push_back(kv.value);
        }
      }
    }
  }
  CHECK(texts > 3000);
  CHECK(passed > texts * 9 / 10);
}
