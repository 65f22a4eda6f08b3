// `{% set ns.attr = ns.attr ~ ... %}`: a namespace attribute's str appended
// to in place where nothing else holds it (append_to_attribute,
// daemon/template/eval_ref.cpp). The values are jinja2's (3.1, in
// transformers' ImmutableSandboxedEnvironment; where both fail, tokfeed's
// message); what must hold besides is
// that no other reference sees the str change, and that a long
// accumulation costs steps for what it appends, not for the str's length.
#include <doctest/doctest.h>

#include <string>

#include "template/template.hpp"
#include "template/value.hpp"

using namespace tokfeed;
using tmpl::Template;

namespace {

std::string render(const std::string& src, uint64_t max_steps = 100000) {
  Template t = Template::parse(src);
  tmpl::Vars vars;
  tmpl::RenderLimits limits;
  limits.max_steps = max_steps;
  return t.render(vars, limits);
}

std::string render_error(const std::string& src) {
  try {
    render(src);
  } catch (const tmpl::Error& e) {
    return e.what();
  }
  return "(rendered)";
}

}  // namespace

TEST_CASE("append to a namespace attribute: jinja2's values") {
  CHECK(render("{% set ns = namespace(s='a') %}{% for i in range(3) %}{% set ns.s = ns.s ~ i %}{% endfor %}"
               "{{ ns.s }}") == "a012");
  CHECK(render("{% set ns = namespace(s='a') %}{% set ns.s = ns.s ~ 1 ~ none ~ [1, 'x'] ~ 2.5 %}{{ ns.s }}") ==
        "a1None[1, 'x']2.5");
  // The attribute read again on the right: its value before the statement.
  CHECK(render("{% set ns = namespace(s='a') %}{% set ns.s = ns.s ~ 'b' %}{% set ns.s = ns.s ~ ns.s ~ '.' %}"
               "{{ ns.s }}") == "abab.");
  CHECK(render("{% set ns = namespace(s='a') %}{% set ns.s = ns.s ~ 'b' %}{% set ns.s = ns.s ~ (ns.s | length) %}"
               "{{ ns.s }}") == "ab2");
  // Not a str on the left: the chain as any other.
  CHECK(render("{% set ns = namespace(l=[1]) %}{% set ns.l = ns.l + [2] %}{{ ns.l }}") == "[1, 2]");
  CHECK(render("{% set ns = namespace(s=undefined_thing) %}{% set ns.s = ns.s ~ 'b' %}{{ ns.s }}") == "b");
  CHECK(render("{% set ns = namespace(s='a') %}{% set other = namespace(s='q') %}{% set ns.s = other.s ~ 'b' %}"
               "{% set ns.s = ns.s ~ 'c' %}{{ ns.s }}{{ other.s }}") == "qbcq");
}

TEST_CASE("append to a namespace attribute: jinja2's errors") {
  CHECK(render_error("{% set ns = namespace(s='a') %}{% set ns.s = ns.s + 'b' + 1 %}{{ ns.s }}")
            .find("unsupported operand type(s) for +: 'str' and 'int'") != std::string::npos);
  CHECK(render_error("{% set ns = namespace(n=1) %}{% set ns.n = ns.n + 2 ~ 'x' %}") != "(rendered)");
}

TEST_CASE("append to a namespace attribute: no other reference sees the str change") {
  // Another variable, a list item and an alias of the namespace hold it.
  CHECK(render("{% set ns = namespace(s='a') %}{% set ns.s = ns.s ~ 'b' %}{% set keep = ns.s %}"
               "{% set ns.s = ns.s ~ 'c' %}{{ keep }}|{{ ns.s }}") == "ab|abc");
  CHECK(render("{% set ns = namespace(s='a') %}{% set ns.s = ns.s ~ 'b' %}{% set l = [ns.s] %}"
               "{% set ns.s = ns.s + 'c' %}{{ l }}{{ ns.s }}") == "['ab']abc");
  CHECK(render("{% set ns = namespace(s='ab') %}{% set alias = ns %}{% set ns.s = ns.s ~ 'c' %}"
               "{% set ns.s = ns.s ~ 'd' %}{{ alias.s }}") == "abcd");
  // A macro on the right sets the attribute: the str the statement read
  // is its own then, and the result is that str with what follows.
  CHECK(render("{% set ns = namespace(s='a') %}{% macro m() %}{% set ns.s = 'z' %}x{% endmacro %}"
               "{% set ns.s = ns.s ~ 'b' %}{% set ns.s = ns.s ~ m() ~ ns.s %}{{ ns.s }}") == "abxz");
  // The str a literal holds is shared by every render: never changed.
  const std::string src = "{% set ns = namespace(s='lit') %}{% set ns.s = ns.s ~ '!' %}{{ ns.s }}";
  Template t = Template::parse(src);
  tmpl::Vars vars;
  CHECK(t.render(vars, tmpl::RenderLimits{}) == "lit!");
  CHECK(t.render(vars, tmpl::RenderLimits{}) == "lit!");
}

TEST_CASE("append to a namespace attribute: steps for what is appended, not for the str") {
  // 2,000 appends of `piece`: a new str built each time would cost a step
  // per 4 KiB of every copy (for 3,000-byte pieces, millions in all);
  // appended in place, the nodes' own steps, and one per 4 KiB appended.
  auto steps = [](std::size_t piece) {
    const std::string src = "{% set ns = namespace(s='') %}{% set piece = 'x' * " + std::to_string(piece) +
                            " %}{% for i in range(2000) %}{% set ns.s = ns.s ~ piece %}{% endfor %}"
                            "{{ ns.s | length }}";
    Template t = Template::parse(src);
    tmpl::Vars vars;
    tmpl::RenderLimits limits;
    limits.max_steps = 1000000;
    tmpl::RecordScope scope(uint64_t{1} << 40);
    CHECK(t.render(vars, limits) == std::to_string(2000 * piece));
    return scope.used();
  };
  const uint64_t small = steps(3000), large = steps(40960);
  CHECK(small < 40000);
  CHECK(large - small == 2000 * (40960 >> 12));
}
