// The general split matcher (text/hf/general_split.hpp), by its automaton
// and by backtracking alone, against PCRE2 (Regex with
// RegexEngine::kPcre2): the split patterns of every tokenizer
// in the shared directory, tekken's, o200k's, GPT-2's, Qwen's and Llama-3's
// (the general matcher, not the hand-written one), hand-made patterns that
// need backtracking into quantifiers and groups, lookaheads and anchors, and
// mutations of all of them (quantifiers changed, classes swapped); on the
// golden and SFT texts and on random strings made of the chars where the
// classes meet. Matches must be identical.
#include <doctest/doctest.h>
#include <simdjson.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "tokenizer/hf/general_split.hpp"
#include "tokenizer/hf_tokenizer.hpp"
#include "tokenizer/hf/regex.hpp"
#include "tokenizer/hf/unicode.hpp"
#include "regex_pair.hpp"

namespace fs = std::filesystem;
using tokfeed::text::hf::append_utf8;
using tokfeed::text::hf::GeneralSplit;
using tokfeed::text::hf::Regex;
using tokfeed::text::hf::RegexEngine;
using tokfeed::text::hf::RunSplits;

namespace {

using tokfeed::text::hf::testing::golden_and_sft_files;
using tokfeed::text::hf::testing::jsonl_texts;
using tokfeed::text::hf::testing::Matches;

const std::string kGpt2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
const std::string kTekken =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|[^\\r\\n\\p{L}\\p{N}]?["
    "\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";
const std::string kO200k =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|"
    "'d)?|"
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|"
    "'d)?|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const std::string kLlama3 =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";
const std::string kDeepSeek =
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "
    "?[\\p{P}\\p{S}]+[\r\n]*|"
    "\\s*[\r\n]+|\\s+(?!\\S)|\\s+";

// Patterns made for the matcher's corners: backtracking into a run that
// the next atom overlaps, into a group's alternatives, bounded repeats,
// lookaheads of several chars, anchors, caseless literals, `.`, escapes.
const std::vector<std::string> kCorners = {
    "\\p{L}*\\p{Ll}\\p{L}|\\s+$|\\S",
    "(?:ab|a)(?:bc|c)?d?|.",
    "[a-z]{2,4}(?=\\d)|\\d{2}|\\p{N}|\\p{L}|\\s",
    "^\\s+|\\s+$|\\s|\\S+",
    "(?i:straße|kelvin|s)+?|x",  // lazy: declined
    "(?i:straße|kelvin|s|k)|[^\\s]+|\\s+(?!\\S|$)|\\s",
    "\\w+|\\W",
    "\\d+(?:\\.\\d+)?|[^\\d\\s]+|\\s+",
    "(?!\\p{Lu})\\p{L}+|\\p{Lu}|.|\\n",
    "\\p{Lu}?\\p{Ll}+(?=\\s|$)|[\\p{L}\\p{M}]+|\\p{P}+|\\s*\\n+|\\s+(?=\\s)|\\s+|.",
    "[\\x{4e00}-\\x{9fa5}]+|[\\x41-\\x5A]{1,2}|\\h+|\\v+|[^\\h\\v]",
    "(a|b|ab)(c|bcd)(d*)|.",
    "[[:alpha:]]+|[[:^alpha:]]",
    "\\t|\\.|\\-+|\\\\|/|\\x{20}+|[^\\t.\\\\/ -]+",
    // For the automaton: states that are long lists of paths, one-char
    // lookaheads behind runs that overlap, a match that must stop the paths
    // after it in the same group (an empty first alternative).
    "[ab]*a[ab]{3}|[^ab]+|.",
    "a(?:|bc)d?|[\\p{L}\\s](?:|\\p{L}+)|.",
    "(?:\\p{Ll}|\\p{L}\\p{M})\\p{L}*\\p{M}?(?=\\s)|\\p{L}+(?!\\p{Lu})|\\s+(?!\\S)|(?i:ss|s)|.",
};

// Mutations: each rewrite of one spot of the pattern.
std::vector<std::string> mutations(const std::string& p) {
  std::vector<std::string> out;
  auto each = [&](const std::string& from, const std::string& to) {
    for (size_t at = p.find(from); at != std::string::npos; at = p.find(from, at + 1)) {
      if (at > 0 && p[at - 1] == '\\') continue;
      out.push_back(p.substr(0, at) + to + p.substr(at + from.size()));
    }
  };
  each("+", "*");
  each("*", "+");
  each("?", "*");
  each("+", "{2,}");
  each("*", "{0,2}");
  each("{1,3}", "{2,3}");
  each("{1,3}", "+");
  each("\\p{L}", "\\p{N}");
  each("\\p{N}", "\\p{L}");
  each("\\p{Lu}", "\\p{Ll}");
  each("\\p{Ll}", "\\p{Lu}");
  each("\\s", "\\S");
  each("(?!\\S)", "(?=\\S)");
  each("(?!\\S)", "$");
  each("(?i:", "(?:");
  each("[\\r\\n]", "[\\r\\n\\p{Zs}]");
  return out;
}

struct Pair : tokfeed::text::hf::testing::RegexPair {
  // kGeneral: the automaton where the pattern allows; kGeneralBacktracking: backtracking alone.
  Pair(const std::string& p, RegexEngine engine)
      : RegexPair(p, engine, engine == RegexEngine::kGeneral ? "matcher" : "backtracking matcher") {}

  // The matches as find_all gives them, and the pieces' ends as split_ends
  // gives them (after ends already in the list) against those of PCRE2's matches.
  std::string diff(std::string_view s) const {
    if (std::string d = RegexPair::diff(s); !d.empty()) return d;
    const GeneralSplit* g = matcher.general();
    if (g == nullptr) return "";
    Matches m;
    pcre.find_all(s, m);
    std::vector<uint32_t> want = {7};
    uint32_t prev = 0;
    for (auto [b, e] : m) {
      if (prev < b) want.push_back(100 + b);
      want.push_back(100 + e);
      prev = e;
    }
    if (prev < s.size()) want.push_back(100 + uint32_t(s.size()));
    tokfeed::text::hf::EndList got;
    got.push_back(7);
    g->split_ends(s, 100, got);
    if (std::vector<uint32_t>(got.data(), got.data() + got.size()) == want) return "";
    return "split_ends: " + std::to_string(got.size()) + " ends, from PCRE2's matches " + std::to_string(want.size());
  }
};

constexpr RegexEngine kBothMethods[] = {RegexEngine::kGeneral, RegexEngine::kGeneralBacktracking};

bool by_automaton(const Regex& r) { return r.path().find(", automaton of ") != std::string::npos; }

std::string hex(std::string_view s) {
  std::string h;
  for (unsigned char c : s) h += "0123456789abcdef"[c >> 4], h += "0123456789abcdef"[c & 15], h += ' ';
  return h;
}

// The Split patterns of every tokenizer.json in the shared directory.
std::vector<std::string> shared_split_patterns() {
  std::vector<std::string> out;
  const fs::path dir = fs::path(TOKFEED_SHARED_DIR) / "tokenizers";
  if (!fs::exists(dir)) return out;
  simdjson::dom::parser parser;
  for (const auto& e : fs::directory_iterator(dir)) {
    const fs::path json = e.path() / "tokenizer.json";
    if (!fs::exists(json)) continue;
    simdjson::dom::element doc;
    if (parser.load(json.string()).get(doc)) continue;
    std::function<void(simdjson::dom::element)> walk = [&](simdjson::dom::element x) {
      if (x.is_object()) {
        std::string_view type, regex;
        if (!x["type"].get(type) && type == "Split" && !x["pattern"]["Regex"].get(regex)) out.emplace_back(regex);
        for (auto kv : x.get_object())
          if (kv.key != "model" && kv.key != "added_tokens") walk(kv.value);
      } else if (x.is_array()) {
        for (auto y : x.get_array()) walk(y);
      }
    };
    walk(doc["pre_tokenizer"]);
  }
  return out;
}

std::vector<std::string> main_patterns() {
  std::vector<std::string> p = {kGpt2, kTekken, kO200k, kLlama3, kDeepSeek};
  for (const std::string& s : shared_split_patterns()) p.push_back(s);
  std::set<std::string> seen;
  std::vector<std::string> out;
  for (const std::string& s : p)
    if (seen.insert(s).second) out.push_back(s);
  return out;
}

// Pieces random strings are made of: letters of each case (Lu, Ll, Lt, Lm,
// Lo), marks, digits of several kinds, every kind of space, CR and LF,
// punctuation and symbols, CJK and kana, contractions with the chars that
// fold to their letters (ſ, K, İ), invalid UTF-8.
std::vector<std::string> alphabet() {
  std::vector<std::string> a = {"a",    "Z",    "k",  "K",   "s",   "S",  "x",   "'",  "'s", "'S",    "'t",  "'re",
                                "'RE",  "'ve",  "'m", "'ll", "'lL", "'d", "'D",  "'x", " ",  "  ",    "\t",  "\n",
                                "\r\n", "\r",   "\v", "\f",  "0",   "7",  "123", "(",  ".",  ",",     "!",   "$",
                                "+",    "_",    "-",  "\"",  "\\",  "/",  "/\n", "#",  "@",  "ab",    "abc", "bcd",
                                "d",    "Kelv", "ss", "ß",   "İ",   "ı",  "é",   "É",  "ſ",  "straß", "\n ", " \n"};
  for (char32_t cp : {0x85u,   0xA0u,    0x1680u,  0x180Eu, 0x2000u, 0x2009u,   0x200Bu, 0x2028u, 0x2029u, 0x202Fu,
                      0x205Fu, 0x3000u,  0xFEFFu,  0x0301u, 0x0308u, 0x093Fu,   0x0660u, 0x00B2u, 0x00BDu, 0x2167u,
                      0x3007u, 0x4E00u,  0x4E2Du,  0x9FA5u, 0x9FA6u, 0x3040u,   0x3042u, 0x30A2u, 0x30FFu, 0x3002u,
                      0xFF0Cu, 0x1F600u, 0x1F468u, 0x200Du, 0xE000u, 0x10FFFFu, 0x01C5u, 0x02B0u, 0x0E3Fu, 0x00ADu,
                      0x0000u, 0x001Fu,  0x007Fu,  0x212Au, 0x017Fu, 0x0130u,   0x1E9Eu, 0x03A3u, 0x03C2u, 0x0391u}) {
    std::string s;
    append_utf8(s, cp);
    a.push_back(s);
  }
  for (const char* bad :
       {"\x80", "\xBF", "\xC0\x80", "\xC1", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\xE4\xB8", "\xF0\x9F", "\xFF", "\xFE"})
    a.emplace_back(bad);
  return a;
}

std::string random_string(std::mt19937_64& rng, const std::vector<std::string>& a, int max_pieces) {
  std::string s;
  const int len = int(rng() % uint64_t(max_pieces));
  for (int k = 0; k < len; ++k) {
    const uint64_t r = rng();
    if (r % 10 == 0) {
      const char32_t cp = char32_t((r >> 8) % 0x110000);
      if (cp >= 0xD800 && cp <= 0xDFFF) s += "\xED\xA0\x80";
      else append_utf8(s, cp);
    } else if (r % 10 == 1) {
      s.push_back(char(r >> 8));
    } else {
      s += a[(r >> 8) % a.size()];
    }
  }
  return s;
}

// Random strings on `p`; the first difference, or "".
std::string random_diff(const Pair& p, uint64_t seed, int rounds) {
  std::mt19937_64 rng(seed);
  static const std::vector<std::string> a = alphabet();
  for (int round = 0; round < rounds; ++round) {
    const std::string s = random_string(rng, a, round % 4 == 0 ? 64 : 16);
    if (std::string d = p.diff(s); !d.empty()) return d + " in bytes " + hex(s);
  }
  return "";
}

}  // namespace

TEST_CASE("general split: takes the split patterns of today's tokenizers, declines what it cannot match") {
  for (const std::string& p : main_patterns()) {
    Regex r(p, "t", RegexEngine::kGeneral);
    CAPTURE(p);
    CAPTURE(r.path());
    CHECK(r.general() != nullptr);
    CHECK(by_automaton(r));
    Regex b(p, "t", RegexEngine::kGeneralBacktracking);
    CHECK(b.path().find(", backtracking (asked for)") != std::string::npos);
  }
  // Taken, but matched by backtracking: what the automaton does not do.
  const std::pair<const char*, const char*> backtracking[] = {
      {"\\s+(?!\\S|$)|\\s", "backtracking (a lookahead of more than one char)"},
      {"[a-z]+(?=\\d\\d)|.", "backtracking (a lookahead of more than one char)"},
      {"^\\s+|\\S+|\\s", "backtracking (anchors)"},
      {"\\s+$|\\S+|\\s", "backtracking (anchors)"},
      {"a{1,5000}|.", "backtracking (more than 4096 nodes)"},
      {"[ab]*a[ab]{12}|.", "backtracking (an automaton of more than 1024 states)"},
  };
  for (auto [p, why] : backtracking) {
    CAPTURE(p);
    Regex r(p, "t");
    CAPTURE(r.path());
    CHECK(r.general() != nullptr);
    CHECK(r.path().find(why) != std::string::npos);
  }
  // Declined, with the reason in the path.
  const std::pair<const char*, const char*> declined[] = {
      {"\\p{L}+?", "lazy or possessive quantifier"},
      {"\\p{L}++", "lazy or possessive quantifier"},
      {"(?<=a)b", "group '(?<='"},
      {"(a)\\1", "escape \\1"},
      {"\\bfoo", "escape \\b"},
      {"(?:ab)+", "repeated group"},
      {"a|\\s*", "can match the empty string"},
      {"(?i)abc", "group '(?i)'"},
  };
  for (auto [p, why] : declined) {
    CAPTURE(p);
    Regex r(p, "t");
    CAPTURE(r.path());
    CHECK(r.general() == nullptr);
    CHECK(r.path().find(why) != std::string::npos);
    CHECK(r.path().rfind("PCRE2", 0) == 0);
  }
  CHECK(Regex(kTekken, "t").path() ==
        "matcher (7 branches, 10 atoms, automaton of 23 states, ASCII three bytes a step (8 classes))");
  // o200k's case-folded contractions make 25 ASCII classes: too many for a
  // table of three bytes a step, two it is.
  const std::string o200k = Regex(kO200k, "t").path();
  CHECK(o200k.find(", ASCII a pair of bytes a step (25 classes))") != std::string::npos);
  CHECK(Regex(kLlama3, "t").path() == "hand-written");
}

TEST_CASE("general split: small cases, as HF tokenizers splits them") {
  auto pieces = [](const std::string& pattern, std::string_view s) {
    Regex r(pattern, "t");
    REQUIRE(r.general() != nullptr);
    Matches m;
    r.find_all(s, m);
    std::vector<std::string> out;
    for (auto [b, e] : m) out.emplace_back(s.substr(b, e - b));
    return out;
  };
  using V = std::vector<std::string>;
  CHECK(pieces(kTekken, "HTTPServer isOK") == V{"HTTPServer", " is", "OK"});
  CHECK(pieces(kO200k, "THEY'RE won't") == V{"THEY'RE", " won't"});
  CHECK(pieces(kO200k, "12345") == V{"123", "45"});
  CHECK(pieces(kGpt2, "  it's\n\n x") == V{" ", " it", "'s", "\n\n", " x"});
  CHECK(pieces(kDeepSeek, "a.b,Cd 12") == V{"a", ".b", ",Cd", " "});
  CHECK(pieces("\\p{N}{1,3}", "12345") == V{"123", "45"});
  CHECK(pieces(kTekken, "a/\n/b") == V{"a", "/\n/", "b"});
  // The char that ends a match starts the next one, which goes on past it
  // (the automaton steps it once, from the state it ends, into the start
  // state's next): ASCII and not.
  CHECK(pieces(kTekken, "ab cd,ef  gh\n\nij") == V{"ab", " cd", ",ef", " ", " gh", "\n\n", "ij"});
  CHECK(pieces(kTekken, "ab\u00A0cd\u00E9f\u3000\u4E2D\u6587") == V{"ab", "\u00A0cd\u00E9f", "\u3000\u4E2D\u6587"});
  CHECK(pieces(kGpt2, "it's 12ab") == V{"it", "'s", " 12", "ab"});
}

TEST_CASE("general split: identical to PCRE2 on the golden and SFT texts") {
  const std::vector<fs::path> files = golden_and_sft_files();
  std::vector<std::string> texts;
  for (const auto& f : files)
    for (std::string& t : jsonl_texts(f)) texts.push_back(std::move(t));
  CHECK(texts.size() > 3000);
  for (const std::string& pattern : main_patterns())
    for (RegexEngine engine : kBothMethods) {
      Pair p(pattern, engine);
      REQUIRE(p.matcher.general() != nullptr);
      for (const std::string& t : texts)
        if (std::string d = p.diff(t); !d.empty()) FAIL_CHECK(pattern << ": " << d << " in " << t.substr(0, 120));
    }
}

TEST_CASE("general split: identical to PCRE2 on random strings, for the patterns, corner cases and mutations") {
  size_t general = 0, automaton = 0, declined = 0;
  uint64_t seed = 20261206;
  for (const std::string& pattern : main_patterns())
    for (RegexEngine engine : kBothMethods) {
      Pair p(pattern, engine);
      CAPTURE(pattern);
      CAPTURE(p.matcher.path());
      CHECK(random_diff(p, ++seed, 30000) == "");
    }
  std::vector<std::string> variants = kCorners;
  for (const std::string& p : main_patterns())
    for (std::string& m : mutations(p)) variants.push_back(std::move(m));
  for (const std::string& c : kCorners)
    for (std::string& m : mutations(c)) variants.push_back(std::move(m));
  for (const std::string& pattern : variants)
    for (RegexEngine engine : kBothMethods) {
      std::unique_ptr<Pair> made;
      try {
        made = std::make_unique<Pair>(pattern, engine);
      } catch (const std::exception&) {
        continue;  // a mutation PCRE2 does not compile
      }
      const Pair& p = *made;
      CAPTURE(pattern);
      CAPTURE(p.matcher.path());
      if (p.matcher.general() == nullptr) {
        declined += engine == RegexEngine::kGeneral;
        continue;
      }
      if (engine == RegexEngine::kGeneral) {
        ++general;
        automaton += by_automaton(p.matcher);
      }
      CHECK(random_diff(p, ++seed, 3000) == "");
    }
  MESSAGE(general << " variants matched by the general matcher (" << automaton << " by its automaton), " << declined
                  << " declined");
  CHECK(general > 150);
  CHECK(automaton > 150);
  CHECK(automaton < general);  // both methods are held to PCRE2 on patterns of their own
}

namespace {

// The ends of the pieces Isolated splits by `rs` cut `s` into, split after split (PCRE2).
void ends_split_by_split(const std::vector<std::unique_ptr<Regex>>& rs, size_t level, std::string_view s, uint32_t base,
                         std::vector<uint32_t>& out) {
  if (level == rs.size()) {
    out.push_back(base + uint32_t(s.size()));
    return;
  }
  Matches m;
  rs[level]->find_all(s, m);
  uint32_t prev = 0;
  for (auto [b, e] : m) {
    if (prev < b) ends_split_by_split(rs, level + 1, s.substr(prev, b - prev), base + prev, out);
    if (b < e) ends_split_by_split(rs, level + 1, s.substr(b, e - b), base + b, out);
    prev = e;
  }
  if (prev < s.size()) ends_split_by_split(rs, level + 1, s.substr(prev), base + prev, out);
}

}  // namespace

TEST_CASE("general split: the splits before the last in one pass, as split after split") {
  struct Case {
    std::vector<std::string> before;
    std::string last;
    std::vector<bool> whole;  // empty: RunSplits declines
  };
  const std::string cjk = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+";
  const std::vector<Case> cases = {
      // DeepSeek-V3's: its digit runs are words as they are, its CJK runs
      // are split again where they hold punctuation or a symbol (U+30FB,
      // U+309B).
      {{"\\p{N}{1,3}", cjk}, kDeepSeek, {true, false}},
      // Each run is one match of GPT-2's ` ?\p{L}+` or ` ?\p{N}+`.
      {{"[a-c]{1,2}", "\\p{N}+", "[x-z\u4e00]{1,3}"}, kGpt2, {true, true, true}},
      // `\s+(?!\S)` leaves the last space for a word after it.
      {{"\\s{1,2}"}, kTekken, {false}},
      // One match of ` ?[\p{P}\p{S}]+[\r\n]*`.
      {{"[0-9]{1,3}", "[()]+"}, kDeepSeek, {true, true}},
      {{"\\p{N}+", "[0-5x]+"}, kDeepSeek, {}},  // the atoms share chars
      {{"[acegi]+"}, kDeepSeek, {}},            // ASCII in five ranges
      {{"\\p{N}{2,3}"}, kDeepSeek, {}},         // runs of two at least
      {{"\\p{N}|a"}, kDeepSeek, {}},            // two branches
  };
  std::vector<std::string> a = alphabet();
  for (const char* more :
       {"1234567", "\u4e00\u4e8c\u30a2\u30fb\u30fc", "\u309b\u3042", "\uff12\u2160", "12 34", "abcab", "xyzzy",
        "\u4e00\u4e00\u4e00\u4e00", "(((", "\t\t\t ", "\u3099\u4e00", "\u30a0", "\u309c\u3099", "\u3097"})
    a.emplace_back(more);
  std::mt19937_64 rng(20261207);
  for (const Case& c : cases) {
    CAPTURE(c.last);
    std::vector<std::unique_ptr<Regex>> pcre2, general;
    std::vector<const GeneralSplit*> before;
    for (const std::string& p : c.before) {
      CAPTURE(p);
      pcre2.push_back(std::make_unique<Regex>(p, "t", RegexEngine::kPcre2));
      general.push_back(std::make_unique<Regex>(p, "t"));
      REQUIRE(general.back()->general() != nullptr);
      before.push_back(general.back()->general());
    }
    pcre2.push_back(std::make_unique<Regex>(c.last, "t", RegexEngine::kPcre2));
    const Regex last(c.last, "t");
    REQUIRE(last.general() != nullptr);
    const std::unique_ptr<RunSplits> runs = RunSplits::build(before, *last.general());
    if (c.whole.empty()) {
      CHECK(runs == nullptr);
      continue;
    }
    REQUIRE(runs != nullptr);
    for (size_t l = 0; l < c.whole.size(); ++l) CHECK(runs->whole(l) == c.whole[l]);
    size_t bad = 0, whole_pieces = 0, cut_whole = 0;
    for (int round = 0; round < 20000; ++round) {
      const std::string s = random_string(rng, a, round % 4 == 0 ? 64 : 16);
      std::vector<uint32_t> want;
      ends_split_by_split(pcre2, 0, s, 0, want);
      tokfeed::text::hf::EndList ends;
      runs->pieces(s, [&](size_t b, size_t e, bool whole) {
        const std::string_view piece = std::string_view(s).substr(b, e - b);
        if (!whole) {
          last.general()->split_ends(piece, uint32_t(b), ends);
          return;
        }
        ends.push_back(uint32_t(e));
        // The last split on its own leaves a piece said to be whole whole.
        ++whole_pieces;
        tokfeed::text::hf::EndList alone;
        last.general()->split_ends(piece, 0, alone);
        if (alone.size() != 1 && cut_whole++ < 3) FAIL_CHECK("said whole, but split: " << hex(std::string(piece)));
      });
      const std::vector<uint32_t> got(ends.data(), ends.data() + ends.size());
      if (got != want && bad++ < 3) FAIL_CHECK("differs in bytes " << hex(s));
    }
    CHECK(bad == 0);
    CHECK(cut_whole == 0);
    CHECK(whole_pieces > 0);
  }
}

TEST_CASE("general split: runs the last split leaves whole are words as they are, by their chars (DeepSeek-V3)") {
  const Regex digits("\\p{N}{1,3}", "t"), cjk("[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+", "t"), last(kDeepSeek, "t");
  REQUIRE(digits.general() != nullptr);
  REQUIRE(cjk.general() != nullptr);
  REQUIRE(last.general() != nullptr);
  const std::unique_ptr<RunSplits> runs = RunSplits::build({digits.general(), cjk.general()}, *last.general());
  REQUIRE(runs != nullptr);
  CHECK(runs->whole(0));
  CHECK_FALSE(runs->whole(1));  // U+30FB, U+309B among its chars
  // Letters (Han, kana, U+30FC a modifier letter) and marks (U+3099): one
  // match of `[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+` however they follow each other.
  for (char32_t cp : {0x4E00u, 0x4E2Du, 0x9FA5u, 0x3042u, 0x309Fu, 0x30A2u, 0x30FCu, 0x30FFu, 0x3099u, 0x37u}) {
    CAPTURE(uint32_t(cp));
    CHECK(runs->kept_whole(cp));
  }
  // Punctuation, symbols and unassigned code points end or start a match.
  for (char32_t cp : {0x30FBu, 0x309Bu, 0x309Cu, 0x30A0u, 0x3040u, 0x3097u}) {
    CAPTURE(uint32_t(cp));
    CHECK_FALSE(runs->kept_whole(cp));
  }
  struct Piece {
    uint32_t begin, end;
    bool whole;
    bool operator==(const Piece& o) const { return begin == o.begin && end == o.end && whole == o.whole; }
  };
  auto pieces = [&](std::string_view s) {
    std::vector<Piece> out;
    runs->pieces(s, [&](size_t b, size_t e, bool whole) { out.push_back({uint32_t(b), uint32_t(e), whole}); });
    return out;
  };
  // 中文ー字あ゙: one run, whole; 中・文: one run the last split cuts.
  CHECK(pieces("\u4e2d\u6587\u30fc\u5b57\u3042\u3099") == std::vector<Piece>{{0, 18, true}});
  CHECK(pieces("\u4e2d\u30fb\u6587") == std::vector<Piece>{{0, 9, false}});
  // A stretch of one char is whole; of two, split by the last split.
  CHECK(pieces("\u4e2d\uff0c\u6587") == std::vector<Piece>{{0, 3, true}, {3, 6, true}, {6, 9, true}});
  CHECK(pieces("\u4e2d\u3002\n\u6587") == std::vector<Piece>{{0, 3, true}, {3, 7, false}, {7, 10, true}});
  CHECK(pieces("a\u00e9\u4e2d") == std::vector<Piece>{{0, 3, false}, {3, 6, true}});
  CHECK(pieces("\u00e9\u4e2d") == std::vector<Piece>{{0, 2, true}, {2, 5, true}});
  // Digits cut every three; a byte of invalid UTF-8 alone is whole, two are not.
  CHECK(pieces("12345\u4e2d") == std::vector<Piece>{{0, 3, true}, {3, 5, true}, {5, 8, true}});
  CHECK(pieces("\u4e2d\xff") == std::vector<Piece>{{0, 3, true}, {3, 4, true}});
  CHECK(pieces("\u4e2d\xe4\xb8") == std::vector<Piece>{{0, 3, true}, {3, 5, false}});
  CHECK(pieces("\u4e2d\xe0\x80\x80") == std::vector<Piece>{{0, 3, true}, {3, 6, false}});
}

TEST_CASE("general split: the load log names each split's path") {
  const fs::path deepseek = fs::path(TOKFEED_SHARED_DIR) / "tokenizers" / "deepseek_v3" / "tokenizer.json";
  const fs::path qwen = fs::path(TOKFEED_SHARED_DIR) / "tokenizers" / "qwen3" / "tokenizer.json";
  if (!fs::exists(deepseek) || !fs::exists(qwen)) return;
  const std::string e = tokfeed::text::load_hf_tokenizer(deepseek.string())->engine();
  MESSAGE(e);
  CHECK(e.find("; Split: matcher (1 branches, 1 atoms, automaton of 5 states, ASCII three bytes a step (2 "
               "classes)); Split: matcher (1 branches, 1 atoms, automaton of 3 states, ASCII three bytes a step (1 "
               "classes)); Split: matcher (6 branches, ") != std::string::npos);
  CHECK(e.find("; splits and merges fused; the splits before the last in one pass") != std::string::npos);
  const std::string q = tokfeed::text::load_hf_tokenizer(qwen.string())->engine();
  MESSAGE(q);
  CHECK(q.find("; Split: hand-written") != std::string::npos);
}
