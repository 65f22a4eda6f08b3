// The hand-written split matcher (text/hf/fast_split.hpp) against PCRE2
// (Regex with RegexEngine::kPcre2), on the Qwen and Llama-3 patterns: every
// golden text, the SFT texts, and random strings built from the chars where
// the regex's alternatives meet (contractions, case folds, newlines, Unicode
// spaces, digits, marks, invalid UTF-8). Matches must be identical.
#include <doctest/doctest.h>
#include <simdjson.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "tokenizer/hf/fast_split.hpp"
#include "tokenizer/hf/regex.hpp"
#include "tokenizer/hf/unicode.hpp"
#include "regex_pair.hpp"

namespace fs = std::filesystem;
using tokfeed::text::hf::append_utf8;
using tokfeed::text::hf::FastSplit;
using tokfeed::text::hf::Regex;

namespace {

const std::string kQwen =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";
const std::string kLlama3 =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";

using tokfeed::text::hf::testing::golden_and_sft_files;
using tokfeed::text::hf::testing::jsonl_texts;
using tokfeed::text::hf::testing::Matches;

struct Pair : tokfeed::text::hf::testing::RegexPair {
  explicit Pair(const std::string& p) : RegexPair(p, tokfeed::text::hf::RegexEngine::kAny, "hand-written") {}
};

// Pieces random strings are made of.
std::vector<std::string> alphabet() {
  std::vector<std::string> a = {"a",   "Z",   "é",    "ſ",   "K",   "'",  "'s", "'S", "'t",    "'re", "'RE",
                                "'rE", "'ve", "'m",   "'ll", "'lL", "'d", "'D", "'x", "'ſ",    " ",   "  ",
                                "\t",  "\n",  "\r\n", "\r",  "\v",  "\f", "0",  "7",  "12345", "(",   ".",
                                ",",   "!",   "$",    "+",   "_",   "-",  "\"", "\\"};
  for (char32_t cp : {0x85u,   0xA0u,   0x1680u, 0x180Eu, 0x2000u, 0x2009u,  0x200Bu,  0x2028u, 0x2029u, 0x202Fu,
                      0x205Fu, 0x3000u, 0xFEFFu, 0x0301u, 0x0308u, 0x093Fu,  0x0660u,  0x00B2u, 0x00BDu, 0x2167u,
                      0x3007u, 0x4E2Du, 0x6587u, 0x3002u, 0xFF0Cu, 0x1F600u, 0x1F468u, 0x200Du, 0xE000u, 0x10FFFFu,
                      0x01C5u, 0x02B0u, 0x0E3Fu, 0x00ADu, 0x0000u, 0x001Fu,  0x007Fu}) {
    std::string s;
    append_utf8(s, cp);
    a.push_back(s);
  }
  // Invalid UTF-8: stray continuation, overlong, surrogate, past U+10FFFF, truncated.
  for (const char* bad :
       {"\x80", "\xBF", "\xC0\x80", "\xC1", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\xE4\xB8", "\xF0\x9F", "\xFF", "\xFE"})
    a.emplace_back(bad);
  return a;
}

}  // namespace

TEST_CASE("fast split: the Qwen and Llama-3 patterns are recognised, others are not") {
  REQUIRE(FastSplit::for_pattern(kQwen) != nullptr);
  CHECK(FastSplit::for_pattern(kQwen)->max_digits() == 1);
  REQUIRE(FastSplit::for_pattern(kLlama3) != nullptr);
  CHECK(FastSplit::for_pattern(kLlama3)->max_digits() == 3);
  CHECK(FastSplit::for_pattern("\\p{N}{1,3}") == nullptr);
  CHECK(FastSplit::for_pattern(kQwen + "|x") == nullptr);
  CHECK(FastSplit::for_pattern("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+"
                               "[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+") != nullptr);
}

TEST_CASE("fast split: small cases, as HF tokenizers 0.23.3 splits them") {
  Regex qwen(kQwen, "qwen"), llama(kLlama3, "llama3");
  auto pieces = [](const Regex& r, std::string_view s) {
    Matches m;
    r.find_all(s, m);
    std::vector<std::string> out;
    for (auto [b, e] : m) out.emplace_back(s.substr(b, e - b));
    return out;
  };
  using V = std::vector<std::string>;
  CHECK(pieces(qwen, "it'ſx") == V{"it", "'ſ", "x"});
  CHECK(pieces(qwen, "IT'LL be") == V{"IT", "'LL", " be"});
  CHECK(pieces(qwen, "x \u3000y") == V{"x", " ", "\u3000y"});
  CHECK(pieces(qwen, "a\u0085b") == V{"a", "\u0085b"});
  CHECK(pieces(qwen, "12345") == V{"1", "2", "3", "4", "5"});
  CHECK(pieces(llama, "12345") == V{"123", "45"});
  CHECK(pieces(qwen, "  word\n\n  x  ") == V{" ", " word", "\n\n", " ", " x", "  "});
  CHECK(pieces(qwen, "f(x) += 1;\r\n") == V{"f", "(x", ")", " +=", " ", "1", ";\r\n"});
}

TEST_CASE("fast split: identical to PCRE2 on the golden and SFT texts") {
  const std::vector<fs::path> files = golden_and_sft_files();
  for (const std::string& pattern : {kQwen, kLlama3}) {
    Pair p(pattern);
    size_t texts = 0;
    for (const auto& f : files) {
      for (const std::string& t : jsonl_texts(f)) {
        ++texts;
        std::string d = p.diff(t);
        if (!d.empty()) FAIL_CHECK(f.filename().string() << ": " << d << " in " << t.substr(0, 120));
      }
    }
    CHECK(texts > 3000);
  }
}

TEST_CASE("fast split: identical to PCRE2 on random strings and random code points") {
  std::mt19937_64 rng(20261203);
  const std::vector<std::string> a = alphabet();
  for (const std::string& pattern : {kQwen, kLlama3}) {
    Pair p(pattern);
    for (int round = 0; round < 40000; ++round) {
      std::string s;
      const int len = int(rng() % 24);
      for (int k = 0; k < len; ++k) {
        const uint64_t r = rng();
        if (r % 8 == 0) {
          // Any code point (surrogates encoded as the invalid bytes they are).
          char32_t cp = char32_t((r >> 8) % 0x110000);
          if (cp >= 0xD800 && cp <= 0xDFFF) s += "\xED\xA0\x80";
          else append_utf8(s, cp);
        } else if (r % 8 == 1) {
          s.push_back(char(r >> 8));  // any byte
        } else {
          s += a[(r >> 8) % a.size()];
        }
      }
      std::string d = p.diff(s);
      if (!d.empty()) {
        std::string hex;
        for (unsigned char c : s) hex += "0123456789abcdef"[c >> 4], hex += "0123456789abcdef"[c & 15], hex += ' ';
        FAIL(d << " in bytes " << hex);
      }
    }
  }
}

TEST_CASE("fast split: identical to PCRE2 on long runs of words, spaces and what ends them") {
  // Mostly ASCII words one space apart (the split's 64-byte mask path),
  // broken by what ends that path: a letter past ASCII, two spaces, a space
  // before a non-letter, punctuation, digits, newlines, contractions.
  std::mt19937_64 rng(20261205);
  const std::vector<std::string> rare = {"\xc3\xa9", "\xc5\xbf", "\xe4\xb8\xad", "  ",   " .",          ".",
                                         ",",        "7",        "\n",           "\r\n", "'s",          "'LL",
                                         "\t",       "\xff",     " 1",           "'",    "\xe2\x80\x83"};
  for (const std::string& pattern : {kQwen, kLlama3}) {
    Pair p(pattern);
    for (int round = 0; round < 20000; ++round) {
      std::string s;
      const int words = 10 + int(rng() % 40);
      for (int k = 0; k < words; ++k) {
        const uint64_t r = rng();
        if (r % 16 == 0) s += rare[(r >> 8) % rare.size()];
        if (r % 3 != 0 || k == 0) s += ' ';
        for (int c = 0, len = 1 + int((r >> 20) % 9); c < len; ++c)
          s.push_back(char((r >> (24 + c)) % 2 ? 'a' + (r >> (30 + c)) % 26 : 'A' + (r >> (33 + c)) % 26));
      }
      std::string d = p.diff(s);
      if (!d.empty()) FAIL(d << " in \"" << s << "\"");
    }
  }
}

TEST_CASE("fast split: every code point alone and after a space, a letter and a newline") {
  for (const std::string& pattern : {kQwen, kLlama3}) {
    Pair p(pattern);
    for (char32_t cp = 0; cp < 0x110000; cp += (cp < 0x31000 ? 1 : 61)) {
      if (cp >= 0xD800 && cp <= 0xDFFF) continue;
      std::string c;
      append_utf8(c, cp);
      for (const std::string& s : {c, " " + c + "a", "a" + c + c, "\n" + c + " ", "'" + c + "1", c + "  x"}) {
        std::string d = p.diff(s);
        if (!d.empty()) FAIL("U+" << std::hex << uint32_t(cp) << ": " << d);
      }
    }
  }
}

TEST_CASE("fast split: the class table gives every code point PCRE2's class, unassigned and private ones included") {
  using namespace tokfeed::text::hf::split_detail;
  // The table leaves out of its PCRE2 scan the code points no class can hold
  // (regex_unicode.hpp): scan all of them here and compare.
  std::vector<uint8_t> want(0x110000, kOther);
  std::string all;
  for (char32_t cp = 0; cp < 0x110000; ++cp)
    if (cp < 0xD800 || cp > 0xDFFF) append_utf8(all, cp);
  std::vector<std::pair<uint32_t, uint32_t>> runs;
  for (const auto& [pattern, cls] : {std::pair{"\\s+", kSpace}, {"\\p{N}+", kNumber}, {"\\p{L}+", kLetter}}) {
    runs.clear();
    Regex(pattern, "test", tokfeed::text::hf::RegexEngine::kPcre2).find_all(all, runs);
    for (auto [b, e] : runs)
      for (size_t i = b; i < e;) {
        const auto d = tokfeed::text::hf::decode_utf8(all, i);
        want[d.cp] = cls;
        i += d.len;
      }
  }
  const ClassTable& t = class_table();
  size_t letters = 0;
  for (char32_t cp = 0; cp < 0x110000; ++cp) {
    const uint8_t expect = cp >= 0xD800 && cp <= 0xDFFF ? uint8_t(kInvalid) : want[cp];
    if (t.get(cp) != expect) FAIL("U+" << std::hex << uint32_t(cp) << ": " << int(t.get(cp)) << " != " << int(expect));
    letters += expect == kLetter;
  }
  CHECK(letters > 130000);  // Unicode 14 has about 131,000 letters (Han alone 92,000)
}

TEST_CASE("fast split: the 64-byte masks agree with the class table and with a byte-at-a-time scan") {
  using namespace tokfeed::text::hf::split_detail;
  const ClassTable& t = class_table();
  // Each ASCII byte's mask is its class in the table (from PCRE2).
  for (int c = 0; c < 128; ++c) {
    const unsigned char b = static_cast<unsigned char>(c);
    const ByteMasks m = classify(&b, 1);
    const uint8_t cls = m.letter ? kLetter : m.digit ? kNumber : m.space ? kSpace : kOther;
    CHECK_MESSAGE(cls == t.ascii(b), "byte " << c);
    CHECK((m.newline != 0) == (c == '\n' || c == '\r'));
    CHECK((m.other != 0) == (cls == kOther));
    CHECK((m.prefix != 0) == (cls == kOther || (cls == kSpace && c != '\n' && c != '\r')));
    CHECK(m.high == 0);
    CHECK((m.apostrophe != 0) == (c == '\''));
    CHECK((m.blank != 0) == (c == ' '));
    CHECK((m.word != 0) == (cls == kLetter));  // a prefix needs a letter after it
  }
  // A prefix starts a word before a letter, but an apostrophe.
  for (const char* w : {" a", ".a", "\ta", "_Z"})
    CHECK(classify(reinterpret_cast<const unsigned char*>(w), 2).word == 3);
  for (const char* w : {"'a", "\na", "7a"}) CHECK(classify(reinterpret_cast<const unsigned char*>(w), 2).word == 2);
  // The vector path against the scan, on random bytes of every length.
  std::mt19937_64 rng(20261206);
  unsigned char buf[64];
  for (int round = 0; round < 20000; ++round) {
    const size_t len = round < 65 ? size_t(round) : size_t(rng() % 65);
    for (auto& b : buf) b = static_cast<unsigned char>(rng() % 4 == 0 ? rng() : "a Z9\n\r\t'.,\x80\xe4"[rng() % 12]);
    const ByteMasks a = classify(buf, len), b = classify_bytes(buf, len);
    REQUIRE(a.letter == b.letter);
    REQUIRE(a.digit == b.digit);
    REQUIRE(a.space == b.space);
    REQUIRE(a.newline == b.newline);
    REQUIRE(a.high == b.high);
    REQUIRE(a.other == b.other);
    REQUIRE(a.prefix == b.prefix);
    REQUIRE(a.apostrophe == b.apostrophe);
    REQUIRE(a.blank == b.blank);
    REQUIRE(a.word == b.word);
  }
}

TEST_CASE("fast split: three-byte letter blocks hold letters only") {
  using namespace tokfeed::text::hf::split_detail;
  const ClassTable& t = class_table();
  size_t blocks = 0;
  for (unsigned lead = 0xE0; lead <= 0xEF; ++lead)
    for (unsigned second = 0x80; second <= 0xBF; ++second) {
      if (!t.letter_block(static_cast<unsigned char>(lead), static_cast<unsigned char>(second))) continue;
      ++blocks;
      const char32_t first = char32_t(lead & 0x0F) << 12 | char32_t(second & 0x3F) << 6;
      for (char32_t cp = first; cp < first + 64; ++cp) REQUIRE(t.get(cp) == kLetter);
    }
  CHECK(blocks > 300);  // CJK ideographs alone fill 20,992 code points: 328 blocks
}

TEST_CASE("fast split: identical to PCRE2 on long random strings across the 64-byte windows") {
  // Runs of each class, long and short, in any order, so that every kind of
  // match starts and ends at every offset of a window, and chars past ASCII
  // (letters, marks, spaces, punctuation, emoji, invalid bytes) stand where
  // the masks hand over to the per-char path.
  std::mt19937_64 rng(20261207);
  const std::vector<std::string> past_ascii = {"\xe4\xb8\xad",
                                               "\xe6\x96\x87",
                                               "\xe3\x80\x82",
                                               "\xef\xbc\x8c",
                                               "\xe3\x80\x80",
                                               "\xc3\xa9",
                                               "\xc5\xbf",
                                               "\xcc\x81",
                                               "\xe0\xa4\xbf",
                                               "\xd9\xa0",
                                               "\xc2\xb2",
                                               "\xc2\x85",
                                               "\xc2\xa0",
                                               "\xe2\x80\x83",
                                               "\xe2\x80\xa8",
                                               "\xf0\x9f\x98\x80",
                                               "\xe2\x80\x8d",
                                               "\xea\xb0\x80",
                                               "\xe3\x81\x82",
                                               "\xe3\x82\x99",
                                               "\xe2\x85\xa7",
                                               "\x80",
                                               "\xff",
                                               "\xe4\xb8",
                                               "\xed\xa0\x80",
                                               "\xc0\xaf",
                                               "\xf4\x90\x80\x80"};
  const std::string ascii_runs[] = {"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
                                    "0123456789",
                                    "          ",
                                    "\n\n\r\n",
                                    "\t\v\f",
                                    ".,;:!?()[]{}<>\"#$%&*+-/=@\\^_`|~",
                                    "''"};
  for (const std::string& pattern : {kQwen, kLlama3}) {
    Pair p(pattern);
    for (int round = 0; round < 6000; ++round) {
      std::string s;
      const size_t target = 40 + rng() % 300;
      while (s.size() < target) {
        const uint64_t r = rng();
        if (r % 7 == 0) {
          for (int k = 0, len = 1 + int(r >> 8) % 12; k < len; ++k) s += past_ascii[rng() % past_ascii.size()];
        } else {
          const std::string& run = ascii_runs[(r >> 8) % 7];
          const size_t len = (r >> 16) % 8 == 0 ? 40 + (r >> 24) % 90 : 1 + (r >> 24) % 9;
          for (size_t k = 0; k < len; ++k) s.push_back(run[rng() % run.size()]);
          if ((r >> 40) % 3 == 0) s.push_back(' ');
        }
      }
      std::string d = p.diff(s);
      if (!d.empty()) {
        std::string hex;
        for (unsigned char c : s) hex += "0123456789abcdef"[c >> 4], hex += "0123456789abcdef"[c & 15], hex += ' ';
        FAIL(d << " in bytes " << hex);
      }
    }
  }
}
