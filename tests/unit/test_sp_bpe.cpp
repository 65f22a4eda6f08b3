// tokfeed's encoder for SentencePiece BPE models (tokenizer/sp_bpe.hpp)
// against libsentencepiece itself: ids and original byte ranges of every
// piece, on the sp32k golden texts, every string of the SFT data (the
// repository's, and ../shared's where present), and random Unicode.
#include <doctest/doctest.h>
#include <sentencepiece_processor.h>
#include <simdjson.h>

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "tokenizer/hf/unicode.hpp"
#include "tokenizer/sp_bpe.hpp"
#include "tokenizer/tokenizer.hpp"

namespace fs = std::filesystem;
using tokfeed::text::SpBpe;
using tokfeed::text::Token;

namespace {

const std::string kModel = std::string(TOKFEED_TEST_DATA) + "/tokenizers/sp32k/tokenizer.model";

void strings_of(simdjson::dom::element e, std::vector<std::string>& out) {
  switch (e.type()) {
    case simdjson::dom::element_type::STRING: out.emplace_back(std::string_view(e.get_string())); break;
    case simdjson::dom::element_type::ARRAY:
      for (auto v : e.get_array()) strings_of(v, out);
      break;
    case simdjson::dom::element_type::OBJECT:
      for (auto kv : e.get_object()) strings_of(kv.value, out);
      break;
    default: break;
  }
}

// Every string leaf of every record of the .json / .jsonl files in `dir`
// (files over 4 MB left out, for time: libsentencepiece runs at about 1 MB/s).
std::vector<std::string> sft_strings(const fs::path& dir) {
  std::vector<std::string> out;
  if (!fs::exists(dir)) return out;
  std::vector<fs::path> files;
  for (const auto& f : fs::directory_iterator(dir))
    if (f.file_size() <= (4u << 20)) files.push_back(f.path());
  std::sort(files.begin(), files.end());
  simdjson::dom::parser parser;
  for (const auto& f : files) {
    const auto json = simdjson::padded_string::load(f.string()).value();
    if (f.extension() == ".jsonl") {
      for (auto doc : parser.parse_many(json)) strings_of(doc.value(), out);
    } else if (f.extension() == ".json") {
      strings_of(parser.parse(json).value(), out);
    }
  }
  return out;
}

std::string random_text(std::mt19937& rng) {
  static const char* const units[] = {
      " ",         "  ",   "a",    "the", "\xe2\x96\x81", "\n",  "\t",          "\xe4\xb8\xad", "\xf0\x9f\x91\x8d",
      "e\xcc\x81", "\xff", "\x80", "0",   "12",           "<s>", "\xef\xbf\xbd"};
  std::string s;
  const int parts = 1 + int(rng() % 20);
  for (int k = 0; k < parts; ++k) {
    const int kind = int(rng() % 4);
    if (kind == 0) {
      s += units[rng() % (sizeof units / sizeof *units)];
    } else if (kind == 1) {
      for (int i = 0, n = 1 + int(rng() % 8); i < n; ++i) s.push_back(char(0x21 + rng() % 94));
    } else if (kind == 2) {
      char32_t cp = char32_t(0x80 + rng() % 0x10FF80);
      if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0x4E2D;
      tokfeed::text::hf::append_utf8(s, cp);
    } else {
      s += std::string(1 + rng() % 6, " a=\xe2"[rng() % 4]);
    }
  }
  return s;
}

struct Compared {
  size_t texts = 0, exact = 0;
  std::string first_mismatch;
};

void compare(const SpBpe& ours, const sentencepiece::SentencePieceProcessor& sp, const std::vector<std::string>& texts,
             Compared& r) {
  std::vector<Token> mine;
  for (const std::string& t : texts) {
    ++r.texts;
    mine.clear();
    ours.encode(t, 0, mine);
    sentencepiece::ImmutableSentencePieceText spt;
    REQUIRE(sp.Encode(t, spt.mutable_proto()).ok());
    bool same = mine.size() == spt.pieces_size();
    for (size_t i = 0; same && i < mine.size(); ++i) {
      const auto p = spt.pieces(int(i));
      same = mine[i].id == int32_t(p.id()) && mine[i].begin == p.begin() && mine[i].end == p.end();
    }
    if (same) ++r.exact;
    else if (r.first_mismatch.empty()) r.first_mismatch = t.substr(0, 200);
  }
}

}  // namespace

TEST_CASE("sp bpe: sp32k takes tokfeed's encoder; ids and offsets equal libsentencepiece's everywhere") {
  std::string why;
  auto ours = SpBpe::build(tokfeed::text::read_sp_model(kModel), kModel, why);
  REQUIRE_MESSAGE(ours, why);
  sentencepiece::SentencePieceProcessor sp;
  REQUIRE(sp.Load(kModel).ok());

  std::vector<std::string> golden;
  simdjson::dom::parser parser;
  const auto json = simdjson::padded_string::load(std::string(TOKFEED_TEST_DATA) + "/golden/sp32k.jsonl").value();
  for (auto doc : parser.parse_many(json)) golden.emplace_back(std::string_view(doc["text"].get_string()));
  Compared g;
  compare(*ours, sp, golden, g);
  CHECK_MESSAGE(g.exact == g.texts, "golden, first mismatch: " << g.first_mismatch);
  CHECK(g.texts == 3011);

  Compared d;
  compare(*ours, sp, sft_strings(fs::path(TOKFEED_TEST_DATA) / "sft"), d);
  compare(*ours, sp, sft_strings(fs::path(TOKFEED_SHARED_DIR) / "data" / "sft"), d);
  CHECK_MESSAGE(d.exact == d.texts, "SFT, first mismatch: " << d.first_mismatch);
  CHECK(d.texts > 1000);
  MESSAGE("SFT strings equal to libsentencepiece: " << d.exact << "/" << d.texts);

  std::mt19937 rng(33);
  std::vector<std::string> random;
  for (int i = 0; i < 20000; ++i) random.push_back(random_text(rng));
  Compared u;
  compare(*ours, sp, random, u);
  CHECK_MESSAGE(u.exact == u.texts, "random, first mismatch: " << u.first_mismatch);
}

TEST_CASE("sp bpe: models outside its exact cases keep libsentencepiece, saying why") {
  auto spec = tokfeed::text::read_sp_model(kModel);
  std::string why;
  auto nfkc = spec;
  nfkc.normalizer_name = "nmt_nfkc";
  nfkc.precompiled_charsmap = "x";
  CHECK_FALSE(SpBpe::build(nfkc, "m", why));
  CHECK(why == "normalizer 'nmt_nfkc' has a character map");
  auto unigram = spec;
  unigram.model_type = 1;
  CHECK_FALSE(SpBpe::build(unigram, "m", why));
  CHECK(why == "not a BPE model");
  auto no_bytes = spec;
  no_bytes.byte_fallback = false;
  CHECK_FALSE(SpBpe::build(no_bytes, "m", why));
  CHECK(why == "byte_fallback is off");
  auto user = spec;
  user.pieces.push_back({"<tool>", 0, tokfeed::text::SpModelSpec::PieceType::kUserDefined});
  CHECK_FALSE(SpBpe::build(user, "m", why));
  CHECK(why == "it has user-defined or unused pieces ('<tool>')");
  CHECK_THROWS_WITH_AS(tokfeed::text::read_sp_model(std::string(TOKFEED_TEST_DATA) + "/golden/sp32k.jsonl"),
                       doctest::Contains("not a SentencePiece model"), tokfeed::text::TokenizerError);
}

TEST_CASE("sp bpe: the sentencepiece tokenizer names its engine; encode_ids gives encode's ids") {
  auto tok = tokfeed::text::load_tokenizer("sentencepiece", kModel);
  CHECK(tok->engine() == "sentencepiece; BPE: tokfeed's encoder");
  const std::string text = "<s>Hello  world,\n\xe4\xb8\xad\xe6\x96\x87 </s>x";
  std::vector<tokfeed::text::Token> tokens;
  tok->encode(text, tokens);
  std::vector<int32_t> ids = {-1}, want = {-1};
  tok->encode_ids(text, ids);
  for (const auto& t : tokens) want.push_back(t.id);
  CHECK(tokens.size() > 5);
  CHECK(ids == want);
}
