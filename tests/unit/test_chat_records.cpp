// Records → the template's messages and tools (docs/data_model.md 1.2) with
// the tools reused from the record before (daemon/chat/record_tools.hpp):
// every record maps to the same values, reason and kinds to the bit, as it
// does with nothing kept, over the conversations and SFT data of
// ../shared and records built to differ from their neighbours' tools in one
// detail each.
#include <doctest/doctest.h>
#include <simdjson.h>

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "chat/chat_jinja.hpp"
#include "chat/record_json.hpp"
#include "chat/record_tools.hpp"
#include "template/json_value.hpp"

using namespace tokfeed;
using tmpl::Kind;
using tmpl::Value;
namespace fs = std::filesystem;

namespace {

// Equal in every respect tmpl::from_json sets: kind, flags, numbers to the
// bit, strings, key order.
bool identical(const Value& a, const Value& b) {
  if (a.kind != b.kind || a.tuple != b.tuple || a.ns != b.ns || a.gen != b.gen || a.view != b.view) return false;
  switch (a.kind) {
    case Kind::kUndefined:
    case Kind::kNone: return true;
    case Kind::kBool: return a.b == b.b;
    case Kind::kInt: return a.i == b.i;
    case Kind::kFloat: return std::memcmp(&a.f, &b.f, sizeof a.f) == 0;
    case Kind::kStr: return *a.s == *b.s;
    case Kind::kList: {
      if (a.list->items.size() != b.list->items.size()) return false;
      for (std::size_t i = 0; i < a.list->items.size(); ++i)
        if (!identical(a.list->items[i], b.list->items[i])) return false;
      return true;
    }
    case Kind::kDict: {
      if (a.dict->items().size() != b.dict->items().size()) return false;
      for (std::size_t i = 0; i < a.dict->items().size(); ++i)
        if (a.dict->items()[i].first != b.dict->items()[i].first ||
            !identical(a.dict->items()[i].second, b.dict->items()[i].second))
          return false;
      return true;
    }
    case Kind::kFunc: return false;
  }
  return false;
}

struct Mapped {
  std::string reason;
  Value messages, tools;
};

Mapped map(const std::string& rec, const text::RecordRules& rules) {
  Mapped m;
  m.reason = text::record_to_chat(rec, rules, false, m.messages, m.tools);
  return m;
}

// Maps each record with the tools of the record before kept, then with
// nothing kept: the same reason and values. Returns how many records took
// their tools from the ones kept (the very list of the record before).
std::size_t check_all(const std::vector<std::string>& records, const text::RecordRules& rules) {
  auto& cache = text::detail::ToolsCache::local();
  cache.clear();
  std::size_t reused = 0;
  Value before;  // the last tools a record took
  for (const std::string& rec : records) {
    INFO(rec.substr(0, 200));
    Mapped kept = map(rec, rules);  // as a run maps it
    if (kept.tools.is_list() && before.is_list() && kept.tools.list == before.list) ++reused;
    if (kept.tools.is_list()) before = kept.tools;
    const text::detail::ToolsCache run = cache;
    cache.clear();
    Mapped fresh = map(rec, rules);
    cache = run;  // the next record finds what the run left
    REQUIRE(kept.reason == fresh.reason);
    if (!kept.reason.empty()) continue;
    CHECK(identical(kept.messages, fresh.messages));
    CHECK(identical(kept.tools, fresh.tools));
  }
  return reused;
}

// Rules under which every turn is mapped on its own: a placeholder that
// matches nothing keeps a record's lists from being passed on or refilled
// as they are.
text::RecordRules each_turn_rules() {
  text::RecordRules rules;
  rules.placeholders = {{"NO SUCH NAME", "x"}};
  return rules;
}

std::vector<std::string> lines_of(const fs::path& file, std::size_t max) {
  std::vector<std::string> out;
  std::ifstream f(file);
  for (std::string line; std::getline(f, line) && out.size() < max;)
    if (!line.empty()) out.push_back(line);
  return out;
}

}  // namespace

TEST_CASE("records: tools kept from the record before map as built fresh, over ../shared") {
  const fs::path shared(TOKFEED_SHARED_DIR);
  if (!fs::exists(shared / "templates" / "conversations.jsonl")) return;  // ../shared is absent
  text::RecordRules rules;
  std::vector<std::string> records = lines_of(shared / "templates" / "conversations.jsonl", 300);
  CHECK(check_all(records, rules) > 80);  // the 89 with tools share one tool set
  for (const char* sft : {"messages-1k.jsonl", "sharegpt-1k.jsonl", "mixed-10k.jsonl"})
    check_all(lines_of(shared / "data" / "sft" / sft, 1000), rules);
}

TEST_CASE("records: tools that differ from the kept ones in one detail are built fresh") {
  const std::string msgs = R"("messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}])";
  auto with = [&](const std::string& tools) { return "{\"tools\": " + tools + ", " + msgs + "}"; };
  const std::string base =
      R"([{"type": "function", "function": {"name": "f", "parameters": {"x": 1, "y": [true, null, 2.5]}}}])";
  std::vector<std::string> records = {
      with(base),
      with(base),  // reused
      with(R"([{"type": "function", "function": {"name": "f", "parameters": {"x": 1.0, "y": [true, null, 2.5]}}}])"),
      with(R"([{"type": "function", "function": {"name": "f", "parameters": {"y": [true, null, 2.5], "x": 1}}}])"),
      with(
          R"([{"type": "function", "function": {"name": "f", "parameters": {"x": 1, "x": 2, "y": [true, null, 2.5]}}}])"),
      with(
          R"([{"type": "function", "function": {"name": "f", "parameters": {"x": 1, "y": [true, null, 2.50000000000000001]}}}])"),
      with(R"([{"type": "function", "function": {"name": "f", "parameters": {"x": 18446744073709551615, "y": []}}}])"),
      with(R"([{"type": "function", "function": {"name": "f", "parameters": {"x": -0.0, "y": []}}}])"),
      with(R"([{"type": "function", "function": {"name": "f", "parameters": {"x": 0.0, "y": []}}}])"),
      with(R"([{"type": "function", "function": {"name": "f\u0001", "parameters": {"\u0001x": 1}}}])"),
      with(R"([{"type": "function", "function": {"name": "f\u0001", "parameters": {"\u0001x": 1}}}])"),  // reused
      with(R"([{"type": "function", "function": {"name": "f", "parameters": {"x": 1, "y": [true, null, 2.5, 3]}}}])"),
      with(R"([[1, 2], {"a": "é\n"}])"),
      with(R"([[1, 2], {"a": "é\n", "b": false}])"),
      with(R"([[1, 2], {"a": "é\n"}])"),
      with(R"({"type": "function"})"),  // not a list
      with(R"("[{\"type\": \"function\", \"function\": {\"name\": \"g\"}}]")"),
      with(R"("[{\"type\": \"function\", \"function\": {\"name\": \"g\"}}]")"),  // reused
      with(R"("[{\"type\": \"function\", \"function\": {\"name\": \"h\"}}]")"),
      with(R"("[{\"type\": \"function\"")"),  // does not parse
      with(R"("{}")"),                        // not a list
      with(R"([])"),
      with(R"(null)"),
      R"({"tools": [1], "tools": [2], )" + msgs + "}",
      R"({"tools": [1], )" + msgs,  // malformed
      R"({"tools": [{"a": 1}], "messages": [{"role": 3}]})",
      "[1, 2]",
  };
  text::RecordRules rules;
  CHECK(check_all(records, rules) == 3);
  // Under `columns` renames nothing is kept.
  rules.columns = {{"functions", "tools"}};
  CHECK(check_all({"{\"functions\": " + base + ", " + msgs + "}", "{\"functions\": " + base + ", " + msgs + "}"},
                  rules) == 0);
}

// Mapping a record reuses the objects of values freed before it
// (Value::recycled_*): a value still held, in any part, keeps what it was
// mapped to while later records map, whether the records between were kept
// or dropped (under ASan a reuse of a freed object's memory fails here too).
TEST_CASE("records: values still held keep their contents while later records reuse freed ones") {
  const fs::path shared(TOKFEED_SHARED_DIR);
  std::vector<std::string> records;
  if (fs::exists(shared / "templates" / "conversations.jsonl"))
    records = lines_of(shared / "templates" / "conversations.jsonl", 200);
  const std::string msgs = R"("messages": [{"role": "user", "content": "a question that is longer than fifteen"},
      {"role": "assistant", "reasoning_content": "thought", "content": "x"}])";
  for (int i = 0; i < 40; ++i) {
    records.push_back("{" + msgs + "}");
    records.push_back(R"({"conversations": [{"from": "human", "value": "q)" + std::to_string(i) +
                      R"("}, {"from": "function_call", "value": "{\"name\": \"f\", \"arguments\": {\"n\": )" +
                      std::to_string(i) + R"(}}"}]})");
    records.push_back(R"({"system": "s", "tools": "[{\"name\": \"t\"}]", )" + msgs + "}");
  }
  text::RecordRules rules;
  auto repr = [](const Value& v) {
    std::string out;
    tmpl::append_repr(v, out);
    return out;
  };
  struct Held {
    Value part;  // a message, a content string or the whole list
    std::string was;
  };
  std::vector<Held> held;
  Value messages, tools;  // reused from record to record, as a worker does
  for (std::size_t r = 0; r < records.size(); ++r) {
    INFO(records[r].substr(0, 200));
    if (!text::record_to_chat(records[r], rules, false, messages, tools).empty()) continue;
    const auto& items = messages.list->items;
    switch (r % 4) {  // keep some part of every other record
      case 0: held.push_back({messages, repr(messages)}); break;
      case 1: held.push_back({items.back(), repr(items.back())}); break;
      case 2:
        if (const Value* c = items.front().dict->find("content")) held.push_back({*c, repr(*c)});
        break;
      default: break;
    }
    if (tools.is_list()) held.push_back({tools, repr(tools)});
  }
  REQUIRE(held.size() > 100);
  for (const Held& h : held) CHECK(repr(h.part) == h.was);
}

TEST_CASE("records: a message key whose value is null is left out, as transformers' chat normalization does") {
  text::RecordRules rules;
  Mapped m = map(R"({"messages": [{"role": "user", "content": "q", "name": null},
                     {"role": "assistant", "content": null, "tool_calls": [{"type": "function", "id": null,
                      "function": {"name": "f", "arguments": "{}"}}]}]})",
                 rules);
  REQUIRE(m.reason.empty());
  const auto& msgs = m.messages.list->items;
  REQUIRE(msgs.size() == 2);
  CHECK(msgs[0].dict->items().size() == 2);
  CHECK(msgs[0].dict->find("name") == nullptr);
  CHECK(msgs[1].dict->find("content") == nullptr);
  // Only the message's own keys: a null inside a tool call stays.
  const Value* calls = msgs[1].dict->find("tool_calls");
  REQUIRE((calls && calls->is_list()));
  const Value* id = calls->list->items[0].dict->find("id");
  REQUIRE(id != nullptr);
  CHECK(id->is_none());
}

TEST_CASE("records: an integer past INT64_MAX is a bad record that says so, never a float") {
  // Python's int holds 2^64 - 1 and prints it whole; the engine's ints are
  // 64-bit, so it refuses the record (docs/chat_templates.md, known differences).
  text::RecordRules rules;
  auto& cache = text::detail::ToolsCache::local();
  cache.clear();
  Mapped big = map(R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a",
                   "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"id": 18446744073709551615}}}]}]})",
                   rules);
  CHECK(big.reason ==
        "the integer 18446744073709551615 is beyond the engine's 64-bit integers (Python's are unbounded)");
  Mapped max = map(R"({"messages": [{"role": "user", "content": "q", "n": 9223372036854775807}]})", rules);
  REQUIRE(max.reason.empty());
  const Value* n = max.messages.list->items[0].dict->find("n");
  REQUIRE(n != nullptr);
  CHECK(n->kind == Kind::kInt);
  CHECK(n->i == INT64_MAX);
  // Tools kept from the record before, whose float has the integer's value as
  // a double, do not stand in for it.
  const std::string conv = R"("messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}])";
  Mapped f =
      map("{" + conv + R"(, "tools": [{"type": "function", "function": {"name": "f", "d": 1.8446744073709552e19}}]})",
          rules);
  REQUIRE(f.reason.empty());
  Mapped i =
      map("{" + conv + R"(, "tools": [{"type": "function", "function": {"name": "f", "d": 18446744073709551615}}]})",
          rules);
  CHECK(i.reason == "the integer 18446744073709551615 is beyond the engine's 64-bit integers (Python's are unbounded)");
  CHECK_THROWS_WITH_AS(
      tmpl::parse_json("[18446744073709551615]"),
      "the integer 18446744073709551615 is beyond the engine's 64-bit integers (Python's are unbounded)", tmpl::Error);
}

TEST_CASE("chat template: a tokenizer_config.json with integers past 64 bits loads; the template gets its specials") {
  // HF writes model_max_length as the integer 10^30; transformers gives the
  // template only chat_template's text and the special tokens.
  const fs::path dir = fs::temp_directory_path() / ("tokfeed-cfg-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "tokenizer_config.json") << R"({"model_max_length": 1000000000000000019884624838656,
    "added_tokens_decoder": {"0": {"content": "<s>", "n": 18446744073709551616}},
    "bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>", "chat_template": "old",
    "additional_special_tokens": ["<a>", {"content": "<b>"}], "extra": [-99999999999999999999],
    "chat_template": "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}{{ eos_token }}|{{ additional_special_tokens | join(',') }}"})";
  std::ofstream(dir / "tokenizer.json") << "{}";
  text::ChatSource src;
  src.path = (dir / "tokenizer_config.json").string();
  src.instant = "2024-07-26";
  auto spec = text::load_chat_template(src);
  tmpl::Vars vars = spec->globals;
  Value msg = Value::new_dict();
  msg.dict->set("role", Value::str("user"));
  msg.dict->set("content", Value::str("hi"));
  vars.emplace_back("messages", Value::new_list({msg}));
  CHECK(spec->tmpl.render(vars, spec->limits) == "<s>hi</s>|<a>,<b>");  // the last chat_template, as json.loads
  auto found = text::auto_chat_template((dir / "tokenizer.json").string());
  CHECK(found == dir.string());
  // special_tokens_map.json beside it wins, as in transformers; its nulls do not.
  std::ofstream(dir / "special_tokens_map.json") << R"({"eos_token": {"content": "<|end|>"}, "bos_token": null})";
  spec = text::load_chat_template(src);
  vars = spec->globals;
  vars.emplace_back("messages", Value::new_list({msg}));
  CHECK(spec->tmpl.render(vars, spec->limits) == "<s>hi<|end|>|<a>,<b>");
  fs::remove(dir / "special_tokens_map.json");
  // Malformed JSON is still refused, naming the file.
  std::ofstream(dir / "tokenizer_config.json") << R"({"chat_template": "x", "bos_token": )";
  CHECK_THROWS_WITH_AS(text::load_chat_template(src), doctest::Contains("tokenizer_config.json: malformed JSON"),
                       std::runtime_error);
  fs::remove_all(dir);
  // Llama-3's own tokenizer_config.json (model_max_length 10^30), where ../shared has it.
  const fs::path llama = fs::path(TOKFEED_SHARED_DIR) / "tokenizers/llama3/tokenizer_config.json";
  if (!fs::exists(llama)) return;
  src.path = llama.string();
  auto l = text::load_chat_template(src);
  bool bos = false;
  for (const auto& [k, v] : l->globals) bos |= k == "bos_token" && v.is_str() && *v.s == "<|begin_of_text|>";
  CHECK(bos);
}

TEST_CASE("records: an integer of 2^63 or more is a bad record, not a float that prints as another number") {
  // json.loads gives Python's int 9223372036854775808 and tojson prints it
  // so; a double would print 9.223372036854776e+18.
  text::RecordRules rules;
  const std::string tail = R"(}}}]}, {"role": "tool", "content": "r"}, {"role": "assistant", "content": "a"}]})";
  const std::string head =
      R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "", "tool_calls": [
         {"type": "function", "function": {"name": "f", "arguments": {"x": )";
  Mapped fits = map(head + "9223372036854775807" + tail, rules);
  REQUIRE(fits.reason.empty());
  const Value& args = *fits.messages.list->items[1]
                           .dict->find("tool_calls")
                           ->list->items[0]
                           .dict->find("function")
                           ->dict->find("arguments");
  CHECK(args.dict->find("x")->kind == Kind::kInt);
  for (const char* n : {"9223372036854775808", "18446744073709551615"}) {
    Mapped big = map(head + n + tail, rules);
    CHECK(big.reason ==
          std::string("the integer ") + n + " is beyond the engine's 64-bit integers (Python's are unbounded)");
  }
  // In the tools, kept from a record before or not.
  const std::string msgs = R"("messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}])";
  for (int i = 0; i < 2; ++i) {
    Mapped t = map(
        R"({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"max": 18446744073709551615}}}], )" +
            msgs + "}",
        rules);
    CHECK(t.reason.find("beyond the engine's 64-bit integers") != std::string::npos);
  }
}

TEST_CASE("records: a tool that is not an object is a bad record, as apply_chat_template refuses it") {
  // transformers takes a tool as a JSON schema (a dict) or a function and
  // raises for anything else: a list of JSON strings, one per tool, included.
  text::RecordRules rules;
  const std::string msgs = R"("messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}])";
  for (const char* tools :
       {R"(["{\"type\": \"function\", \"function\": {\"name\": \"f\"}}"])",
        R"([{"type": "function", "function": {"name": "f"}}, 1])", R"("[{\"name\": \"f\"}, [\"g\"]]")", R"([null])"}) {
    Mapped m = map("{\"tools\": " + std::string(tools) + ", " + msgs + "}", rules);
    CHECK(m.reason.find("expected an object (a tool's JSON schema)") != std::string::npos);
    CHECK(m.reason.find("field 'tools[") == 0);
  }
  for (const char* tools : {"[]", R"([{"name": "f"}])", R"("[{\"name\": \"f\"}]")"}) {
    Mapped m = map("{\"tools\": " + std::string(tools) + ", " + msgs + "}", rules);
    CHECK(m.reason.empty());
    CHECK(m.tools.is_list());
  }
}

namespace {

// `tmpl_src` rendered with the record's messages and tools, or its reason.
std::string render_record(const std::string& rec, const char* tmpl_src) {
  Mapped m = map(rec, text::RecordRules{});
  if (!m.reason.empty()) return "refused: " + m.reason;
  const tmpl::Template t = tmpl::Template::parse(tmpl_src);
  tmpl::Vars vars;
  vars.emplace_back("messages", m.messages);
  vars.emplace_back("tools", m.tools);
  return t.render(vars, tmpl::RenderLimits{});
}

}  // namespace

TEST_CASE("records: NaN, Infinity and numbers past a double reach the template as json.loads reads them") {
  // Python's json.loads takes NaN, Infinity and -Infinity (json.dumps writes
  // them) and reads 1e400 as inf; simdjson refuses all four.
  const char* args_tmpl =
      "{% for k, v in messages[1].tool_calls[0].function.arguments.items() %}"
      "{{ k }}={{ v }} {{ v | tojson }} {{ v | string }} {{ '%s' | format(v) }} {{ v > 1 }};{% endfor %}"
      "{{ tools[0].function.parameters.default }}|{{ messages[0].score }}";
  const std::string rec =
      R"({"messages": [{"role": "user", "content": "q", "score": -1e999}, {"role": "assistant", "content": "",
          "tool_calls": [{"type": "function", "function": {"name": "f", "arguments":
          {"a": NaN, "b": Infinity, "c": -Infinity, "d": 1e400, "e": -1E+309, "a": 2.5, "f": 1e-400, "g": -0.0}}}]}],
          "tools": "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"default\": NaN}}}]"})";
  CHECK(render_record(rec, args_tmpl) ==
        "a=2.5 2.5 2.5 2.5 True;b=inf Infinity inf inf True;c=-inf -Infinity -inf -inf False;"
        "d=inf Infinity inf inf True;e=-inf -Infinity -inf -inf False;f=0.0 0.0 0.0 0.0 False;"
        "g=-0.0 -0.0 -0.0 -0.0 False;nan|-inf");
  // A tool call's content given as a JSON string (ms-swift) is read the same way.
  const std::string swift =
      R"({"messages": [{"role": "user", "content": "q"}, {"role": "tool_call",
          "content": "{\"name\": \"f\", \"arguments\": {\"x\": NaN, \"y\": [Infinity, 1]}}"}]})";
  CHECK(render_record(swift, "{{ messages[1].tool_calls[0].function.arguments | tojson }}") ==
        R"({"x": NaN, "y": [Infinity, 1]})");
  // What json.loads refuses is refused, with simdjson's reason.
  for (const char* bad :
       {R"({"messages": [], "x": nan})", R"({"messages": [], "x": 01})", R"({"messages": [], "x": 1.})",
        R"({"messages": [], "x": -})", R"({"messages": [], "x": +1})", R"({"messages": [], "x": NaN )",
        R"({"messages": [], "x": [NaN,]})", R"({"messages": [], "x": "\x"})"}) {
    Mapped m = map(bad, text::RecordRules{});
    CHECK_MESSAGE(m.reason.starts_with("malformed JSON: "), bad);
  }
}

TEST_CASE("records: a lone surrogate, bytes that are not UTF-8 and integers past 64 bits are bad records saying why") {
  const std::string head = R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": )";
  // json.loads gives a str holding U+D800, which UTF-8 cannot encode: no
  // tokenizer takes the text a template prints from it.
  for (const char* s : {R"("a\ud800b")", R"("\udc00")", R"("\uD83D\u0041")", R"("\ude00\ud83d")"}) {
    Mapped m = map(head + s + "}]}", text::RecordRules{});
    CHECK_MESSAGE(m.reason.starts_with("a string holds the lone UTF-16 surrogate \\u"), s);
  }
  Mapped pair = map(head + R"("\ud83d\ude00 \uD83D\uDE00"}]})", text::RecordRules{});
  REQUIRE(pair.reason.empty());
  CHECK(*pair.messages.list->items[1].dict->find("content")->s == "\xF0\x9F\x98\x80 \xF0\x9F\x98\x80");
  CHECK(map(head + "\"a\xFF\"}]}", text::RecordRules{}).reason == "malformed JSON: not UTF-8 (byte 0xFF at offset 83)");
  CHECK(map(head + "\"\xED\xA0\x80\"}]}", text::RecordRules{}).reason ==
        "malformed JSON: not UTF-8 (byte 0xED at offset 82)");
  for (const char* n : {"18446744073709551616", "-9223372036854775809", "123456789012345678901234567890"}) {
    Mapped m = map(head + R"("a", "n": )" + n + "}]}", text::RecordRules{});
    CHECK(m.reason ==
          std::string("the integer ") + n + " is beyond the engine's 64-bit integers (Python's are unbounded)");
  }
  Mapped longer = map(head + R"("a", "n": )" + std::string(100, '7') + "}]}", text::RecordRules{});
  CHECK(longer.reason == "the integer " + std::string(40, '7') +
                             "... (100 digits) is beyond the engine's 64-bit integers (Python's are unbounded)");
}

namespace {

// What simdjson's tree and tmpl::from_json build from `rec`, or false
// where they refuse it (or it is not an object).
bool tree_value(const std::string& rec, Value& out) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (parser.parse(rec).get(root) || !root.is_object()) return false;
  try {
    out = tmpl::from_json(root);
  } catch (const tmpl::Error&) {
    return false;
  }
  return true;
}

// Reads each record as record_to_chat does (refilling the values of the
// record before): every record read builds exactly what the tree builds.
// Returns how many were read (the others are left to simdjson).
std::size_t read_all(const std::vector<std::string>& records) {
  std::size_t read = 0;
  Value prev;
  for (const std::string& rec : records) {
    INFO(rec.substr(0, 300));
    Value out;
    const bool ok = text::detail::read_record(rec, false, std::move(prev), out);
    Value tree;
    const bool parsed = tree_value(rec, tree);
    if (ok) {
      ++read;
      REQUIRE(parsed);
      CHECK(identical(out, tree));
    }
    prev = std::move(out);
  }
  return read;
}

}  // namespace

TEST_CASE("records: read without simdjson's tree, a record builds what the tree builds, or is left to it") {
  const fs::path shared(TOKFEED_SHARED_DIR);
  if (fs::exists(shared / "templates" / "conversations.jsonl")) {
    std::vector<std::string> conv = lines_of(shared / "templates" / "conversations.jsonl", 300);
    CHECK(read_all(conv) == conv.size());
    for (const char* sft :
         {"messages-1k.jsonl", "sharegpt-1k.jsonl", "alpaca-1k.jsonl", "query_response-1k.jsonl", "mixed-10k.jsonl"}) {
      std::vector<std::string> records = lines_of(shared / "data" / "sft" / sft, 2000);
      CHECK(read_all(records) * 100 >= records.size() * 95);
    }
  }
  // Every escape at every offset from a 32-byte block's start, in strings
  // with bytes over 0x7F, short and long; numbers in each form taken;
  // duplicate keys; more keys than a dict keeps in place; nesting.
  std::vector<std::string> taken;
  for (const char* esc : {R"(\")", R"(\\)", R"(\/)", R"(\b)", R"(\f)", R"(\n)", R"(\r)", R"(\t)", R"(\u00e9)",
                          R"(\u4E2D)", R"(\u0000)", R"(\ud83d\ude00)", R"(\uDBFF\uDFFF)"})
    for (std::size_t at = 0; at < 70; at += 3) {
      const std::string s = std::string(at, 'a') + esc + "\xC3\xA9 tail" + esc;
      taken.push_back(R"({"messages": [{"role": "user", "content": ")" + s + R"("}], "k": ")" + s + "\"}");
      taken.push_back(R"({"x": ")" + s + "\"}");  // the string among the record's last 32 bytes
    }
  // Runs of escapes and escapes every few bytes, from every offset of a
  // block, across block ends and into the record's last 32 bytes (a
  // block's stops are found once, the bytes after an escape moved behind
  // it; the last bytes read from a padded copy).
  const char* const kinds[] = {R"(\n)", R"(\")",     R"(\\)",           R"(\t)",
                               R"(\/)", R"(\u00e9)", R"(\ud83d\ude00)", R"(\u4e2d)"};
  for (std::size_t at = 0; at < 66; ++at)
    for (std::size_t run : {1, 2, 3, 5, 16, 33}) {
      std::string s(at, 'a');
      for (std::size_t i = 0; i < run; ++i) s += kinds[(at + i) % 8];
      s += "b\xC3\xA9" + std::string(at % 7, 'c');
      taken.push_back(R"({"x": ")" + s + "\"}");
      taken.push_back(R"({"x": ")" + s + R"(", "y": ")" + std::string(40, 'd') + "\"}");
    }
  for (std::size_t every = 1; every < 40; ++every) {
    std::string s;
    for (std::size_t i = 0; s.size() < 300; ++i)
      s += std::string(every, static_cast<char>('a' + i % 26)) + kinds[i % 8];
    taken.push_back(R"({"messages": [{"role": "user", "content": ")" + s + R"("}], "k": ")" + s.substr(every) + "\"}");
  }
  // Strings of every length up to 40 (the short ones read without a
  // call), with bytes over 0x7F at their end, right after their quote or
  // not at all, and the record's end at every distance; separators written
  // every way JSON allows.
  for (std::size_t len = 0; len <= 40; ++len)
    for (const char* tail : {"", "\xC3\xA9", "\xE4\xB8\xAD\xF0\x9F\x98\x80"}) {
      const std::string s = std::string(len, 'r') + tail;
      taken.push_back(R"({"role": ")" + s + "\"}");
      taken.push_back(R"({"role": ")" + s + "\", \"k\": \"\xC3\xA9" + std::string(len, 'z') + "\"}");
      taken.push_back(R"({"k": [")" + s + R"(", ")" + s + R"("], "z": ")" + std::string(40, 'z') + "\"}");
    }
  for (const char* sep : {"", " ", "  ", "\n", "\t", "\r\n ", " \n"}) {
    const std::string w(sep);
    taken.push_back("{" + w + R"("a")" + w + ":" + w + R"("b")" + w + "," + w + R"("c")" + w + ":" + w + "[" + w + "1" +
                    w + "," + w + R"("d")" + w + "," + w + "{" + w + R"("e")" + w + ":" + w + "null" + w + "}" + w +
                    "]" + w + "}");
    taken.push_back(R"({"messages":)" + w + R"([{"role":)" + w + R"("user",)" + w + R"("content":)" + w + R"("q"},)" +
                    w + R"({"role":)" + w + R"("assistant","content":")" + std::string(50, 'a') + R"("}]})");
  }
  taken.push_back(R"({"n": [0, -1, 7, 123456789012345678, -123456789012345678, 1.5, -0.0, 0.0, 1e5, 2.5E-3, 1E+2,
                   1e-300, 0.1, 4.9e-324, 1.7976931348623157e308, 3.14159265358979323846264]})");
  taken.push_back(R"( {"a": 1, "b": {"a": [], "c": {}}, "a": "last", "t": true, "f": false, "z": null} )");
  taken.push_back("{\"\xE4\xB8\xAD\": \"\xF0\x9F\x98\x80\", \"\": \"\"}\n");
  std::string many = "{";
  for (int i = 0; i < 40; ++i) many += "\"k" + std::to_string(i % 30) + "\": " + std::to_string(i) + ", ";
  taken.push_back(many + "\"last\": [[[[\"deep\"]]]]}");
  taken.push_back(R"({"messages": [{"role": "user", "content": "q"}], "tools": [{"name": "f"}], "tools": []})");
  CHECK(read_all(taken) == taken.size());
  // What simdjson refuses, or gives otherwise than the forms read here, is
  // left to it.
  const std::string pad(40, 'p');
  std::vector<std::string> left = {
      "{\"x\": \"" + pad + "\xFF\"}",      // not UTF-8, in a long string
      "{\"x\": \"" + pad + "\xE4\xB8\"}",  // a sequence cut by the quote
      "{\"x\": \"\xED\xA0\x80\"}",         // an encoded surrogate
      R"({"x": "a\ud800b"})",
      R"({"x": "\udc00"})",
      R"({"x": "\uD83D\u0041"})",
      "{\"x\": \"" + pad + "\tx\"}",  // a raw control character
      R"({"x": "\x"})",
      R"({"x": "\u12G4"})",
      R"({"x": "unterminated)",
      "{\"x\": \"" + pad,
      R"({"x": -0})",
      R"({"x": 1234567890123456789})",
      R"({"x": 1e400})",
      R"({"x": 1e-400})",
      R"({"x": 01})",
      R"({"x": 1.})",
      R"({"x": .5})",
      R"({"x": +1})",
      R"({"x": NaN})",
      R"({"x": tru})",
      R"({"x": 1x})",
      "{\"\\u0001k\": 1}",
      "{\"\x01k\": 1}",
      R"({"x": 1} x)",
      R"([1])",
      R"("s")",
      R"({"x": 1,})",
      R"({"x" 1})",
      "{\"x\": " + std::string(100, '[') + std::string(100, ']') + "}",
  };
  // Short strings that JSON refuses: a control character, bytes that are
  // not UTF-8, each before the quote; separators out of place.
  for (std::size_t len = 0; len < 20; ++len)
    for (const char* bad : {"\x01", "\x1F", "\xFF", "\xC3", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\xC0\xAF"}) {
      left.push_back(R"({"role": ")" + std::string(len, 'r') + bad + R"(", "k": ")" + pad + "\"}");
      left.push_back(R"({"role": ")" + std::string(len, 'r') + bad + "\"}");
    }
  for (const char* rec : {R"({"a" "b"})", R"({"a":: "b"})", R"({"a": "b",, "c": 1})", R"({"a": "b" "c": 1})",
                          R"({"a": ["b",, "c"]})", R"({"a": ["b" "c"]})", R"({"a": ["b",])", R"({"a":)",
                          R"({"a": ["b",)", "{\"a\":\v\"b\"}", "{\"a\",\"b\"}", "{\"a\":\"b\":\"c\"}"})
    left.push_back(rec);
  // A bad escape, a control character, a lone surrogate, bytes that are not
  // UTF-8 or the text's end, at every offset after plain bytes and after a
  // run of escapes, in a long string and in the record's last bytes.
  for (std::size_t at = 0; at < 66; ++at)
    for (const char* bad : {R"(\x)", "\x01", R"(\u12G4)", R"(\ud800b)", R"(\ude00)", "\xFF", "\xC3", R"(\)", ""})
      for (const char* before : {"", R"(\n\"\\)"}) {
        const std::string s = std::string(at, 'a') + before + bad;
        left.push_back(R"({"x": ")" + s);  // the text ends in the string
        if (*bad) {
          left.push_back(R"({"x": ")" + s + "\"}");
          left.push_back(R"({"x": ")" + s + R"(Xtail", "y": ")" + std::string(40, 'd') + "\"}");
        }
      }
  for (const std::string& rec : left) {
    INFO(rec);
    Value out;
    CHECK_FALSE(text::detail::read_record(rec, false, Value(), out));
  }
  // Where it is left to simdjson, record_to_chat's reason is the tree's.
  text::RecordRules rules;
  Mapped bad = map(R"({"messages": [{"role": "user", "content": "a\u12G4"}]})", rules);
  CHECK(bad.reason.starts_with("malformed JSON: "));
}

// The block loop's escapes: a run decoded from one search of its block,
// an escape whose second byte is a quote or a backslash (also a stop of
// the block), one at a block's last byte, \u escapes and pairs beside
// simple ones, and every byte a string may hold plain, at every offset of
// two blocks; what JSON refuses among them (a control character, a bad
// escape, the text's end) is left to simdjson, whose reason stands.
TEST_CASE("records: escapes in runs, at a block's end and beside quotes decode as the tree does, or are left to it") {
  std::vector<std::string> taken;
  const char* const runs[] = {
      R"(\")",         R"(\\)",         R"(\\\")",           R"(\\\\)",     R"(\"\"\")",         R"(\\\\\\\")",
      R"(\\n)",        R"(\\\\n\\)",    R"(\n\\)",           R"(\"\\\"\\)", R"(\ud83d\ude00\n)", R"(\n\ud83d\ude00\")",
      R"(\"\u00e9\\)", R"(\t\u4e2d\t)", R"(\\\ud83d\ude00)", R"(\/\b\f\r)", R"(\u005c\u0022)",   R"(\n\n\n\n\n\n)"};
  for (std::size_t at = 0; at < 70; ++at)
    for (const char* run : runs) {
      const std::string s = std::string(at, 'a') + run;
      taken.push_back(R"({"x": ")" + s + R"(", "y": ")" + std::string(70, 'd') + "\"}");
      taken.push_back(R"({"x": ")" + s + "b\"}");  // in the record's last bytes
      taken.push_back(R"({"x": ")" + s + run + std::string(at % 5, 'c') + run + R"(", "y": 1})");
    }
  // Every byte JSON takes plain (0x20-0x7F but the quote and the
  // backslash; over 0x7F as UTF-8) after an escape and before the next one.
  for (int b = 0x20; b < 0x80; ++b) {
    if (b == '"' || b == '\\') continue;
    const std::string c(1, static_cast<char>(b));
    for (std::size_t at = 25; at < 40; ++at)
      taken.push_back(R"({"x": ")" + std::string(at, 'a') + R"(\n)" + c + R"(\")" + c + c + "\xC3\xA9" + c +
                      R"(", "y": ")" + std::string(70, 'd') + "\"}");
  }
  CHECK(read_all(taken) == taken.size());
  // Known values, decoded in the block loop (a long string) and in the
  // record's last bytes.
  for (const std::string& pad : {std::string(29, 'a'), std::string(30, 'a'), std::string(31, 'a'), std::string()}) {
    Value out;
    const std::string rec = R"({"x": ")" + pad + R"(\"\\n\\\"", "y": ")" + pad + R"(\n\ud83d\ude00\t"})";
    REQUIRE(text::detail::read_record(rec, false, Value(), out));
    CHECK(*out.dict->find("x")->s == pad + "\"\\n\\\"");
    CHECK(*out.dict->find("y")->s == pad + "\n\xF0\x9F\x98\x80\t");
  }
  // Left to simdjson: a control character (every one) right after a run of
  // escapes, after an escape at a block's last byte, or one that follows
  // an escaped backslash; a bad escape after a run; a string whose text
  // ends after an escaped quote.
  std::vector<std::string> left;
  for (int c = 0; c < 0x20; ++c)
    for (std::size_t at : {0, 1, 28, 29, 30, 31, 32, 33, 62, 63}) {
      const std::string ctl(1, static_cast<char>(c));
      for (const char* before : {R"(\n\"\\)", R"(\")", R"(\\)", R"(\ud83d\ude00)"}) {
        const std::string s = std::string(at, 'a') + before + ctl;
        left.push_back(R"({"x": ")" + s + R"(tail", "y": ")" + std::string(70, 'd') + "\"}");
        left.push_back(R"({"x": ")" + s + "\"}");
      }
    }
  for (std::size_t at = 0; at < 70; ++at) {
    for (const char* bad : {R"(\n\x)", R"(\"\')", R"(\\\ )", R"(\t\u12G4)", R"(\n\ud800\n)"}) {
      const std::string s = std::string(at, 'a') + bad;
      left.push_back(R"({"x": ")" + s + R"(tail", "y": ")" + std::string(70, 'd') + "\"}");
      left.push_back(R"({"x": ")" + s);
    }
    for (const char* cut : {R"(\")", R"(\\\")", R"(\n\")"}) left.push_back(R"({"x": ")" + std::string(at, 'a') + cut);
  }
  for (const std::string& rec : left) {
    INFO(rec);
    Value out;
    CHECK_FALSE(text::detail::read_record(rec, false, Value(), out));
  }
  // record_to_chat's reason for those is the one simdjson's parse and the
  // Python-json reader after it give.
  text::RecordRules rules;
  simdjson::dom::parser parser;
  for (std::size_t i = 0; i < left.size(); i += 3) {  // a sample: each is parsed twice over
    const std::string& rec = left[i];
    INFO(rec);
    simdjson::dom::element root;
    const auto err = parser.parse(rec).get(root);
    REQUIRE(err);
    std::string expected;
    try {
      tmpl::parse_python_json(rec, simdjson::error_message(err));
    } catch (const tmpl::Error& e) {
      expected = e.what();
    }
    REQUIRE_FALSE(expected.empty());
    CHECK(map(rec, rules).reason == expected);
  }
}

// Alpaca and query/response records map to the messages of the conversation
// parse_record reads from simdjson's tree, with its reason where it refuses
// one: over ../shared's sets and records built to fail each check in turn,
// under each format and with placeholders.
TEST_CASE("records: alpaca and query/response records map to parse_record's conversation, reasons alike") {
  const fs::path shared(TOKFEED_SHARED_DIR);
  std::vector<std::string> records;
  if (fs::exists(shared / "data" / "sft" / "alpaca-1k.jsonl"))
    for (const char* sft : {"alpaca-1k.jsonl", "query_response-1k.jsonl"})
      for (std::string& r : lines_of(shared / "data" / "sft" / sft, 1000)) records.push_back(std::move(r));
  const std::vector<std::string> built = {
      R"({"instruction": "i", "output": "o"})",
      R"({"instruction": "i", "input": "", "output": "o"})",
      R"({"instruction": "i", "input": "x", "output": "o"})",
      R"({"instruction": "i", "input": null, "output": "o"})",
      R"({"instruction": "i", "input": 3, "output": "o"})",
      R"({"instruction": 1, "output": "o"})",
      R"({"instruction": 1, "input": 2, "output": 3})",
      R"({"instruction": "i", "input": 2, "output": 3})",
      R"({"instruction": 1})",
      R"({"output": "o"})",
      R"({"instruction": "i", "output": null})",
      R"({"instruction": "", "output": "o"})",
      R"({"instruction": "", "input": "x", "output": "o"})",
      R"({"instruction": "i", "output": ""})",
      R"({"instruction": "i", "output": ["o"]})",
      R"({"system": "s", "instruction": "i", "output": "o"})",
      R"({"system": 5, "instruction": "i", "output": "o"})",
      R"({"system": 5})",
      R"({"system": null, "instruction": "i", "output": "o"})",
      R"({"system": "", "instruction": "i", "output": "o"})",
      R"({"instruction": "a", "output": "b", "instruction": "c"})",
      R"({"instruction": null, "output": "b", "instruction": "c"})",
      R"({"instruction": "a", "output": "b", "instruction": null})",
      R"({"query": "q", "response": "r"})",
      R"({"query": "q", "response": "r", "history": [["a", "b"], ["c", "d"]]})",
      R"({"history": [["a", "b"]], "query": "q", "response": "r", "system": "s"})",
      R"({"query": "q", "response": "r", "history": []})",
      R"({"query": "q", "response": "r", "history": null})",
      R"({"query": "q", "response": "r", "history": "x"})",
      R"({"query": "q", "response": "r", "history": [["a", "b"], ["a"]]})",
      R"({"query": "q", "response": "r", "history": [["a", "b", "c"]]})",
      R"({"query": "q", "response": "r", "history": ["ab"]})",
      R"({"query": "q", "response": "r", "history": [["a", "b"], [1, "b"]]})",
      R"({"query": "q", "response": "r", "history": [["a", 2]]})",
      R"({"query": "q", "response": "r", "history": [["", "b"]]})",
      R"({"query": "q", "response": "", "history": [["a", "b"]]})",
      R"({"query": 1, "response": "r"})",
      R"({"query": "q", "response": 2})",
      R"({"query": "q"})",
      R"({"response": "r", "history": 1})",
      R"({"query": "q", "response": "r", "query": "z"})",
      R"({"instruction": "i", "output": "o", "query": "q", "response": "r"})",
      R"({"instruction": "i", "query": "q", "response": "r"})",
      R"({"text": "t"})",
      R"({"prompt": "p"})",
      R"({})",
      R"({"other": 1})",
      R"({"instruction": "{{NAME}} i", "input": "{{NAME}}", "output": "{{NAME}}"})",
      R"({"instruction": "{{EMPTY}}", "output": "o"})",
      R"({"query": "q", "response": "{{EMPTY}}"})",
      R"({"instruction": "\u00e9\n\"", "input": "\ud83d\ude00", "output": "o\\"})",
      R"({"instruction": "i", "output": "o", "n": NaN})",
  };
  records.insert(records.end(), built.begin(), built.end());
  std::string many = R"({"instruction": "i", "output": "o")";
  for (int i = 0; i < 20; ++i) many += ", \"k" + std::to_string(i) + "\": " + std::to_string(i);
  records.push_back(many + "}");
  std::size_t mapped = 0;
  for (text::Format format : {text::Format::kAuto, text::Format::kAlpaca, text::Format::kQueryResponse})
    for (bool placeholders : {false, true}) {
      text::RecordRules rules;
      rules.format = format;
      if (placeholders) rules.placeholders = {{"NAME", "Ann"}, {"EMPTY", ""}};
      for (const std::string& rec : records) {
        INFO(rec.substr(0, 200));
        INFO(text::format_name(format) << (placeholders ? " with placeholders" : ""));
        Mapped m = map(rec, rules);
        text::Conversation conv;
        const std::string want = text::parse_record(rec, rules, conv);
        CHECK(m.reason == want);
        if (!m.reason.empty() || !want.empty()) continue;
        ++mapped;
        CHECK(identical(m.messages, text::conversation_messages(conv)));
      }
    }
  CHECK(mapped > 4000);
}

// A message that maps to itself (no null value, no reasoning under any of
// its names, no tool call or tool response role) is passed on as the record
// holds it: the same messages as each one mapped on its own, which
// placeholders that match nothing force.
TEST_CASE("records: messages passed on as the record holds them map as each mapped on its own") {
  const fs::path shared(TOKFEED_SHARED_DIR);
  std::vector<std::string> records = {
      R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]})",
      R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a", "thinking": "t"}]})",
      R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a", "reasoning": "t"}]})",
      R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "reasoning_content": "t", "content": "a"}]})",
      R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a", "thinking": null}]})",
      R"({"messages": [{"role": "user", "content": "q", "name": null}, {"role": "assistant", "content": "a"}]})",
      R"({"messages": [{"role": "user", "content": "q"}, {"role": "tool_call", "content": "{\"name\": \"f\"}"},
                       {"role": "observation", "content": "r"}, {"role": "assistant", "content": "a"}]})",
      R"({"messages": [{"role": "user", "content": "q"}, {"role": "function_call", "content": {"name": "f"}},
                       {"role": "tool_response", "content": "r"}, {"role": "assistant", "content": "a"}]})",
      R"({"messages": [{"role": "user", "content": "q"}, {"role": "tool", "content": "r"}]})",
      R"({"system": "s", "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]})",
      R"({"system": "s", "messages": [{"role": "system", "content": "t"}, {"role": "user", "content": "q"}]})",
      R"({"messages": [{"role": "user", "content": "q"}, 3]})",
      R"({"messages": [{"content": "q"}]})",
      R"({"messages": [{"role": 1, "content": "q"}]})",
      R"({"messages": []})",
      R"({"messages": [{"role": "user", "content": "q", "role": "assistant"}]})",
  };
  if (fs::exists(shared / "templates" / "conversations.jsonl"))
    for (std::string& r : lines_of(shared / "templates" / "conversations.jsonl", 300)) records.push_back(std::move(r));
  if (fs::exists(shared / "data" / "sft" / "messages-1k.jsonl"))
    for (const char* sft : {"messages-1k.jsonl", "mixed-10k.jsonl"})
      for (std::string& r : lines_of(shared / "data" / "sft" / sft, 1000)) records.push_back(std::move(r));
  const text::RecordRules as_is;
  const text::RecordRules each = each_turn_rules();
  std::size_t passed = 0;
  for (const std::string& rec : records) {
    INFO(rec.substr(0, 200));
    text::detail::ToolsCache::local().clear();
    Mapped a = map(rec, as_is);
    text::detail::ToolsCache::local().clear();
    Mapped b = map(rec, each);
    REQUIRE(a.reason == b.reason);
    if (!a.reason.empty()) continue;
    CHECK(identical(a.messages, b.messages));
    CHECK(identical(a.tools, b.tools));
    ++passed;
  }
  CHECK(passed > 1500);
}

// ShareGPT turns of `from` and `value` alone are mapped without a dict per
// turn, into dicts kept from one record to the next: the same messages as
// every turn mapped on its own (placeholders that match nothing force that
// path), over records of changing lengths and kinds, and messages a caller
// still holds keep what they were while later records map.
TEST_CASE("records: ShareGPT turns of from and value alone map as each mapped on its own, kept or held") {
  const fs::path shared(TOKFEED_SHARED_DIR);
  auto conv = [](const std::string& turns, const std::string& more = "") {
    return R"({"conversations": [)" + turns + "]" + more + "}";
  };
  const std::string q = R"({"from": "human", "value": "q"})", a = R"({"from": "gpt", "value": "a"})";
  std::vector<std::string> records = {
      conv(q + ", " + a),
      conv(R"({"from": "system", "value": "s"}, )" + q + ", " + a),
      conv(q),
      conv(q + ", " + a + ", " + q + ", " + a + ", " + q),
      conv(q + ", " + a, R"(, "system": "top")"),
      conv(R"({"from": "system", "value": "s"}, )" + q, R"(, "system": "top")"),
      conv(R"({"value": "q2", "from": "human"}, {"value": "a2", "from": "gpt"})"),
      conv(R"({"from": "user", "value": "q"}, {"from": "assistant", "value": "a"}, {"from": "HUMAN", "value": ""})"),
      conv(
          R"({"from": "human", "value": 3}, {"from": "gpt", "value": [1, {"x": null}]}, {"from": "gpt", "value": {}})"),
      conv(R"({"from": "human", "value": null}, )" + a),
      conv(q + R"(, {"from": "gpt", "value": "a", "loss": false})"),
      conv(q + R"(, {"from": "gpt", "value": "a", "thinking": "t"})"),
      conv(R"({"from": "human", "value": "q", "role": "x"}, )" + a),
      conv(q + R"(, {"from": "function_call", "value": "{\"name\": \"f\"}"}, {"from": "observation", "value": "r"})"),
      conv(q + R"(, {"from": "tool_call", "value": {"name": "f"}}, {"from": "tool_response", "value": "r"}, )" + a),
      conv(R"({"from": "human"}, )" + a),
      conv(R"({"from": 1, "value": "q"})"),
      conv(R"({"from": "human", "value": "q", "from": "gpt"}, )" + a),
      conv(R"({"from": "human", "value": "q", "value": "q3"}, )" + a),
      conv(q + ", 3"),
      conv(""),
      conv(q + ", " + a, R"(, "tools": [{"type": "function", "function": {"name": "f"}}])"),
      conv(R"({"from": "human", "value": "\u4e2d\n\"x\""}, {"from": "gpt", "value": "é"})"),
      conv(q + ", " + a),
  };
  const std::size_t built = records.size();
  if (fs::exists(shared / "data" / "sft" / "sharegpt-1k.jsonl"))
    for (const char* sft : {"sharegpt-1k.jsonl", "mixed-10k.jsonl"})
      for (std::string& r : lines_of(shared / "data" / "sft" / sft, 1000)) records.push_back(std::move(r));
  const text::RecordRules as_is;
  const text::RecordRules each = each_turn_rules();
  std::vector<Mapped> held;  // every other record's messages, kept while the rest map
  std::size_t passed = 0;
  for (std::size_t i = 0; i < records.size(); ++i) {
    const std::string& rec = records[i];
    INFO(rec.substr(0, 200));
    Mapped kept = map(rec, as_is);
    if (i % 2 == 0 && held.size() < 200) held.push_back(kept);
    Mapped fresh = map(rec, each);
    REQUIRE(kept.reason == fresh.reason);
    if (!kept.reason.empty()) continue;
    CHECK(identical(kept.messages, fresh.messages));
    CHECK(identical(kept.tools, fresh.tools));
    ++passed;
  }
  CHECK(passed >= built - 6);
  if (records.size() > built) CHECK(passed > 1700);
  // What a caller held stayed as it was mapped.
  for (std::size_t i = 0; i < held.size(); ++i) {
    const std::string& rec = records[2 * i];
    INFO(rec.substr(0, 200));
    Mapped again = map(rec, each);
    REQUIRE(again.reason == held[i].reason);
    if (!again.reason.empty()) continue;
    CHECK(identical(held[i].messages, again.messages));
  }
  // Turns of `from` and `value` alone share the record's strings.
  Mapped m = map(conv(R"({"from": "system", "value": "s"}, )" + q + ", " + a), as_is);
  REQUIRE(m.reason.empty());
  REQUIRE(m.messages.list->items.size() == 3);
  CHECK(*m.messages.list->items[0].dict->find("role")->s == "system");
  CHECK(*m.messages.list->items[1].dict->find("role")->s == "user");
  CHECK(*m.messages.list->items[2].dict->find("role")->s == "assistant");
  CHECK(*m.messages.list->items[2].dict->find("content")->s == "a");
}

// Dicts a shorter list left over are kept for a longer list after it
// (record_json.cpp, SpareDicts): lists of messages that shrink and grow,
// dicts holding nested values, big strings and keys of every kind, read
// as the tree reads them; a dict a caller still holds is never refilled;
// and the dicts a list dropped are the ones a longer list after it takes.
TEST_CASE("records: dicts a shorter list left are refilled by a longer one, never one a caller holds") {
  auto msg = [](int i, const std::string& extra = "") {
    return R"({"role": ")" + std::string(i % 2 ? "assistant" : "user") + R"(", "content": "m)" + std::to_string(i) +
           "\"" + extra + "}";
  };
  auto rec = [&](int n, const std::string& extra = "") {
    std::string s = R"({"messages": [)";
    for (int i = 0; i < n; ++i) s += (i ? ", " : "") + msg(i, i == n - 1 ? extra : "");
    return s + "]}";
  };
  const std::string big(20000, 'b');
  std::vector<std::string> records;
  for (int round = 0; round < 3; ++round)
    for (int n : {5, 2, 7, 1, 3, 8, 0, 4, 6})
      for (const std::string& extra :
           {std::string(), std::string(R"(, "tool_calls": [{"name": "f", "arguments": {"a": [1, 2]}}])"),
            R"(, "big": ")" + big + "\"", std::string(R"(, "n": 1.5, "b": true, "z": null, "d": {})")})
        records.push_back(rec(n, extra));
  // The tree's values, record by record, with the previous record refilled.
  CHECK(read_all(records) == records.size());
  // Held items of a list keep what they were while later lists take dicts
  // from the spare.
  Value prev;
  std::vector<std::pair<Value, Value>> held;  // an item held, and a copy built fresh
  for (std::size_t r = 0; r < records.size(); ++r) {
    INFO(records[r].substr(0, 200));
    Value out;
    REQUIRE(text::detail::read_record(records[r], false, std::move(prev), out));
    const auto& items = out.dict->find("messages")->list->items;
    if (r % 3 == 0 && !items.empty()) {
      Value fresh;
      REQUIRE(tree_value(records[r], fresh));
      held.push_back({items.back(), fresh.dict->find("messages")->list->items.back()});
    }
    prev = std::move(out);
  }
  REQUIRE(held.size() > 20);
  for (const auto& [part, fresh] : held) CHECK(identical(part, fresh));
  // Five dicts, then two: the three left over are the ones five after take.
  prev = Value();
  Value out;
  REQUIRE(text::detail::read_record(rec(5), false, std::move(prev), out));
  std::vector<const void*> dropped;
  for (std::size_t i = 2; i < 5; ++i) dropped.push_back(out.dict->find("messages")->list->items[i].dict.raw());
  REQUIRE(text::detail::read_record(rec(2), false, std::move(out), prev));
  REQUIRE(text::detail::read_record(rec(5), false, std::move(prev), out));
  std::vector<const void*> taken;
  for (std::size_t i = 2; i < 5; ++i) taken.push_back(out.dict->find("messages")->list->items[i].dict.raw());
  std::sort(dropped.begin(), dropped.end());
  std::sort(taken.begin(), taken.end());
  CHECK(taken == dropped);
  Value tree;
  REQUIRE(tree_value(rec(5), tree));
  CHECK(identical(out, tree));
}

// The messages of alpaca and query/response records are kept from one
// record to the next and refilled (chat_messages.cpp, field_messages):
// over records of changing lengths, refused ones between them and
// placeholders, each maps to parse_record's conversation; messages a
// caller still holds keep what they were; and a record's messages reuse
// the list of the record before where nothing else holds it.
TEST_CASE("records: alpaca and query/response messages refilled from record to record map as built fresh") {
  const std::vector<std::string> records = {
      R"({"instruction": "i", "output": "o"})",
      R"({"system": "s", "instruction": "i", "input": "x", "output": "o"})",
      R"({"query": "q", "response": "r", "history": [["a", "b"], ["c", "d"], ["e", "f"]]})",
      R"({"instruction": "", "output": "o"})",
      R"({"query": "q", "response": "r"})",
      R"({"query": "q", "response": "", "history": [["a", "b"]]})",
      R"({"system": "s", "query": "q", "response": "r", "history": [["a", "b"]]})",
      R"({"instruction": "{{NAME}}", "input": "{{NAME}}", "output": "o"})",
      R"({"query": "q", "response": "r", "history": [["", "b"], ["c", "d"]]})",
      R"({"instruction": "i", "output": "o", "extra": [1, {"k": "v"}]})",
      R"({"system": "\u00e9", "query": "q\n", "response": "r\"", "history": [["a", "b"], ["c", "d"], ["e", "f"]]})",
  };
  std::size_t mapped = 0;
  for (bool placeholders : {false, true}) {
    text::RecordRules rules;
    if (placeholders) rules.placeholders = {{"NAME", "Ann"}};
    std::vector<std::pair<Value, std::string>> held;
    auto repr = [](const Value& v) {
      std::string out;
      tmpl::append_repr(v, out);
      return out;
    };
    for (int round = 0; round < 4; ++round)
      for (std::size_t r = 0; r < records.size(); ++r) {
        INFO(records[r]);
        Mapped m = map(records[r], rules);
        text::Conversation conv;
        const std::string want = text::parse_record(records[r], rules, conv);
        REQUIRE(m.reason == want);
        if (!want.empty()) continue;
        ++mapped;
        CHECK(identical(m.messages, text::conversation_messages(conv)));
        // The list held, or a message of it alone.
        if ((r + round) % 3 == 0) held.push_back({m.messages, repr(m.messages)});
        if ((r + round) % 3 == 1) held.push_back({m.messages.list->items.back(), repr(m.messages.list->items.back())});
      }
    for (const auto& [part, was] : held) CHECK(repr(part) == was);
  }
  CHECK(mapped > 60);
  // Nothing held: the next record's messages are the same list and dicts.
  text::RecordRules rules;
  const void* list = nullptr;
  const void* first = nullptr;
  {
    Mapped m = map(records[0], rules);
    REQUIRE(m.reason.empty());
    list = m.messages.list.raw();
    first = m.messages.list->items[0].dict.raw();
  }
  Mapped m = map(records[4], rules);
  REQUIRE(m.reason.empty());
  CHECK(m.messages.list.raw() == list);
  CHECK(m.messages.list->items[0].dict.raw() == first);
  CHECK(*m.messages.list->items[0].dict->find("content")->s == "q");
}
