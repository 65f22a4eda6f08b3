// The linear BPE (tokenizer/hf/bpe_linear.hpp) against the heap loop that
// applies merges one by one (itself checked against HF tokenizers by the
// golden files and tests/reference/hf_random_diff.py): random merge lists
// over a small alphabet, every string up to a length; real vocabularies on
// random bytes and runs; and the load-time choice where preconditions fail.
#include <doctest/doctest.h>

#include <algorithm>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "tokenizer_files.hpp"
#include "tokenizer/hf/bpe.hpp"
#include "tokenizer/hf/hf_model.hpp"
#include "tokenizer/hf/token_index.hpp"
#include "tokenizer/hf/unicode.hpp"

using tokfeed::test::tokenizer_json;
using namespace tokfeed::text::hf;

namespace {

std::string byte_token(unsigned char b) {
  std::string s;
  append_utf8(s, byte_to_unicode()[b]);
  return s;
}

std::string to_token(const std::string& raw) {
  std::string s;
  for (unsigned char c : raw) s += byte_token(c);
  return s;
}

// A byte-level config with every byte and the given merges (raw bytes).
BpeConfig config_with(const std::vector<std::pair<std::string, std::string>>& raw_merges) {
  BpeConfig c;
  c.byte_level = true;
  int32_t next = 0;
  for (int b = 0; b < 256; ++b) c.vocab.emplace(byte_token(uint8_t(b)), next++);
  for (const auto& [a, b] : raw_merges) {
    c.merges.push_back({to_token(a), to_token(b)});
    c.vocab.emplace(to_token(a + b), next++);  // keeps the first id of a repeat
  }
  return c;
}

std::vector<WordPiece> run(const BpeModel& m, const std::string& word, bool heap) {
  std::vector<WordPiece> out;
  if (heap) m.tokenize_heap(word, out);
  else m.tokenize(word, out);
  return out;
}

// The word through the linear search alone and, up to kShortMax bytes,
// the short merge loop alone (tokenize takes one or the other).
std::vector<WordPiece> run_linear(const BpeModel& m, const std::string& word, bool short_loop) {
  std::vector<WordPiece> out;
  const auto emit = [&](int32_t id, uint32_t len) { out.push_back({id, len}); };
  if (short_loop) m.linear()->encode_short(word, emit);
  else m.linear()->encode(word, emit);
  return out;
}

bool same(const std::vector<WordPiece>& a, const std::vector<WordPiece>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].id != b[i].id || a[i].len != b[i].len) return false;
  return true;
}

std::string show(const std::vector<WordPiece>& v) {
  std::string s;
  for (const auto& p : v) s += std::to_string(p.id) + ":" + std::to_string(p.len) + " ";
  return s;
}

// Every string over `alphabet` of length 1..max_len.
template <class F>
void each_string(const std::string& alphabet, size_t max_len, F&& f) {
  std::string s;
  std::vector<size_t> digits;
  for (size_t len = 1; len <= max_len; ++len) {
    digits.assign(len, 0);
    for (;;) {
      s.clear();
      for (size_t d : digits) s.push_back(alphabet[d]);
      f(s);
      size_t i = 0;
      while (i < len && ++digits[i] == alphabet.size()) digits[i++] = 0;
      if (i == len) break;
    }
  }
}

// The bytes a byte-level token stands for; empty where `token` is none or
// holds a char that is no byte's.
std::string byte_level_bytes(const std::string* token) {
  std::string raw;
  if (!token) return raw;
  for (size_t i = 0; i < token->size();) {
    const DecodedChar d = decode_utf8(*token, i);
    const int b = unicode_to_byte(d.cp);
    if (b < 0) return {};
    raw.push_back(char(b));
    i += d.len;
  }
  return raw;
}

// `name`'s tokenizer.json from ../shared, loaded; none (said so) where it
// is missing, which only a tokenizer other than qwen3 may be.
std::optional<HfParts> load_or_skip(const char* name) {
  const std::string path = tokenizer_json(name);
  if (path.empty() && std::string(name) != "qwen3") {
    MESSAGE("skipped: no " << name << " tokenizer.json");
    return std::nullopt;
  }
  REQUIRE(!path.empty());
  return load_hf_parts(path);
}

}  // namespace

TEST_CASE("bpe linear: random consistent merge lists give the heap's pieces on every short string") {
  std::mt19937 rng(33);
  int linear_models = 0;
  for (int trial = 0; trial < 60; ++trial) {
    // Merges of two tokens made so far, in order: consistent by construction,
    // each token made once; many are unreachable from their own bytes.
    std::vector<std::string> tokens = {"a", "b", "c"};
    std::vector<std::pair<std::string, std::string>> merges;
    const int n_merges = 4 + int(rng() % 40);
    for (int k = 0; k < n_merges * 4 && int(merges.size()) < n_merges; ++k) {
      const std::string& x = tokens[rng() % tokens.size()];
      const std::string& y = tokens[rng() % tokens.size()];
      const std::string xy = x + y;
      if (xy.size() > 6 || std::find(tokens.begin(), tokens.end(), xy) != tokens.end()) continue;
      merges.push_back({x, y});
      tokens.push_back(xy);
    }
    BpeModel m(config_with(merges), "random");
    CAPTURE(trial);
    REQUIRE(m.merge_algorithm() == "linear");
    ++linear_models;
    size_t checked = 0, bad = 0;
    each_string("abc", 9, [&](const std::string& s) {
      const auto heap = run(m, s, true);
      for (const auto& [what, got] :
           {std::pair{"tokenize", run(m, s, false)}, std::pair{"linear", run_linear(m, s, false)},
            std::pair{"short", run_linear(m, s, true)}})
        if (!same(got, heap) && bad++ < 3) FAIL_CHECK(s << ": " << what << " " << show(got) << " heap " << show(heap));
      ++checked;
    });
    CHECK(bad == 0);
    CHECK(checked == 29523);
  }
  CHECK(linear_models == 60);
}

TEST_CASE("bpe linear: random merge lists in any order, tokens made by several merges, give the heap's pieces") {
  // Merges of any two tokens, ranked in random order (a token's parts may
  // be made later, or not at all), each token often made by several splits,
  // as in vocabularies converted from tiktoken. Irregular tokens are common.
  std::mt19937 rng(3333);
  int irregular_models = 0;
  for (int trial = 0; trial < 80; ++trial) {
    std::vector<std::string> tokens = {"a", "b", "c"};
    std::vector<std::pair<std::string, std::string>> merges;
    const int n_tokens = 3 + int(rng() % 14);
    for (int k = 0; k < 400 && int(tokens.size()) < n_tokens; ++k) {
      const std::string& x = tokens[rng() % tokens.size()];
      const std::string& y = tokens[rng() % tokens.size()];
      const std::string xy = x + y;
      if (xy.size() > 5 || std::find(tokens.begin(), tokens.end(), xy) != tokens.end()) continue;
      tokens.push_back(xy);
    }
    // Every split of every token whose parts are tokens, in random order.
    for (const std::string& t : tokens)
      for (size_t k = 1; k < t.size(); ++k)
        if (std::find(tokens.begin(), tokens.end(), t.substr(0, k)) != tokens.end() &&
            std::find(tokens.begin(), tokens.end(), t.substr(k)) != tokens.end())
          merges.push_back({t.substr(0, k), t.substr(k)});
    std::shuffle(merges.begin(), merges.end(), rng);
    BpeModel m(config_with(merges), "random");
    CAPTURE(trial);
    REQUIRE(m.merge_algorithm().starts_with("linear"));
    if (m.merge_algorithm() != "linear") ++irregular_models;
    size_t bad = 0;
    each_string("abc", 8, [&](const std::string& s) {
      const auto heap = run(m, s, true);
      for (const auto& [what, got] :
           {std::pair{"tokenize", run(m, s, false)}, std::pair{"linear", run_linear(m, s, false)},
            std::pair{"short", run_linear(m, s, true)}})
        if (!same(got, heap) && bad++ < 3) FAIL_CHECK(s << ": " << what << " " << show(got) << " heap " << show(heap));
    });
    CHECK(bad == 0);
  }
  CHECK(irregular_models >= 10);
}

TEST_CASE("bpe linear: runs of one token, where the leftmost equal pair merges first") {
  BpeModel m(config_with({{"a", "a"}, {"aa", "a"}, {"aa", "aa"}, {"aaaa", "aaa"}, {"aaa", "aa"}, {"aaaa", "aaaa"}}),
             "runs");
  REQUIRE(m.merge_algorithm() == "linear");
  for (size_t n = 1; n <= 64; ++n) {
    const std::string s(n, 'a');
    CAPTURE(n);
    CHECK(show(run(m, s, false)) == show(run(m, s, true)));
    CHECK(show(run_linear(m, s, false)) == show(run(m, s, true)));
    if (n <= LinearBpe::kShortMax) CHECK(show(run_linear(m, s, true)) == show(run(m, s, true)));
  }
}

TEST_CASE("bpe linear: qwen3 and llama-3 take it and agree with the heap on random bytes, runs and text") {
  for (const char* name : {"qwen3", "llama3"}) {
    CAPTURE(name);
    const std::string path = tokenizer_json(name);
    if (path.empty() && std::string(name) == "llama3") {
      MESSAGE("skipped: no llama3 tokenizer.json");
      continue;
    }
    REQUIRE(!path.empty());
    HfParts parts = load_hf_parts(path);
    const BpeModel& m = *parts.model;
    // Llama-3 (converted from tiktoken) makes most tokens by several merges,
    // and a few tokens are irregular.
    if (std::string(name) == "qwen3") REQUIRE(m.merge_algorithm() == "linear");
    else REQUIRE(m.merge_algorithm().starts_with("linear (") == true);
    std::mt19937 rng(7);
    const std::vector<std::string> units = {"a",
                                            "e",
                                            "t",
                                            " ",
                                            "  ",
                                            "=",
                                            "-",
                                            "\n",
                                            "0",
                                            "1",
                                            "\xe4\xb8\xad",
                                            "\xe7\x9a\x84",
                                            "th",
                                            "ing",
                                            "\xf0\x9f\x91\x8d",
                                            "\xc3\xa9",
                                            "\xff",
                                            "\x80",
                                            "\t",
                                            "_",
                                            "/"};
    size_t bad = 0;
    for (int i = 0; i < 40000; ++i) {
      std::string w;
      const int kind = int(rng() % 3);
      const size_t len = 1 + rng() % 40;
      if (kind == 0) {
        for (size_t k = 0; k < len; ++k) w.push_back(char(rng() % 256));
      } else if (kind == 1) {
        for (size_t k = 0; k < len; ++k) w += units[rng() % units.size()];
      } else {
        w = std::string(len, units[rng() % units.size()][0]);
      }
      const auto heap = run(m, w, true);
      auto lin = run(m, w, false);
      if (!same(lin, heap) && bad++ < 3)
        FAIL_CHECK("word " << i << ": tokenize " << show(lin) << " heap " << show(heap));
      lin = run_linear(m, w, w.size() <= LinearBpe::kShortMax);
      if (!same(lin, heap) && bad++ < 3)
        FAIL_CHECK("word " << i << ": encoder " << show(lin) << " heap " << show(heap));
    }
    CHECK(bad == 0);
  }
}

TEST_CASE("bpe linear: vocabularies outside its preconditions keep the heap and say why") {
  // The same token made by two merges: only the split its own BPE ends with matters.
  BpeModel twice(config_with({{"a", "b"}, {"ab", "c"}, {"b", "c"}, {"a", "bc"}}), "twice");
  CHECK(twice.merge_algorithm() == "linear");
  // A merge that uses a token a later merge makes: 'abc' is irregular, and
  // pairs with it take the heap loop.
  BpeConfig late = config_with({{"a", "b"}});
  late.merges.insert(late.merges.begin(), {to_token("ab"), to_token("c")});
  late.vocab.emplace(to_token("abc"), 999);
  BpeModel later(std::move(late), "late");
  CHECK(later.merge_algorithm() == "linear (1 irregular tokens)");
  each_string("abc", 8, [&](const std::string& s) {
    CHECK_MESSAGE(show(run(later, s, false)) == show(run(later, s, true)), s);
    CHECK_MESSAGE(show(run_linear(later, s, false)) == show(run(later, s, true)), s);
    CHECK_MESSAGE(show(run_linear(later, s, true)) == show(run(later, s, true)), s);
  });
  // A byte without a token.
  BpeConfig holes = config_with({{"a", "b"}});
  holes.vocab.erase(byte_token(0xff));
  BpeModel holed(std::move(holes), "holes");
  CHECK(holed.merge_algorithm() == "heap: byte 255 has no token");
  // Ranks that are not the merges' places (two pairs of one rank, as
  // sentencepiece's scores give): the short loop could not order them.
  BpeConfig tied = config_with({{"a", "b"}, {"b", "c"}, {"ab", "c"}});
  tied.merge_ranks = {0, 0, 1};
  BpeModel tied_ranks(std::move(tied), "tied");
  CHECK(tied_ranks.merge_algorithm() == "heap: merge ranks are not the merges' places in the list");
  CHECK(tied_ranks.linear() == nullptr);
  std::vector<WordPiece> tied_out;
  tied_ranks.tokenize("abc", tied_out);
  CHECK(show(tied_out) == show(run(tied_ranks, "abc", true)));
  // Not byte-level.
  BpeConfig chars;
  chars.vocab = {{"a", 0}, {"b", 1}, {"ab", 2}};
  chars.merges = {{"a", "b"}};
  BpeModel char_level(std::move(chars), "chars");
  CHECK(char_level.merge_algorithm() == "heap: the vocabulary is not byte-level");
  std::vector<WordPiece> out;
  char_level.tokenize("abab", out);
  CHECK(show(out) == "2:2 2:2 ");
}

TEST_CASE("bpe linear: under ignore_merges (llama-3) every token's bytes as a word give the token") {
  const std::string path = tokenizer_json("llama3");
  if (path.empty()) {
    MESSAGE("skipped: no llama3 tokenizer.json");
    return;
  }
  HfParts parts = load_hf_parts(path);
  const BpeModel& m = *parts.model;
  REQUIRE(m.merge_algorithm().starts_with("linear"));
  // Words that are tokens the merges cannot give (looked up) and that they
  // can (their BPE): both must come out as the one token, as HF's lookup of
  // the whole word gives.
  size_t words = 0, not_bpe = 0, bad = 0;
  std::vector<WordPiece> out, heap;
  for (size_t id = 0; id < m.max_id_plus_one(); ++id) {
    const std::string* token = m.id_to_token(int32_t(id));
    if (token == nullptr) continue;
    std::string raw;
    bool byte_level = true;
    for (size_t i = 0; i < token->size() && byte_level;) {
      const DecodedChar d = decode_utf8(*token, i);
      const int b = unicode_to_byte(d.cp);
      byte_level = b >= 0;
      raw.push_back(char(b));
      i += d.len;
    }
    if (!byte_level || raw.empty()) continue;
    ++words;
    out.clear();
    heap.clear();
    m.tokenize(raw, out);
    m.tokenize_heap(raw, heap);
    not_bpe += heap.size() != 1;
    if ((out.size() != 1 || out[0].id != int32_t(id) || out[0].len != raw.size()) && bad++ < 3)
      FAIL_CHECK("token " << id << " gives " << show(out));
  }
  CHECK(bad == 0);
  CHECK(words > 127000);
  CHECK(not_bpe > 0);  // some tokens are whole words only
}

TEST_CASE("bpe linear: every token is found in the trie, and words of tokens side by side give the heap's pieces") {
  // The trie (its two-byte table, its children compared at once) and the
  // compatibility walk, through the linear encoder alone (no word cache, no
  // cuts between chars), and the short merge loop alone (its byte-pair
  // table, its merges in rank order): each token's own bytes, then 60,000 words made of
  // vocabulary tokens side by side with a random byte now and then, on three
  // real vocabularies, each word against the heap loop.
  int vocabularies = 0;
  for (const char* name : {"qwen3", "llama3", "deepseek_v3"}) {
    CAPTURE(name);
    std::optional<HfParts> parts = load_or_skip(name);
    if (!parts) continue;
    const BpeModel& m = *parts->model;
    const LinearBpe* lin = m.linear();
    REQUIRE(lin != nullptr);
    ++vocabularies;
    std::vector<std::string> raws;
    for (size_t id = 0; id < m.max_id_plus_one(); ++id) {
      if (std::string raw = byte_level_bytes(m.id_to_token(int32_t(id))); !raw.empty()) raws.push_back(raw);
    }
    REQUIRE(raws.size() > 100000);
    std::vector<WordPiece> lin_out, heap_out;
    const auto linear = [&](const std::string& w) {
      lin_out.clear();
      REQUIRE(lin->encode(w, [&](int32_t id, uint32_t len) { lin_out.push_back({id, len}); }));
      return lin_out;
    };
    // The short merge loop on the same words, where they are short enough.
    const auto short_loop = [&](const std::string& w) {
      lin_out.clear();
      lin->encode_short(w, [&](int32_t id, uint32_t len) { lin_out.push_back({id, len}); });
      return lin_out;
    };
    size_t reachable = 0, bad = 0, shorts = 0;
    for (const std::string& raw : raws) {
      heap_out.clear();
      m.tokenize_heap(raw, heap_out);
      reachable += heap_out.size() == 1;
      if (!same(linear(raw), heap_out) && bad++ < 3) FAIL_CHECK(show(lin_out) << " heap " << show(heap_out));
      if (raw.size() > LinearBpe::kShortMax) continue;
      ++shorts;
      if (!same(short_loop(raw), heap_out) && bad++ < 3)
        FAIL_CHECK("short " << show(lin_out) << " heap " << show(heap_out));
    }
    CHECK(shorts > raws.size() * 9 / 10);
    CHECK(reachable > raws.size() * 9 / 10);
    std::mt19937 rng(60000);
    for (int i = 0; i < 60000; ++i) {
      std::string w;
      for (int k = 1 + int(rng() % 4); k > 0; --k) {
        if (rng() % 8 == 0) w.push_back(char(rng() % 256));
        const std::string& t = raws[rng() % raws.size()];
        w += t.substr(0, std::min<size_t>(t.size(), 1 + rng() % 12));
      }
      heap_out.clear();
      m.tokenize_heap(w, heap_out);
      if (!same(linear(w), heap_out) && bad++ < 3)
        FAIL_CHECK("word " << i << ": " << show(lin_out) << " heap " << show(heap_out));
      if (w.size() <= LinearBpe::kShortMax && !same(short_loop(w), heap_out) && bad++ < 3)
        FAIL_CHECK("word " << i << ": short " << show(lin_out) << " heap " << show(heap_out));
    }
    CHECK(bad == 0);
  }
  CHECK(vocabularies >= 1);
}

TEST_CASE("bpe: a word the cache misses that BPE makes one token is that token; one it does not is merged") {
  // The whole path (word cache, the index of words that are one token, the
  // cuts between chars, the merges), each word met for the first time, on
  // two vocabularies without ignore_merges: every token's own bytes (each
  // reachable, so looked up as a whole), then each token with a byte before
  // or after it and two tokens side by side, and the same words again from
  // the cache; each against the heap loop. First a made-up vocabulary with
  // a token its own bytes' BPE does not give, which must be merged: 'abc'
  // (made from 'a' 'bc'; BPE of "abc" merges 'ab' first).
  BpeModel made(config_with({{"a", "b"}, {"b", "c"}, {"a", "bc"}}), "made");
  REQUIRE(made.linear() != nullptr);
  each_string("abc", 7, [&](const std::string& s) {
    CHECK_MESSAGE(show(run(made, s, false)) == show(run(made, s, true)), s);
    CHECK_MESSAGE(show(run(made, s, false)) == show(run(made, s, true)), s);  // from the cache
  });
  CHECK(!made.linear()->reachable(258));  // "abc"
  CHECK(show(run(made, "abc", false)) == "256:2 99:1 ");
  int vocabularies = 0;
  for (const char* name : {"qwen3", "deepseek_v3"}) {
    CAPTURE(name);
    std::optional<HfParts> parts = load_or_skip(name);
    if (!parts) continue;
    const BpeModel& m = *parts->model;
    REQUIRE(!m.ignore_merges());
    REQUIRE(m.linear() != nullptr);
    ++vocabularies;
    std::vector<std::pair<std::string, int32_t>> tokens;
    for (size_t id = 0; id < m.max_id_plus_one(); ++id) {
      if (std::string raw = byte_level_bytes(m.id_to_token(int32_t(id))); !raw.empty())
        tokens.push_back({raw, int32_t(id)});
    }
    REQUIRE(tokens.size() > 100000);
    std::vector<std::string> words;
    size_t one = 0;
    for (const auto& [raw, id] : tokens) {
      words.push_back(raw);
      one += m.linear()->reachable(id);
    }
    CHECK(one > tokens.size() * 9 / 10);
    std::mt19937 rng(1515);
    for (int i = 0; i < 60000; ++i) {
      const std::string& t = tokens[rng() % tokens.size()].first;
      const char byte = char(rng() % 256);
      switch (rng() % 3) {
        case 0: words.push_back(std::string(1, byte) + t); break;
        case 1: words.push_back(t + byte); break;
        default: words.push_back(t + tokens[rng() % tokens.size()].first); break;
      }
    }
    size_t bad = 0, single = 0;
    std::vector<WordPiece> out, heap;
    for (int pass = 0; pass < 2; ++pass) {
      for (const std::string& w : words) {
        out.clear();
        heap.clear();
        m.tokenize(w, out);
        m.tokenize_heap(w, heap);
        single += pass == 0 && heap.size() == 1;
        if (!same(out, heap) && bad++ < 5)
          FAIL_CHECK("pass " << pass << " word of " << w.size() << " bytes: " << show(out) << " heap " << show(heap));
      }
    }
    CHECK(bad == 0);
    CHECK(single >= one);
  }
  CHECK(vocabularies >= 1);
}

TEST_CASE("word token index: keys that share their first bytes, short and long, present and absent") {
  // Keys as the word cache makes them: a word's first 8 bytes in one half,
  // the rest and its length in the other. 26 words share their first 8
  // bytes, so probes meet slots that hold the same first half; the absent
  // words share them too (those the filter lets through are probed).
  WordTokenIndex index;
  const std::string stem = "abcdefgh";
  std::vector<std::pair<std::string, int32_t>> present = {
      {stem, 1}, {"a", 2}, {"ab", 3}, {stem + "ijklmno", 4}, {stem + "ijklmnop", 5}, {stem + "ijklmnopqrst", 6}};
  for (char c = 'a'; c <= 'z'; ++c) present.push_back({stem + c, int32_t(100 + c)});
  for (const auto& [w, id] : present) index.add(w, id);
  index.add(stem, 7);  // a key given twice keeps its first id
  index.finish();
  const auto find = [&](const std::string& w) { return index.find(w, WordCache::key_of(w, nullptr)); };
  for (const auto& [w, id] : present) CHECK_MESSAGE(find(w) == id, w);
  size_t absent = 0, bad = 0;
  for (char c = 'A'; c <= 'Z'; ++c) {
    for (char d = 'a'; d <= 'z'; ++d) {
      for (const std::string& w :
           {stem + c, stem + d + c, stem + c + d, std::string(1, c) + d, stem + "ijklmnopqrs" + c}) {
        ++absent;
        if (find(w) != -1 && bad++ < 3) FAIL_CHECK(w << " found as " << find(w));
      }
    }
  }
  CHECK(bad == 0);
  CHECK(absent == 26 * 26 * 5);
  CHECK(find("abcdefg") == -1);
  CHECK(find("b") == -1);
}
