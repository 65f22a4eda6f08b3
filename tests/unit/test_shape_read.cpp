// A record's shape read from its JSON text (daemon/chat/chat_shape_read.cpp)
// must be the shape record_to_chat's values give: where Walk::read takes a
// record, its key and its holes' strings are those of Walk::run over the
// messages and tools record_to_chat reads, byte for byte, over the
// repository's and ../shared's datasets and records made to vary what the
// reader takes and leaves. And a record served from its text renders as it
// does directly.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "chat/chat_jinja.hpp"
#include "chat/shape_walk.hpp"

using namespace tokfeed;
using tmpl::Kind;
using tmpl::Value;
namespace fs = std::filesystem;

namespace {

bool same_value(const Value& a, const Value& b) {
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Kind::kStr: return a.s.unread() == b.s.unread();
    case Kind::kInt:
    case Kind::kFloat: return a.i == b.i;
    case Kind::kBool: return a.b == b.b;
    case Kind::kList: {
      const auto &x = a.list->items, &y = b.list->items;
      if (x.size() != y.size()) return false;
      for (std::size_t k = 0; k < x.size(); ++k)
        if (!same_value(x[k], y[k])) return false;
      return true;
    }
    case Kind::kDict: {
      const auto &x = a.dict->items(), &y = b.dict->items();
      if (x.size() != y.size()) return false;
      for (std::size_t k = 0; k < x.size(); ++k)
        if (x[k].first != y[k].first || !same_value(x[k].second, y[k].second)) return false;
      return true;
    }
    default: return true;
  }
}

// Records are drawn from two generators: one for their structure (their
// shape, mostly), one for their strings.
struct Gen {
  explicit Gen(uint32_t seed, uint32_t words_seed) : shape(seed), words(words_seed) {}
  std::mt19937 shape, words;
};

std::string quoted(Gen& g, const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\', out += c;
    else if (c == '\n') out += g.words() % 2 ? "\\n" : "\\u000a";
    else if (c == '\t' && g.words() % 20) out += "\\t";  // else raw: a record JSON refuses
    else out += c;
  }
  return out + "\"";
}

// A string that meets the decoder's cases: escapes, \u forms and a
// surrogate pair, multi-byte characters, lengths around its blocks.
std::string text(Gen& g) {
  static const char* kPieces[] = {"a", "word ", "\n", "\"", "\\", "é", "中文", "<tool_call>", "{\"k\": 1}", "\t"};
  std::string s;
  if (g.words() % 10 == 0) return s;
  for (int n = static_cast<int>(g.words() % 12); n-- > 0;) s += kPieces[g.words() % std::size(kPieces)];
  if (g.words() % 4 == 0) s += std::string(20 + g.words() % 60, 'x');
  return s;
}

std::string str(Gen& g) {
  if (g.words() % 16 == 0) return "\"\\u00e9\\ud83d\\ude00 x\"";
  return quoted(g, text(g));
}

const char* sep(Gen& g) {
  static const char* kSeps[] = {", ", ",", " ,\n  ", ",\t"};
  return kSeps[g.shape() % std::size(kSeps)];
}

std::string scalar(Gen& g) {
  static const char* kScalars[] = {"0",
                                   "-3",
                                   "17",
                                   "0.25",
                                   "1e5",
                                   "-2.5E-3",
                                   "true",
                                   "false",
                                   "null",
                                   "123456789012",
                                   "1.0",
                                   "-0.0",
                                   "12345678901234567890"};
  if (g.shape() % 3 == 0) return str(g);
  return kScalars[g.shape() % std::size(kScalars)];
}

std::string json_value(Gen& g, int depth) {
  switch (depth > 2 ? 0 : g.shape() % 5) {
    case 1: {
      std::string s = "[";
      for (int n = static_cast<int>(g.shape() % 4), k = 0; k < n; ++k)
        s += (k ? sep(g) : "") + json_value(g, depth + 1);
      return s + "]";
    }
    case 2: {
      static const char* kKeys[] = {"city", "query", "n", "opts", "code"};
      std::string s = "{";
      for (int n = static_cast<int>(g.shape() % 4), k = 0; k < n; ++k)
        s += std::string(k ? sep(g) : "") + "\"" + kKeys[g.shape() % std::size(kKeys)] +
             "\": " + json_value(g, depth + 1);
      return s + "}";
    }
    default: return scalar(g);
  }
}

std::string tool_call(Gen& g) {
  std::string args;
  switch (g.shape() % 4) {
    case 0: args = quoted(g, "{\"city\": \"Paris\"}"); break;
    case 1: args = "{}"; break;
    default: args = "{\"city\": " + str(g) + ", \"n\": " + scalar(g) + "}";
  }
  std::string call = "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": " + args + "}";
  if (g.shape() % 2) call += ", \"id\": \"call_" + std::to_string(g.shape() % 100) + "\"";
  return call + "}";
}

std::string message(Gen& g, bool& plain) {
  static const char* kRoles[] = {"user", "assistant", "system", "tool", "user", "assistant"};
  static const char* kOdd[] = {"tool_call", "observation", "function_call", "tool_response", "human"};
  const bool odd = g.shape() % 25 == 0;
  std::string role = odd ? kOdd[g.shape() % std::size(kOdd)] : kRoles[g.shape() % std::size(kRoles)];
  std::vector<std::string> keys;
  keys.push_back("\"role\": \"" + role + "\"");
  switch (g.shape() % 10) {
    case 0: keys.push_back("\"content\": null"); break;
    case 1: keys.push_back("\"content\": [{\"type\": \"text\", \"text\": " + str(g) + "}]"); break;
    case 2: break;  // no content
    default: keys.push_back("\"content\": " + str(g));
  }
  if (role == "assistant" && g.shape() % 3 == 0) {
    std::string calls = "\"tool_calls\": [";
    for (int n = 1 + static_cast<int>(g.shape() % 2), k = 0; k < n; ++k) calls += (k ? sep(g) : "") + tool_call(g);
    keys.push_back(calls + "]");
  }
  if (role == "tool" && g.shape() % 2) keys.push_back("\"tool_call_id\": \"call_1\"");
  switch (g.shape() % 14) {
    case 0: {
      // Reasoning under one, two or three of its names, any of them first.
      static const char* kNames[] = {"reasoning_content", "thinking", "reasoning"};
      for (int n = 0; n < 3; ++n)
        if (g.shape() % 2) keys.push_back("\"" + std::string(kNames[n]) + "\": " + str(g));
      if (g.shape() % 3 == 0) keys.push_back("\"reasoning\": " + str(g));
      break;
    }
    case 1: keys.push_back("\"loss\": " + std::string(g.shape() % 2 ? "true" : "false")); break;
    case 2: keys.push_back("\"weight\": " + scalar(g)); break;
    case 3: keys.push_back("\"meta\": " + json_value(g, 0)); break;
    case 4: keys.push_back("\"content\": \"again\""); break;  // a repeated key
    case 5: keys.push_back("\"name\": " + str(g)); break;
    default: break;
  }
  if (g.shape() % 8 == 0) std::swap(keys.front(), keys.back());
  std::string m = "{";
  for (std::size_t k = 0; k < keys.size(); ++k) m += (k ? sep(g) : "") + keys[k];
  plain = plain && !odd;
  return m + "}";
}

// A ShareGPT, alpaca or query/response record (the fields' formats).
std::string field_record(Gen& g) {
  std::vector<std::string> fields;
  auto maybe_empty = [&] { return g.shape() % 12 == 0 ? std::string("\"\"") : str(g); };
  switch (g.shape() % 3) {
    case 0: {
      static const char* kFrom[] = {"human", "gpt", "system", "user", "assistant", "observation", "tool"};
      std::string list = "[";
      for (int n = static_cast<int>(g.shape() % 5), k = 0; k < n; ++k) {
        std::string from = "\"from\": \"" + std::string(kFrom[g.shape() % std::size(kFrom)]) + "\"";
        std::string value = "\"value\": " + (g.shape() % 20 == 0 ? std::string("null") : str(g));
        std::string t = g.shape() % 10 == 0 ? value + sep(g) + from : from + sep(g) + value;
        if (g.shape() % 15 == 0) t += ", \"loss\": false";
        list += (k ? sep(g) : "") + ("{" + t + "}");
      }
      fields.push_back("\"conversations\": " + list + "]");
      break;
    }
    case 1:
      fields.push_back("\"instruction\": " + maybe_empty());
      if (g.shape() % 3) fields.push_back("\"input\": " + (g.shape() % 6 ? maybe_empty() : std::string("null")));
      if (g.shape() % 10) fields.push_back("\"output\": " + maybe_empty());
      break;
    default:
      if (g.shape() % 2) {
        std::string h = "[";
        for (int n = static_cast<int>(g.shape() % 3), k = 0; k < n; ++k)
          h += std::string(k ? sep(g) : "") + "[" + maybe_empty() + sep(g) + maybe_empty() + "]";
        fields.push_back("\"history\": " + (g.shape() % 8 ? h + "]" : std::string("[[\"q\"]]")));
      }
      fields.push_back("\"query\": " + maybe_empty());
      if (g.shape() % 10) fields.push_back("\"response\": " + (g.shape() % 9 ? maybe_empty() : std::string("7")));
  }
  switch (g.shape() % 6) {
    case 0: fields.push_back("\"system\": " + maybe_empty()); break;
    case 1: fields.push_back("\"system\": null"); break;
    case 2: fields.push_back("\"id\": " + json_value(g, 0)); break;
    default: break;
  }
  std::shuffle(fields.begin(), fields.end(), g.shape);
  std::string r = "{";
  for (std::size_t k = 0; k < fields.size(); ++k) r += (k ? sep(g) : "") + fields[k];
  return r + "}";
}

std::string record(Gen& g) {
  if (g.shape() % 3 == 0) return field_record(g);
  static const std::string kTools[] = {
      R"([{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])",
      R"([{"type": "function", "function": {"name": "run", "parameters": {"type": "object", "properties": {}}}}, {"type": "function", "function": {"name": "search"}}])"};
  std::vector<std::string> fields;
  std::string list = "[";
  bool plain = true;
  for (int n = static_cast<int>(g.shape() % 6), k = 0; k < n; ++k) list += (k ? sep(g) : "") + message(g, plain);
  fields.push_back("\"messages\": " + list + "]");
  switch (g.shape() % 8) {
    case 0:
    case 1: fields.push_back("\"tools\": " + kTools[g.shape() % 2]); break;
    case 2: fields.push_back("\"tools\": " + quoted(g, kTools[g.shape() % 2])); break;
    case 3: fields.push_back("\"tools\": null"); break;
    case 4: fields.push_back("\"tools\": [1]"); break;
    default: break;
  }
  switch (g.shape() % 8) {
    case 0: fields.push_back("\"id\": " + json_value(g, 0)); break;
    case 1: fields.push_back("\"source\": {\"a\": [1, 2, {\"b\": null}]}"); break;
    case 2: fields.push_back("\"system\": \"Be brief.\""); break;
    default: break;
  }
  if (g.shape() % 4 == 0) std::swap(fields.front(), fields.back());
  std::string r = g.shape() % 5 == 0 ? " {" : "{";
  for (std::size_t k = 0; k < fields.size(); ++k) r += (k ? sep(g) : "") + fields[k];
  return r + (g.shape() % 5 == 0 ? "}\n" : "}");
}

std::vector<std::string> records() {
  std::vector<std::string> out;
  Gen g(20261208, 1);
  for (int k = 0; k < 4000; ++k) out.push_back(record(g));
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(fs::path(TOKFEED_TEST_DATA) / "sft")) files.push_back(e.path());
  const fs::path shared = TOKFEED_SHARED_DIR;
  files.push_back(shared / "templates" / "conversations.jsonl");
  if (fs::exists(shared / "data" / "sft"))
    for (const auto& e : fs::directory_iterator(shared / "data" / "sft"))
      if (e.path().filename() != "mixed-10k.jsonl") files.push_back(e.path());
  for (const fs::path& p : files) {
    if (p.extension() != ".jsonl" || !fs::exists(p)) continue;
    std::ifstream f(p);
    for (std::string line; std::getline(f, line);)
      if (!line.empty()) out.push_back(line);
  }
  return out;
}

}  // namespace

TEST_CASE("shapes: a record's shape read from its text is the shape of its values") {
  const std::vector<std::string> recs = records();
  text::RecordRules rules;
  text::detail::Paths paths;
  for (int pass = 0; pass < 2; ++pass) {
    // The second pass: every path named so far read (part of the shape).
    if (pass == 1)
      for (uint32_t node = 0; node < paths.size(); ++node) paths.add(node);
    std::size_t taken = 0, mapped = 0;
    for (const std::string& rec : recs) {
      for (text::Loss loss : {text::Loss::kAllAssistant, text::Loss::kLastAssistant}) {
        text::detail::Walk from_text(paths), from_values(paths);
        const bool read = from_text.read(rec, text::Format::kAuto, loss);
        Value messages, tools;
        const std::string reason = text::record_to_chat(rec, rules, false, messages, tools);
        mapped += reason.empty();
        if (!read) continue;
        ++taken;
        INFO(rec);
        REQUIRE(reason == "");
        REQUIRE(from_values.run(messages, tools, loss, nullptr, nullptr));
        CHECK(from_text.key() == from_values.key());
        CHECK(from_text.bytes == from_values.bytes);
        CHECK(from_text.tools_first == from_values.tools_first);
        REQUIRE(from_text.leaves.size() == from_values.leaves.size());
        for (std::size_t k = 0; k < from_text.leaves.size(); ++k) {
          const text::detail::Leaf &a = from_text.leaves[k], &b = from_values.leaves[k];
          CHECK(a.text == b.text);
          // A string read from the text has no value; a dict held whole
          // (or a string of the tools) has one equal to the record's.
          if (a.value) CHECK(same_value(*a.value, *b.value));
          else CHECK(b.value->is_str());
        }
      }
    }
    MESSAGE("pass " << pass << ": " << taken << " of " << mapped << " records mapped to messages read from their text");
    // Most records of the messages format are read from the text.
    CHECK(taken * 3 > mapped);
  }
}

TEST_CASE("shapes: records served from their text render as they do directly") {
  // Tools dumped, tool calls' arguments dumped, roles and a reasoning
  // test read: what agent templates ask of their records.
  text::ChatSpec spec;
  spec.tmpl = tmpl::Template::parse(
      "{%- if tools %}<tools>{% for t in tools %}{{ t | tojson }}\n{% endfor %}</tools>\n{% endif %}"
      "{%- for m in messages %}<|{{ m.role }}|>"
      "{%- if m.content is string %}{{ m.content }}{% elif m.content %}{{ m.content[0].text }}{% endif %}"
      "{%- for c in m.tool_calls or [] %}<call>{{ c.function.name }} {{ c.function.arguments | tojson }}</call>"
      "{%- endfor %}{%- if m.loss is defined %}[{{ m.loss }}]{% endif %}\n{% endfor %}"
      "{%- if add_generation_prompt %}<|assistant|>{% endif %}");
  spec.name = "shape_read.jinja";
  auto shared_spec = std::make_shared<text::ChatSpec>(std::move(spec));
  text::RecordRules rules;
  rules.chat = shared_spec;
  // 60 structures, each drawn 20 times with other strings, three at a
  // time.
  std::vector<std::string> recs;
  std::mt19937 words(7);
  for (int k = 0; k < 1200; ++k) {
    Gen g(static_cast<uint32_t>(k % 3 + 3 * (k / 60)), static_cast<uint32_t>(words()));
    recs.push_back(record(g));
  }
  std::size_t compared = 0;
  for (const std::string& rec : recs) {
    Value messages, tools, m2, t2;
    text::Rendered served, direct;
    const std::string reason = text::render_chat_record(rec, rules, false, messages, tools, served);
    const std::string mapped = text::record_to_chat(rec, text::RecordRules(), false, m2, t2);
    std::string want = mapped;
    if (mapped.empty()) want = text::render_labeled_direct(*shared_spec, m2, t2, rules.loss, direct);
    INFO(rec);
    REQUIRE(reason == want);
    if (!reason.empty()) continue;
    CHECK(served.text == direct.text);
    REQUIRE(served.trained.size() == direct.trained.size());
    for (std::size_t k = 0; k < served.trained.size(); ++k) {
      CHECK(served.trained[k].begin == direct.trained[k].begin);
      CHECK(served.trained[k].end == direct.trained[k].end);
    }
    ++compared;
  }
  const text::ShapeStats st = text::render_shape_stats(*shared_spec);
  MESSAGE(compared << " records compared; " << st.served << " served from their shape, " << st.from_text
                   << " read from their text alone");
  CHECK(st.from_text > 100);
}
