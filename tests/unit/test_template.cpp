// The chat-template engine's edges (daemon/template/) and the record mapping
// and label rule of docs/data_model.md 1.2 and 2.2. Rendering against jinja2
// itself is reference.jinja2; the daemon's batches, reference.chat_templates.
#include <doctest/doctest.h>

#include <string>
#include <thread>

#include "template/json_value.hpp"
#include "template/name.hpp"
#include "template/pystr.hpp"
#include "template/template.hpp"
#include "template/value.hpp"
#include "chat/chat_jinja.hpp"

using namespace tokfeed;
using tmpl::Template;
using tmpl::Value;

namespace {

std::string render(const std::string& src, const std::string& ctx_json = "{}") {
  Template t = Template::parse(src);
  Value ctx = tmpl::parse_json(ctx_json);
  tmpl::Vars vars(ctx.dict->items().begin(), ctx.dict->items().end());
  tmpl::RenderLimits limits;
  limits.max_steps = 100000;
  tmpl::parse_instant("2024-07-26T13:05:00", limits.now);
  return t.render(vars, limits);
}

std::string load_error(const std::string& src) {
  try {
    Template::parse(src);
  } catch (const tmpl::Error& e) {
    return e.what();
  }
  return {};
}

std::string render_error(const std::string& src, const std::string& ctx = "{}") {
  try {
    render(src, ctx);
  } catch (const tmpl::Error& e) {
    return e.what();
  }
  return {};
}

}  // namespace

TEST_CASE("bytes_equal: names and keys compared by words, every length and every differing byte") {
  for (std::size_t n = 0; n <= 40; ++n) {
    std::string a(n, 'x'), b(n, 'x');
    for (std::size_t i = 0; i < n; ++i) a[i] = b[i] = static_cast<char>('a' + i % 26);
    INFO("n = " << n);
    CHECK(tmpl::bytes_equal(a.data(), b.data(), n));
    for (std::size_t i = 0; i < n; ++i) {
      std::string c = b;
      c[i] = static_cast<char>(c[i] ^ 0x20);
      INFO("differs at " << i);
      CHECK_FALSE(tmpl::bytes_equal(a.data(), c.data(), n));
      CHECK(tmpl::bytes_equal(a.data(), c.data(), i));  // the bytes before it
    }
  }
}

TEST_CASE("json_quote: a byte to escape at every position of strings up to 40 bytes") {
  // What json.dumps writes for each: the byte's escape, the rest as it is.
  const std::pair<char, std::string> cases[] = {{'"', "\\\""},       {'\\', "\\\\"},      {'\n', "\\n"},
                                                {'\x01', "\\u0001"}, {'\x1f', "\\u001f"}, {'\t', "\\t"}};
  for (std::size_t n = 1; n <= 40; ++n)
    for (std::size_t i = 0; i < n; ++i)
      for (const auto& [c, escaped] : cases) {
        std::string s(n, 'a');
        s[i] = c;
        std::string out;
        tmpl::json_quote(s, out, false);
        INFO("n = " << n << ", at " << i << ", byte " << static_cast<int>(c));
        CHECK(out == "\"" + std::string(i, 'a') + escaped + std::string(n - i - 1, 'a') + "\"");
      }
  // Under ensure_ascii a non-ASCII character, and DEL (json.dumps' ASCII
  // range is ' '..'~'), is escaped wherever it is; without, it is copied.
  for (const auto& [c, escaped] : {std::pair<std::string, std::string>{"\xc3\xa9", "\\u00e9"}, {"\x7f", "\\u007f"}}) {
    for (std::size_t i = 0; i < 30; ++i) {
      std::string s = std::string(i, 'b') + c + std::string(30 - i, 'b');
      std::string ascii, plain;
      tmpl::json_quote(s, ascii, true);
      tmpl::json_quote(s, plain, false);
      INFO(escaped << " at " << i);
      CHECK(ascii == "\"" + std::string(i, 'b') + escaped + std::string(30 - i, 'b') + "\"");
      CHECK(plain == "\"" + s + "\"");
    }
  }
  std::string none;
  tmpl::json_quote(std::string(37, 'z'), none, true);
  CHECK(none == "\"" + std::string(37, 'z') + "\"");
}

TEST_CASE("trim and tojson(indent): what jinja2 and json.dumps give") {
  CHECK(render("[{{ s | trim }}]", R"({"s": " a b \n"})") == "[a b]");
  CHECK(render("[{{ s | trim }}]", R"({"s": "a b"})") == "[a b]");
  CHECK(render("[{{ s | trim }}]", R"({"s": ""})") == "[]");
  CHECK(render("[{{ s | trim('x') }}]", R"({"s": "xxaxbx"})") == "[axb]");
  CHECK(render("[{{ s | trim('x') }}]", R"({"s": "ab"})") == "[ab]");
  CHECK(render("[{{ 12 | trim }}]") == "[12]");
  CHECK(render("{{ v | tojson(indent=2) }}", R"({"v": {"a": [1, {"b": null}], "c": {}, "d": -7}})") ==
        "{\n  \"a\": [\n    1,\n    {\n      \"b\": null\n    }\n  ],\n  \"c\": {},\n  \"d\": -7\n}");
  CHECK(render("{{ v | tojson(indent='\t') }}", R"({"v": [[1]]})") == "[\n\t[\n\t\t1\n\t]\n]");
  CHECK(render("{{ v | tojson(indent=0) }}", R"({"v": [1, 2]})") == "[\n1,\n2\n]");
}

TEST_CASE("length and count: of the subject read in place, as Python's len()") {
  CHECK(render("{{ xs | length }} {{ xs | count }} {{ s | length }} {{ d | length }} {{ nothing | length }}",
               R"({"xs": [1, 2, 3], "s": "ab\u00e9", "d": {"a": 1}})") == "3 3 3 1 0");
  CHECK(render("{{ (xs + [4]) | length }}{{ xs[1:] | length }}", R"({"xs": [1, 2, 3]})") == "42");
  CHECK(render_error("{{ n | length }}", R"({"n": 5})").find("object of type 'int' has no len()") != std::string::npos);
}

TEST_CASE("provenance: a render after `messages` changed finds the messages anew") {
  const tmpl::Template t = tmpl::Template::parse("{% for m in messages %}{{ m.content }}{% endfor %}");
  const Value a = tmpl::parse_json(R"([{"content": "x"}, {"content": "yy"}])");
  const Value b = tmpl::parse_json(R"([{"content": "zzz"}])");
  tmpl::Provenance prov;
  auto pieces = [&] {
    std::string out;
    for (const auto& p : prov.pieces)
      out += std::to_string(p.message) + ":" + std::to_string(p.begin) + "-" + std::to_string(p.end) + " ";
    return out;
  };
  prov.messages = {a.list->items[0].dict.get(), a.list->items[1].dict.get()};
  CHECK(t.render({{"messages", a}}, tmpl::RenderLimits{}, nullptr, &prov) == "xyy");
  CHECK(pieces() == "0:0-1 1:1-3 ");
  CHECK(t.render({{"messages", a}}, tmpl::RenderLimits{}, nullptr, &prov) == "xyy");
  CHECK(pieces() == "0:0-1 1:1-3 ");
  // The same count of messages, in the other order: found by their new index.
  prov.messages = {a.list->items[1].dict.get(), a.list->items[0].dict.get()};
  CHECK(t.render({{"messages", a}}, tmpl::RenderLimits{}, nullptr, &prov) == "xyy");
  CHECK(pieces() == "1:0-1 0:1-3 ");
  // Another message in a slot of the same list.
  prov.messages = {a.list->items[0].dict.get(), b.list->items[0].dict.get()};
  CHECK(t.render({{"messages", b}}, tmpl::RenderLimits{}, nullptr, &prov) == "zzz");
  CHECK(pieces() == "1:0-3 ");
}

TEST_CASE("whitespace control as transformers configures jinja2: trim_blocks, lstrip_blocks, - and +") {
  CHECK(render("{% if true %}\nA\n{% endif %}\nB") == "A\nB");
  CHECK(render("  {% if true %}x{% endif %}  ") == "x  ");
  CHECK(render("a  {%- if true -%}  b  {%- endif %}") == "ab");
  CHECK(render("{%+ if true %}x{% endif %}", "{}") == "x");
  CHECK(render("line\n") == "line");  // the source's final newline is dropped
  CHECK(render("{# c #}\nA") == "A");
}

TEST_CASE("Python semantics: str(), repr, tojson, slicing, arithmetic, None and Undefined") {
  CHECK(render("{{ [1, 'a', none, true, 1.5] }}") == "[1, 'a', None, True, 1.5]");
  CHECK(render("{{ {'k': \"it's\"} }}") == "{'k': \"it's\"}");
  CHECK(render("{{ {'a': [1, 2], 'é': 'ü'} | tojson }}") == "{\"a\": [1, 2], \"é\": \"ü\"}");
  CHECK(render("{{ {'a': [1]} | tojson(indent=2) }}") == "{\n  \"a\": [\n    1\n  ]\n}");
  CHECK(render("{{ 'héllo'[1:3] }}{{ 'abc'[::-1] }}{{ [1,2,3][-1] }}") == "élcba3");
  CHECK(render("{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 1 / 4 }} {{ 2 ** 10 }} {{ 1e16 }} {{ 0.1 + 0.2 }}") ==
        "3 -4 2 0.25 1024 1e+16 0.30000000000000004");
  CHECK(render("{{ x }}|{{ x is defined }}|{{ x | length }}|{{ none }}|{{ none ~ 'a' }}") == "|False|0|None|Nonea");
  CHECK(render("{{ 'a,b,,c'.split(',') }} {{ '  x y '.split() }} {{ 'x'.startswith(('a', 'x')) }}") ==
        "['a', 'b', '', 'c'] ['x', 'y'] True");
  // startswith/endswith: ASCII and not, longer than the string, empty, a tuple, a bound.
  CHECK(render("{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith('bc') }}{{ 'ab'.startswith('abc') }}"
               "{{ 'ab'.endswith('xab') }}{{ 'ab'.endswith('') }}{{ 'éab'.endswith('ab') }}{{ 'aé'.endswith('é') }}"
               "{{ 'éa'.startswith('é') }}{{ 'é'.startswith('e') }}{{ 'xé'.endswith(('y', 'xé')) }}"
               "{{ 'abc'.endswith('b', 0, 2) }}") == "TrueTrueFalseFalseTrueTrueTrueTrueFalseTrueTrue");
  CHECK(render("{{ messages | selectattr('role', 'equalto', 'user') | list | length }}",
               R"({"messages": [{"role": "user"}, {"role": "assistant"}, {"role": "user"}]})") == "2");
  CHECK(render("{% set g = [1, 2] | map('string') %}{{ g | join }}{{ g | join }}") == "12");  // an iterator, used up
  CHECK(render("{{ strftime_now('%d %b %Y %H:%M') }}") == "26 Jul 2024 13:05");
  CHECK(render("{{ {1024: 'a'} | dictsort | first | first + 1 }}") == "1025");
}

TEST_CASE("scopes: loops, namespace, macros, set blocks, loop controls") {
  CHECK(render("{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}{{ x }}") == "1");
  CHECK(render("{% set ns = namespace(x=1) %}{% for i in [1] %}{% set ns.x = 2 %}{% endfor %}{{ ns.x }}") == "2");
  CHECK(render("{% macro m(a, b='B') %}{{ a }}{{ b }}{% endmacro %}{{ m(1) }}{{ m(1, b=2) }}") == "1B12");
  CHECK(render("{% set s %}x{{ 1 }}{% endset %}{{ s | upper }}") == "X1");
  CHECK(render("{% for i in range(5) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 3 %}{% break %}{% endif %}"
               "{{ i }}{{ loop.index }}{% endfor %}") == "0123");
  CHECK(render("{% for i in [] %}x{% else %}empty{% endfor %}") == "empty");
}

TEST_CASE("autoescape: outputs escaped where jinja2 compiled them so; Markup from safe, macros, set blocks, join") {
  const std::string ctx = R"({"x": "<a&'\">", "y": "<", "b": 1})";
  CHECK(render("{% autoescape true %}{{ x }}{{ x | safe }}{% endautoescape %}{{ x }}", ctx) ==
        "&lt;a&amp;&#39;&#34;&gt;<a&'\"><a&'\">");
  // A value known at render time alone: a constant output is text as
  // compiled (not escaped), the rest escapes.
  CHECK(render("{% autoescape b %}{{ y }}{{ '<' }}{% endautoescape %}", ctx) == "&lt;<");
  // markup_join: a Markup operand escapes the others.
  CHECK(render("{% autoescape true %}{{ (y | safe) ~ y }}{{ y ~ 'b' }}{% endautoescape %}", ctx) == "<&lt;&lt;b");
  // A macro called under autoescape gives Markup, its body compiled outside.
  CHECK(render("{% macro m() %}<{{ y }}>{% endmacro %}{% autoescape true %}{{ m() }}{% endautoescape %}{{ m() }}",
               ctx) == "<<><<>");
  CHECK(render("{% autoescape true %}{% set s %}<{{ y }}>{% endset %}{{ s }}{{ [y, y | safe] | join(',') }}"
               "{% endautoescape %}",
               ctx) == "<&lt;>&lt;,<");
}

TEST_CASE("tuples are dict keys; a {% generation %} body has varargs, kwargs and no caller of its own") {
  CHECK(render("{% set d = {(1, 2): 'a', (1.0, 2): 'b'} %}{{ d }}{{ d[(1, 2)] }}{{ (1, 2) in d }}{{ d[[1, 2]] is "
               "defined }}") == "{(1, 2): 'b'}bTrueFalse");
  CHECK(render_error("{{ {(1, [2]): 3} }}").find("unhashable type: 'list'") != std::string::npos);
  CHECK(render_error("{{ {(1, 2): 3} | tojson }}").find("not tuple") != std::string::npos);
  CHECK(render("{% generation %}{{ varargs }}{{ kwargs }}{{ caller is defined }}{% endgeneration %}") == "(){}False");
}

TEST_CASE("errors: unsupported constructs at load with line:column; raise_exception, budget, sandbox at render") {
  CHECK(load_error("a\n  {% include 'x' %}").rfind("2:", 0) == 0);
  CHECK(load_error("a\n  {% include 'x' %}").find("include") != std::string::npos);
  CHECK(load_error("{{ x | nosuchfilter }}").find("1:") == 0);
  CHECK(load_error("{{ x is nosuchtest }}").find("nosuchtest") != std::string::npos);
  CHECK(load_error("{% for m in [] %}\n{{ m | nosuch }}{% endfor %}").rfind("2:8:", 0) == 0);  // a loop is no branch
  CHECK(load_error("{{ dict(a=1, a=2) }}").find("keyword argument repeated") != std::string::npos);
  CHECK(load_error("{% for x in y %}").find("endfor") != std::string::npos);
  CHECK(load_error("{% block b %}{% endblock %}{% block b %}{% endblock %}").find("defined twice") !=
        std::string::npos);
  CHECK(load_error("{{ " + std::string(500, '(') + "1" + std::string(500, ')') + " }}").find("nesting") !=
        std::string::npos);
  CHECK(render_error("{{ raise_exception('roles must alternate') }}").rfind("roles must alternate", 0) == 0);
  CHECK(render_error("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}")
            .find("step budget") != std::string::npos);
  CHECK(render_error("{% set l = [] %}{{ l.append(1) }}").find("unsafe") != std::string::npos);
  CHECK(render_error("{{ x.y }}").find("undefined") != std::string::npos);
  CHECK(render_error("{{ 1 + 'a' }}").find("unsupported operand") != std::string::npos);
}

TEST_CASE("errors: a failure taken as a value says what the thrown one says, limit or not") {
  const std::pair<const char*, int> cases[] = {
      {"ab{{ raise_exception('roles must alternate') }}", 0},
      {"{% for m in [1] %}{% if m %}{{ raise_exception('in a loop') }}{% endif %}{% endfor %}", 0},
      {"{% macro f() %}{{ 1 + 'a' }}{% endmacro %}x{{ f() }}", 0},
      {"{% set l = [] %}{{ l.append(1) }}", 0},
      {"{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", 1},
      {"{{ 'x' * 1000000 }}{{ 'y' * 1000000 }}", 0},  // past max_output: the template's doing
      {"fine {{ 1 + 2 }}", -1},
  };
  for (const auto& [src, kind] : cases) {
    const std::string source = src;
    CAPTURE(source);
    Template t = Template::parse(src);
    tmpl::Vars vars;
    tmpl::RenderLimits limits;
    limits.max_steps = 100000;
    limits.max_output = 1500000;
    std::string thrown;
    bool limit = false;
    std::string text;
    try {
      text = t.render(vars, limits);
    } catch (const tmpl::LimitError& e) {
      thrown = e.what();
      limit = true;
    } catch (const tmpl::Error& e) {
      thrown = e.what();
    }
    tmpl::RenderFailure failed;
    const std::string got = t.render(vars, limits, nullptr, nullptr, nullptr, &failed);
    CHECK(failed.failed == (kind >= 0));
    CHECK(failed.message == thrown);
    CHECK(failed.limit == limit);
    CHECK(limit == (kind == 1));
    CHECK(got == (kind >= 0 ? std::string() : text));
    if (kind >= 0) CHECK(thrown.find("(at template ") != std::string::npos);
  }
}

namespace {

text::ChatSpec spec_of(const std::string& src) {
  text::ChatSpec s;
  s.tmpl = Template::parse(src);
  s.name = "test.jinja";
  return s;
}

std::vector<std::string> trained(const text::Rendered& r) {
  std::vector<std::string> out;
  for (const text::Span& s : r.trained) out.push_back(r.text.substr(s.begin, s.end - s.begin));
  return out;
}

const char* kChatml =
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

}  // namespace

TEST_CASE("the label rule: prefix rule, loss switches, last_assistant") {
  text::ChatSpec spec = spec_of(kChatml);
  text::RecordRules rules;
  Value msgs, tools;
  text::Rendered r;
  std::string rec =
      R"({"messages": [{"role": "user", "content": "U"}, {"role": "assistant", "content": "A"},
                      {"role": "user", "content": "U2", "loss": true}, {"role": "assistant", "content": "B", "loss": false},
                      {"role": "assistant", "content": "C"}]})";
  REQUIRE(text::record_to_chat(rec, rules, false, msgs, tools) == "");
  REQUIRE(text::render_labeled(spec, msgs, tools, text::Loss::kAllAssistant, r) == "");
  CHECK(trained(r) == std::vector<std::string>{"A<|im_end|>\n<|im_start|>user\nU2<|im_end|>\n", "C<|im_end|>\n"});
  REQUIRE(text::render_labeled(spec, msgs, tools, text::Loss::kLastAssistant, r) == "");
  CHECK(trained(r) == std::vector<std::string>{"<|im_start|>user\nU2<|im_end|>\n", "C<|im_end|>\n"});
  // loss = "all": the whole rendering but the region of the message that says "loss": false
  // ("B<|im_end|>\n", as (b) places it); the generation prompt before it stays trained.
  REQUIRE(text::render_labeled(spec, msgs, tools, text::Loss::kAll, r) == "");
  CHECK(trained(r) ==
        std::vector<std::string>{
            "<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\nA<|im_end|>\n<|im_start|>user\nU2<|im_end|>"
            "\n<|im_start|>assistant\n",
            "<|im_start|>assistant\nC<|im_end|>\n"});
}

TEST_CASE("loss = \"all\": the whole rendering, generation blocks or not") {
  text::RecordRules rules;
  Value msgs, tools;
  text::Rendered r;
  std::string rec =
      R"({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "U"},
                       {"role": "assistant", "content": "A"}]})";
  REQUIRE(text::record_to_chat(rec, rules, false, msgs, tools) == "");
  text::ChatSpec plain = spec_of(kChatml);
  REQUIRE(text::render_labeled(plain, msgs, tools, text::Loss::kAll, r) == "");
  CHECK(trained(r) == std::vector<std::string>{r.text});
  CHECK(r.text ==
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\nA<|im_end|>\n");
  // Blocks mark what all_assistant trains; under all they change nothing.
  text::ChatSpec blocks = spec_of(
      "{% for m in messages %}<{{ m.role }}>{% if m.role == 'assistant' %}{% generation %}{{ m.content }}"
      "{% endgeneration %}{% else %}{{ m.content }}{% endif %}{% endfor %}");
  REQUIRE(text::render_labeled(blocks, msgs, tools, text::Loss::kAllAssistant, r) == "");
  CHECK(trained(r) == std::vector<std::string>{"A"});
  REQUIRE(text::render_labeled(blocks, msgs, tools, text::Loss::kAll, r) == "");
  CHECK(trained(r) == std::vector<std::string>{"<system>S<user>U<assistant>A"});
}

namespace {

// Renders `rec` under `src` and returns the trained texts, or the reason.
std::vector<std::string> labels_of(const std::string& src, const std::string& rec, bool last_assistant = false) {
  const text::Loss loss = last_assistant ? text::Loss::kLastAssistant : text::Loss::kAllAssistant;
  text::ChatSpec spec = spec_of(src);
  text::RecordRules rules;
  Value msgs, tools;
  text::Rendered r;
  REQUIRE(text::record_to_chat(rec, rules, false, msgs, tools) == "");
  std::string why = text::render_labeled(spec, msgs, tools, loss, r);
  if (!why.empty()) return {"refused: " + why};
  return trained(r);
}

}  // namespace

TEST_CASE("the label rule (b): an empty turn trains nothing") {
  // The empty assistant turn's span under (b) is empty: no span at all, so
  // that no token it would fall inside (here one holding ":" and the "\n"
  // written because the turn is not last) is trained.
  const char* glm =
      "{% for m in messages %}{% if m.role == 'user' %}Q:{{ m.content }}{% elif m.role == 'assistant' %}\nA:"
      "{{ m.content }}{% if not loop.last %}\n{% endif %}{% endif %}{% endfor %}"
      "{% if add_generation_prompt %}\nA:{% endif %}";
  std::string rec =
      R"({"messages": [{"role": "user", "content": "U"}, {"role": "assistant", "content": ""},
                       {"role": "user", "content": "V"}, {"role": "assistant", "content": "B"}]})";
  CHECK(labels_of(glm, rec) == std::vector<std::string>{"B"});
}

TEST_CASE("the label rule (c): each turn as it stands in F, where the prefix rule fails") {
  // Earlier turns lose their reasoning: messages[1] fails (b) and trains its
  // own text less the generation prompt "assistant:"; messages[3] keeps (b).
  const char* drop =
      "{% for m in messages %}{{ m.role }}:{% if m.reasoning_content and loop.last %}<think>{{ m.reasoning_content }}"
      "</think>{% endif %}{{ m.content }}\n{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}";
  std::string rec =
      R"({"messages": [{"role": "user", "content": "U"}, {"role": "assistant", "content": "A", "reasoning_content": "r"},
                       {"role": "user", "content": "U2"}, {"role": "assistant", "content": "B", "reasoning_content": "s"}]})";
  CHECK(labels_of(drop, rec) == std::vector<std::string>{"A\n", "<think>s</think>B\n"});
  CHECK(labels_of(drop, rec, true) == std::vector<std::string>{"<think>s</think>B\n"});
  // A per-message switch keeps working where (c) places the message.
  std::string off =
      R"({"messages": [{"role": "user", "content": "U"}, {"role": "assistant", "content": "A", "reasoning_content": "r", "loss": false},
                       {"role": "user", "content": "U2"}, {"role": "assistant", "content": "B"}]})";
  CHECK(labels_of(drop, off) == std::vector<std::string>{"B\n"});
  // So does it under (a): the switch untrains the blocks inside (c)'s region.
  const char* blocks =
      "{% for m in messages %}{{ m.role }}:{% if m.role == 'assistant' %}{% generation %}{% if m.reasoning_content "
      "and loop.last %}<think>{{ m.reasoning_content }}</think>{% endif %}{{ m.content }}\n{% endgeneration %}"
      "{% else %}{{ m.content }}\n{% endif %}{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}";
  CHECK(labels_of(blocks, rec) == std::vector<std::string>{"A\n", "<think>s</think>B\n"});
  CHECK(labels_of(blocks, off) == std::vector<std::string>{"B\n"});

  // The generation prompt's text is what P writes after the last text it
  // writes for a message: after a tool result, the tag closing the tool
  // block (also in render(msgs[:i], false)); it belongs to P, so it is not
  // trained. The eos the template appends after its loop belongs to the
  // last message: (b) holds for the last turn and trains it.
  const char* tools_block =
      "{% set ns = namespace(tool=false) %}{% for m in messages %}"
      "{% if m.role == 'tool' %}{% if not ns.tool %}<tools>{% endif %}{% set ns.tool = true %}[{{ m.content }}]"
      "{% else %}{% if ns.tool %}</tools>{% endif %}{% set ns.tool = false %}"
      "{% if m.role == 'assistant' %}<A>{% if loop.last %}<think>{{ m.reasoning_content }}</think>{% endif %}"
      "{{ m.content }}<end>{% else %}<U>{{ m.content }}{% endif %}{% endif %}{% endfor %}"
      "{% if ns.tool %}</tools>{% endif %}{% if add_generation_prompt and not ns.tool %}<A><think>{% endif %}"
      "{% if not add_generation_prompt %}<eos>{% endif %}";
  std::string calls =
      R"({"messages": [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a", "reasoning_content": "r"},
                       {"role": "tool", "content": "t"}, {"role": "assistant", "content": "b", "reasoning_content": "q"}]})";
  CHECK(labels_of(tools_block, calls) == std::vector<std::string>{"a<end>", "<A><think>q</think>b<end><eos>"});
  std::string more =
      R"({"messages": [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a", "reasoning_content": "r"},
                       {"role": "tool", "content": "t"}, {"role": "assistant", "content": "b", "reasoning_content": "q"},
                       {"role": "user", "content": "v"}]})";
  CHECK(labels_of(tools_block, more) == std::vector<std::string>{"a<end>", "<A>b<end>"});

  // A message written inside another's iteration (an inner loop over the
  // messages) is its own: the tool results are not trained.
  const char* inner =
      "{% for m in messages %}{% if m.role == 'assistant' %}<A>{% if loop.last %}({{ m.reasoning_content }}){% endif %}"
      "{{ m.content }}{% for t in messages[loop.index:] %}{% if t.role == 'tool' %}<T>{{ t.content }}{% endif %}"
      "{% endfor %}</A>{% elif m.role == 'user' %}<U>{{ m.content }}{% endif %}{% endfor %}"
      "{% if add_generation_prompt %}<A>{% endif %}";
  CHECK(labels_of(inner, calls) == std::vector<std::string>{"a", "</A>", "(q)b</A>"});

  // So is one an index scan binds with {% set %}: in an iteration no message
  // is bound to, the rest of the iteration is the set message's.
  const char* scan =
      "{% for m in messages %}{% if m.role == 'assistant' %}<A>{% if loop.last %}({{ m.reasoning_content }}){% endif %}"
      "{{ m.content }}{% for k in range(loop.index, messages | length) %}<k>{% set t = messages[k] %}"
      "{% if t.role == 'tool' %}<T>{{ t.content }}{% endif %}{% endfor %}</A>{% elif m.role == 'user' %}<U>"
      "{{ m.content }}{% endif %}{% endfor %}{% if add_generation_prompt %}<A>{% endif %}";
  CHECK(labels_of(scan, calls) == std::vector<std::string>{"a<k>", "<k></A>", "(q)b</A>"});

  // The common prefix with the generation prompt stops at a whole character.
  const char* accent =
      "{% for m in messages %}{% if m.role == 'assistant' %}{% if loop.last %}É{% else %}é{% endif %}{{ m.content }}"
      "{% else %}<U>{{ m.content }}{% endif %}{% endfor %}{% if add_generation_prompt %}è{% endif %}";
  CHECK(labels_of(accent, R"({"messages": [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a"},
                                           {"role": "user", "content": "v"}]})") == std::vector<std::string>{"éa"});
}

TEST_CASE("the label rule: a clear bad record where no rule places a message") {
  // The turns are reached by index and (b) fails: neither rule applies.
  const char* by_index =
      "{% for k in range(messages | length) %}{% if messages[k].role == 'assistant' and k + 1 < messages | length %}"
      "[{{ messages[k].content }}]{% else %}{{ messages[k].content }}{% endif %}{% endfor %}";
  std::string rec =
      R"({"messages": [{"role": "user", "content": "U"}, {"role": "assistant", "content": "A"},
                       {"role": "user", "content": "U2"}, {"role": "assistant", "content": "B"}]})";
  std::vector<std::string> got = labels_of(by_index, rec);
  REQUIRE(got.size() == 1);
  CHECK(got[0].find("test.jinja") != std::string::npos);
  CHECK(got[0].find("messages[1]") != std::string::npos);
  CHECK(got[0].find("by index") != std::string::npos);
  CHECK(labels_of(by_index, rec, true) == std::vector<std::string>{"B"});
}

TEST_CASE("records: reasoning under any of its names, the first set of reasoning_content, thinking, reasoning") {
  text::RecordRules rules;
  Value msgs, tools;
  auto last = [&](const std::string& assistant) {
    const std::string rec =
        R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", )" + assistant + "}]}";
    REQUIRE(text::record_to_chat(rec, rules, false, msgs, tools) == "");
    return tmpl::to_str(msgs.list->items.back());
  };
  // A null name is no name; the order of the keys does not matter, the
  // order of the names does.
  CHECK(last(R"("reasoning": "r", "thinking": "t", "content": "a")") ==
        "{'thinking': 't', 'role': 'assistant', 'reasoning': 'r', 'content': 'a', 'reasoning_content': 't'}");
  CHECK(last(R"("reasoning": "r", "thinking": null, "reasoning_content": "c", "content": "a")") ==
        "{'thinking': 'c', 'role': 'assistant', 'reasoning': 'r', 'reasoning_content': 'c', 'content': 'a'}");
  CHECK(last(R"("reasoning_content": null, "content": "a", "reasoning": "r")") ==
        "{'thinking': 'r', 'role': 'assistant', 'content': 'a', 'reasoning': 'r', 'reasoning_content': 'r'}");
  CHECK(last(R"("reasoning_contents": "x", "thinkin": "y", "content": "a")") ==
        "{'role': 'assistant', 'reasoning_contents': 'x', 'thinkin': 'y', 'content': 'a'}");
}

TEST_CASE("records: duplicate JSON keys keep the last value at the first one's place, in small and big objects") {
  // json.loads: {"a": 1, "b": 2, "a": 3} is {'a': 3, 'b': 2}. Objects up to
  // 16 keys are built in place, bigger ones through DictObj::set's index.
  std::string big = "{", want = "{";
  for (int k = 0; k < 20; ++k) {
    big += (k ? ", " : "") + std::string("\"k") + std::to_string(k) + "\": " + std::to_string(k);
    want += (k ? ", " : "") + std::string("'k") + std::to_string(k) + "': " +
            (k == 2    ? "102"
             : k == 15 ? "115"
             : k == 3  ? "[]"
                       : std::to_string(k));
  }
  big += R"(, "k2": 102, "k15": 115, "k3": 0, "k3": []})";
  want += "}";
  CHECK(tmpl::to_str(tmpl::parse_json(big)) == want);
  CHECK(tmpl::to_str(tmpl::parse_json(R"({"a": 1, "b": 2, "a": 3, "\u0001x": 4, "\u0001x": 5})")) ==
        "{'a': 3, 'b': 2, '\\x01x': 5}");
  Value d = tmpl::parse_json(big);
  CHECK(d.dict->items().size() == 20);
  const Value* k15 = d.dict->find("k15");
  REQUIRE(k15 != nullptr);
  CHECK(k15->i == 115);
  CHECK(d.dict->find("k19")->i == 19);
}

// A record's values refill the previous record's objects that nothing else
// holds (chat_messages.cpp, record_fields): the same objects, this record's
// contents; an object something else holds keeps what it was.
TEST_CASE("records: the previous record's objects are refilled where nothing else holds them") {
  text::RecordRules rules;
  Value msgs, tools;
  auto rec = [](const std::string& q, const std::string& a) {
    return R"({"messages": [{"role": "user", "content": ")" + q + R"("}, {"role": "assistant", "content": ")" + a +
           R"(", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"x": ")" + q +
           R"("}}}]}]})";
  };
  auto text_of = [&](const Value& v) { return tmpl::to_str(v); };
  REQUIRE(text::record_to_chat(rec("first question, longer than fifteen", "a1"), rules, false, msgs, tools) == "");
  const tmpl::DictObj* user = msgs.list->items[0].dict.get();
  REQUIRE(text::record_to_chat(rec("q2", "second answer"), rules, false, msgs, tools) == "");
  CHECK(msgs.list->items[0].dict.get() == user);  // refilled
  CHECK(text_of(msgs) ==
        "[{'role': 'user', 'content': 'q2'}, {'role': 'assistant', 'content': 'second answer', 'tool_calls': "
        "[{'type': 'function', 'function': {'name': 'f', 'arguments': {'x': 'q2'}}}]}]");
  // Held parts keep their contents: a message, a tool call's arguments.
  const Value held = msgs.list->items[0];
  const Value args =
      *msgs.list->items[1].dict->find("tool_calls")->list->items[0].dict->find("function")->dict->find("arguments");
  REQUIRE(text::record_to_chat(rec("q3", "a3"), rules, false, msgs, tools) == "");
  CHECK(msgs.list->items[0].dict.get() != held.dict.get());
  CHECK(text_of(held) == "{'role': 'user', 'content': 'q2'}");
  CHECK(text_of(args) == "{'x': 'q2'}");
  CHECK(text_of(msgs) ==
        "[{'role': 'user', 'content': 'q3'}, {'role': 'assistant', 'content': 'a3', 'tool_calls': "
        "[{'type': 'function', 'function': {'name': 'f', 'arguments': {'x': 'q3'}}}]}]");
  // Other shapes in turn: more keys, fewer, duplicates, a list where a dict was, a big object.
  std::string big = R"({"role": "user", "content": "c")";
  for (int k = 0; k < 20; ++k) big += ", \"k" + std::to_string(k) + "\": " + std::to_string(k);
  big += "}";
  const std::vector<std::pair<std::string, std::string>> shapes = {
      {R"({"messages": [{"role": "user", "content": "x", "content": "y", "n": [1, {"a": null}]}]})",
       "[{'role': 'user', 'content': 'y', 'n': [1, {'a': None}]}]"},
      {R"({"messages": [{"content": ["p", "q"], "role": "user"}], "m": {}})",
       "[{'content': ['p', 'q'], 'role': 'user'}]"},
      {R"({"messages": [)" + big + "]}", ""},
      {R"({"messages": [{"role": "user", "content": "z"}]})", "[{'role': 'user', 'content': 'z'}]"},
  };
  for (const auto& [json, want] : shapes) {
    INFO(json);
    REQUIRE(text::record_to_chat(json, rules, false, msgs, tools) == "");
    if (!want.empty()) CHECK(text_of(msgs) == want);
    else CHECK(msgs.list->items[0].dict->find("k19")->i == 19);
  }
}

TEST_CASE("records: ms-swift agent form and ShareGPT function calls map onto HF tool calls") {
  text::RecordRules rules;
  Value msgs, tools;
  std::string swift =
      R"({"tools": "[{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]",
          "messages": [{"role": "user", "content": "q"},
                       {"role": "tool_call", "content": "{\"name\": \"f\", \"arguments\": {\"x\": 1}}"},
                       {"role": "tool_call", "content": "{\"name\": \"g\", \"arguments\": \"{}\"}"},
                       {"role": "tool_response", "content": "42"},
                       {"role": "assistant", "content": "a", "reasoning": "r"}]})";
  REQUIRE(text::record_to_chat(swift, rules, false, msgs, tools) == "");
  CHECK(tmpl::to_str(tools) == "[{'type': 'function', 'function': {'name': 'f'}}]");
  REQUIRE(msgs.list->items.size() == 4);
  CHECK(tmpl::to_str(msgs.list->items[1]) ==
        "{'role': 'assistant', 'content': '', 'tool_calls': [{'type': 'function', 'function': {'name': 'f', "
        "'arguments': {'x': 1}}}, {'type': 'function', 'function': {'name': 'g', 'arguments': '{}'}}]}");
  CHECK(tmpl::to_str(msgs.list->items[2]) == "{'role': 'tool', 'content': '42'}");
  CHECK(tmpl::to_str(msgs.list->items[3]) ==
        "{'thinking': 'r', 'role': 'assistant', 'content': 'a', 'reasoning': 'r', 'reasoning_content': 'r'}");
  std::string sharegpt =
      R"({"system": "S", "conversations": [{"from": "human", "value": "q"},
          {"from": "function_call", "value": "{\"name\": \"f\", \"arguments\": \"{}\"}"},
          {"from": "observation", "value": "1"}, {"from": "gpt", "value": "a"}]})";
  REQUIRE(text::record_to_chat(sharegpt, rules, false, msgs, tools) == "");
  REQUIRE(msgs.list->items.size() == 5);
  CHECK(tmpl::to_str(msgs.list->items[0]) == "{'role': 'system', 'content': 'S'}");
  CHECK(tmpl::to_str(msgs.list->items[3]) == "{'role': 'tool', 'content': '1'}");
  CHECK(text::record_to_chat(R"({"messages": [{"content": "x"}]})", rules, false, msgs, tools) ==
        "field 'messages[0].role' is missing");
  CHECK(text::record_to_chat(R"({"messages": [{"role": "tool_call", "content": "nope"}]})", rules, false, msgs, tools)
            .find("tool call") != std::string::npos);
}

TEST_CASE("unknown filters and tests in a branch fail only when reached, and are load warnings") {
  // jinja2 3.x defers them inside `if` and conditional expressions.
  std::string src = "{% if x is string %}{{ x | from_json }}{% endif %}\n{{ 'n' if y else y is nosuch }}";
  Template t = Template::parse(src);
  REQUIRE(t.warnings().size() == 2);
  CHECK(t.warnings()[0] == "1:28: unknown filter 'from_json' (an error if a render reaches it)");
  CHECK(t.warnings()[1].rfind("2:", 0) == 0);
  CHECK(t.warnings()[1].find("test 'nosuch'") != std::string::npos);
  CHECK(render(src, R"({"x": 1, "y": 1})") == "n");  // trim_blocks takes the newline
  CHECK(render_error(src, R"({"x": "a"})").rfind("No filter named 'from_json'.", 0) == 0);
  CHECK(Template::parse("{{ x | upper }}").warnings().empty());
}

TEST_CASE("Python's str semantics: full case mapping, %-formatting, divisibleby on floats") {
  CHECK(render("{{ 'ß'.upper() }} {{ 'ﬃ'.upper() }} {{ 'İ'.lower() | length }} {{ 'ΑΣ'.lower() }}") == "SS FFI 2 ας");
  CHECK(render("{{ 'ǆa'.title() }} {{ 'ßa'.capitalize() }} {{ 'Straße'.casefold() }} {{ 'aBß'.swapcase() }}") ==
        "ǅa Ssa strasse AbSS");
  CHECK(render("{{ '٣'.isdigit() }} {{ 'ǅ'.istitle() }} {{ 'Ⅻ'.isnumeric() }} {{ '٣' | int }}") == "True True True 3");
  CHECK(render("{{ ('%600d' % 1) | length }}|{{ '%x|%#o|%-3s|%.1f' % (-255, 8, 'ß', 0.25) }}") ==
        "600|-ff|0o10|ß  |0.2");
  CHECK(render("{{ 12.34 is divisibleby 3 }} {{ 12.0 is divisibleby 3 }} {{ 3.0 is odd }}") == "False True True");
  CHECK(render("{{ d | attr('role') }}|{{ nn | select | list }}{{ nn | map('upper') | list }}",
               R"({"d": {"role": "user"}, "nn": null})") == "|[][]");
}

TEST_CASE("template: a record's renders share tojson of its lists and dicts, each option apart") {
  Template t = Template::parse(
      "{{ tools | tojson }}|{{ tools | tojson(indent=2) }}|{{ tools[0] | tojson(sort_keys=true) }}|"
      "{{ [1, 'x'] | tojson }}|{% set ns = namespace(a=1) %}{{ {'n': ns.a} | tojson }}");
  tmpl::Vars vars{{"tools", tmpl::parse_json(R"([{"name": "f", "b": [1, 2.5, null], "a": "é\n"}])")}};
  tmpl::RenderLimits limits;
  const std::string plain = t.render(vars, limits);
  CHECK(plain ==
        "[{\"name\": \"f\", \"b\": [1, 2.5, null], \"a\": \"é\\n\"}]|[\n  {\n    \"name\": \"f\",\n    \"b\": [\n"
        "      1,\n      2.5,\n      null\n    ],\n    \"a\": \"é\\n\"\n  }\n]|"
        "{\"a\": \"é\\n\", \"b\": [1, 2.5, null], \"name\": \"f\"}|[1, \"x\"]|{\"n\": 1}");
  tmpl::MemoScope memo;
  // (Entries the thread kept from earlier scopes, of objects still held
  // elsewhere: a record's tools in the thread's ToolsCache.)
  const std::size_t kept = memo.entries.size();
  CHECK(t.render(vars, limits) == plain);
  CHECK(t.render(vars, limits) == plain);
  // tools twice (two options), tools[0] (the constant list's output is
  // folded into the template's text at load); the dict each render builds
  // is a new object each time.
  CHECK(memo.entries.size() == kept + 5);
  {
    tmpl::MemoScope inner;  // scopes do not nest
    CHECK(t.render(vars, limits) == plain);
    CHECK(inner.entries.empty());
  }
  CHECK(memo.entries.size() == kept + 6);
}

// The thread keeps a scope's tojson texts for later scopes while their
// object is held by something besides the memo (a record's tools reused by
// later records, not only the next): a scope that reads none of them keeps
// them too; an object nothing else holds is dropped, so a new object at its
// address is never served its text.
TEST_CASE("template: tojson texts kept across records while their object is held, by identity and options") {
  Template t = Template::parse("{{ tools | tojson }}|{{ tools | tojson(indent=1) }}");
  tmpl::RenderLimits limits;
  auto text_of = [&](const Value& tools) {
    tmpl::MemoScope memo;
    return t.render({{"tools", tools}}, limits);
  };
  auto kept = [] {  // the entries kept for the next scope once it ends: their objects still held
    { tmpl::MemoScope drop; }
    tmpl::MemoScope probe;
    return probe.entries.size();
  };
  text_of(Value::new_list());  // whatever earlier tests left is dropped or kept apart from these
  const std::size_t base = kept();
  Value a = tmpl::parse_json(R"([{"name": "a", "n": [1, 2]}])");
  Value b = tmpl::parse_json(R"([{"name": "b"}])");
  const std::string a_text =
      "[{\"name\": \"a\", \"n\": [1, 2]}]|[\n {\n  \"name\": \"a\",\n  \"n\": [\n   1,\n   2\n  ]\n }\n]";
  const std::string b_text = "[{\"name\": \"b\"}]|[\n {\n  \"name\": \"b\"\n }\n]";
  CHECK(text_of(a) == a_text);
  CHECK(kept() == base + 2);  // a, each option apart
  // The tools change: b's texts, a's kept beside them (a is still held).
  CHECK(text_of(b) == b_text);
  CHECK(kept() == base + 4);
  // A record without tools reads none; a's and b's stay kept, and a record
  // whose tools are a's again (not the previous record's) is served them.
  CHECK(text_of(Value::none()) == "null|null");
  {
    tmpl::MemoScope memo;
    CHECK(t.render({{"tools", a}}, limits) == a_text);
    std::size_t served = 0;
    for (const auto& e : memo.entries) served += e.used;
    CHECK(served == 2);  // both from the scopes before, none written again
  }
  CHECK(text_of(b) == b_text);
  // b freed: nothing but the memo holds it, a scope's end drops its texts.
  b = Value();
  CHECK(kept() == base + 2);
  // A new list, perhaps at b's address, with other contents: its own text.
  for (int i = 0; i < 4; ++i) {
    Value c = tmpl::parse_json(R"([{"name": "c)" + std::to_string(i) + R"("}])");
    CHECK(text_of(c) ==
          "[{\"name\": \"c" + std::to_string(i) + "\"}]|[\n {\n  \"name\": \"c" + std::to_string(i) + "\"\n }\n]");
  }
  CHECK(kept() == base + 2);  // a's alone: each c was freed after its record
  a = Value();
  CHECK(kept() == base);
}

// The entries a scope keeps reach the next scope in a list of the capacity
// a push_back of each leaves it: the next record's renders append to it,
// and its growth there is counted by their budget as it always was. (A
// thread of its own: nothing kept before.)
TEST_CASE("template: the tojson texts kept for the next record come in a list grown as by push_back") {
  std::thread([] {
    Template t = Template::parse("{{ tools | tojson }}|{{ tools | tojson(indent=1) }}|{{ tools | tojson(indent=2) }}");
    tmpl::RenderLimits limits;
    Value tools = tmpl::parse_json(R"([{"name": "a"}])");
    std::string first;
    {
      tmpl::MemoScope memo;
      first = t.render({{"tools", tools}}, limits);
      CHECK(memo.entries.size() == 3);
    }
    tmpl::MemoScope next;
    CHECK(next.entries.size() == 3);
    CHECK(next.entries.capacity() == 4);  // 1, 2, 4: not 3
    CHECK(t.render({{"tools", tools}}, limits) == first);
    std::size_t served = 0;
    for (const auto& e : next.entries) served += e.used;
    CHECK(served == 3);
  }).join();
}

// Value::recycled_list(items), as the resumed prefix renders make their
// messages[:k] outside the render's budget: the items in their own buffer
// (a render that frees the list frees what new_list(items) would have
// allocated), in the object a freed list left on the thread. (A thread of
// its own: its kept objects are those freed here.)
TEST_CASE("value: recycled_list(items) keeps the items' buffer and takes a freed list's object") {
  std::thread([] {
    auto ints = [](int n) {
      std::vector<Value> v;
      v.reserve(static_cast<std::size_t>(n));
      for (int i = 0; i < n; ++i) v.push_back(Value::integer(i));
      return v;
    };
    const tmpl::ListObj* freed;
    {
      Value big = Value::new_list(ints(9));
      freed = big.list.get();
    }  // kept by the thread with its buffer of 9
    Value l = Value::recycled_list(ints(3));
    REQUIRE(l.is_list());
    CHECK(!l.tuple);
    CHECK(l.list.get() == freed);
    REQUIRE(l.list->items.size() == 3);
    CHECK(l.list->items.capacity() == 3);  // not the kept buffer's 9
    CHECK(l.list->items[2].i == 2);
    CHECK(tmpl::to_str(l) == "[0, 1, 2]");
  }).join();
}

TEST_CASE("template: variable names are interned, equal iff their text is") {
  std::string a = "add_generation_prompt", b = std::string("add_generation_") + "prompt";
  const tmpl::Name x(a), y(b), z("add_generation_promp"), none;
  CHECK(x == y);
  CHECK(&x.str() == &y.str());  // one string for both
  CHECK_FALSE(x == z);
  CHECK(x.str() == "add_generation_prompt");
  CHECK_FALSE(none == tmpl::Name(""));  // no name: equal to no variable's, the empty one's included
  CHECK(tmpl::Name("") == tmpl::Name(std::string_view()));
  // A template's scopes keep their names apart by those pointers: a loop
  // variable shadows an outer one of the same name only.
  CHECK(render("{% set m = 1 %}{% set mm = 2 %}{% for m in [3] %}{{ m }}{{ mm }}{% endfor %}{{ m }}") == "321");
}

TEST_CASE("template: items read in place, as jinja2 reads them") {
  // A dict's value under a str key and a list's item (negative, bool
  // indices) are borrowed from the variable; a miss is what getitem gives.
  CHECK(render("{% set d = {'a': [1, 2, 3], 'b': 'xy'} %}{{ d['a'][-1] }}{{ d['a'][True] }}{{ d['a'][5] is defined }}"
               "{{ d['b'][1] }}{{ d['c'] is defined }}{% for m in [d] %}{{ m['a'][0] == 1 }}"
               "{{ m['a'][-4] is defined }}{% endfor %}") == "32FalseyFalseTrueFalse");
}

TEST_CASE("template: slices with any step, as Python's") {
  // The items are counted before they are taken: a step near the int64
  // limits takes one item, without the index passing the limit.
  CHECK(render("{{ [1,2,3][1::9223372036854775807] }}{{ [1,2,3][::-9223372036854775807 - 1] }}"
               "{{ 'abc'[1::9223372036854775807] }}{{ 'abcd'[::-2] }}{{ [1,2,3,4,5][4:0:-3] }}{{ [1,2,3][5:1:-1] }}") ==
        "[2][3]bdb[5, 2][3]");
}

TEST_CASE("template: int + and - past 64 bits are an error, not a wrapped value") {
  CHECK(render("{{ 3 - 5 }}{{ 2 + 2 }}{{ true + 1 }}{{ 1 - 0.5 }}") ==
        "-242"
        "0.5");
  CHECK(render_error("{{ 9223372036854775807 + 1 }}").find("integer overflow") != std::string::npos);
  CHECK(render_error("{{ -9223372036854775807 - 2 }}").find("integer overflow") != std::string::npos);
}

TEST_CASE("template: the int -2^63 from a record divided by -1 or made positive is an error, not a trap") {
  // A record's -9223372036854775808 fits; Python's -x // -1 and abs(x) are
  // 2^63 (past 64 bits: loud, docs/chat_templates.md), x % -1 is 0, and
  // C++'s INT64_MIN / -1 would stop the process with SIGFPE.
  const std::string x = R"({"x": -9223372036854775808})";
  CHECK(render("{{ x % -1 }}|{{ x // 1 }}|{{ x % 7 }}|{{ x // -7 }}|{{ x is divisibleby(-1) }}|{{ -1 // -1 }}", x) ==
        "0|-9223372036854775808|6|1317624576693539401|True|1");
  for (const char* t :
       {"{{ x // -1 }}", "{{ x | abs }}", "{{ x | int | abs }}", "{{ -x }}", "{{ [x, -1] | sum | abs }}"})
    CHECK_MESSAGE(render_error(t, x).find("integer overflow") != std::string::npos, t);
  CHECK(render("{{ (x + 1) | abs }}|{{ -5 | abs }}|{{ true | abs }}", x) == "9223372036854775807|5|1");
  // round() with a negative precision: Python's int result, past 64 bits an error.
  CHECK(render("{{ (x + 9) | round(-1) }}|{{ x | round(-18) }}|{{ 5000000000000000000 | round(-19) }}|"
               "{{ -5000000000000000000 | round(-19) }}|{{ x | round(-20) }}|{{ 15 | round(-1) }}|{{ 25 | round(-1) }}",
               x) == "-9223372036854775800|-9000000000000000000|0|0|0|20|20");
  for (const char* t : {"{{ x | round(-1) }}", "{{ 9223372036854775807 | round(-1) }}",
                        "{{ 5000000000000000001 | round(-19) }}", "{{ x | round(-19) }}"})
    CHECK_MESSAGE(render_error(t, x).find("integer overflow") != std::string::npos, t);
}
