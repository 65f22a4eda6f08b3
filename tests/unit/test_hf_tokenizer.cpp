// Specification of the HF tokenizer.json backend (text/hf_tokenizer.hpp).
//
// Data: TOKFEED_TEST_DATA/golden/{qwen3,sp32k}.jsonl (ids from
// transformers.js; HF `tokenizers` agrees on every one of them, checked with
// tests/reference/hf_compare.py: no disagreement was found), tokenizer.json
// files extracted from tests/data/tokenizers/*.tar.xz into
// TOKFEED_TEST_BUILD_DATA/<name>/, and, only where present, the llama3 and
// deepseek_v3 tokenizers of TOKFEED_SHARED_DIR (not in the repo: licence).
// Expected values in the small cases below were taken from HF tokenizers 0.23.3.
#include <doctest/doctest.h>
#include <simdjson.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "tokenizer/hf/components.hpp"
#include "tokenizer/hf_tokenizer.hpp"

namespace fs = std::filesystem;
using tokfeed::text::load_hf_tokenizer;
using tokfeed::text::Token;
using tokfeed::text::Tokenizer;
using tokfeed::text::TokenizerError;

namespace {

std::string test_data() { return TOKFEED_TEST_DATA; }

// tokenizer.json of a committed tokenizer ("qwen3", "sp32k-hf"), or "".
std::string committed_tokenizer(const std::string& name) {
  std::vector<fs::path> candidates;
#ifdef TOKFEED_TEST_BUILD_DATA
  candidates.push_back(fs::path(TOKFEED_TEST_BUILD_DATA) / name / "tokenizer.json");
  candidates.push_back(fs::path(TOKFEED_TEST_BUILD_DATA) / name / name / "tokenizer.json");
#endif
  candidates.push_back(fs::path(test_data()) / "tokenizers" / name / "tokenizer.json");
  for (const auto& c : candidates)
    if (fs::exists(c)) return c.string();
  return "";
}

// tokenizer.json of a tokenizer only in ../shared ("llama3", "deepseek_v3"), or "".
std::string shared_tokenizer(const std::string& name) {
#ifdef TOKFEED_SHARED_DIR
  fs::path p = fs::path(TOKFEED_SHARED_DIR) / "tokenizers" / name / "tokenizer.json";
  if (fs::exists(p)) return p.string();
#endif
  return "";
}

std::string shared_golden(const std::string& name) {
#ifdef TOKFEED_SHARED_DIR
  fs::path p = fs::path(TOKFEED_SHARED_DIR) / "golden" / (name + ".jsonl");
  if (fs::exists(p)) return p.string();
#endif
  return "";
}

std::unique_ptr<Tokenizer> load_committed(const std::string& name) {
  std::string path = committed_tokenizer(name);
  REQUIRE_MESSAGE(!path.empty(), "tokenizer " << name << " not extracted; see tests/CMakeLists.txt");
  return load_hf_tokenizer(path);
}

std::vector<int32_t> ids_of(const Tokenizer& tok, std::string_view text) {
  std::vector<Token> out;
  tok.encode(text, out);
  std::vector<int32_t> ids;
  for (const Token& t : out) ids.push_back(t.id);
  return ids;
}

std::vector<std::tuple<int32_t, uint32_t, uint32_t>> tokens_of(const Tokenizer& tok, std::string_view text) {
  std::vector<Token> out;
  tok.encode(text, out);
  std::vector<std::tuple<int32_t, uint32_t, uint32_t>> r;
  for (const Token& t : out) r.emplace_back(t.id, t.begin, t.end);
  return r;
}

struct GoldenResult {
  int total = 0, exact = 0;
  std::string first_mismatch;
};

GoldenResult run_golden(const Tokenizer& tok, const std::string& path) {
  GoldenResult r;
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "cannot open " << path);
  simdjson::dom::parser parser;
  std::string line;
  std::vector<Token> out;
  while (std::getline(in, line)) {
    simdjson::dom::element doc = parser.parse(line).value();
    std::string_view text = doc["text"].get_string().value();
    simdjson::dom::array ids = doc["ids"].get_array().value();
    out.clear();
    tok.encode(text, out);
    bool same = out.size() == ids.size();
    size_t i = 0;
    for (auto v : ids) {
      if (!same) break;
      same = out[i++].id == int64_t(v.get_int64().value());
    }
    ++r.total;
    r.exact += same;
    if (!same && r.first_mismatch.empty()) r.first_mismatch = std::string(text.substr(0, 80));
  }
  return r;
}

// Tokens tile the text: each starts where the previous ended, the last ends at the end.
void check_tiling(const std::vector<Token>& out, size_t size) {
  uint32_t at = 0;
  for (const Token& t : out) {
    CHECK(t.begin == at);
    CHECK(t.end > t.begin);
    at = t.end;
  }
  CHECK(at == size);
}

std::string write_temp_json(const std::string& name, const std::string& body) {
  fs::path dir = fs::temp_directory_path() / ("tokfeed_hf_test_" + std::to_string(::getpid()) + "_" + name);
  fs::create_directories(dir);
  fs::path p = dir / "tokenizer.json";
  std::ofstream(p) << body;
  return p.string();
}

}  // namespace

TEST_CASE("hf: qwen3 ids equal the golden file on all 3,011 texts") {
  auto tok = load_committed("qwen3");
  GoldenResult r = run_golden(*tok, test_data() + "/golden/qwen3.jsonl");
  CHECK_MESSAGE(r.exact == r.total, "first mismatch: " << r.first_mismatch);
  CHECK(r.total == 3011);
}

TEST_CASE("hf: sp32k tokenizer.json ids equal the golden file on all 3,011 texts") {
  auto tok = load_committed("sp32k-hf");
  GoldenResult r = run_golden(*tok, test_data() + "/golden/sp32k.jsonl");
  CHECK_MESSAGE(r.exact == r.total, "first mismatch: " << r.first_mismatch);
  CHECK(r.total == 3011);
}

TEST_CASE("hf: llama3 and deepseek_v3 ids equal their golden files, where ../shared has them") {
  for (const char* name : {"llama3", "deepseek_v3"}) {
    CAPTURE(name);
    std::string path = shared_tokenizer(name), golden = shared_golden(name);
    if (path.empty() || golden.empty()) {
      MESSAGE("skipped: " << name << " is not in TOKFEED_SHARED_DIR");
      continue;
    }
    auto tok = load_hf_tokenizer(path);
    GoldenResult r = run_golden(*tok, golden);
    CHECK_MESSAGE(r.exact == r.total, "first mismatch: " << r.first_mismatch);
  }
}

TEST_CASE("hf: qwen3 metadata: pad, added tokens, vocabulary size, kind") {
  auto tok = load_committed("qwen3");
  CHECK(tok->kind() == "hf");
  CHECK(tok->pad_id() == 151643);  // pad_token <|endoftext|> of tokenizer_config.json
  CHECK(tok->special_token_id("<|im_start|>") == 151644);
  CHECK(tok->special_token_id("<|im_end|>") == 151645);
  CHECK(tok->special_token_id("<think>") == 151667);
  CHECK_FALSE(tok->special_token_id("hello").has_value());
  CHECK(tok->vocab_size() == 151669);  // 151,643 pieces + 26 added tokens
}

TEST_CASE("hf: sp32k metadata: no pad token means pad 0") {
  auto tok = load_committed("sp32k-hf");
  CHECK(tok->pad_id() == 0);
  CHECK(tok->special_token_id("<s>") == 1);
  CHECK(tok->vocab_size() == 32000);
}

TEST_CASE("hf: added tokens are split out first and cover exactly their string") {
  auto tok = load_committed("qwen3");
  const std::string text = "<|im_start|>user\nhi<|im_end|>";
  auto t = tokens_of(*tok, text);
  REQUIRE(t.size() == 5);
  CHECK(t[0] == std::tuple{151644, 0u, 12u});
  CHECK(std::get<0>(t[1]) == 872);  // "user"
  CHECK(t[4] == std::tuple{151645, 19u, 29u});
  std::vector<Token> out;
  tok->encode(text, out);
  check_tiling(out, text.size());
}

TEST_CASE("hf: byte-level offsets tile the input and each token decodes to its bytes") {
  auto tok = load_committed("qwen3");
  const std::string text = "Hello, world! 你好世界。 def f(x):\n    return x  # done\n\n";
  std::vector<Token> out;
  tok->encode(text, out);
  check_tiling(out, text.size());
  std::string joined;
  for (const Token& t : out) joined += text.substr(t.begin, t.end - t.begin);
  CHECK(joined == text);
  std::vector<int32_t> ids;
  for (const Token& t : out) ids.push_back(t.id);
  CHECK(tok->decode(ids) == text);
}

TEST_CASE("hf: NFC-rewritten text maps back to the whole original span") {
  auto tok = load_committed("qwen3");
  // "e" + U+0301 composes to "é" (HF ids 963, 87, 5394); HF maps "é" to the
  // "e" alone, we map it to both bytes of the original "e" + accent.
  auto t = tokens_of(*tok, "e\xCC\x81x ok");
  REQUIRE(t.size() == 3);
  CHECK(t[0] == std::tuple{963, 0u, 3u});
  CHECK(t[1] == std::tuple{87, 3u, 4u});
  CHECK(t[2] == std::tuple{5394, 4u, 7u});
}

TEST_CASE("hf: sp32k offsets of the prepended and replaced metaspace") {
  auto tok = load_committed("sp32k-hf");
  // As HF: the prepended "▁" takes the range of the first char.
  CHECK(tokens_of(*tok, "Hello world") ==
        std::vector<std::tuple<int32_t, uint32_t, uint32_t>>{{22557, 0, 5}, {1526, 5, 11}});
  CHECK(tokens_of(*tok, " x") == std::vector<std::tuple<int32_t, uint32_t, uint32_t>>{{28705, 0, 1}, {1318, 0, 2}});
  CHECK(tokens_of(*tok, "<s>hello") ==
        std::vector<std::tuple<int32_t, uint32_t, uint32_t>>{{1, 0, 3}, {6312, 3, 7}, {28709, 7, 8}});
  CHECK(ids_of(*tok, "a<s> b") == std::vector<int32_t>{264, 1, 28705, 287});
  CHECK(ids_of(*tok, "").empty());
  CHECK(tok->decode(ids_of(*tok, "Hello world")) == "Hello world");
}

TEST_CASE("hf: byte fallback covers each byte of an unknown char") {
  auto tok = load_committed("sp32k-hf");
  // U+030A is not in the sp32k vocabulary: <0xCC> <0x8A>.
  auto t = tokens_of(*tok,
                     "A\xCC\x8A\xCC\xA3"
                     "b");
  REQUIRE(t.size() == 5);
  CHECK(t[1] == std::tuple{207, 1u, 2u});
  CHECK(t[2] == std::tuple{141, 2u, 3u});
}

TEST_CASE("hf: invalid UTF-8 never throws; each invalid byte is a char of its own") {
  auto qwen = load_committed("qwen3");
  auto sp = load_committed("sp32k-hf");
  const std::string bad = std::string("ok \xFF\xFE mid \xC3 end \xE4\xBD") + "\x80\xED\xA0\x80 z";
  std::vector<Token> out;
  CHECK_NOTHROW(qwen->encode(bad, out));
  check_tiling(out, bad.size());
  out.clear();
  CHECK_NOTHROW(sp->encode(bad, out));
  CHECK(!out.empty());
  // Each invalid byte becomes its <0xXX> piece under byte fallback.
  CHECK(ids_of(*sp, "\xFF") == std::vector<int32_t>{28705, 258});
  // Every single byte value and random-ish junk: no exception.
  for (int b = 0; b < 256; ++b) {
    std::string s(3, char(b));
    out.clear();
    CHECK_NOTHROW(qwen->encode(s, out));
    CHECK_NOTHROW(sp->encode(s, out));
  }
}

TEST_CASE("hf: unsupported components are load errors naming the file and the component") {
  const std::string model = R"("model": {"type": "BPE", "vocab": {"a": 0}, "merges": []})";
  struct Case {
    const char* name;
    std::string json;
    const char* message;
  } cases[] = {
      {"bert", R"({"normalizer": {"type": "BertNormalizer"}, )" + model + "}",
       "normalizer type 'BertNormalizer' is not supported"},
      {"scripts", R"({"pre_tokenizer": {"type": "UnicodeScripts"}, )" + model + "}",
       "pre_tokenizer type 'UnicodeScripts' is not supported"},
      {"delimiter", R"({"pre_tokenizer": {"type": "CharDelimiterSplit", "delimiter": "ab"}, )" + model + "}",
       "pre_tokenizer.delimiter must be one char"},
      {"punct", R"({"pre_tokenizer": {"type": "Punctuation", "behavior": "Dropped"}, )" + model + "}",
       "pre_tokenizer.behavior 'Dropped' is not supported"},
      {"strip", R"({"normalizer": {"type": "Strip", "strip_left": "yes"}, )" + model + "}",
       "normalizer.strip_left must be true or false"},
      {"wordpiece", R"({"model": {"type": "WordPiece", "vocab": {}}})", "model type 'WordPiece' is not supported"},
      {"ctc", R"({"decoder": {"type": "CTC"}, )" + model + "}", "decoder type 'CTC' is not supported"},
      {"prefix", R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [], "continuing_subword_prefix": "##"}})",
       "continuing_subword_prefix '##' is not supported"},
      {"merge", R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}})", "merges[0] 'a b'"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    std::string path = write_temp_json(c.name, c.json);
    std::string what;
    try {
      load_hf_tokenizer(path);
    } catch (const TokenizerError& e) {
      what = e.what();
    }
    CHECK_MESSAGE(what.find(path) != std::string::npos, what);
    CHECK_MESSAGE(what.find(c.message) != std::string::npos, what);
    fs::remove_all(fs::path(path).parent_path());
  }
  CHECK_THROWS_AS(load_hf_tokenizer("/nonexistent/tokenizer.json"), TokenizerError);
}

TEST_CASE("hf: the post_processor's special tokens around a sequence; eos_token from tokenizer_config.json") {
  const std::string model =
      R"("added_tokens": [{"id": 3, "content": "<s>", "special": true}, {"id": 4, "content": "</s>", "special": true}],
         "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "<s>": 3, "</s>": 4}, "merges": ["a b"]})";
  const std::string tp =
      R"({"type": "TemplateProcessing",
          "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "</s>", "type_id": 0}}],
          "special_tokens": {"<s>": {"id": "<s>", "ids": [3], "tokens": ["<s>"]},
                             "</s>": {"id": "</s>", "ids": [4], "tokens": ["</s>"]}}})";
  struct Case {
    const char* name;
    std::string post_processor;
    std::vector<int32_t> before, after;
  } cases[] = {
      {"none", "null", {}, {}},
      {"byte_level", R"({"type": "ByteLevel", "trim_offsets": false})", {}, {}},
      {"template", tp, {3}, {4}},
      {"bert", R"({"type": "BertProcessing", "sep": ["</s>", 4], "cls": ["<s>", 3]})", {3}, {4}},
      {"roberta",
       R"({"type": "RobertaProcessing", "sep": ["</s>", 4], "cls": ["<s>", 3], "trim_offsets": true})",
       {3},
       {4}},
      // Each processor of a Sequence wraps what the one before gave.
      {"sequence",
       R"({"type": "Sequence", "processors": [)" + tp + R"(, {"type": "BertProcessing",
          "sep": ["b", 1], "cls": ["a", 0]}]})",
       {0, 3},
       {4, 1}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    std::string path = write_temp_json(c.name, "{" + model + R"(, "post_processor": )" + c.post_processor + "}");
    auto tok = load_hf_tokenizer(path);
    CHECK(tok->sequence_specials().before == c.before);
    CHECK(tok->sequence_specials().after == c.after);
    CHECK_FALSE(tok->eos_token().has_value());
    fs::remove_all(fs::path(path).parent_path());
  }
  // An unknown post-processor loads (conversations do not need it) and is
  // an error naming it where plain text asks for its tokens.
  std::string path = write_temp_json("unknown", "{" + model + R"(, "post_processor": {"type": "Future"}})");
  {
    std::ofstream(fs::path(path).parent_path() / "tokenizer_config.json")
        << R"({"model_max_length": 1000000000000000019884624838656, "eos_token": {"content": "</s>"}})";
    auto tok = load_hf_tokenizer(path);
    CHECK(tok->eos_token() == std::optional<std::string>("</s>"));
    std::string what;
    try {
      tok->sequence_specials();
    } catch (const TokenizerError& e) {
      what = e.what();
    }
    CHECK_MESSAGE(what.find(path + ": post_processor: post-processor 'Future' is not supported") == 0, what);
    // special_tokens_map.json's tokens win over tokenizer_config.json's, as
    // in transformers (5.25: a map's eos_token and pad_token over the config's).
    std::ofstream(fs::path(path).parent_path() / "special_tokens_map.json")
        << R"({"eos_token": "<s>", "pad_token": {"content": "</s>"}, "unk_token": null})";
    auto mapped = load_hf_tokenizer(path);
    CHECK(mapped->eos_token() == std::optional<std::string>("<s>"));
    CHECK(mapped->pad_id() == 4);
  }
  fs::remove_all(fs::path(path).parent_path());
}

TEST_CASE("hf: merges in the [\"a\", \"b\"] form; ignore_merges takes whole words") {
  const std::string vocab = R"("vocab": {"a": 0, "b": 1, "ab": 2, "ba": 3, "aba": 4, "bab": 5})";
  std::string array_form =
      write_temp_json("arr", R"({"model": {"type": "BPE", )" + vocab + R"(, "merges": [["a", "b"], ["ab", "a"]]}})");
  CHECK(ids_of(*load_hf_tokenizer(array_form), "aba") == std::vector<int32_t>{4});
  CHECK(ids_of(*load_hf_tokenizer(array_form), "bab") == std::vector<int32_t>{1, 2});
  std::string ignore = write_temp_json(
      "ign", R"({"model": {"type": "BPE", "ignore_merges": true, )" + vocab + R"(, "merges": ["a b"]}})");
  CHECK(ids_of(*load_hf_tokenizer(ignore), "bab") == std::vector<int32_t>{5});
  CHECK(ids_of(*load_hf_tokenizer(ignore), "abb") == std::vector<int32_t>{2, 1});
  for (const auto& p : {array_form, ignore}) fs::remove_all(fs::path(p).parent_path());
}

TEST_CASE("hf: unk_token with fuse_unk fuses a run of unknown chars") {
  std::string path = write_temp_json("unk", R"({"model": {"type": "BPE", "unk_token": "<unk>", "fuse_unk": true,
                 "vocab": {"<unk>": 0, "a": 1}, "merges": []}})");
  auto tok = load_hf_tokenizer(path);
  CHECK(tokens_of(*tok, "axyza") ==
        std::vector<std::tuple<int32_t, uint32_t, uint32_t>>{{1, 0, 1}, {0, 1, 4}, {1, 4, 5}});
  fs::remove_all(fs::path(path).parent_path());
}

// ---- pre-tokenizers, against HF's pre_tokenize_str ----

namespace hf = tokfeed::text::hf;
using Pieces = std::vector<std::tuple<std::string, uint32_t, uint32_t>>;

static Pieces pre_tokenize(const hf::PreTokenizer& p, std::string_view s) {
  hf::PreTokenized pt;
  pt.texts.emplace_back(s, 0u, uint32_t(s.size()));
  pt.spans.push_back({0, 0, uint32_t(s.size())});
  p.pre_tokenize(pt);
  Pieces r;
  for (const auto& span : pt.spans) {
    const auto& t = pt.texts[span.text];
    auto o = t.to_original(span.begin, span.end);
    r.emplace_back(std::string(t.text().substr(span.begin, span.end - span.begin)), o.begin, o.end);
  }
  return r;
}

static std::unique_ptr<hf::Regex> re(const std::string& p) { return std::make_unique<hf::Regex>(p, "test"); }

TEST_CASE("hf: Split behaviors and invert, empty matches included") {
  using B = hf::SplitBehavior;
  const std::string s = "baab aac";
  auto split = [&](B b, bool invert) { return pre_tokenize(hf::SplitPreTokenizer(re("a*"), b, invert), s); };
  CHECK(split(B::kRemoved, false) == Pieces{{"b", 0, 1}, {"b", 3, 4}, {" ", 4, 5}, {"c", 7, 8}});
  CHECK(split(B::kRemoved, true) == Pieces{{"aa", 1, 3}, {"aa", 5, 7}});
  const Pieces isolated{{"b", 0, 1}, {"aa", 1, 3}, {"b", 3, 4}, {" ", 4, 5}, {"aa", 5, 7}, {"c", 7, 8}};
  CHECK(split(B::kIsolated, false) == isolated);
  CHECK(split(B::kIsolated, true) == isolated);
  CHECK(split(B::kMergedWithPrevious, false) == Pieces{{"baa", 0, 3}, {"b", 3, 4}, {" aa", 4, 7}, {"c", 7, 8}});
  CHECK(split(B::kMergedWithPrevious, true) == Pieces{{"b", 0, 1}, {"aab", 1, 4}, {" ", 4, 5}, {"aac", 5, 8}});
  CHECK(split(B::kMergedWithNext, false) == Pieces{{"b", 0, 1}, {"aab", 1, 4}, {" ", 4, 5}, {"aac", 5, 8}});
  CHECK(split(B::kMergedWithNext, true) == Pieces{{"baa", 0, 3}, {"b", 3, 4}, {" aa", 4, 7}, {"c", 7, 8}});
  CHECK(split(B::kContiguous, false) == isolated);
  CHECK(split(B::kContiguous, true) == isolated);
}

TEST_CASE("hf: Digits, Metaspace and ByteLevel pre-tokenizers") {
  CHECK(pre_tokenize(hf::DigitsPreTokenizer(false), "a123b4") ==
        Pieces{{"a", 0, 1}, {"123", 1, 4}, {"b", 4, 5}, {"4", 5, 6}});
  CHECK(pre_tokenize(hf::MetaspacePreTokenizer("\xE2\x96\x81", hf::PrependScheme::kFirst, true), "hello  world") ==
        Pieces{{"\xE2\x96\x81hello", 0, 5}, {"\xE2\x96\x81", 5, 6}, {"\xE2\x96\x81world", 6, 12}});

  auto metaspace_after_x = [](hf::PrependScheme scheme) {
    std::vector<std::unique_ptr<hf::PreTokenizer>> steps;
    steps.push_back(std::make_unique<hf::SplitPreTokenizer>(re("x"), hf::SplitBehavior::kIsolated, false));
    steps.push_back(std::make_unique<hf::MetaspacePreTokenizer>("\xE2\x96\x81", scheme, true));
    return pre_tokenize(hf::SequencePreTokenizer(std::move(steps)), "ab xcd");
  };
  // "first" prepends only to the piece at original offset 0.
  CHECK(metaspace_after_x(hf::PrependScheme::kFirst) == Pieces{{"\xE2\x96\x81"
                                                                "ab",
                                                                0, 2},
                                                               {"\xE2\x96\x81", 2, 3},
                                                               {"x", 3, 4},
                                                               {"cd", 4, 6}});
  CHECK(metaspace_after_x(hf::PrependScheme::kAlways) == Pieces{{"\xE2\x96\x81"
                                                                 "ab",
                                                                 0, 2},
                                                                {"\xE2\x96\x81", 2, 3},
                                                                {"\xE2\x96\x81x", 3, 4},
                                                                {"\xE2\x96\x81"
                                                                 "cd",
                                                                 4, 6}});

  // The byte-level alphabet is applied by the model, so pieces here are raw bytes.
  const char* gpt2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
  CHECK(pre_tokenize(hf::ByteLevelPreTokenizer(true, re(gpt2)), "hello world  x") ==
        Pieces{{" hello", 0, 5}, {" world", 5, 11}, {" ", 11, 12}, {" x", 12, 14}});
  std::vector<std::unique_ptr<hf::PreTokenizer>> steps;
  steps.push_back(std::make_unique<hf::SplitPreTokenizer>(re(" "), hf::SplitBehavior::kIsolated, false));
  steps.push_back(std::make_unique<hf::ByteLevelPreTokenizer>(true, nullptr));
  // The prefix space goes on every piece that lacks one, as in HF.
  CHECK(pre_tokenize(hf::SequencePreTokenizer(std::move(steps)), "ab cd") ==
        Pieces{{" ab", 0, 2}, {" ", 2, 3}, {" cd", 3, 5}});
}

TEST_CASE("hf: regex \\s is Oniguruma's (no U+180E), \\p{L} and (?i:) work") {
  std::vector<std::pair<uint32_t, uint32_t>> m;
  re("\\s+")->find_all("a \xE1\xA0\x8E b\xC2\x85", m);  // U+180E is not a space, U+0085 is
  CHECK(m == std::vector<std::pair<uint32_t, uint32_t>>{{1, 2}, {5, 6}, {7, 9}});
  m.clear();
  re("(?i:'s|'t)|\\p{L}+")->find_all("IT'S 你好", m);
  CHECK(m == std::vector<std::pair<uint32_t, uint32_t>>{{0, 2}, {2, 4}, {5, 11}});
}
