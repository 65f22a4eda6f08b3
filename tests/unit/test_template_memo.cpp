// Pure macros and the record's memo of their calls (daemon/template/
// macro_memo.cpp): a call served from the memo gives what running it
// gives (the text, the steps, the error under every budget), and a macro
// whose output depends on more than its arguments and the top-level
// values it reads is never served.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "template/budget.hpp"
#include "template/json_value.hpp"
#include "template/macro_memo.hpp"
#include "template/template.hpp"

using namespace tokfeed;
using tmpl::Template;
using tmpl::Value;

namespace {

struct Outcome {
  std::string text, error;
  uint64_t steps = 0;
  std::vector<char> seen;
  bool operator==(const Outcome&) const = default;
};

Outcome run(const Template& t, const tmpl::Vars& vars, uint64_t max_steps = 1'000'000, tmpl::Provenance* prov = nullptr,
            std::size_t max_bytes = std::size_t{256} << 20) {
  tmpl::RenderLimits limits;
  limits.max_steps = max_steps;
  limits.max_bytes = max_bytes;
  Outcome o;
  tmpl::RecordScope scope(uint64_t{1} << 40);
  try {
    o.text = t.render(vars, limits, nullptr, prov);
  } catch (const tmpl::Error& e) {
    o.error = e.what();
  }
  o.steps = scope.used();
  if (prov) o.seen = prov->seen;
  return o;
}

std::size_t kept(const tmpl::MemoScope& memo) { return memo.macros ? memo.macros->entries.size() : 0; }

// Drops the calls the scopes before left for the next (kept while their
// objects are held: a test's values outlive its scopes).
void forget() {
  tmpl::MemoScope drop;
  drop.macros.reset();
}

// Kimi K3's serializer: dicts' keys sorted, recursively.
const char* kSorted = R"(
{%- macro js(v) -%}
{%- if v is mapping -%}{ {%- for k, x in v | dictsort -%}{{ k | tojson }}:{{ js(x) }}{{ ',' if not loop.last }}{%- endfor -%} }
{%- elif v is string or v is number or v is boolean or v is none -%}{{ v | tojson }}
{%- else -%}[{%- for x in v -%}{{ js(x) }}{{ ',' if not loop.last }}{%- endfor -%}]
{%- endif -%}
{%- endmacro -%}
{%- macro declare(tools) -%}<tools>{{ js(tools) }}</tools>{%- endmacro -%})";

const char* kTools = R"([{"name": "f", "parameters": {"type": "object", "properties": {"b": {"type": "string"},
  "a": {"type": "array", "items": [1, 2.5, null, true]}}}}, {"name": "g", "description": "é\n"}])";

// A macro whose loop binds the messages it is given, called with two
// (`msgs`), and a provenance that knows them.
struct MessagesMacro {
  const Template t = Template::parse(
      "{% macro all(ms) %}{% for m in ms %}{{ m.content }}{% endfor %}"
      "{%- for i in range(80) %}.{% endfor -%}{% endmacro %}{{ all(msgs) }}");
  const Value msgs = tmpl::parse_json(R"([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}])");
  const tmpl::Vars vars{{"msgs", msgs}};
  tmpl::Provenance provenance() const {
    tmpl::Provenance p;
    for (const Value& m : msgs.list->items) p.messages.push_back(m.dict.get());
    return p;
  }
};

}  // namespace

// Each budget's outcome without the memo (no MemoScope open), from 1 step
// to the render's steps + 1.
std::vector<Outcome> plain_runs(const Template& t, const tmpl::Vars& vars, uint64_t steps) {
  std::vector<Outcome> out;
  for (uint64_t max = 1; max <= steps + 1; ++max) out.push_back(run(t, vars, max));
  return out;
}

TEST_CASE("template memo: a served call gives the text, steps and error of a run, under every budget") {
  const Template t = Template::parse(std::string(kSorted) + "A{{ declare(tools) }}B{{ declare(tools) }}C");
  const tmpl::Vars vars{{"tools", tmpl::parse_json(kTools)}};
  const Outcome plain = run(t, vars);
  REQUIRE(plain.error.empty());
  const std::string decl =
      "<tools>[{\"name\":\"f\",\"parameters\":{\"properties\":{\"a\":{\"items\":[1,2.5,null,true],\"type\":\"array\"},"
      "\"b\":{\"type\":\"string\"}},\"type\":\"object\"}},{\"description\":\"é\\n\",\"name\":\"g\"}]</tools>";
  CHECK(plain.text == "A" + decl + "B" + decl + "C");
  const std::vector<Outcome> budgets = plain_runs(t, vars, plain.steps);
  CHECK(budgets.back() == plain);
  CHECK(budgets[plain.steps - 2].error.find("step budget of " + std::to_string(plain.steps - 1)) != std::string::npos);
  forget();
  tmpl::MemoScope memo;
  // The first render keeps declare(tools) and serves its second call; the
  // second render serves both. Each counts the steps of the plain render.
  CHECK(run(t, vars) == plain);
  CHECK(kept(memo) == 1);
  CHECK(run(t, vars) == plain);
  CHECK(kept(memo) == 1);
  // Under each budget, the render stops where the plain one does, with the
  // same error and steps (a served call past the budget runs instead).
  for (uint64_t max = 1; max <= plain.steps + 1; ++max) {
    INFO("max_steps = " << max);
    CHECK(run(t, vars, max) == budgets[max - 1]);
  }
  CHECK(kept(memo) == 1);
}

TEST_CASE("template memo: a served call deeper in the recursion runs as running it runs") {
  // deep(v, n) recurses n levels, two scopes a level; `wrap` is impure (it
  // sets a namespace's attribute), so its calls run, and deep() inside it
  // is looked up w levels deeper. The first deep() grows the render's
  // vector of scopes to 128 (a step for its 4 KiB): not kept, as a run
  // after it counts no such step. At w = 1 deep(tools, 60) is served; at
  // w = 5 it would grow the vector again (a step more): it runs; at w = 45
  // it passes the recursion limit of 100: it runs and fails there.
  const Template t = Template::parse(R"(
{%- macro deep(v, n) -%}{%- if n > 0 -%}({{ deep(v, n - 1) }}){%- else -%}{{ v | length }}{%- endif -%}{%- endmacro -%}
{%- macro wrap(n) -%}{%- set ns.calls = ns.calls + 1 -%}{%- if n > 0 -%}{{ wrap(n - 1) }}{%- else -%}{{ deep(tools, 60) }}{%- endif -%}{%- endmacro -%}
{%- set ns = namespace(calls=0) -%}
{{- deep([], 61) | length }}|{{ deep(tools, 60) | length }}|{{ wrap(w) }})");
  const Value tools = tmpl::parse_json(kTools);
  std::vector<Outcome> plain;
  for (int w : {1, 5, 45}) plain.push_back(run(t, {{"tools", tools}, {"w", Value::integer(w)}}));
  CHECK(plain[0].text == "123|121|" + std::string(60, '(') + "2" + std::string(60, ')'));
  CHECK(plain[1].text == plain[0].text);
  CHECK(plain[2].error.find("maximum macro recursion depth exceeded") != std::string::npos);
  forget();
  tmpl::MemoScope memo;
  for (int round = 0; round < 2; ++round) {
    for (std::size_t i = 0; i < 3; ++i) {
      const int w = i == 0 ? 1 : i == 1 ? 5 : 45;
      INFO("w = " << w);
      CHECK(run(t, {{"tools", tools}, {"w", Value::integer(w)}}) == plain[i]);
    }
    CHECK(kept(memo) == 1);  // deep(tools, 60)
  }
}

TEST_CASE("template memo: a served call past the recursion limit runs and fails there") {
  // As above, but the first deep() grows the vector of scopes to 256: at
  // w = 45 deep(tools, 60) fits in it, and passes the recursion limit.
  const Template t = Template::parse(R"(
{%- macro deep(v, n) -%}{%- if n > 0 -%}({{ deep(v, n - 1) }}){%- else -%}{{ v | length }}{%- endif -%}{%- endmacro -%}
{%- macro wrap(n) -%}{%- set ns.calls = ns.calls + 1 -%}{%- if n > 0 -%}{{ wrap(n - 1) }}{%- else -%}{{ deep(tools, 60) }}{%- endif -%}{%- endmacro -%}
{%- set ns = namespace(calls=0) -%}
{{- deep([], 99) | length }}|{{ deep(tools, 60) | length }}|{{ wrap(w) }})");
  const Value tools = tmpl::parse_json(kTools);
  const tmpl::Vars shallow{{"tools", tools}, {"w", Value::integer(1)}},
      deep{{"tools", tools}, {"w", Value::integer(45)}};
  const Outcome ok = run(t, shallow), fails = run(t, deep);
  CHECK(ok.text == "199|121|" + std::string(60, '(') + "2" + std::string(60, ')'));
  CHECK(fails.error.find("maximum macro recursion depth exceeded") != std::string::npos);
  forget();
  tmpl::MemoScope memo;
  CHECK(run(t, shallow) == ok);
  CHECK(kept(memo) == 1);
  CHECK(run(t, deep) == fails);
  CHECK(run(t, shallow) == ok);
}

TEST_CASE("template memo: a served call that would pass the memory budget runs and fails there") {
  if (!tmpl::budget_counts_allocations()) return;  // a sanitizer build counts no memory
  // big(n) holds a 3 MB string for a moment and writes its length.
  const Template t = Template::parse(
      "{% macro big(n) %}{% set s = 'x' * n %}{{ s | length }}"
      "{%- for i in range(80) %}.{% endfor -%}{% endmacro %}{{ big(3000000) }}");
  const std::string dots(80, '.');
  const Outcome ok = run(t, {}), fails = run(t, {}, 1'000'000, nullptr, 2u << 20);
  CHECK(ok.text == "3000000" + dots);
  CHECK(fails.error.find("the render needed more than 2097152 bytes of memory") != std::string::npos);
  forget();
  tmpl::MemoScope memo;
  CHECK(run(t, {}) == ok);
  CHECK(kept(memo) == 1);
  CHECK(run(t, {}, 1'000'000, nullptr, 2u << 20) == fails);
  CHECK(run(t, {}) == ok);
}

TEST_CASE("template memo: macros whose output depends on more than their arguments are not served") {
  const std::string pad = "{%- for i in range(80) %}.{% endfor -%}";  // steps enough to be kept
  auto twice = [](const std::string& src, const tmpl::Vars& vars) {
    const Template t = Template::parse(src);
    const Outcome plain = run(t, vars);
    forget();
    tmpl::MemoScope memo;
    CHECK(run(t, vars) == plain);
    CHECK(run(t, vars) == plain);
    return std::make_pair(plain.text, kept(memo));
  };
  const std::string dots(80, '.');
  // A namespace argument that changes between calls: pure by its text, but
  // its argument is no settled value.
  auto [a, na] = twice("{% macro show(s) %}{{ s.v }}" + pad +
                           "{% endmacro %}{% set ns = namespace(v=1) %}{{ show(ns) }}{% set ns.v = 2 %}{{ show(ns) }}",
                       {});
  CHECK(a == "1" + dots + "2" + dots);
  CHECK(na == 0);
  // A namespace read by name from the top level.
  auto [b, nb] = twice("{% macro show() %}{{ cfg.v }}" + pad +
                           "{% endmacro %}{% set cfg = namespace(v=1) %}{{ show() }}{% set cfg.v = 2 %}{{ show() }}",
                       {});
  CHECK(b == "1" + dots + "2" + dots);
  CHECK(nb == 0);
  // A list that holds a namespace.
  auto [c, nc] = twice("{% macro show(l) %}{{ l[0].v }}" + pad +
                           "{% endmacro %}{% set ns = namespace(v=1) %}{% set l = [ns] %}{{ show(l) }}"
                           "{% set ns.v = 2 %}{{ show(l) }}",
                       {});
  CHECK(c == "1" + dots + "2" + dots);
  CHECK(nc == 0);
  // A macro that sets a namespace's attribute: each call counts.
  auto [d, nd] = twice("{% set st = namespace(n=0) %}{% macro bump(x) %}{% set st.n = st.n + 1 %}{{ st.n }}" + pad +
                           "{% endmacro %}{{ bump(1) }}{{ bump(1) }}",
                       {});
  CHECK(d == "1" + dots + "2" + dots);
  CHECK(nd == 0);
  // A top-level variable the macro reads, set again between the calls: a
  // call's key holds its value.
  auto [e, ne] = twice("{% macro show() %}{{ x }}" + pad + "{% endmacro %}{{ show() }}{% set x = 2 %}{{ show() }}",
                       {{"x", Value::integer(1)}});
  CHECK(e == "1" + dots + "2" + dots);
  CHECK(ne == 2);
  // A macro it calls bound to another macro between the calls.
  auto [f, nf] = twice("{% macro a() %}A{% endmacro %}{% macro b() %}B{% endmacro %}{% macro show() %}{{ inner() }}" +
                           pad + "{% endmacro %}{% set inner = a %}{{ show() }}{% set inner = b %}{{ show() }}",
                       {});
  CHECK(f == "A" + dots + "B" + dots);
  CHECK(nf == 0);  // `inner` holds a function: no settled value
  auto [g, ng] = twice(
      "{% macro inner() %}A{% endmacro %}{% macro other() %}B{% endmacro %}{% macro show() %}"
      "{{ inner() }}" +
          pad + "{% endmacro %}{{ show() }}{% set inner = other %}{{ show() }}",
      {});
  CHECK(g == "A" + dots + "B" + dots);
  CHECK(ng == 1);  // the first call alone: the second's `inner` is not the macro show() was analysed with
  // A local name read before the macro sets it is the top-level one.
  auto [h, nh] = twice(
      "{% macro show() %}{{ y }}{% set y = 5 %}{{ y }}" + pad + "{% endmacro %}{{ show() }}{% set y = 3 %}{{ show() }}",
      {{"y", Value::integer(1)}});
  CHECK(h == "15" + dots + "35" + dots);
  CHECK(nh == 2);
  // Mutating methods, caller, cycler, namespace(), random: never kept,
  // though these calls take no branch that uses them.
  const tmpl::Vars list{{"l", tmpl::parse_json("[1, 2]")}};
  CHECK(
      twice("{% macro m(l, f) %}{% if f %}{{ l.append(3) }}{% endif %}" + pad + "{% endmacro %}{{ m(l, false) }}", list)
          .second == 0);
  CHECK(twice("{% macro m(l, f) %}{% if f %}{{ caller() }}{% endif %}" + pad + "{% endmacro %}{{ m(l, false) }}", list)
            .second == 0);
  CHECK(twice("{% macro m(l, f) %}{% if f %}{{ cycler(1, 2).next() }}{% endif %}" + pad +
                  "{% endmacro %}{{ m(l, false) }}",
              list)
            .second == 0);
  CHECK(
      twice("{% macro m(l, f) %}{% if f %}{{ namespace(a=1).a }}{% endif %}" + pad + "{% endmacro %}{{ m(l, false) }}",
            list)
          .second == 0);
  CHECK(
      twice("{% macro m(l, f) %}{% if f %}{{ l | random }}{% endif %}" + pad + "{% endmacro %}{{ m(l, false) }}", list)
          .second == 0);
  // The same macro without them is kept (so the checks above can fail).
  CHECK(twice("{% macro m(l, f) %}{% if f %}{{ l | first }}{% endif %}" + pad + "{% endmacro %}{{ m(l, false) }}", list)
            .second == 1);
}

TEST_CASE("template memo: a call whose loop binds messages is not served (provenance's seen)") {
  const MessagesMacro f;
  const Template& t = f.t;
  const tmpl::Vars& vars = f.vars;
  auto provenance = [&] { return f.provenance(); };
  tmpl::Provenance p0 = provenance();
  const Outcome plain = run(t, vars, 1'000'000, &p0);
  CHECK(plain.seen == std::vector<char>{1, 1});
  forget();
  tmpl::MemoScope memo;
  tmpl::Provenance p1 = provenance();
  CHECK(run(t, vars, 1'000'000, &p1) == plain);
  CHECK(run(t, vars, 1'000'000, &p1) == plain);
  CHECK(kept(memo) == 0);
  // Without provenance nothing is bound: kept, and served.
  const Outcome bare = run(t, vars);
  CHECK(run(t, vars) == bare);
  CHECK(kept(memo) == 1);
  CHECK(run(t, vars) == bare);
}

TEST_CASE("template memo: a call that dumped a big tojson through the record's memo is not kept") {
  const Template t = Template::parse(
      "{% macro d(v) %}{{ v | tojson }}{%- for i in range(80) %}.{% endfor -%}"
      "{% endmacro %}{{ d(small) | length }} {{ d(big) | length }}");
  std::string big = "[";
  for (int i = 0; i < 400; ++i) big += (i ? ", " : "") + std::to_string(100000 + i);
  big += "]";
  const tmpl::Vars vars{{"small", tmpl::parse_json("[1, 2]")}, {"big", tmpl::parse_json(big)}};
  forget();
  tmpl::MemoScope memo;
  const Outcome first = run(t, vars);
  CHECK(first.text == "86 3280");
  CHECK(kept(memo) == 1);  // d(small) alone
  CHECK(run(t, vars).text == first.text);
}

// As the tojson texts: a scope's calls are kept for the scopes after it
// while something besides the memo holds their objects (a record's tools
// reused by later records); an object nothing else holds is dropped, so a
// new object at its address is never served another's text.
TEST_CASE("template memo: calls kept from one record to the next while their objects are held") {
  const Template t = Template::parse(std::string(kSorted) + "{{ declare(tools) }}");
  Value a = tmpl::parse_json(kTools), b = tmpl::parse_json(R"([{"name": "b", "z": 1, "a": 2}])");
  const Outcome plain_a = run(t, {{"tools", a}}), plain_b = run(t, {{"tools", b}});
  CHECK(plain_b.text == "<tools>[{\"a\":2,\"name\":\"b\",\"z\":1}]</tools>");
  forget();
  auto record = [&](const Value& tools, const Outcome& plain, std::size_t kept_before, bool served) {
    tmpl::MemoScope memo;
    CHECK(kept(memo) == kept_before);
    CHECK(run(t, {{"tools", tools}}) == plain);
    std::size_t used = 0;
    if (memo.macros)
      for (const auto& e : memo.macros->entries) used += e.used;
    CHECK(used == (served ? 1u : 0u));
  };
  record(a, plain_a, 0, false);
  record(a, plain_a, 1, true);
  record(b, plain_b, 1, false);
  record(a, plain_a, 2, true);
  b = Value();  // nothing but the memo holds b: dropped at the next scope's end
  record(a, plain_a, 2, true);
  for (int i = 0; i < 4; ++i) {
    const Value c = tmpl::parse_json(R"([{"name": "c)" + std::to_string(i) + R"("}])");
    const Outcome plain_c = run(t, {{"tools", c}});
    CHECK(plain_c.text == "<tools>[{\"name\":\"c" + std::to_string(i) + "\"}]</tools>");
    record(c, plain_c, 1, false);  // a's alone: each c freed after its record
  }
  a = Value();
  {
    tmpl::MemoScope memo;
    CHECK(kept(memo) == 1);  // a's, left by the last scope, which held a
  }
  tmpl::MemoScope memo;
  CHECK(kept(memo) == 0);
}

// A call kept where no provenance was recorded, or for other messages, is
// served in a render with provenance only where its key reaches none of
// that render's messages (an iteration over them would mark them seen).
TEST_CASE("template memo: a kept call is not served where its key reaches the render's messages") {
  const MessagesMacro f;
  const Template& t = f.t;
  const tmpl::Vars& vars = f.vars;
  auto provenance = [&] { return f.provenance(); };
  tmpl::Provenance p0 = provenance();
  const Outcome plain = run(t, vars, 1'000'000, &p0), bare = run(t, vars);
  CHECK(plain.seen == std::vector<char>{1, 1});
  forget();
  {
    tmpl::MemoScope memo;
    CHECK(run(t, vars) == bare);
    CHECK(kept(memo) == 1);
  }
  tmpl::MemoScope memo;
  CHECK(kept(memo) == 1);
  tmpl::Provenance p1 = provenance();
  CHECK(run(t, vars, 1'000'000, &p1) == plain);
  CHECK(memo.macros->entries[0].used == false);
  // Another provenance whose messages the key does not reach: served.
  tmpl::Provenance other;
  const Value stranger = tmpl::parse_json(R"({"role": "user", "content": "x"})");
  other.messages.push_back(stranger.dict.get());
  const Outcome served = run(t, vars, 1'000'000, &other);
  CHECK(served.text == bare.text);
  CHECK(served.steps == bare.steps);
  CHECK(served.seen == std::vector<char>{0});
  CHECK(memo.macros->entries[0].used == true);
}

// The render that keeps resume points serves calls too (where the key
// reaches no list the tracker watches): with the memo open, every prefix
// resumed from the full render is the prefix rendered in full. n(messages)
// reads the list's length (its key reaches `messages`, which the tracker
// watches); d(tools) is served from its second call on.
TEST_CASE("template memo: prefixes resumed from a full render that served calls are the prefixes in full") {
  const Template t = Template::parse(
      "{%- macro n(ms) -%}{{ ms | length }}{%- for i in range(80) %}.{% endfor -%}{%- endmacro -%}"
      "{%- macro d(ts) -%}{{ ts | length }}{%- for i in range(80) %}:{% endfor -%}{%- endmacro -%}"
      "{%- for m in messages -%}[{{ m.content }}]{{ d(tools) if loop.index0 % 2 else n(messages) }}{%- endfor -%}");
  const Value msgs = tmpl::parse_json(
      R"([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"},
          {"role": "assistant", "content": "d"}])");
  const std::size_t n = msgs.list->items.size();
  const Value tools = tmpl::parse_json(kTools);
  auto vars_for = [&](std::size_t k, bool g) {
    std::vector<Value> items(msgs.list->items.begin(), msgs.list->items.begin() + static_cast<std::ptrdiff_t>(k));
    return tmpl::Vars{{"messages", k == n ? msgs : Value::new_list(std::move(items))},
                      {"add_generation_prompt", Value::boolean(g)},
                      {"tools", tools}};
  };
  tmpl::RenderLimits limits;
  forget();
  tmpl::MemoScope memo;
  tmpl::Resumes resumes;
  resumes.want.assign(n + 1, 3);
  const std::string full = t.render(vars_for(n, false), limits, nullptr, nullptr, &resumes);
  const std::string dots(80, '.'), colons(80, ':');
  CHECK(full == "[a]4" + dots + "[b]2" + colons + "[c]4" + dots + "[d]2" + colons);
  CHECK(kept(memo) == 2);
  std::size_t used = 0;
  for (const auto& e : memo.macros->entries) used += e.used;
  // d(tools) in the full render; n(messages) too: its first read of the
  // length concerned every prefix not yet passed, so the tracker stopped
  // watching, and its hooks do nothing after.
  CHECK(used == 2);
  std::size_t compared = 0;
  for (std::size_t k = 0; k <= n; ++k) {
    INFO("k = " << k);
    const std::string in_full = t.render(vars_for(k, false), limits);
    if (!resumes.ready(k, false)) continue;
    const auto resumed = t.resume(resumes, k, false, limits);
    REQUIRE(resumed);
    CHECK(*resumed == in_full);
    ++compared;
  }
  CHECK(compared >= 1);  // messages[:0] at least resumes
}
