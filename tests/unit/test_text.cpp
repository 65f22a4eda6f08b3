// Records, templates and labels (docs/data_model.md sections 1-3).
#include <doctest/doctest.h>

#include <algorithm>

#include "chat/chat_jinja.hpp"
#include "chat/chat_template.hpp"
#include "template/pystr.hpp"
#include "records/record_fields.hpp"
#include "records/records.hpp"
#include "chat/sample.hpp"
#include "tokenizer/tokenizer.hpp"

using namespace tokfeed::text;

TEST_CASE("formats are detected per record and mapped to roles") {
  RecordRules rules;
  Conversation c;
  CHECK(
      parse_record(
          R"({"conversations":[{"from":"system","value":"s"},{"from":"human","value":"q"},{"from":"gpt","value":"a"}]})",
          rules, c) == "");
  REQUIRE(c.size() == 3);
  CHECK(c[1].role == Role::kUser);
  CHECK(c[2].role == Role::kAssistant);
  CHECK(parse_record(R"({"instruction":"do","input":"this","output":"done"})", rules, c) == "");
  CHECK(c[0].content == "do\nthis");
  CHECK(parse_record(R"({"query":"q2","response":"r2","history":[["q1","r1"]],"system":"s"})", rules, c) == "");
  REQUIRE(c.size() == 5);
  CHECK(c[1].content == "q1");
  CHECK(c[4].content == "r2");
}

TEST_CASE("bad records say why") {
  RecordRules rules;
  Conversation c;
  CHECK(parse_record("{oops", rules, c).rfind("malformed JSON", 0) == 0);
  CHECK(parse_record(R"({"messages":[{"role":"tool","content":"x"}]})", rules, c) ==
        "unknown role 'tool' in 'messages[0]'");
  CHECK(parse_record(R"({"messages":[{"role":"user","content":1}]})", rules, c) ==
        "field 'messages[0].content': expected a string");
  CHECK(parse_record(R"({"messages":[{"role":"user","content":"x"}]})", rules, c) == "no assistant turn");
  rules.require_alternation = true;
  CHECK(parse_record(R"({"messages":[{"role":"assistant","content":"x"}]})", rules, c) ==
        "roles must alternate user/assistant");
}

TEST_CASE("plain-text records: prompt/completion and text, detected after the conversation formats") {
  RecordRules rules;
  PlainRecord p;
  std::string why;
  // Conversations are not plain, under auto; nor is a malformed record.
  CHECK_FALSE(plain_record(R"({"messages":[{"role":"user","content":"text"}],"text":"t"})", rules, false, p, why));
  CHECK_FALSE(plain_record(R"({"instruction":"i","output":"o","prompt":"p","completion":"c"})", rules, false, p, why));
  CHECK_FALSE(plain_record(R"({"text": oops)", rules, false, p, why));
  REQUIRE(plain_record(R"({"prompt":"Q: 2+2=","completion":" 4","text":"ignored"})", rules, false, p, why));
  CHECK(why == "");
  CHECK(p.prompt == std::optional<std::string>("Q: 2+2="));
  CHECK(p.text == " 4");
  // A null completion is absent: the record is a text record.
  REQUIRE(plain_record(R"({"prompt":"Q","completion":null,"text":"all of it"})", rules, false, p, why));
  CHECK(why == "");
  CHECK_FALSE(p.prompt.has_value());
  CHECK(p.text == "all of it");
  // An escaped key is still the key.
  REQUIRE(plain_record(R"({"te\u0078t":"x"})", rules, false, p, why));
  CHECK(p.text == "x");
  // Renamed columns and placeholders apply as for conversations.
  rules.columns = {{"content", "text"}};
  rules.placeholders = {{"NAME", "tokfeed"}};
  REQUIRE(plain_record(R"({"content":"I am {{NAME}}."})", rules, false, p, why));
  CHECK(p.text == "I am tokfeed.");
  CHECK(check_record(R"({"content":"{{NAME}}"})", rules) == "");
  rules.placeholders = {{"NAME", ""}};
  REQUIRE(plain_record(R"({"content":"{{NAME}}"})", rules, false, p, why));
  CHECK(why == "the text is empty once placeholders are applied");
  CHECK(check_record(R"({"content":"{{NAME}}"})", rules) == why);
}

TEST_CASE("plain-text records: bad ones say why, and a conversation format never reads them") {
  RecordRules rules;
  PlainRecord p;
  std::string why;
  auto reason = [&](const char* json) {
    REQUIRE_MESSAGE(plain_record(json, rules, false, p, why), json);
    CHECK_MESSAGE(check_record(json, rules) == why, json);  // the index gives the same verdict
    return why;
  };
  CHECK(reason(R"({"text":""})") == "field 'text' is empty");
  CHECK(reason(R"({"text":5})") == "field 'text': expected a string");
  CHECK(reason(R"({"prompt":"q","completion":""})") == "field 'completion' is empty");
  const char* chat = R"({"prompt":[{"role":"user","content":"q"}],"completion":[{"role":"assistant","content":"a"}]})";
  CHECK(reason(chat) ==
        "field 'prompt': a list of messages (a conversational prompt/completion) is rendered by a model's template: "
        "set [tokenizer] template = \"auto\" or \"jinja\", or give the conversation as 'messages'");
  // Under a model's template the conversation path reads it.
  rules.chat = builtin_chat_spec(Template::kChatml, std::nullopt);
  CHECK_FALSE(plain_record(chat, rules, false, p, why));
  rules.chat.reset();
  rules.format = Format::kPromptCompletion;
  CHECK(reason(R"({"text":"t"})") == "field 'prompt' is missing");
  CHECK(reason(R"({"prompt":"","completion":"c"})") == "");  // an empty prompt: all of the text after it trains
  rules.format = Format::kText;
  CHECK(reason(R"({"prompt":"q","completion":"c"})") == "field 'text' is missing");
  rules.format = Format::kMessages;
  CHECK_FALSE(plain_record(R"({"text":"t"})", rules, false, p, why));
  Conversation c;
  CHECK(parse_record(R"({"text":"t"})", rules, c) == "field 'messages' is missing");
  rules.format = Format::kAuto;
  CHECK(parse_record(R"({"something":"else"})", rules, c) ==
        "unrecognized record: expected 'messages', 'conversations', 'instruction'+'output', 'query'+'response', "
        "'prompt'+'completion' or 'text'");
}

TEST_CASE("plain-text records: a reader of conversations finds them in its own parse, as plain_record does") {
  const char* records[] = {
      R"({"text":"t"})",
      R"({"te\u0078t":"escaped key"})",
      R"({"text":""})",
      R"({"text":5})",
      R"({"prompt":"Q: 2+2=","completion":" 4"})",
      R"({"prompt":"q","completion":""})",
      R"({"prompt":"Q","completion":null,"text":"all of it"})",
      R"({"messages":[{"role":"user","content":"text"},{"role":"assistant","content":"a"}],"text":"t"})",
      R"({"instruction":"i","output":"o","prompt":"p","completion":"c"})",
      R"({"prompt":[{"role":"user","content":"q"}],"completion":[{"role":"assistant","content":"a"}]})",
      R"({"content":"I am {{NAME}}."})",
      R"({"something":"else"})",
      R"(["not", "an", "object"])",
      R"({"text": oops)",
  };
  tokfeed::tmpl::Value msgs, tools;
  for (Format f : {Format::kAuto, Format::kText, Format::kPromptCompletion, Format::kMessages})
    for (bool chat : {false, true})
      for (bool renamed : {false, true}) {
        RecordRules rules;
        rules.format = f;
        if (chat) rules.chat = builtin_chat_spec(Template::kChatml, std::nullopt);
        if (renamed) rules.columns = {{"content", "text"}}, rules.placeholders = {{"NAME", "tokfeed"}};
        for (const char* json : records) {
          PlainRecord p;
          std::string why;
          const bool plain = plain_record(json, rules, false, p, why);
          PlainFound found;
          std::size_t prompt = 0;
          const std::string reason = record_to_chat(json, rules, false, msgs, tools, &prompt, &found);
          INFO(std::string(json), " format ", format_name(f), chat ? " chat" : "", renamed ? " renamed" : "");
          CHECK(found.found == plain);
          // A built-in template's reader (parse_record) the same way.
          Conversation conv, conv_alone;
          PlainFound by_parse;
          const std::string parsed = parse_record(json, rules, conv, false, by_parse);
          CHECK(by_parse.found == plain);
          if (!plain) {
            CHECK(parsed == parse_record(json, rules, conv_alone));  // a conversation's verdict is unchanged
            CHECK(conv.size() == conv_alone.size());
            continue;
          }
          CHECK(reason == why);
          CHECK(parsed == why);
          if (!why.empty()) continue;
          CHECK(found.record.text == p.text);
          CHECK(found.record.prompt == p.prompt);
          CHECK(by_parse.record.text == p.text);
          CHECK(by_parse.record.prompt == p.prompt);
        }
      }
}

TEST_CASE("conversational prompt/completion: the prompt's messages, then the completion's, labelled past the prompt") {
  RecordRules rules;
  rules.chat = builtin_chat_spec(Template::kChatml, std::nullopt);
  const char* json = R"({"prompt":[{"role":"system","content":"Be brief."},{"role":"user","content":"2+2?"}],)"
                     R"("completion":[{"role":"assistant","content":"4"}]})";
  tokfeed::tmpl::Value msgs, tools;
  std::size_t n = 99;
  REQUIRE(record_to_chat(json, rules, false, msgs, tools, &n) == "");
  CHECK(n == 2);
  CHECK(msgs.list->items.size() == 3);
  // A caller that cannot label it refuses it.
  CHECK(record_to_chat(json, rules, false, msgs, tools) != "");
  Rendered r;
  REQUIRE(render_chat_record(json, rules, false, msgs, tools, r) == "");
  REQUIRE(r.prompt.has_value());
  CHECK(*r.prompt ==
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n");
  CHECK(r.text == *r.prompt + "4<|im_end|>\n");
  rules.loss = Loss::kAll;  // every token trains
  REQUIRE(render_chat_record(json, rules, false, msgs, tools, r) == "");
  CHECK_FALSE(r.prompt.has_value());
  CHECK(render_chat_record(R"({"prompt":[{"role":"user","content":"q"}],"completion":"a"})", rules, false, msgs, tools,
                           r) ==
        "field 'completion': expected a list of messages, as the other one is (or both strings)");
  CHECK(render_chat_record(R"({"prompt":[{"role":"user","content":"q"}],"completion":[{"content":"a"}]})", rules, false,
                           msgs, tools, r) == "field 'completion[0].role' is missing");
}

namespace {

// The index's verdict on `json` lying in a larger mapping (check_record in
// place: the scan first) equals the full parser's; returns whether the scan
// alone accepted it.
bool scanned_like_full_parse(const std::string& json, const RecordRules& rules) {
  std::string mapped = json + "\n{\"x\":\"\\\\" + std::string(kParsePadding, 'y');
  std::string_view in_place(mapped.data(), json.size());
  Conversation c;
  std::string full = parse_record(json, rules, c);
  bool fast = detail::scan_accepts(in_place, rules);
  CHECK_MESSAGE(check_record(in_place, rules, /*padded=*/true) == full, json);
  if (fast) CHECK_MESSAGE(full == "", json);
  return fast;
}

}  // namespace

TEST_CASE("the index's in-place scan accepts valid records and leaves the rest to the full parser") {
  RecordRules rules;
  // Valid records of every format, with every kind of value and escape: the
  // scan shows them valid by itself.
  for (
      const std::string& json : std::vector<std::string>{
          R"({"m\u0065ssages":[{"role":"user","content":"q"},{"role":"assistant","content":"a"}]})",
          R"({"messages":[{"role":"user","content":"hi\n\"x\" \\ \/ \b\f\r\t"},{"role":"assistant","content":"\u4f60\u597d \ud83d\ude00"}]})",
          R"({"conversations":[{"from":"human","value":"q"},{"from":"gpt","value":"a"}],"id":12,"score":-0.5,"ok":true,"no":false,"x":null,"meta":{"a":[1,2,{"b":"c"}]}})",
          R"({"system":"s","instruction":"do","input":"","output":"done"})",
          R"({"query":"q2","response":"r2","history":[["q1","r1"],["q\\","r\""]],"system":"s"})",
          R"({"messages":null,"messages":[1],"conversations":[{"from":"human","value":"q"},{"from":"gpt","value":"a"}]})",
      })
    CHECK_MESSAGE(scanned_like_full_parse(json, rules), json);
  // Backslash runs of every length across the 64-byte blocks.
  for (std::size_t at = 0; at < 140; ++at)
    for (const char* run :
         {R"(\\)", R"(\\\\)", R"(\\\")", R"(\n\\\\\\)", R"(\u00e9\\)", R"(\ud83d\ude00)", R"(\uD7FF\uE000\u0041)"}) {
      std::string json = R"({"instruction":")" + std::string(at, 'a') + run + R"(","output":"o"})";
      CHECK_MESSAGE(scanned_like_full_parse(json, rules), json);
    }

  // Bad \u escapes at every offset: never accepted by the scan.
  for (std::size_t at = 0; at < 140; ++at)
    for (const char* run : {R"(\u12x4)", R"(\ud83dx)", R"(\ude00)", R"(\ud83d\u0041)", R"(\uDBFF\\)", R"(\u00)"}) {
      std::string json = R"({"instruction":")" + std::string(at, 'a') + run + R"(","output":"o"})";
      CHECK_MESSAGE(!scanned_like_full_parse(json, rules), json);
    }

  // Bad records and the cases the scan leaves alone: never accepted by it,
  // and the verdict is the full parser's.
  for (const std::string& json : std::vector<std::string>{
           R"({"instruction":"\q","output":"o"})",
           R"({"instruction":"\u12","output":"o"})",
           R"({"instruction":"\ud800","output":"o"})",
           R"({"instruction":"\udc00x","output":"o"})",
           R"({"instruction":"\ud800\u0041","output":"o"})",
           R"({"instruction":"i","output":"o"} x)",
           R"({"instruction":"i","output":"o"}})",
           R"({"instruction":"i","output":"o")",
           R"({"instruction":"i","output":"o",\n"id":1})",
           R"({"instruction":"i","output":"o","id":01})",
           R"({"instruction":"i","output":"o","id":-})",
           R"({"instruction":"i","output":"o","id":tru})",
           R"({"instruction":"i","output":"o","id":1e5})",
           R"({"instruction":"i","output":"o","id":123456789012345678901234567890})",
           R"({"instruction":"i" "output":"o"})",
           R"({"messages":[{"role":"user","content":"a": "b"}},{"role":"assistant","content":"c"}]})",
           R"({"instruction":"i","output":"o","x":1: 2}, "y":3})",
           R"({"instruction":"i","output":"o",})",
           R"({"messages":[{"role":"\u0075ser","content":"q"},{"role":"assistant","content":"a"}]})",
           R"({"messages":[{"role":"user","content":""},{"role":"assistant","content":"a"}]})",
           R"({"messages":[{"role":"user","content":["q"]},{"role":"assistant","content":"a"}]})",
           R"({"query":"q","response":"r","history":[["q1"]]})",
           R"({"instruction":"i","output":"o","deep":)" + std::string(100, '[') + std::string(100, ']') + "}",
           R"(["instruction","output"])",
       })
    CHECK_MESSAGE(!scanned_like_full_parse(json, rules), json);

  // A placeholder can empty a turn: such turns go to the full parser.
  rules.placeholders = {{"EMPTY", ""}};
  CHECK(!scanned_like_full_parse(R"({"instruction":"{{EMPTY}}","output":"o"})", rules));
  CHECK(scanned_like_full_parse(R"({"instruction":"i","output":"o"})", rules));
  // Renamed fields, as the full parser reads them.
  rules.placeholders.clear();
  rules.columns = {{"prompt", "instruction"}, {"completion", "output"}, {"instruction", "query"}};
  CHECK(scanned_like_full_parse(R"({"prompt":"p","completion":"c","instruction":"x"})", rules));
  CHECK(!scanned_like_full_parse(R"({"prompt":null,"instruction":"i","output":"o"})", rules));
  CHECK(scanned_like_full_parse(R"({"prompt":"p","prompt":null,"completion":"c"})", rules));
}

TEST_CASE("placeholders are replaced in one pass") {
  std::vector<std::pair<std::string, std::string>> ph{{"NAME", "bot {{AUTHOR}}"}, {"AUTHOR", "team"}};
  CHECK(apply_placeholders("I am {{NAME}} by {{AUTHOR}}, {{OTHER}}", ph) == "I am bot {{AUTHOR}} by team, {{OTHER}}");
}

TEST_CASE("py_strip strips what Python's str.strip() strips") {
  auto py_strip = [](std::string_view s) { return tokfeed::tmpl::py_strip(s, std::nullopt, true, true); };
  CHECK(py_strip("  \t\nhi there\r\n") == "hi there");
  CHECK(py_strip("\u3000\u00a0x\u2009") == "x");
  CHECK(py_strip("\xe4\xbd\xa0") == "\xe4\xbd\xa0");  // 你 is not space
  CHECK(py_strip("") == "");
}

TEST_CASE("chat templates render the model's text and mark the trained spans") {
  Conversation c{
      {Role::kSystem, "S"}, {Role::kUser, "U"}, {Role::kAssistant, "A"}, {Role::kUser, "U2"}, {Role::kAssistant, "A2"}};
  Rendered r;
  RenderOptions o;
  o.tmpl = Template::kMistral;
  render(c, o, r);
  CHECK(r.text == "<s>[INST] S\n\nU [/INST]A</s>[INST] U2 [/INST]A2</s>");
  REQUIRE(r.trained.size() == 2);
  CHECK(r.text.substr(r.trained[0].begin, r.trained[0].end - r.trained[0].begin) == "A</s>");
  o.tmpl = Template::kLlama2;
  render(c, o, r);
  CHECK(r.text == "<s>[INST] <<SYS>>\nS\n<</SYS>>\n\nU [/INST] A </s><s>[INST] U2 [/INST] A2 </s>");
  o.tmpl = Template::kChatml;
  o.loss = Loss::kLastAssistant;
  render(c, o, r);
  CHECK(r.text ==
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\nA<|im_end|>\n"
        "<|im_start|>user\nU2<|im_end|>\n<|im_start|>assistant\nA2<|im_end|>\n");
  REQUIRE(r.trained.size() == 1);
  CHECK(r.text.substr(r.trained[0].begin, r.trained[0].end - r.trained[0].begin) == "A2<|im_end|>\n");
  o.tmpl = Template::kQwen2_5;
  o.loss = Loss::kAllAssistant;
  render(Conversation{{Role::kUser, "U"}, {Role::kAssistant, "A"}}, o, r);
  CHECK(r.text.rfind("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.", 0) ==
        0);
}

namespace {
std::string span_text(const Rendered& r, std::size_t i) {
  return r.text.substr(r.trained[i].begin, r.trained[i].end - r.trained[i].begin);
}
}  // namespace

TEST_CASE("qwen3: no default system, history loses its reasoning, the final answer gets a think block") {
  Conversation c{{Role::kUser, "U"},
                 {Role::kAssistant, "<think>\nr1\n</think>\n\nA"},
                 {Role::kUser, "U2"},
                 {Role::kAssistant, "\nA2"}};
  Rendered r;
  RenderOptions o;
  o.tmpl = Template::kQwen3;
  render(c, o, r);
  CHECK(r.text ==
        "<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\nA<|im_end|>\n"
        "<|im_start|>user\nU2<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nA2<|im_end|>\n");
  REQUIRE(r.trained.size() == 2);
  CHECK(span_text(r, 0) == "A<|im_end|>\n");
  CHECK(span_text(r, 1) == "<think>\n\n</think>\n\nA2<|im_end|>\n");
  // The final turn keeps its own reasoning; an earlier turn after the last
  // query keeps its reasoning too; a tool response is not a query.
  c = {{Role::kSystem, "S"},
       {Role::kUser, "U"},
       {Role::kAssistant, "<think>a</think>x"},
       {Role::kUser, "<tool_response>1</tool_response>"},
       {Role::kAssistant, "\n<think>\n\nb\n</think>y"}};
  o.loss = Loss::kLastAssistant;
  render(c, o, r);
  CHECK(r.text ==
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n"
        "<|im_start|>assistant\n<think>\na\n</think>\n\nx<|im_end|>\n"
        "<|im_start|>user\n<tool_response>1</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n<think>\nb\n</think>\n\ny<|im_end|>\n");
  REQUIRE(r.trained.size() == 1);
  CHECK(span_text(r, 0) == "<think>\nb\n</think>\n\ny<|im_end|>\n");
}

TEST_CASE("llama3: begin_of_text, trimmed contents, a closing assistant header") {
  Conversation c{{Role::kSystem, " S "}, {Role::kUser, "\tU\n"}, {Role::kAssistant, "  A  "}};
  Rendered r;
  RenderOptions o;
  o.tmpl = Template::kLlama3;
  render(c, o, r);
  CHECK(r.text ==
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nU<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\nA<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n");
  REQUIRE(r.trained.size() == 1);
  CHECK(span_text(r, 0) == "A<|eot_id|>");
  render(Conversation{{Role::kUser, "U"}, {Role::kAssistant, "A"}}, o, r);
  CHECK(r.text.rfind("<|begin_of_text|><|start_header_id|>user<|end_header_id|>", 0) == 0);
}

TEST_CASE("labels: a token holding any assistant byte is trained; truncation keeps labels aligned") {
  auto tok = load_tokenizer("sentencepiece", std::string(TOKFEED_TEST_DATA) + "/tokenizers/sp32k/tokenizer.model");
  Conversation c{{Role::kUser, "Hi"}, {Role::kAssistant, "Hello"}};
  Rendered r;
  RenderOptions o;
  o.tmpl = Template::kLlama2;
  render(c, o, r);
  EncodedSample s;
  std::vector<Token> scratch;
  encode_sample(*tok, r, 1000, Truncation::kRight, s, scratch);
  REQUIRE(s.ids.size() >= 4);
  CHECK(s.ids.front() == 1);  // <s> split out as its id
  CHECK(s.ids.back() == 2);   // </s>
  CHECK(s.labels.back() == 2);
  CHECK(s.labels.front() == kIgnoreIndex);
  // "▁Hello" after "[/INST] " holds assistant bytes, so it is trained.
  auto hello = std::find(s.ids.begin(), s.ids.end(), 22557);
  REQUIRE(hello != s.ids.end());
  CHECK(s.labels[hello - s.ids.begin()] == 22557);
  EncodedSample left;
  encode_sample(*tok, r, 3, Truncation::kLeft, left, scratch);
  CHECK(left.truncated);
  CHECK(std::vector<int32_t>(s.labels.end() - 3, s.labels.end()) == left.labels);
  EncodedSample dropped;
  encode_sample(*tok, r, 3, Truncation::kDrop, dropped, scratch);
  CHECK(dropped.dropped);
}
