// FastSplit::word_ends, the fused tokenizer's split (ASCII windows taken
// from bit masks, the rest match by match), against PCRE2 (Regex with
// RegexEngine::kPcre2) on the Qwen and Llama-3 patterns: the word ends must
// be PCRE2's matches, with the bytes between two matches (invalid UTF-8) as
// words of their own. Texts: random mixes of the chars where the regex's
// alternatives meet, mostly ASCII so that the window path decides most
// boundaries; and the golden and SFT texts, each also mutated at random.
#include <doctest/doctest.h>
#include <simdjson.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tokenizer/hf/fast_split.hpp"
#include "tokenizer/hf/regex.hpp"
#include "tokenizer/hf/unicode.hpp"

namespace fs = std::filesystem;
using tokfeed::text::hf::FastSplit;
using tokfeed::text::hf::Regex;

namespace {

const std::string kQwen =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";
const std::string kLlama3 =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

struct Check {
  std::unique_ptr<FastSplit> fast;
  Regex pcre;
  explicit Check(const std::string& p)
      : fast(FastSplit::for_pattern(p)), pcre(p, "pcre2", tokfeed::text::hf::RegexEngine::kPcre2) {
    REQUIRE(fast != nullptr);
  }
  // Empty when word_ends gives PCRE2's words, else where they first differ.
  std::string diff(std::string_view s) const {
    std::vector<std::pair<uint32_t, uint32_t>> m;
    pcre.find_all(s, m);
    std::vector<uint32_t> want, got;
    uint32_t prev = 0;
    for (auto [b, e] : m) {
      if (prev < b) want.push_back(b);
      want.push_back(e);
      prev = e;
    }
    if (prev < s.size()) want.push_back(uint32_t(s.size()));
    uint32_t ends[FastSplit::kWordBatch];
    for (size_t pos = 0; pos < s.size();) {
      const size_t before = pos, k = fast->word_ends(s, pos, ends);
      if (k == 0 || k > FastSplit::kWordBatch || pos <= before || ends[k - 1] != pos) return "a batch is malformed";
      got.insert(got.end(), ends, ends + k);
    }
    if (got == want) return "";
    size_t i = 0;
    while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
    auto at = [&](const std::vector<uint32_t>& v) { return i < v.size() ? std::to_string(v[i]) : std::string("none"); };
    return "word " + std::to_string(i) + " ends at " + at(got) + ", PCRE2 says " + at(want);
  }
};

std::string hex(std::string_view s) {
  std::string h;
  for (unsigned char c : s) h += "0123456789abcdef"[c >> 4], h += "0123456789abcdef"[c & 15], h += ' ';
  return h;
}

// What the random texts are made of: ASCII of every class, the runs where
// one alternative hands over to another, and chars past ASCII (letters,
// marks, Unicode spaces and digits, punctuation, invalid UTF-8).
const std::vector<std::string>& pieces() {
  static const std::vector<std::string> p = {"a",
                                             "Z",
                                             "word",
                                             "Words",
                                             " ",
                                             "  ",
                                             "   ",
                                             "\t",
                                             "\n",
                                             "\r\n",
                                             "\r",
                                             "\v",
                                             "\f",
                                             "0",
                                             "7",
                                             "42",
                                             "1234",
                                             ".",
                                             ",",
                                             "(",
                                             ")",
                                             "!",
                                             "\"",
                                             "_",
                                             "-",
                                             "'",
                                             "''",
                                             "'s",
                                             "'S",
                                             "'t",
                                             "'re",
                                             "'RE",
                                             "'ve",
                                             "'m",
                                             "'ll",
                                             "'lL",
                                             "'d",
                                             "'x",
                                             "'l",
                                             " .",
                                             " 'd",
                                             "x'",
                                             "\xc3\xa9",
                                             "\xc5\xbf",
                                             "\xe4\xb8\xad",
                                             "\xe3\x80\x82",
                                             "\xc2\xa0",
                                             "\xe2\x80\x83",
                                             "\xc2\x85",
                                             "\xcc\x81",
                                             "\xd9\xa0",
                                             "\xc2\xb2",
                                             "\xf0\x9f\x98\x80",
                                             "\xe2\x80\x9c",
                                             "\x80",
                                             "\xff",
                                             "\xe4\xb8",
                                             "\xed\xa0\x80"};
  return p;
}

}  // namespace

TEST_CASE("split words: the word ends of the window path equal PCRE2's on random texts") {
  std::mt19937_64 rng(20261206);
  const auto& p = pieces();
  const size_t ascii_pieces = 44;  // p[0, 44) are ASCII
  for (const std::string& pattern : {kQwen, kLlama3}) {
    Check c(pattern);
    for (int round = 0; round < 6000; ++round) {
      std::string s;
      // Short texts (ends within a window) and long ones (several batches).
      const size_t target = round % 4 == 0 ? 1 + rng() % 80 : 100 + rng() % 3000;
      const unsigned rare = 1 + unsigned(rng() % 64);  // one piece in `rare` past ASCII
      while (s.size() < target) {
        const uint64_t r = rng();
        if (r % 11 == 0) {
          // A long run of one kind, across window edges.
          const char* kinds[] = {"abcXYZ", "0123456789", " ", " \t", "\n \r", ".,;:!?()", "'"};
          const std::string k = kinds[(r >> 8) % 7];
          for (size_t j = 0, len = 1 + (r >> 16) % 100; j < len; ++j) s.push_back(k[rng() % k.size()]);
        } else {
          s +=
              p[(r >> 8) % rare == 0 ? ascii_pieces + (r >> 20) % (p.size() - ascii_pieces) : (r >> 20) % ascii_pieces];
        }
      }
      const std::string d = c.diff(s);
      if (!d.empty()) FAIL(d << " in bytes " << hex(s));
    }
  }
}

TEST_CASE("split words: the word ends equal PCRE2's on random CJK texts") {
  // Mostly chars of three bytes (Han, kana, Hangul, CJK and fullwidth
  // punctuation, the ideographic space U+3000, a Han char in a block that
  // is not all letters), with what stands between their runs in CJK text:
  // ASCII spaces, newlines and punctuation, runs of spaces, a letter, digits.
  const std::vector<std::string> p = {"\xe4\xb8\xad",
                                      "\xe6\x96\x87",
                                      "\xe9\xbe\x8d",
                                      "\xe3\x81\x82",
                                      "\xe3\x82\xa2",
                                      "\xea\xb0\x80",
                                      "\xed\x95\x9c",
                                      "\xe3\x80\x85",
                                      "\xe3\x80\x82",
                                      "\xef\xbc\x8c",
                                      "\xe3\x80\x81",
                                      "\xef\xbc\x9f",
                                      "\xe2\x80\x9c",
                                      "\xe2\x80\x9d",
                                      "\xe3\x80\x8a",
                                      "\xe3\x80\x80",
                                      "\xe4\xb7\x80",
                                      "\xef\xbc\x91",
                                      "\xe2\x80\x83",
                                      "\xe3\x83\xbc",
                                      "\xc2\xb7",
                                      " ",
                                      "  ",
                                      "    ",
                                      "\n",
                                      "\n\n",
                                      "\r\n",
                                      " \n ",
                                      "\t",
                                      "(",
                                      "\"",
                                      "'",
                                      "-",
                                      ".",
                                      "a",
                                      "Zh",
                                      "7",
                                      "2024",
                                      "\xe2\x80\x94\xe2\x80\x94",
                                      "\xc3\xa9",
                                      "\xff",
                                      "\xe4\xb8"};
  const size_t cjk = 21;  // p[0, 21) are past ASCII and common
  std::mt19937_64 rng(20261208);
  for (const std::string& pattern : {kQwen, kLlama3}) {
    Check c(pattern);
    for (int round = 0; round < 8000; ++round) {
      std::string s;
      const size_t target = round % 4 == 0 ? 1 + rng() % 60 : 100 + rng() % 2000;
      while (s.size() < target) {
        const uint64_t r = rng();
        s += p[r % 3 != 0 ? (r >> 8) % cjk : (r >> 8) % p.size()];
      }
      const std::string d = c.diff(s);
      if (!d.empty()) FAIL(d << " in bytes " << hex(s));
    }
  }
}

TEST_CASE("split words: the word ends equal PCRE2's on the golden and SFT texts, as written and mutated") {
  std::vector<fs::path> files;
  for (const char* name : {"qwen3", "sp32k"})
    files.push_back(fs::path(TOKFEED_TEST_DATA) / "golden" / (name + std::string(".jsonl")));
  for (const auto& e : fs::directory_iterator(fs::path(TOKFEED_TEST_DATA) / "sft"))
    if (e.path().extension() == ".jsonl") files.push_back(e.path());
  std::vector<std::string> texts;
  for (const auto& f : files) {
    std::ifstream in(f);
    simdjson::dom::parser parser;
    std::string line;
    std::function<void(simdjson::dom::element)> leaves = [&](simdjson::dom::element e) {
      if (e.is_string()) texts.emplace_back(std::string_view(e.get_string()));
      else if (e.is_array())
        for (auto x : e.get_array()) leaves(x);
      else if (e.is_object())
        for (auto kv : e.get_object()) leaves(kv.value);
    };
    while (std::getline(in, line))
      if (auto doc = parser.parse(line); !doc.error()) leaves(doc.value());
  }
  REQUIRE(texts.size() > 100);
  std::mt19937_64 rng(20261207);
  const auto& p = pieces();
  for (const std::string& pattern : {kQwen, kLlama3}) {
    Check c(pattern);
    for (const std::string& t : texts) {
      std::string d = c.diff(t);
      if (!d.empty()) FAIL(d << " in " << hex(t));
      // Mutated: pieces put in, bytes taken out, at random places.
      std::string m = t;
      for (int k = 0, edits = 1 + int(rng() % 12); k < edits && !m.empty(); ++k) {
        const size_t at = rng() % m.size();
        if (rng() % 3 == 0) m.erase(at, 1 + rng() % 3);
        else m.insert(at, p[rng() % p.size()]);
      }
      d = c.diff(m);
      if (!d.empty()) FAIL(d << " in " << hex(m));
    }
  }
}
