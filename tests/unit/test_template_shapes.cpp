// One render per shape (daemon/chat/chat_shapes.cpp): render_labeled
// serves a record from the skeleton of an earlier record of its shape. Each
// record must come out as rendering it gives (render_labeled_direct): the
// same text, trained spans and refusal, over records made to vary what the
// templates ask of their strings.
#include <doctest/doctest.h>

#include <random>
#include <string>
#include <vector>

#include "chat/chat_jinja.hpp"
#include "template/json_value.hpp"

using namespace tokfeed;
using tmpl::Value;

namespace {

text::ChatSpec spec_of(const std::string& src) {
  text::ChatSpec s;
  s.tmpl = tmpl::Template::parse(src);
  s.name = "shapes.jinja";
  return s;
}

std::string json_str(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\', out += c;
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out + "\"";
}

// A message's text from pieces that meet the templates' literals and
// questions: tags, whitespace at the edges, a first byte that some
// literals share, multi-byte characters; one in twelve is empty.
std::string content(std::mt19937& rng, bool plain = false) {
  static const char* kPieces[] = {"a",
                                  "A",
                                  " ",
                                  "\n",
                                  "<",
                                  "<think>",
                                  "</think>",
                                  "<|im_start|>",
                                  "é",
                                  "中",
                                  "x y",
                                  "tool",
                                  "<tool_response>",
                                  "</tool_response>"};
  if (!plain && rng() % 12 == 0) return "";
  // Plain: a word first (never blank, the same first letter), then the
  // same pieces, whitespace at the end or not.
  std::string s = plain ? "w" : "";
  for (int n = 1 + static_cast<int>(rng() % 5); n-- > 0;) s += kPieces[rng() % std::size(kPieces)];
  return s;
}

// A conversation: a system message or not, then one to three turns; an
// assistant message may carry its own "loss", or reasoning_content. Plain:
// a system message and one or two turns, their texts never empty (a
// dataset of a few shapes).
std::string record(std::mt19937& rng, bool plain) {
  std::string m = "{\"messages\": [";
  bool first = true;
  auto add = [&](const std::string& role, const std::string& extra) {
    if (!first) m += ", ";
    first = false;
    m += "{\"role\": \"" + role + "\", \"content\": " + json_str(content(rng, plain)) + extra + "}";
  };
  if (plain || rng() % 2) add("system", "");
  for (int turns = 1 + static_cast<int>(rng() % (plain ? 2 : 3)); turns-- > 0;) {
    add("user", "");
    std::string extra;
    if (!plain && rng() % 6 == 0) extra += ", \"loss\": " + std::string(rng() % 2 ? "true" : "false");
    if (!plain && rng() % 5 == 0) extra += ", \"reasoning_content\": " + json_str(content(rng));
    add("assistant", extra);
  }
  return m + "]}";
}

struct Outcome {
  std::string reason, text;
  std::vector<std::pair<uint32_t, uint32_t>> spans;
  bool operator==(const Outcome&) const = default;
};

Outcome outcome(const std::string& reason, const text::Rendered& r) {
  Outcome o{reason, reason.empty() ? r.text : std::string(), {}};
  if (reason.empty())
    for (const text::Span& s : r.trained) o.spans.emplace_back(s.begin, s.end);
  return o;
}

// Renders the record `rec` (JSON, no tools) both ways under the default
// loss: the same outcome.
void require_as_direct(const text::ChatSpec& spec, const std::string& rec) {
  const Value doc = tmpl::parse_json(rec);
  const Value& messages = *doc.dict->find("messages");
  text::Rendered a, b;
  const Outcome served = outcome(text::render_labeled(spec, messages, Value::none(), text::Loss::kAllAssistant, a), a);
  const Outcome direct =
      outcome(text::render_labeled_direct(spec, messages, Value::none(), text::Loss::kAllAssistant, b), b);
  REQUIRE(served == direct);
}

// Renders `n` records both ways under each loss (a template of its own,
// whose shapes start empty); returns the shapes' counts, added up.
text::ShapeStats check_template(const std::string& src, int n, unsigned seed, bool plain = false) {
  text::ShapeStats all;
  for (text::Loss loss : {text::Loss::kAllAssistant, text::Loss::kLastAssistant, text::Loss::kAll}) {
    const text::ChatSpec spec = spec_of(src);
    std::mt19937 rng(seed);
    for (int k = 0; k < n; ++k) {
      const std::string rec = record(rng, plain);
      const Value doc = tmpl::parse_json(rec);
      const Value& messages = *doc.dict->find("messages");
      const Value tools = Value::none();
      text::Rendered a, b;
      const Outcome served = outcome(text::render_labeled(spec, messages, tools, loss, a), a);
      const Outcome direct = outcome(text::render_labeled_direct(spec, messages, tools, loss, b), b);
      INFO("record ", k, ": ", rec, " loss ", static_cast<int>(loss));
      REQUIRE(served == direct);
    }
    const text::ShapeStats st = text::render_shape_stats(spec);
    all.records += st.records, all.served += st.served, all.learnt += st.learnt;
  }
  return all;
}

}  // namespace

TEST_CASE("shapes: strings copied on as they are") {
  const auto st = check_template(
      "{% for m in messages %}<|im_start|>{{ m.role + '\\n' + m.content }}<|im_end|>\n{% endfor %}"
      "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
      300, 1, true);
  CHECK(st.records == 900);
  CHECK(st.served > 850);  // 6 shapes, each rendered once
  // A dataset of many shapes: served or not, each record as it renders.
  check_template(
      "{% for m in messages %}<|im_start|>{{ m.role + '\\n' + m.content }}<|im_end|>\n{% endfor %}"
      "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
      300, 11);
}

TEST_CASE("shapes: a filter and methods answered from the record (trim, strip, startswith, length)") {
  const auto st = check_template(
      "{% for m in messages %}<|start|>{{ m.role }}<|end|>\n\n{{ m.content | trim }}"
      "{% if m.content.startswith('A') %}[A]{% endif %}{{ m.content.strip(' ') }}"
      "<|eot|>{% endfor %}{% if add_generation_prompt %}<|start|>assistant<|end|>\n\n{% endif %}",
      300, 2, true);
  CHECK(st.records == 900);
  CHECK(st.served > 600);
  // A length is an answer of its own: a shape's renderings are told apart
  // by it, each learnt from a record with that length.
  const auto lengths = check_template(
      "{% for m in messages %}{{ m.role }}({{ m.content | length }}):{{ m.content }}\n{% endfor %}", 300, 12, true);
  CHECK(lengths.learnt > 3 * 8);
}

TEST_CASE("shapes: tojson of a message's text answered from the record") {
  // Llama 3.1 writes a tool result as `content | tojson`: the quoted,
  // escaped text (quotes, newlines, non-ASCII as it is) is a new hole,
  // and the records of a shape are served from one skeleton.
  const std::string src =
      "{% for m in messages %}<{{ m.role }}>{% if m.role == 'user' %}{{ m.content | tojson }}"
      "{% else %}{{ m.content }}{% endif %}\n{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}";
  const auto st = check_template(src, 300, 3, true);
  CHECK(st.records == 900);
  CHECK(st.served > 850);
  check_template(src, 300, 12);
}

TEST_CASE("shapes: tojson of a tool call's arguments answered from the record") {
  // Tool calls whose arguments hold strings of every kind the dump escapes
  // (quotes, backslashes, newlines, control characters, non-ASCII), numbers
  // and nested lists: the dump is one new hole, asked again of each
  // record's arguments.
  static const char* kValues[] = {"Paris", "S\\u00e3o \\\"Paulo\\\"", "a\\nb\\t\\u0001", "北京", "x\\\\y"};
  std::mt19937 rng(21);
  auto value = [&] { return std::string("\"") + kValues[rng() % std::size(kValues)] + "\""; };
  const std::string src =
      "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% for tc in m.tool_calls or [] %}"
      "<call>{{ tc.function.name }} {{ tc.function.arguments | tojson }}</call>{% endfor %}|{% endfor %}"
      "{% if add_generation_prompt %}<assistant>{% endif %}";
  const text::ChatSpec spec = spec_of(src);
  for (int k = 0; k < 400; ++k) {
    std::string args = "{\"city\": " + value();
    if (rng() % 2) args += ", \"n\": " + std::to_string(rng() % 2);
    if (rng() % 3 == 0) args += ", \"tags\": [" + value() + ", " + value() + "]";
    args += "}";
    const std::string rec = "{\"messages\": [{\"role\": \"user\", \"content\": " + value() +
                            "}, {\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"type\": "
                            "\"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": " +
                            args + "}}]}, {\"role\": \"tool\", \"content\": " + value() +
                            "}, {\"role\": \"assistant\", \"content\": " + value() + "}]}";
    INFO("record ", k, ": ", rec);
    require_as_direct(spec, rec);
  }
  const auto st = text::render_shape_stats(spec);
  CHECK(st.records == 400);
  CHECK(st.served > 380);  // six shapes: `n` absent, 0 or 1; `tags` or not
}

// Tool calls whose arguments differ from record to record in their keys,
// their numbers and their nesting; one in ten empty, one in ten a JSON
// string.
std::string tool_call_record(std::mt19937& rng) {
  static const char* kKeys[] = {"city", "n", "query", "code", "unit", "tags", "deep"};
  auto value = [&](int depth) -> std::string {
    switch (rng() % (depth > 1 ? 4 : 6)) {
      case 0: return std::to_string(static_cast<int>(rng() % 2000) - 1000);
      case 1: return rng() % 2 ? "true" : "null";
      case 2: return std::to_string(rng() % 100) + ".5";
      case 3: return "\"Paris \\\"x\\\" \\u00e9\"";
      case 4: return "[1, \"a\", {\"k\": " + std::to_string(rng() % 7) + "}]";
      default: return "{\"inner\": " + std::to_string(rng() % 9) + "}";
    }
  };
  std::string args;
  if (rng() % 10 == 0) {
    args = "{}";
  } else if (rng() % 10 == 0) {
    args = "\"{\\\"city\\\": \\\"Paris\\\"}\"";
  } else {
    args = "{";
    for (int k = 0, n = 1 + static_cast<int>(rng() % 4); k < n; ++k)
      args += std::string(k ? ", " : "") + "\"" + kKeys[(k + rng()) % std::size(kKeys)] + "\": " + value(0);
    args += "}";
  }
  return "{\"messages\": [{\"role\": \"user\", \"content\": \"Weather?\"}, {\"role\": \"assistant\", \"content\": "
         "\"\", \"tool_calls\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": " +
         args + "}}]}, {\"role\": \"tool\", \"content\": \"sunny\"}, {\"role\": \"assistant\", \"content\": \"ok\"}]}";
}

TEST_CASE("shapes: a tool call's arguments one hole where the template only dumps them") {
  // Arguments whose keys and numbers differ in every record are not part of
  // the shape where the template only dumps them (and tests their type):
  // one skeleton serves them all.
  const std::string dumped =
      "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% for tc in m.tool_calls or [] %}"
      "{% set a = tc.function.arguments %}<call>{{ tc.function.name }} "
      "{% if a is string %}{{ a }}{% else %}{{ a | tojson }}{% endif %}</call>{% endfor %}|{% endfor %}"
      "{% if add_generation_prompt %}<assistant>{% endif %}";
  // Templates that look into the arguments, each its own way: every look is
  // a read, and the arguments' keys and values join the shape.
  const char* kLooks[] = {"{{ a | length }}",
                          "{{ 'city' in a }}",
                          "{{ a.city }}",
                          "{{ a['n'] }}",
                          "{{ a.get('n', 7) }}",
                          "{% for k, v in a.items() %}{{ k }}={{ v }};{% endfor %}",
                          "{% for k, v in a | items %}<{{ k }}>{{ v | tojson }}</{{ k }}>{% endfor %}",
                          "{% for k in a %}{{ k }},{% endfor %}",
                          "{{ a | dictsort }}",
                          "{{ a }}",
                          "{{ a | string }}",
                          "{{ a | list }}",
                          "{{ a | tojson(indent=2) }}",
                          "{{ a == {} }}",
                          "{{ a | attr('city') }}",
                          "{{ a.keys() | list | length }}",
                          "{% if a %}full{% else %}empty{% endif %}",
                          "{{ (a | tojson) | length }}",
                          "{% set ns = namespace(args=a) %}{{ ns.args | tojson }}",
                          "{% macro dump(x) %}{{ x | tojson }}{% endmacro %}{{ dump(a) }}",
                          "{{ {'name': tc.function.name, 'arguments': a} | tojson }}",
                          "{{ tc.function | tojson }}",
                          "{{ a | tojson | replace('\"', \"'\") }}",
                          "{% set b = dict(a) %}{{ b | tojson }}",
                          "{{ a is mapping }}{{ a is defined }}{{ a is none }}"};
  auto check = [](const std::string& src, int n, unsigned seed) {
    const text::ChatSpec spec = spec_of(src);
    std::mt19937 rng(seed);
    for (int k = 0; k < n; ++k) {
      const std::string rec = tool_call_record(rng);
      INFO("template ", src, "\nrecord ", k, ": ", rec);
      require_as_direct(spec, rec);
    }
    return text::render_shape_stats(spec);
  };
  const auto st = check(dumped, 400, 31);
  CHECK(st.records == 400);
  CHECK(st.served > 380);  // three shapes: arguments a dict, empty, or a string
  for (const char* look : kLooks) {
    const std::string src =
        "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% for tc in m.tool_calls or [] %}"
        "{% set a = tc.function.arguments %}<call>{% if a is mapping %}" +
        std::string(look) +
        "{% else %}{{ a }}{% endif %}</call>{% endfor %}|{% endfor %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}";
    check(src, 150, 32);
  }
}

TEST_CASE("shapes: slices, an equality of two messages, holes met at one byte, a filter that reads none") {
  // Mistral's templates: the last user message found by `==` against each
  // (after a selectattr over the messages, which reads only their roles);
  // the system message written before the last user message's text, so
  // that a prefix render and the full render meet two holes at one byte;
  // a slice of a text.
  const std::string src =
      "{%- if messages[0].role == 'system' %}{% set sys = messages[0].content %}{% set msgs = messages[1:] %}"
      "{%- else %}{% set msgs = messages %}{% endif %}"
      "{%- set users = msgs | selectattr('role', 'equalto', 'user') | list %}"
      "{%- for m in msgs %}{% if m.role == 'user' %}{% if m == users[-1] %}[T]{% endif %}"
      "{%- if loop.last and sys is defined %}[INST]{{ sys + '\\n\\n' + m.content }}[/INST]"
      "{%- else %}[INST]{{ m.content }}[/INST]{% endif %}"
      "{%- else %}{{ m.content[:-1] }}|{{ m.content[1:3] }}</s>{% endif %}{% endfor %}";
  const auto st = check_template(src, 300, 41);
  CHECK(st.records == 900);
  CHECK(st.served > 400);  // 3 where each comparison read its strings
  check_template(src, 300, 42, true);
}

TEST_CASE("shapes: strips served as parts of the record's strings, and asked again") {
  // Each strip's answer is a part of its subject's bytes: a later question
  // asks it (startswith, upper, a strip of a strip), and the texts meet a
  // literal with the part's first byte.
  const std::string src =
      "{% for m in messages %}{{ m.role }}:{% set t = m.content | trim %}"
      "{% if t.startswith('<') %}[{{ t.lstrip('<') }}]{% endif %}<{{ m.content.lstrip() }}|{{ m.content.rstrip() }}|"
      "{{ t.upper() }}|{{ m.content.strip('a\\n') }}|{{ m.content.rstrip(none) | trim }}\n{% endfor %}"
      "{% if add_generation_prompt %}assistant:{% endif %}";
  const auto st = check_template(src, 300, 4, true);
  CHECK(st.served > 400);
  check_template(src, 300, 14);
}

TEST_CASE("shapes: a thinking template that splits its messages and drops earlier thoughts") {
  const auto st = check_template(R"({%- for message in messages %}
{%- set content = message.content %}
{%- if message.role == 'assistant' %}
{%- set reasoning = '' %}
{%- if message.reasoning_content is string %}{%- set reasoning = message.reasoning_content %}
{%- elif '</think>' in content %}
{%- set reasoning = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
{%- set content = content.split('</think>')[-1].lstrip('\n') %}
{%- endif %}
{%- if loop.last or reasoning %}{{- '<|im_start|>assistant\n<think>\n' + reasoning.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
{%- else %}{{- '<|im_start|>assistant\n' + content }}{%- endif %}
{{- '<|im_end|>\n' }}
{%- else %}{{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>\n' }}{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %})",
                                 300, 3, true);
  CHECK(st.served > 600);
}

TEST_CASE("shapes: a template that reads its strings byte by byte") {
  // A slice reads the string: the path joins the shape, and with every
  // record a shape of its own the shapes give up, each record rendered.
  const auto st = check_template(
      "{% for m in messages %}{{ m.role }}:{{ m.content[:2] }}|{{ m.content }}\n{% endfor %}"
      "{% if add_generation_prompt %}assistant:{% endif %}",
      200, 4);
  CHECK(st.records > 0);
}

TEST_CASE("shapes: {% generation %} blocks and a generation prompt a message may start with") {
  check_template(
      "{% for m in messages %}{% if m.role == 'assistant' %}<|im_start|>{% generation %}{{ m.content }}"
      "<|im_end|>{% endgeneration %}{% else %}<|im_start|>{{ m.content }}<|im_end|>{% endif %}{% endfor %}"
      "{% if add_generation_prompt %}<|im_start|>{% endif %}",
      300, 5);
  // The prompt is a literal "<" that contents start with as often as not:
  // where the record's first byte is the literal's, the split is undecided.
  check_template(
      "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}{% if add_generation_prompt %}<{% endif %}", 300,
      6);
}

TEST_CASE("shapes: where a hole meets the label rule's literal") {
  // Earlier assistant turns render without "[L]", so the prefix rule fails
  // for them and each trains its own text less the generation prompt "w"
  // at its start: every text here starts with "w", a split the skeleton
  // cannot decide (such records render directly); with "v", one it can.
  uint64_t learnt[2] = {};
  for (const char* prompt : {"w", "v"}) {
    const auto st = check_template(
        std::string("{% for m in messages %}{% if m.role == 'assistant' %}{% if loop.last %}[L]{% endif %}"
                    "{{ m.content }}|{% else %}<{{ m.role }}>{{ m.content }}|{% endif %}{% endfor %}"
                    "{% if add_generation_prompt %}") +
            prompt + "{% endif %}",
        300, 13, true);
    CHECK(st.records == 900);
    if (prompt[0] == 'v') CHECK(st.served > 850);
    learnt[prompt[0] == 'v'] = st.learnt;
  }
  // A record alike where its shape's skeleton was undecided renders
  // directly, without a skeleton of its own: no more are learnt than
  // where every split is decided.
  CHECK(learnt[0] <= learnt[1]);
}

TEST_CASE("shapes: a shape is learnt when it comes again; shapes that never repeat stop the walks") {
  const std::string src =
      "{% for m in messages %}<{{ m.role }}>{{ m.content }}|{% endfor %}"
      "{% if add_generation_prompt %}<assistant>{% endif %}";
  // Renders the records both ways (the tools of record k: tools[k %
  // tools.size()], none without); the shapes' counts then.
  auto run = [&](const std::vector<std::string>& records, const std::string& with,
                 const std::vector<Value>& tools = {}) {
    const text::ChatSpec spec = spec_of(with);
    for (std::size_t k = 0; k < records.size(); ++k) {
      const Value doc = tmpl::parse_json(records[k]);
      const Value& messages = *doc.dict->find("messages");
      const Value t = tools.empty() ? Value::none() : tools[k % tools.size()];
      text::Rendered a, b;
      const Outcome served = outcome(text::render_labeled(spec, messages, t, text::Loss::kAllAssistant, a), a);
      const Outcome direct = outcome(text::render_labeled_direct(spec, messages, t, text::Loss::kAllAssistant, b), b);
      INFO("record ", k, ": ", records[k]);
      REQUIRE(served == direct);
    }
    return text::render_shape_stats(spec);
  };
  // Two shapes, each record's strings its own: the first record of each
  // renders directly, the second learns its skeleton, and every record
  // from then on is served from it. The first skeleton's render reads the
  // roles (the label rule asks which message is the assistant's), which
  // then join the shape: that record learns its shape again, and the
  // other shape's next record is a first sight once more.
  std::vector<std::string> two;
  for (int k = 0; k < 40; ++k) {
    const std::string n = std::to_string(k);
    std::string m = "{\"messages\": [";
    if (k % 2) m += "{\"role\": \"system\", \"content\": \"s" + n + "\"}, ";
    two.push_back(m + "{\"role\": \"user\", \"content\": \"u" + n + "\"}, {\"role\": \"assistant\", \"content\": \"a" +
                  n + "\"}]}");
  }
  auto st = run(two, src);
  CHECK(st.records == 40);
  CHECK(st.learnt == 3);
  CHECK(st.served == 37);
  // A key of its own in every record: no shape comes twice, none is
  // learnt, and after the first 64 records the template's records render
  // directly without a walk (they are no longer counted).
  std::vector<std::string> unique;
  for (int k = 0; k < 100; ++k)
    unique.push_back("{\"messages\": [{\"role\": \"user\", \"content\": \"u\", \"k" + std::to_string(k) +
                     "\": 1}, {\"role\": \"assistant\", \"content\": \"a\"}]}");
  st = run(unique, src);
  CHECK(st.learnt == 0);
  CHECK(st.served == 0);
  CHECK(st.records == 65);
  // Tools the template reads (tojson) are part of the shape whole: three
  // values in turn, two of them equal in all but one string, the same
  // objects again; then an object of its own for each record.
  const std::string with_tools = "{{ tools | tojson }}" + src;
  const std::vector<Value> tools = {
      tmpl::parse_json(R"([{"type": "function", "function": {"name": "get_weather"}}])"),
      tmpl::parse_json(R"([{"type": "function", "function": {"name": "get_time"}}])"),
      tmpl::parse_json(R"([{"type": "function", "function": {"name": "get_weather"}}, {"type": "function"}])")};
  st = run(two, with_tools, tools);
  CHECK(st.records == 40);
  CHECK(st.served > 20);
  // A shape the template refuses, whatever the strings: its first record
  // is refused, and so are the next ones, rendered directly while the
  // template refuses them, without a skeleton.
  const std::string strict =
      "{% for m in messages %}{% if loop.first and m.role != 'user' %}{{ raise_exception('user first') }}{% endif %}"
      "<{{ m.role }}>{{ m.content }}|{% endfor %}";
  std::vector<std::string> refused;
  for (int k = 0; k < 40; ++k) refused.push_back(two[2 * (k % 20) + 1]);  // each with a system message first
  st = run(refused, strict);
  CHECK(st.records == 40);
  CHECK(st.served == 0);
  CHECK(st.learnt == 0);
  // A shape whose first record is refused and whose next is not: the one
  // after learns its skeleton (which reads the roles: they join the
  // shape, and the record learns again), and the shape's records are
  // served from then on, that one first.
  std::vector<std::string> once = {refused[0]};
  for (int k = 0; k < 20; ++k) {
    const std::string n = std::to_string(k);
    once.push_back("{\"messages\": [{\"role\": \"user\", \"content\": \"u" + n +
                   "\"}, {\"role\": \"assistant\", \"content\": \"a" + n +
                   "\"}, {\"role\": \"user\", \"content\": \"v" + n + "\"}]}");
  }
  st = run(once, strict);
  CHECK(st.records == 21);
  CHECK(st.learnt == 2);
  CHECK(st.served == 19);
  std::vector<Value> copies;
  for (int k = 0; k < 40; ++k) copies.push_back(tmpl::parse_json(k % 3 ? R"([{"function": {"name": "a"}}])" : "[]"));
  st = run(two, with_tools, copies);
  CHECK(st.served > 20);
  // Each tool dumped on its own: the tools' strings stay holes, answered
  // from the record. Two values that differ in their strings, in turn,
  // and runs of the same one: a walk takes the tools' part of the key and
  // their holes from the walk before while they are the same value.
  const std::string each_tool = "{% for t in tools %}{{ t | tojson }}{% endfor %}" + src;
  const std::vector<Value> described = {
      tmpl::parse_json(R"([{"type": "function", "function": {"name": "a", "description": "first"}}])"),
      tmpl::parse_json(R"([{"type": "function", "function": {"name": "b", "description": "second, longer"}}])")};
  std::vector<Value> runs;
  for (int k = 0; k < 40; ++k) runs.push_back(described[(k / 3) % 2]);
  st = run(two, each_tool, runs);
  CHECK(st.records == 40);
  CHECK(st.served > 20);
  // Shapes that each come four times (k + 1 turns, each record's strings
  // its own): the first 31 shapes' first records render directly, their
  // second learn the skeleton; from the 32nd on (32 seen, most of them
  // come again) a shape is learnt on its first sight, its first record
  // served from it too.
  auto turns = [](int k, int copy) {
    std::string m = "{\"messages\": [";
    for (int t = 0; t <= k; ++t) {
      const std::string n = std::to_string(k) + "." + std::to_string(copy) + "." + std::to_string(t);
      m += std::string(t ? ", " : "") + "{\"role\": \"user\", \"content\": \"u" + n +
           "\"}, {\"role\": \"assistant\", \"content\": \"a" + n + "\"}";
    }
    return m + "]}";
  };
  std::vector<std::string> fours;
  for (int k = 0; k < 40; ++k)
    for (int copy = 0; copy < 4; ++copy) fours.push_back(turns(k, copy));
  st = run(fours, src);
  CHECK(st.records == 160);
  CHECK(st.served == 31 * 3 + 9 * 4);
  // Shapes that never come again: none is learnt, on first sight or after.
  std::vector<std::string> singles;
  for (int k = 0; k < 60; ++k) singles.push_back(turns(k, 0));
  st = run(singles, src);
  CHECK(st.learnt == 0);
  CHECK(st.served == 0);
}

TEST_CASE("shapes: off, every record renders") {
  text::set_render_shapes(false);
  const auto st = check_template("{% for m in messages %}{{ m.content }}{% endfor %}", 20, 7);
  text::set_render_shapes(true);
  CHECK(st.records == 0);
}
