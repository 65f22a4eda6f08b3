// Bounded work per record (daemon/src/bounded_encode.hpp): on long
// multi-turn samples built from real SFT data, the bounded encoding keeps
// exactly the ids and labels of tokenizing the whole text, for both
// tokenizer types (HF tokenizer.json and SentencePiece .model), under right,
// left and drop truncation; and it is the path taken, not a fallback.
#include <doctest/doctest.h>

#include <fstream>
#include <string>
#include <vector>

#include "encode/bounded_encode.hpp"
#include "chat/chat_template.hpp"
#include "records/records.hpp"
#include "chat/sample.hpp"
#include "tokenizer/tokenizer.hpp"
#include "tokenizer_files.hpp"

using tokfeed::test::tokenizer_json;

using namespace tokfeed::text;

namespace {

// Every record of `file`, parsed with `rules`.
std::vector<Conversation> read_conversations(const std::string& file, const RecordRules& rules) {
  std::vector<Conversation> out;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    Conversation c;
    if (!line.empty() && parse_record(line, rules, c).empty()) out.push_back(std::move(c));
  }
  return out;
}

// Conversations [from, from + n) joined into one multi-turn conversation:
// the first system message is kept, later ones are left out, so the roles
// still alternate.
Conversation join(const std::vector<Conversation>& all, std::size_t from, std::size_t n) {
  Conversation c;
  for (std::size_t i = from; i < from + n && i < all.size(); ++i)
    for (const Message& m : all[i])
      if (m.role != Role::kSystem || c.empty()) c.push_back(m);
  return c;
}

struct Case {
  std::string name;
  std::unique_ptr<Tokenizer> tok;
  Template tmpl;
};

void check_exact(const Case& k, const Rendered& r, uint32_t max_length, Truncation trunc, int& bounded,
                 int& trained_kept) {
  EncodedSample whole, part;
  std::vector<Token> s1, s2, s3;
  encode_sample(*k.tok, r, max_length, trunc, whole, s1);
  if (!tokfeed::encode_bounded(*k.tok, r, max_length, trunc, part, s2, s3)) return;
  ++bounded;
  INFO(k.name, " max_length ", max_length, " truncation ", int(trunc), " text bytes ", r.text.size());
  CHECK(part.ids == whole.ids);
  CHECK(part.labels == whole.labels);
  CHECK(part.truncated == whole.truncated);
  CHECK(part.dropped == whole.dropped);
  CHECK(part.all_masked == whole.all_masked);
  for (int32_t l : whole.labels) trained_kept += l != kIgnoreIndex;
}

}  // namespace

TEST_CASE("bounded encoding keeps exactly the tokens and labels of the whole text, both tokenizer types") {
  std::vector<Case> cases;
  cases.push_back(
      {"sp32k.model mistral",
       load_tokenizer("sentencepiece", std::string(TOKFEED_TEST_DATA) + "/tokenizers/sp32k/tokenizer.model"),
       Template::kMistral});
  cases.push_back(
      {"sp32k.model llama2",
       load_tokenizer("sentencepiece", std::string(TOKFEED_TEST_DATA) + "/tokenizers/sp32k/tokenizer.model"),
       Template::kLlama2});
  REQUIRE(!tokenizer_json("qwen3").empty());
  cases.push_back({"qwen3.json qwen2_5", load_tokenizer("hf", tokenizer_json("qwen3")), Template::kQwen2_5});
  cases.push_back({"qwen3.json chatml", load_tokenizer("hf", tokenizer_json("qwen3")), Template::kChatml});
  if (!tokenizer_json("sp32k-hf").empty())
    cases.push_back({"sp32k.json mistral", load_tokenizer("hf", tokenizer_json("sp32k-hf")), Template::kMistral});
  if (!tokenizer_json("llama3").empty())
    cases.push_back({"llama3.json llama3", load_tokenizer("hf", tokenizer_json("llama3")), Template::kLlama3});

  RecordRules rules;
  rules.require_alternation = true;
  const auto convs = read_conversations(std::string(TOKFEED_TEST_DATA) + "/sft/mixed-300.jsonl", rules);
  REQUIRE(convs.size() > 200);

  for (const Case& k : cases) {
    int bounded = 0, tried = 0, trained_kept = 0;
    for (Loss loss : {Loss::kAllAssistant, Loss::kLastAssistant, Loss::kAll}) {
      for (std::size_t from : {std::size_t{0}, std::size_t{140}}) {
        Rendered r;
        RenderOptions o;
        o.tmpl = k.tmpl;
        o.loss = loss;
        render(join(convs, from, 60), o, r);
        REQUIRE(r.text.size() > 60000);
        for (uint32_t max_length : {1u, 64u, 700u, 3000u})
          for (Truncation t : {Truncation::kRight, Truncation::kLeft, Truncation::kDrop}) {
            ++tried;
            check_exact(k, r, max_length, t, bounded, trained_kept);
          }
      }
    }
    INFO(k.name);
    // The text is 20x+ longer than the kept part in every case but the
    // largest max_length: the bounded path is the one taken.
    CHECK(bounded >= tried * 3 / 4);
    CHECK(trained_kept > 1000);  // labels were compared where they are trained
  }
}

TEST_CASE("bounded encoding of a plain-text record keeps the special tokens on the kept side") {
  // sp32k's tokenizer.json adds <s> before a sequence: kept by a right cut,
  // cut by a left one.
  REQUIRE(!tokenizer_json("sp32k-hf").empty());
  std::vector<Case> cases;
  cases.push_back({"sp32k.json", load_tokenizer("hf", tokenizer_json("sp32k-hf")), Template::kChatml});
  RecordRules rules;
  const auto convs = read_conversations(std::string(TOKFEED_TEST_DATA) + "/sft/mixed-300.jsonl", rules);
  Rendered r;
  for (const auto& c : convs)
    for (const Message& m : c) r.text += m.content + "\n\n";
  REQUIRE(r.text.size() > 60000);
  r.plain = true;
  for (const Case& k : cases) {
    const auto& specials = k.tok->sequence_specials();
    REQUIRE(specials.before.size() == 1);
    int bounded = 0, tried = 0, trained_kept = 0;
    for (uint32_t max_length : {1u, 2u, 64u, 700u, 3000u})
      for (Truncation t : {Truncation::kRight, Truncation::kLeft, Truncation::kDrop}) {
        ++tried;
        check_exact(k, r, max_length, t, bounded, trained_kept);
        EncodedSample whole;
        std::vector<Token> s;
        encode_sample(*k.tok, r, max_length, t, whole, s);
        if (t == Truncation::kRight) CHECK(whole.ids.front() == specials.before[0]);
      }
    CHECK(bounded >= tried * 2 / 3);
    // With a prompt the whole text is tokenized.
    Rendered p = r;
    p.prompt = r.text.substr(0, 100);
    EncodedSample out;
    std::vector<Token> s2, s3;
    CHECK_FALSE(tokfeed::encode_bounded(*k.tok, p, 64, Truncation::kRight, out, s2, s3));
  }
}

TEST_CASE("bounded encoding: one long message, Chinese lines and a text without a cut") {
  auto sp = load_tokenizer("sentencepiece", std::string(TOKFEED_TEST_DATA) + "/tokenizers/sp32k/tokenizer.model");
  auto qwen = load_tokenizer("hf", tokenizer_json("qwen3"));
  std::string zh;  // lines of Chinese: cuts only after newlines
  while (zh.size() < 200000) zh += "我们今天学习分词器的边界。这是第" + std::to_string(zh.size()) + "行，没有空格\n";
  std::string en;
  while (en.size() < 200000) en += "The quick brown fox jumps over the lazy dog, again and again. ";
  for (const std::string* body : {&zh, &en}) {
    for (Template tmpl : {Template::kChatml, Template::kMistral}) {
      Rendered r;
      RenderOptions o;
      o.tmpl = tmpl;
      render(Conversation{{Role::kUser, "Summarize."}, {Role::kAssistant, *body}}, o, r);
      for (Tokenizer* tok : {sp.get(), qwen.get()})
        for (Truncation t : {Truncation::kRight, Truncation::kLeft, Truncation::kDrop}) {
          EncodedSample whole, part;
          std::vector<Token> s1, s2, s3;
          encode_sample(*tok, r, 512, t, whole, s1);
          REQUIRE(tokfeed::encode_bounded(*tok, r, 512, t, part, s2, s3));
          CHECK(part.ids == whole.ids);
          CHECK(part.labels == whole.labels);
          CHECK(part.dropped == whole.dropped);
          CHECK(part.truncated == whole.truncated);
        }
    }
  }
  // One 300 KB word: no pre-token boundary to cut at, so the whole path.
  Rendered r;
  render(Conversation{{Role::kUser, "x"}, {Role::kAssistant, std::string(300000, 'a')}}, RenderOptions{}, r);
  EncodedSample out;
  std::vector<Token> s1, s2;
  CHECK_FALSE(tokfeed::encode_bounded(*qwen, r, 512, Truncation::kRight, out, s1, s2));
  CHECK_FALSE(tokfeed::encode_bounded(*qwen, r, 512, Truncation::kLeft, out, s1, s2));
  // A short text is not worth a bound.
  render(Conversation{{Role::kUser, "x"}, {Role::kAssistant, en.substr(0, 5000)}}, RenderOptions{}, r);
  CHECK_FALSE(tokfeed::encode_bounded(*qwen, r, 512, Truncation::kRight, out, s1, s2));
}

TEST_CASE("cut positions: before a space between letters, after a newline before text") {
  using tokfeed::next_cut;
  using tokfeed::prev_cut;
  std::string_view t = "ab cd\n\nef 12 gh\nij";
  CHECK(next_cut(t, 0) == 2);   // "ab| cd"
  CHECK(next_cut(t, 3) == 7);   // "\n\n|ef": the newline before is a newline run's last
  CHECK(next_cut(t, 8) == 16);  // not "ef| 12" nor "12| gh": digits are not letters
  CHECK(prev_cut(t, 15) == 7);
  CHECK(prev_cut(t, 6, 3) == std::string_view::npos);
}
