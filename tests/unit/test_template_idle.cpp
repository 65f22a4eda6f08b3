// Idle iterations (Stmt::idle_guard): a loop whose remaining iterations
// only compute integers and find the guard falsy runs one of them and
// counts the others' steps. Each render must equal the render of a twin
// template that no loop skips in (an empty `else` on the `if`, which costs
// no step): the text, the provenance, the steps, the error, under every
// step budget.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "template/json_value.hpp"
#include "template/template.hpp"

using namespace tokfeed;
using tmpl::Template;
using tmpl::Value;

namespace {

struct Outcome {
  std::string text, error;
  std::vector<std::tuple<std::size_t, std::size_t, uint32_t>> pieces;
  std::vector<char> seen;
  uint64_t steps = 0;
  bool operator==(const Outcome&) const = default;
};

Outcome run(const Template& t, const Value& messages, uint64_t max_steps) {
  tmpl::Vars vars;
  vars.emplace_back("messages", messages);
  vars.emplace_back("add_generation_prompt", Value::boolean(false));
  tmpl::Provenance prov;
  for (const Value& m : messages.list->items) prov.messages.push_back(m.is_dict() ? m.dict.get() : nullptr);
  tmpl::RenderLimits limits;
  limits.max_steps = max_steps;
  Outcome o;
  tmpl::RecordScope scope(uint64_t{1} << 40);
  try {
    o.text = t.render(vars, limits, nullptr, &prov);
  } catch (const tmpl::Error& e) {
    o.error = e.what();
  }
  for (const auto& p : prov.pieces) o.pieces.emplace_back(p.begin, p.end, p.message);
  o.seen = prov.seen;
  o.steps = scope.used();
  return o;
}

// `src` marks `ENDIF` each `{% endif %}` that closes a guarded `if`: the
// twin has `{% else %}{% endif %}` there (a line break after each keeps
// the positions that errors name). Checks every budget up
// to the render's steps; returns the text.
std::string same_as_twin(std::string src, const std::string& messages_json) {
  REQUIRE(src.find("ENDIF") != std::string::npos);
  std::string twin = src;
  for (std::size_t at; (at = src.find("ENDIF")) != std::string::npos;) {
    src.replace(at, 5, "{%- endif %}");
    twin.replace(twin.find("ENDIF"), 5, "{%- else %}{%- endif %}");
  }
  const Template a = Template::parse(src), b = Template::parse(twin);
  const Value messages = tmpl::parse_json(messages_json);
  const Outcome full = run(a, messages, 1'000'000);
  CHECK(full == run(b, messages, 1'000'000));
  CHECK(full.error.empty());
  for (uint64_t max = 1; max <= full.steps + 1; ++max) {
    INFO("max_steps = " << max);
    const Outcome x = run(a, messages, max), y = run(b, messages, max);
    CHECK(x.text == y.text);
    CHECK(x.error == y.error);
    CHECK(x == y);
    CHECK(x.error.empty() == (max >= full.steps));
  }
  return full.text;
}

const char* kScan = R"(
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and not(message.content.startswith('<tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    ENDIF
{%- endfor %}
{%- for message in messages %}{{ loop.index0 }}{{ '>' if loop.index0 > ns.last_query_index else '.' }}{{ message.role[0] }} {% endfor %}
{{- ns.last_query_index }})";

const char* kSix =
    R"([{"role": "system", "content": "s"}, {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
        {"role": "user", "content": "c"}, {"role": "assistant", "content": "d"}, {"role": "tool", "content": "e"}])";

}  // namespace

TEST_CASE("idle iterations: a scan for the last user message counts the iterations after it found one") {
  CHECK(same_as_twin(kScan, kSix) == "0.s 1.u 2.a 3.u 4>a 5>t 3");
  // Found at the last message, at the first, never; one message; none.
  CHECK(same_as_twin(kScan, R"([{"role": "assistant", "content": "b"}, {"role": "user", "content": "a"}])") ==
        "0.a 1.u 1");
  CHECK(same_as_twin(kScan, R"([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                                {"role": "tool", "content": "c"}, {"role": "tool", "content": "d"}])") ==
        "0.u 1>a 2>t 3>t 0");
  CHECK(same_as_twin(kScan, R"([{"role": "assistant", "content": "b"}, {"role": "tool", "content": "c"}])") ==
        "0.a 1.t 1");
  CHECK(same_as_twin(kScan, R"([{"role": "user", "content": "a"}])") == "0.u 0");
  CHECK(same_as_twin(kScan, "[]") == "-1");
  std::string many = "[";
  for (int i = 0; i < 20; ++i) many += R"({"role": "user", "content": "q"}, {"role": "assistant", "content": "r"}, )";
  many += R"({"role": "tool", "content": "<tool_response>"}])";
  const std::string text = same_as_twin(kScan, many);
  CHECK(text.substr(text.size() - 12) == "39>a 40>t 38");
}

TEST_CASE("idle iterations: what the loop leaves behind is the last iteration's") {
  // `loop` kept in a namespace by the iteration that found the message.
  const char* kept = R"(
{%- set ns = namespace(looking=true, at=none) %}
{%- for m in messages %}
    {%- set i = loop.index0 + 1 - loop.length %}
    {%- if ns.looking and m.role == "user" %}{% set ns.looking = false %}{% set ns.at = loop %}ENDIF
{%- endfor %}
{{- ns.at.index }}/{{ ns.at.revindex0 }}/{{ ns.at.last }}/{{ ns.at.previtem.role }})";
  CHECK(same_as_twin(kept, kSix) == "6/0/True/assistant");
  // Inside another loop, whose variables the guarded loop reads; a guard
  // of 0 and of none; a set of a long name.
  const char* nested = R"(
{%- for o in [1, 2] %}
{%- set ns = namespace(n=o - 1, z=none if o == 1 else 5) %}
{%- for m in messages %}
    {%- set a_name_longer_than_sixteen_bytes = loop.revindex - loop.depth0 + messages | length %}
    {%- if ns.n and m.role == "tool" %}{% set ns.n = 0 %}{{ m.content }}ENDIF
{%- endfor %}
{%- for m in messages %}
    {%- if ns.z and m.role == "assistant" %}{% set ns.z = none %}{{ m.content }}ENDIF
{%- endfor %}
{%- endfor %})";
  CHECK(same_as_twin(nested, kSix) == "eb");
}

TEST_CASE("idle iterations: loops whose iterations do more than that run every iteration") {
  // Output, a call, a name the body binds, an elif: not idle, the same
  // either way (the twin check holds for any template).
  CHECK(same_as_twin(R"({%- set ns = namespace(f=false) %}{%- for m in messages %}{%- set i = loop.index %}.
{%- if ns.f and m.role %}xENDIF
{%- endfor %})",
                     kSix) == "......");
  CHECK(same_as_twin(R"({%- set ns = namespace(f=false) %}{%- for m in messages %}{%- set i = m.content | length %}
{%- if ns.f and m.role %}xENDIF
{%- endfor %}{{ i }})",
                     kSix) == "");
}
