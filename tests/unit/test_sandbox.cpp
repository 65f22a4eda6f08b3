// The template sandbox's bounds (daemon/template/budget.hpp): memory checked
// before it is allocated, steps weighted by bytes, one budget per record,
// cycles through namespaces printed as jinja2 prints them and freed, keys
// kept exactly, and big dicts found in linear time. The daemon-level checks
// (bad records named, batches unchanged) are fault.sandbox.
#include <doctest/doctest.h>
#include <malloc.h>

#include <chrono>
#include <string>
#include <unordered_map>
#include <vector>

#include "template/budget.hpp"
#include "template/json_value.hpp"
#include "template/template.hpp"

using namespace tokfeed;
using tmpl::Template;
using tmpl::Value;

namespace {

std::string render(const std::string& src, const std::string& ctx_json = "{}", tmpl::RenderLimits limits = {}) {
  Template t = Template::parse(src);
  Value ctx = tmpl::parse_json(ctx_json);
  tmpl::Vars vars(ctx.dict->items().begin(), ctx.dict->items().end());
  return t.render(vars, limits);
}

std::string render_error(const std::string& src, tmpl::RenderLimits limits = {}) {
  try {
    render(src, "{}", limits);
  } catch (const tmpl::Error& e) {
    return e.what();
  }
  return "(rendered)";
}

std::size_t heap_in_use() { return mallinfo2().uordblks; }

}  // namespace

TEST_CASE("a namespace that holds itself prints as jinja2 prints it, and tojson refuses it") {
  // jinja2 3.1 (Python's repr guard) prints exactly this.
  CHECK(render("{% set ns = namespace(a=1) %}{% set ns.me = ns %}{{ ns }}") ==
        "<Namespace {'a': 1, 'me': <Namespace {...}>}>");
  CHECK(render("{% set ns = namespace(l=[]) %}{% set ns.l = [1, ns] %}{{ ns }}") ==
        "<Namespace {'l': [1, <Namespace {...}>]}>");
  CHECK(render_error("{% set ns = namespace(a=1) %}{% set ns.me = ns %}{{ ns | tojson }}")
            .find("not JSON serializable") != std::string::npos);
  // Nesting deeper than Python's recursion limit is an error, not a crash.
  std::string deep = "{% set ns = namespace(l=1) %}{% for i in range(5000) %}{% set ns.l = [ns.l] %}{% endfor %}";
  CHECK(render_error(deep + "{{ ns.l }}").find("maximum recursion depth exceeded") != std::string::npos);
  CHECK(render_error(deep + "{{ ns.l | tojson }}").find("maximum recursion depth exceeded") != std::string::npos);
}

TEST_CASE("self-holding namespaces are freed when the render ends: no memory grows across renders") {
  Template t =
      Template::parse("{% set ns = namespace(big='x' * 100000) %}{% set ns.me = ns %}{% set ns.l = [ns, ns.big] %}ok");
  tmpl::RenderLimits limits;
  for (int i = 0; i < 5; ++i) t.render({}, limits);  // warm
  std::size_t before = heap_in_use();
  for (int i = 0; i < 200; ++i) CHECK(t.render({}, limits) == "ok");
  // 200 leaked namespaces would hold 20 MB.
  CHECK(heap_in_use() < before + (2u << 20));
}

TEST_CASE("string growth passes no memory budget: refused before the allocation, with the limit named") {
  if (!tmpl::budget_counts_allocations()) return;  // sanitizer builds keep their own allocator
  const std::string limit = "268435456 bytes of memory";
  for (std::string attack : {
           "{{ 'x' | center(4000000000) }}",
           "{{ 'x'.ljust(4000000000) }}",
           "{{ 'x'.rjust(4000000000) }}",
           "{{ ('x\\n' * 1000) | indent(4000000) }}",
           "{{ ('x' * 1000000).replace('x', 'y' * 1000) }}",
           "{{ (['x' * 1000000] * 1000) | join('') }}",
           "{{ ([[[[[[1]]]]]] * 100000) | tojson(indent=10000) }}",
           "{% set ns = namespace(s='xxxxxxxx') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
           "{{ ('x' * 100000) * 100000 }}",
       }) {
    CAPTURE(attack);
    std::size_t before = heap_in_use();
    std::string why = render_error(attack);
    CAPTURE(why);
    // Repetition and padding check their own result first ("string repetition
    // too large", "would pass the output limit").
    CHECK((why.find(limit) != std::string::npos || why.find("repetition too large") != std::string::npos ||
           why.find("would pass the output limit") != std::string::npos));
    CHECK(heap_in_use() < before + (1u << 20));  // nothing kept
  }
}

TEST_CASE("steps are weighted by the bytes they allocate, and one record's renders share one budget") {
  if (!tmpl::budget_counts_allocations()) return;
  // 100,000 loop steps, each copying 10 MB: within the step budget by count,
  // past it by weight (2,441 steps per copy).
  std::string e =
      render_error("{% set s = 'x' * 10000000 %}{% for i in range(100000) %}{% set t = s ~ 'y' %}{% endfor %}");
  CHECK(e.find("step budget of 2000000 steps") != std::string::npos);

  Template t = Template::parse("{% for i in range(1000) %}{{ i }}{% endfor %}");
  tmpl::RenderLimits limits;
  limits.max_steps = 10000;
  {
    tmpl::RecordScope record(25000);
    std::string why;
    int renders = 0;
    try {
      for (; renders < 100; ++renders) t.render({}, limits);
    } catch (const tmpl::Error& err) {
      why = err.what();
    }
    CHECK(renders >= 2);
    CHECK(renders < 25);
    CHECK(why.find("the record's renders ran past their budget of 25000 steps") != std::string::npos);
  }
  t.render({}, limits);  // the next record starts afresh
}

TEST_CASE("keys are exact: a key starting with U+0001 stays a string, and none converts by exception") {
  // json.dumps({"\x01a": 1, "\x011": 2, "\x01i9999999999999999999999": 3}) in Python.
  std::string ctx = R"({"d": {"\u0001a": 1, "\u00011": 2, "\u0001i9999999999999999999999": 3, "\u0001": 4}})";
  CHECK(render("{{ d | tojson }}", ctx) ==
        R"({"\u0001a": 1, "\u00011": 2, "\u0001i9999999999999999999999": 3, "\u0001": 4})");
  CHECK(render("{% for k in d %}[{{ k | length }}]{% endfor %}", ctx) == "[2][2][24][1]");
  CHECK(render("{{ d['\x01"
               "a'] }}|{{ '\x01"
               "1' in d }}",
               ctx) == "1|True");
  CHECK(render("{{ d.items() | list | length }}", ctx) == "4");
}

TEST_CASE("a dict with 100k keys is built and read in linear time") {
  std::string j = "{";
  std::vector<std::string> keys;
  for (int i = 0; i < 100000; ++i) {
    keys.push_back("k" + std::to_string(i));
    j += (i ? ",\"" : "\"") + keys.back() + "\":" + std::to_string(i);
  }
  j += "}";
  using Clock = std::chrono::steady_clock;
  auto since = [](Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  // Side by side with a hash map of the same keys, built the same way: the
  // linear work a dict of 100k keys may cost. The quadratic dict took 50 times
  // more (5e9 key comparisons).
  double ours = 1e9, map = 1e9;
  for (int round = 0; round < 3; ++round) {
    auto t0 = Clock::now();
    Value v = tmpl::parse_json(j);
    REQUIRE(v.dict->find("k99999")->i == 99999);
    ours = std::min(ours, since(t0));
    t0 = Clock::now();
    std::unordered_map<std::string, Value> m;
    std::vector<std::pair<std::string, Value>> items;
    for (int i = 0; i < 100000; ++i) {
      m.emplace(keys[i], Value::integer(i));
      items.emplace_back(keys[i], Value::integer(i));
    }
    REQUIRE(m.count("k99999") == 1);
    map = std::min(map, since(t0));
  }
  MESSAGE("100k keys: " << ours * 1000 << " ms; a hash map of them: " << map * 1000 << " ms");
  CHECK(ours < 10 * map);
  Value v = tmpl::parse_json(j);
  CHECK(v.dict->find("k100000") == nullptr);
  CHECK(v.dict->items()[12345].first == "k12345");  // insertion order kept
}

TEST_CASE("a reuse scope keeps freed small blocks for the next allocation of their size, 4 MiB at most") {
  if (!tmpl::budget_counts_allocations()) return;
  {
    tmpl::ReuseScope reuse;
    auto* a = new std::string(200, 'a');  // a heap buffer of 201 bytes
    const void* block = a->data();
    delete a;
    // malloc does not get the block back: the scope kept it, for the next
    // allocation of its class.
    void* other = std::malloc(201);
    CHECK(other != block);
    std::string b(200, 'b');
    CHECK(static_cast<const void*>(b.data()) == block);
    std::free(other);
    // What it keeps is bounded: of 20 MB of small blocks freed in the
    // scope, all but 4 MiB go back to malloc.
    std::vector<std::string*> many;
    for (int i = 0; i < 10000; ++i) many.push_back(new std::string(2000, 'x'));
    const std::size_t before = heap_in_use();
    for (auto* s : many) delete s;
    CHECK(before - heap_in_use() > 20'000'000 - (5u << 20));
  }
  // A render's budget inside a scope counts as it does outside one.
  tmpl::ReuseScope reuse;
  CHECK(render_error("{{ (['x' * 1000000] * 1000) | join('') }}").find("268435456 bytes of memory") !=
        std::string::npos);
}
