// Words cut between chars no token spans (tokenizer/hf/char_cuts.hpp): the
// pieces of a cut word, parts kept in the word cache, equal the heap loop's
// on the whole word (itself checked against HF tokenizers by the golden
// files and tests/reference/hf_random_diff.py), or under ignore_merges the
// word's own token where it is one. Words are made of the bytes
// of random vocabulary tokens with non-ASCII bytes (so every fragment token
// and every pair of chars inside a token meets its neighbors), of fragment
// tokens (those starting or ending inside a char) with that char completed by
// random bytes, of common Han, kana, Hangul and Cyrillic chars, and of random
// bytes.
#include <doctest/doctest.h>

#include <random>
#include <string>
#include <vector>

#include "tokenizer_files.hpp"
#include "tokenizer/hf/bpe.hpp"
#include "tokenizer/hf/hf_model.hpp"
#include "tokenizer/hf/unicode.hpp"

using tokfeed::test::tokenizer_json;
using namespace tokfeed::text::hf;

namespace {

// The bytes of each byte-level token with a byte past ASCII.
std::vector<std::string> non_ascii_tokens(const BpeModel& m) {
  std::vector<std::string> out;
  for (size_t id = 0; id < m.max_id_plus_one(); ++id) {
    const std::string* tok = m.id_to_token(int32_t(id));
    if (tok == nullptr) continue;
    std::string raw;
    bool ok = true, high = false;
    for (size_t i = 0; i < tok->size() && ok;) {
      const DecodedChar d = decode_utf8(*tok, i);
      const int b = unicode_to_byte(d.cp);
      ok = b >= 0;
      raw.push_back(char(b));
      high |= b >= 0x80;
      i += d.len;
    }
    if (ok && high) out.push_back(raw);
  }
  return out;
}

// Whether the cut path (tokenize, parts kept in the word cache) gives `w`
// the heap loop's pieces on the whole word, or under ignore_merges the
// word's own token where it is one; `pieces` says what each gave.
bool cut_equals_heap(const BpeModel& m, const std::string& w, std::string& pieces) {
  std::vector<WordPiece> cut, heap;
  m.tokenize(w, cut);
  m.tokenize_heap(w, heap);
  if (m.ignore_merges()) {
    std::string tok;
    for (unsigned char c : w) append_utf8(tok, byte_to_unicode()[c]);
    if (const int32_t id = m.token_to_id(tok); id >= 0) heap = {{id, uint32_t(w.size())}};
  }
  bool ok = cut.size() == heap.size();
  for (size_t k = 0; ok && k < heap.size(); ++k) ok = cut[k].id == heap[k].id && cut[k].len == heap[k].len;
  pieces.clear();
  for (const WordPiece& p : cut) pieces += std::to_string(p.id) + "/" + std::to_string(p.len) + " ";
  pieces += "| heap ";
  for (const WordPiece& p : heap) pieces += std::to_string(p.id) + "/" + std::to_string(p.len) + " ";
  return ok;
}

}  // namespace

TEST_CASE("char cuts: cut words give the heap loop's pieces (qwen3, llama-3, deepseek-v3)") {
  const std::vector<std::string> chars = {
      "\xe7\x9a\x84", "\xe4\xb8\x80", "\xe6\x98\xaf", "\xe4\xb8\x8d", "\xe4\xba\x86", "\xe4\xba\xba", "\xe6\x88\x91",
      "\xe5\x9c\xa8", "\xe6\x9c\x89", "\xe4\xbb\x96", "\xe8\xbf\x99", "\xe4\xb8\xad", "\xe5\xa4\xa7", "\xe6\x9d\xa5",
      "\xe3\x80\x82", "\xef\xbc\x8c", "\xe3\x81\xae", "\xe3\x81\x99", "\xe3\x82\xa2", "\xea\xb0\x80", "\xed\x95\x9c",
      "\xd0\xb0",     "\xd0\xbf",     "\xd1\x80",     "\xe2\x80\x99", "\xe2\x80\x9c", "\xc3\xa9",     "\xe2\x96\x81"};
  size_t models = 0;
  for (const char* name : {"qwen3", "llama3", "deepseek_v3"}) {
    CAPTURE(std::string(name));
    const std::string path = tokenizer_json(name);
    if (path.empty()) {
      REQUIRE(std::string(name) != "qwen3");
      MESSAGE("skipped: no " << name << " tokenizer.json");
      continue;
    }
    ++models;
    HfParts parts = load_hf_parts(path);
    const BpeModel& m = *parts.model;
    REQUIRE(m.merge_algorithm().starts_with("linear"));
    const std::vector<std::string> tokens = non_ascii_tokens(m);
    REQUIRE(tokens.size() > 1000);
    const auto is_cont = [](char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; };
    std::vector<std::string> fragments;
    for (const std::string& t : tokens)
      if (t.size() > 1 && (is_cont(t[0]) || static_cast<unsigned char>(t.back()) >= 0xC0 ||
                           (static_cast<unsigned char>(t[t.size() - 2]) >= 0xE0 && is_cont(t.back()))))
        fragments.push_back(t);
    REQUIRE(fragments.size() > 10);
    std::mt19937 rng(11);
    size_t bad = 0;
    std::string pieces;
    // Three times over the same words: the second pass finds parts in the
    // cache and keeps the cut words, the third finds those.
    for (int pass = 0; pass < 3; ++pass) {
      rng.seed(11);
      for (int i = 0; i < 30000; ++i) {
        std::string w;
        const size_t n = 1 + rng() % 8;
        for (size_t k = 0; k < n; ++k) {
          const unsigned kind = rng() % 10;
          const auto cont_byte = [&] { return char(0x80 + rng() % 0x40); };
          if (kind >= 8) {
            // A fragment, its first and last chars made whole.
            std::string f = fragments[rng() % fragments.size()];
            size_t run = 0;
            while (run < f.size() && run < 3 && is_cont(f[run])) ++run;
            if (run == 1) f = std::string(1, char(0xE0 + rng() % 16)) + cont_byte() + f;
            else if (run == 2) f = std::string(1, char(0xE0 + rng() % 16)) + f;
            const auto last = static_cast<unsigned char>(f.back());
            if (last >= 0xE0) f = f + cont_byte() + cont_byte();
            else if (last >= 0xC2) f += cont_byte();
            else if (f.size() >= 2 && static_cast<unsigned char>(f[f.size() - 2]) >= 0xE0) f += cont_byte();
            w += f;
          } else if (kind < 4) w += tokens[rng() % tokens.size()];
          else if (kind < 7) w += chars[rng() % chars.size()];
          else w.push_back(char(0x80 + rng() % 0x70));
        }
        if (!cut_equals_heap(m, w, pieces) && bad++ < 3) {
          std::string hex;
          for (unsigned char c : w) hex += std::to_string(c) + " ";
          FAIL_CHECK("pass " << pass << " word " << i << " [" << hex << "] differs: " << pieces);
        }
      }
    }
    CHECK(bad == 0);
  }
  CHECK(models >= 1);
}

TEST_CASE("char cuts: runs of CJK chars that tokens hold side by side give the heap loop's pieces") {
  // Han, kana and Hangul runs as the split gives them, made of the chars
  // that stand next to another in some token (so most boundaries meet the
  // pair filter, and many are pairs of a token), mixed with fullwidth and CJK
  // punctuation and 2-byte chars.
  size_t models = 0;
  for (const char* name : {"qwen3", "llama3", "deepseek_v3"}) {
    CAPTURE(std::string(name));
    const std::string path = tokenizer_json(name);
    if (path.empty()) {
      REQUIRE(std::string(name) != "qwen3");
      continue;
    }
    ++models;
    HfParts parts = load_hf_parts(path);
    const BpeModel& m = *parts.model;
    REQUIRE(m.merge_algorithm().starts_with("linear"));
    std::vector<std::string> chars;
    for (const std::string& t : non_ascii_tokens(m)) {
      if (t.size() < 6) continue;
      bool all3 = t.size() % 3 == 0;
      for (size_t k = 0; all3 && k < t.size(); k += 3) all3 = (static_cast<unsigned char>(t[k]) & 0xF0) == 0xE0;
      if (all3)
        for (size_t k = 0; k < t.size(); k += 3) chars.push_back(t.substr(k, 3));
    }
    REQUIRE(chars.size() > 1000);
    const std::vector<std::string> others = {"\xef\xbc\x8c", "\xe3\x80\x82", "\xe3\x80\x81", "\xef\xbc\x9a",
                                             "\xe2\x80\x9c", "\xe2\x80\x9d", "\xc2\xb7",     "\xd0\xb0",
                                             "\xe3\x80\x8a", "\xe3\x80\x8b", "\xef\xbf\xbd", "\xe3\x80\x80"};
    std::mt19937 rng(7);
    size_t bad = 0;
    std::string pieces;
    for (int i = 0; i < 40000; ++i) {
      std::string w;
      const size_t n = 1 + rng() % 24;
      for (size_t k = 0; k < n; ++k) w += rng() % 16 == 0 ? others[rng() % others.size()] : chars[rng() % chars.size()];
      if (!cut_equals_heap(m, w, pieces) && bad++ < 3) FAIL_CHECK("word " << i << " '" << w << "' differs: " << pieces);
    }
    CHECK(bad == 0);
  }
  CHECK(models >= 1);
}

TEST_CASE("char cuts: a fragment that starts with a char's last byte stops the cut it spans") {
  // A small vocabulary: Hebrew he and alef (2 bytes each), Han zhong and
  // wen (3 bytes each), and fragments that start with a char's last byte:
  // "\x94\xd7" (he's last byte, alef's lead: it ends inside alef, so it is
  // also a fragment of (c)) and "\xad\xe6\x96\x87" (zhong's last byte, all of
  // wen: only (b) finds it).
  const std::vector<std::string> raw = {"\xd7\x94",     "\xd7\x90", "\xe4\xb8\xad",
                                        "\xe6\x96\x87", "\x94\xd7", "\xad\xe6\x96\x87"};
  CharCuts cuts;
  cuts.build(raw, [](int32_t) { return true; });
  const auto parts = [&](const std::string& w) {
    std::vector<std::string> out;
    cuts.for_each_part(w, [&](size_t b, size_t e, int32_t) { out.push_back(w.substr(b, e - b)); });
    return out;
  };
  // Spanned by a fragment: no cut.
  CHECK(parts("\xd7\x94\xd7\x90").empty());
  CHECK(parts("\xe4\xb8\xad\xe6\x96\x87").empty());
  // The same chars the other way round, or a c2 whose bytes are not the
  // fragment's: cut, each char a part (with its token).
  CHECK(parts("\xd7\x90\xd7\x94") == std::vector<std::string>{"\xd7\x90", "\xd7\x94"});
  CHECK(parts("\xe4\xb8\xad\xe6\x97\x87") == std::vector<std::string>{"\xe4\xb8\xad", "\xe6\x97\x87"});
  CHECK(parts("\xe4\xb8\xad\xe6\x96\x88") == std::vector<std::string>{"\xe4\xb8\xad", "\xe6\x96\x88"});
  CHECK(parts("\xe6\x96\x87\xe4\xb8\xad") == std::vector<std::string>{"\xe6\x96\x87", "\xe4\xb8\xad"});
  std::vector<int32_t> ids;
  cuts.for_each_part(std::string("\xd7\x90\xd7\x94"), [&](size_t, size_t, int32_t id) { ids.push_back(id); });
  CHECK(ids == std::vector<int32_t>{1, 0});
}
