// The per-word paths of tokenizer.json models: the fused split and tokenize
// of HfTokenizer (hf_model.hpp) for byte-level ones, and the cut before each
// run of "\u2581" for SentencePiece-style ones, against the general pipeline
// (span lists, NormalizedText, one word per span), ids and offsets, on the
// golden texts and random strings, and the ids-only path (encode_ids)
// against both, also on long texts encoded again and again; and the word
// cache (word_cache.hpp) against the merges it stands for, through its growth
// and the clear at its limit.
#include <doctest/doctest.h>
#include <simdjson.h>

#include <utf8proc.h>

#include <cstdlib>
#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "tokenizer_files.hpp"
#include "tokenizer/hf/hf_model.hpp"
#include "tokenizer/hf/nfc_check.hpp"
#include "tokenizer/hf/unicode.hpp"

using tokfeed::test::tokenizer_json;
using tokfeed::text::Token;
using namespace tokfeed::text::hf;

namespace {

std::vector<std::string> golden_texts() {
  std::vector<std::string> texts;
  simdjson::dom::parser parser;
  simdjson::padded_string json =
      simdjson::padded_string::load(std::string(TOKFEED_TEST_DATA) + "/golden/qwen3.jsonl").value();
  for (simdjson::dom::element e : parser.parse_many(json)) texts.emplace_back(std::string_view(e["text"].get_string()));
  return texts;
}

// Strings from pieces where the split's alternatives meet, NFC changes
// text, UTF-8 goes wrong, and added tokens (DeepSeek-V3's <｜User｜> and
// <|EOT|> are matched after normalizing).
std::string random_text(std::mt19937& rng) {
  static const std::vector<std::string> units = {"a",
                                                 "Z",
                                                 " the",
                                                 " ",
                                                 "  ",
                                                 "\n",
                                                 "\r\n",
                                                 "\t",
                                                 "'s",
                                                 "'LL",
                                                 "'x",
                                                 "7",
                                                 "123",
                                                 ".",
                                                 ",",
                                                 "!!",
                                                 "(",
                                                 "_",
                                                 "e\xcc\x81",
                                                 "\xc3\xa9",
                                                 "\xe4\xb8\xad\xe6\x96\x87",
                                                 "\xf0\x9f\x98\x80",
                                                 "\xe2\x80\x83",
                                                 "\xc5\xbf",
                                                 "\xff",
                                                 "\x80",
                                                 "\xed\xa0\x80",
                                                 "\xe4\xb8",
                                                 "<|im_start|>",
                                                 "<|endoftext|>",
                                                 "\xe1\x84\x80\xe1\x85\xa1",
                                                 "\xe2\x96\x81",
                                                 "   ",
                                                 "\xe2\x96\x81x",
                                                 "\xe4",
                                                 "\xcc\x81",
                                                 "\xe5\x80",
                                                 "\xe0\x80\x80",
                                                 "\xef\xbc\x8c",
                                                 "\xe0\xa4\xa8\xe0\xa4\xbc",
                                                 "<\xef\xbd\x9cUser\xef\xbd\x9c>",
                                                 " <|EOT|> ",
                                                 "\xe3\x82\xa2\xe3\x82\xa4",
                                                 "1234567",
                                                 "\xef\xbc\x92",
                                                 "\xe2\x85\xa0",
                                                 "\xe3\x83\xbb",
                                                 "\xe3\x83\xbc",
                                                 "\xe4\xb8\x80\xe3\x81\x82"};
  std::string s;
  const size_t n = rng() % 30;
  for (size_t i = 0; i < n; ++i) s += units[rng() % units.size()];
  return s;
}

std::string show(const std::vector<Token>& t) {
  std::string s;
  for (const Token& x : t)
    s += std::to_string(x.id) + "@" + std::to_string(x.begin) + "-" + std::to_string(x.end) + " ";
  return s;
}

bool same(const std::vector<Token>& a, const std::vector<Token>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].id != b[i].id || a[i].begin != b[i].begin || a[i].end != b[i].end) return false;
  return true;
}

}  // namespace

TEST_CASE("word path: fused split and merges equal the general pipeline, ids and offsets; encode_ids its ids") {
  const auto golden = golden_texts();
  REQUIRE(golden.size() == 3011);
  for (const char* name : {"qwen3", "llama3", "sp32k-hf", "deepseek_v3"}) {
    const std::string path = tokenizer_json(name);
    if (path.empty()) {
      MESSAGE("skipped: no " << name << " tokenizer.json");
      continue;
    }
    CAPTURE(name);
    HfTokenizer fused(load_hf_parts(path), true), general(load_hf_parts(path), false);
    std::mt19937 rng(11);
    size_t bad = 0, n = 0;
    size_t bad_ids = 0;
    auto check = [&](const std::string& text) {
      std::vector<Token> a, b;
      fused.encode(text, a);
      general.encode(text, b);
      ++n;
      if (!same(a, b) && bad++ < 3) FAIL_CHECK("text " << n << ": fused " << show(a) << "\ngeneral " << show(b));
      // The ids-only path (encode_ids), fused and general, after what is
      // already in its output.
      for (const HfTokenizer* tok : {&fused, &general}) {
        std::vector<int32_t> ids = {-7};
        tok->encode_ids(text, ids);
        bool ok = ids.size() == a.size() + 1 && ids[0] == -7;
        for (size_t i = 0; ok && i < a.size(); ++i) ok = ids[i + 1] == a[i].id;
        if (!ok && bad_ids++ < 3) FAIL_CHECK("text " << n << ": encode_ids differs from " << show(a));
      }
    };
    for (const auto& t : golden) check(t);
    for (int i = 0; i < 20000; ++i) check(random_text(rng));
    CHECK(bad == 0);
    CHECK(bad_ids == 0);
  }
}

TEST_CASE("word path: long texts, batch after batch, cold and hot, through the cache's growth") {
  // Texts of hundreds of words (the fused path takes them a batch at a
  // time), with new words all along (the cache grows in the middle of a
  // batch), each encoded three times: words missed, then found in their
  // home slot or past it (and moved there). Ids and offsets against the
  // general pipeline, and encode_ids' ids after what its output held.
  for (const char* name : {"qwen3", "llama3", "deepseek_v3"}) {
    const std::string path = tokenizer_json(name);
    if (path.empty()) {
      MESSAGE("skipped: no " << name << " tokenizer.json");
      continue;
    }
    CAPTURE(name);
    HfTokenizer fused(load_hf_parts(path), true), general(load_hf_parts(path), false);
    std::mt19937 rng(17);
    size_t bad = 0, fresh = 0;
    for (int t = 0; t < 100; ++t) {
      std::string text;
      while (text.size() < 3000 + rng() % 3000) {
        if (rng() % 4 != 0) {
          // A word not seen before, 1 to 24 letters, after a space or not.
          std::string w = rng() % 2 ? " " : "";
          for (size_t k = fresh++, len = 1 + rng() % 24; w.size() < len; k /= 26) w += char('a' + k % 26);
          text += w;
        } else {
          text += random_text(rng).substr(0, 20);
        }
      }
      std::vector<Token> want;
      general.encode(text, want);
      for (int pass = 0; pass < 3; ++pass) {
        std::vector<Token> got;
        fused.encode(text, got);
        std::vector<int32_t> ids = {-7, -8};
        fused.encode_ids(text, ids);
        bool ok = same(got, want) && ids.size() == want.size() + 2 && ids[0] == -7 && ids[1] == -8;
        for (size_t i = 0; ok && i < want.size(); ++i) ok = ids[i + 2] == want[i].id;
        if (!ok && bad++ < 3) FAIL_CHECK("text " << t << " pass " << pass << " (" << text.size() << " bytes) differs");
      }
    }
    CHECK(bad == 0);
    CHECK(fresh > 16384);  // past the cache's first two tables (8,192 and 16,384 words at half load)
  }
}

TEST_CASE("word cache: hits give what the merges give, through growth and the clear at its limit") {
  const std::string path = tokenizer_json("qwen3");
  REQUIRE(!path.empty());
  HfParts parts = load_hf_parts(path);
  const BpeModel& m = *parts.model;
  std::mt19937 rng(5);
  static const char* units[] = {"a", "e", "t", "th", "ing", " ", "=", "0", "\xe4\xb8\xad", "\xc3\xa9", "\xff", "_"};
  // More distinct words than the cache's largest table holds at half load
  // (2^18), some of them long (inline keys end at 15 bytes; 255 is the most
  // it keeps), each asked for three times: a miss, then a hit (a long word:
  // a miss, a miss that keeps it, then a hit).
  std::vector<std::string> words;
  for (int i = 0; i < 280000; ++i) {
    std::string w = std::to_string(i) + " ";
    const size_t len = i % 97 == 0 ? 200 + rng() % 100 : 1 + rng() % 8;
    for (size_t k = 0; k < len; ++k) w += units[rng() % std::size(units)];
    words.push_back(std::move(w));
  }
  size_t bad = 0;
  std::vector<WordPiece> cached, heap;
  for (size_t i = 0; i < words.size(); ++i) {
    for (size_t pass = 0; pass < 3; ++pass) {
      // The later asks of word i come after words i + 1 and i + 2 were first asked for.
      const std::string& w = words[i - std::min(i, pass)];
      cached.clear();
      heap.clear();
      m.tokenize(w, cached);
      m.tokenize_heap(w, heap);
      bool ok = cached.size() == heap.size();
      for (size_t k = 0; ok && k < heap.size(); ++k) ok = cached[k].id == heap[k].id && cached[k].len == heap[k].len;
      if (!ok && bad++ < 3) FAIL_CHECK("word " << i << " pass " << pass << " (" << w.size() << " bytes) differs");
    }
  }
  CHECK(bad == 0);
}

TEST_CASE("word cache: words told apart by their length alone, around the end of inline keys") {
  // A word's key is its bytes zero-padded, with its length beside them:
  // words that differ only in trailing NUL bytes are different words. And
  // words of 15, 16 and 17 bytes, where inline keys end, asked for where 16
  // bytes may be read past their start and where they end the text.
  const std::string path = tokenizer_json("qwen3");
  REQUIRE(!path.empty());
  std::vector<std::string> words;
  for (const std::string stem : {"!", "a", "\xff", "=="})
    for (size_t nuls = 0; nuls < 18; ++nuls) words.push_back(stem + std::string(nuls, '\0'));
  for (size_t len = 13; len <= 18; ++len) {
    words.push_back(std::string(len, '!'));
    words.push_back(std::string(len - 1, '!') + '\0');
    words.push_back(std::string(len - 1, '!') + '\x1f');
    words.push_back(std::string(len, ' '));
  }
  // Keys: the batch's (16 readable bytes) and the general one's agree, and
  // no two short words share one.
  std::vector<WordCache::Key> keys;
  for (const std::string& w : words) {
    const std::string padded = w + std::string(16, 'x');
    const WordCache::Key a = WordCache::key_of(w, nullptr),
                         b = WordCache::key_of(padded.substr(0, w.size()), padded.data() + padded.size());
    CAPTURE(w.size());
    CHECK(a.lo == b.lo);
    CHECK(a.hi == b.hi);
    CHECK(a.hash == b.hash);
    if (w.size() <= WordCache::kInlineKey) {
      uint64_t k16[2];
      CHECK(WordCache::key16(padded.data(), w.size(), k16) == a.hash);
      CHECK(k16[0] == a.lo);
      CHECK(k16[1] == a.hi);
      CHECK((a.hi >> 56) == w.size());
      for (const WordCache::Key& k : keys) CHECK_FALSE((k.lo == a.lo && k.hi == a.hi));
      keys.push_back(a);
    } else {
      CHECK(a.hi == WordCache::kLongKey);
    }
  }
  CHECK(keys.size() > 60);
  // Through the cache: each word asked for three times, in both orders, as
  // words of the model and as texts of the fused path against the general one.
  HfParts parts = load_hf_parts(path);
  const BpeModel& m = *parts.model;
  size_t bad = 0;
  for (int order = 0; order < 2; ++order)
    for (int pass = 0; pass < 3; ++pass)
      for (size_t i = 0; i < words.size(); ++i) {
        const std::string& w = words[order == 0 ? i : words.size() - 1 - i];
        std::vector<WordPiece> cached, heap;
        m.tokenize(w, cached);
        m.tokenize_heap(w, heap);
        bool ok = cached.size() == heap.size();
        for (size_t k = 0; ok && k < heap.size(); ++k) ok = cached[k].id == heap[k].id && cached[k].len == heap[k].len;
        if (!ok && bad++ < 3) FAIL_CHECK("word of " << w.size() << " bytes, pass " << pass << " differs");
      }
  HfTokenizer fused(load_hf_parts(path), true), general(load_hf_parts(path), false);
  for (int pass = 0; pass < 3; ++pass)
    for (const std::string& w : words)
      for (const std::string& text : {w, "x" + w, w + "x y", "(" + w + ")" + std::string(20, 'z')}) {
        std::vector<Token> a, b;
        fused.encode(text, a);
        general.encode(text, b);
        std::vector<int32_t> ids;
        fused.encode_ids(text, ids);
        bool ok = same(a, b) && ids.size() == b.size();
        for (size_t k = 0; ok && k < b.size(); ++k) ok = ids[k] == b[k].id;
        if (!ok && bad++ < 6)
          FAIL_CHECK("text of " << text.size() << " bytes, pass " << pass << ": fused " << show(a) << "\ngeneral "
                                << show(b));
      }
  CHECK(bad == 0);
}

TEST_CASE("word path: words are cut before \xe2\x96\x81 only where no merge can join a char to it") {
  auto model = [](std::vector<std::pair<std::string, std::string>> merges, bool ignore_merges) {
    BpeConfig c;
    int32_t id = 0;
    for (const char* unit : {"a", "b", "\xe2\x96\x81"}) c.vocab.emplace(unit, id++);
    for (const auto& [l, r] : merges) {
      c.vocab.emplace(l + r, id++);
      c.merges.push_back({l, r});
    }
    c.ignore_merges = ignore_merges;
    return BpeModel(std::move(c), "test");
  };
  const std::string m = "\xe2\x96\x81";
  CHECK(model({{m, "a"}, {m + "a", "b"}}, false).words_end_before_metaspace());
  CHECK(model({{m, m}, {m + m, "a"}}, false).words_end_before_metaspace());  // a run of them merges with itself
  CHECK_FALSE(model({{"a", m}}, false).words_end_before_metaspace());        // "a▁" crosses the cut
  CHECK_FALSE(model({{m, "a"}, {"b", m + "a"}}, false).words_end_before_metaspace());
  CHECK_FALSE(model({{m, "a"}}, true).words_end_before_metaspace());  // ignore_merges looks up whole words
}

TEST_CASE("word path: a text the NFC quick check passes is its own NFC (utf8proc)") {
  // Code points from every three-byte block (where whole blocks are skipped
  // by their lead byte) and the marks that compose with what precedes them.
  std::mt19937 rng(3);
  const char32_t marks[] = {0x0301, 0x0308, 0x093C, 0x0CD5, 0x3099, 0x1161, 0x11A8, 0x0F71};
  size_t inert = 0, active = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string s;
    for (int k = 0, n = 1 + int(rng() % 6); k < n; ++k) {
      char32_t cp = rng() % 4 == 0 ? marks[rng() % std::size(marks)] : char32_t(0x800 + rng() % (0x10000 - 0x800));
      if (cp >= 0xD800 && cp <= 0xDFFF) cp = 'a';
      append_utf8(s, cp);
    }
    auto* nfc = utf8proc_NFC(reinterpret_cast<const utf8proc_uint8_t*>(s.c_str()));
    REQUIRE(nfc != nullptr);
    const bool same = s == reinterpret_cast<const char*>(nfc);
    std::free(nfc);
    if (nfc_quick_check(s)) {
      ++inert;
      if (!same) FAIL_CHECK("NFC changes a text the quick check passes, entry " << i);
    } else {
      ++active;
    }
  }
  CHECK(inert > 1000);
  CHECK(active > 1000);
}
