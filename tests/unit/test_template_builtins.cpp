// What templates call (str methods, filters with an attribute, `in`) as
// jinja2 in transformers' sandbox gives it: the results below are
// jinja2 3.1's, the error messages CPython's signatures.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "template/json_value.hpp"
#include "template/name_index.hpp"
#include "template/template.hpp"
#include "template/value.hpp"

using namespace tokfeed;
using tmpl::Template;
using tmpl::Value;

namespace {

std::string render(const std::string& src, const std::string& ctx_json = "{}",
                   const char* instant = "2024-07-26T13:05:00") {
  Template t = Template::parse(src);
  Value ctx = tmpl::parse_json(ctx_json);
  tmpl::Vars vars(ctx.dict->items().begin(), ctx.dict->items().end());
  tmpl::RenderLimits limits;
  limits.max_steps = 100000;
  tmpl::parse_instant(instant, limits.now);
  return t.render(vars, limits);
}

}  // namespace

TEST_CASE("name index: each name at its place, whatever else is looked up absent") {
  static constexpr std::string_view kNames[] = {"strip",      "lstrip",  "rstrip", "split",  "rsplit",
                                                "isupper",    "islower", "index",  "rindex", "format",
                                                "format_map", "a",       "ab",     "ba"};
  static constexpr tmpl::NameIndex index(kNames);
  for (std::size_t k = 0; k < std::size(kNames); ++k) CHECK(index.find(kNames[k]) == static_cast<int>(k));
  for (std::string_view miss : {"", "b", "aa", "strips", "strip ", "Strip", "splits", "format_", "isuppe", "role",
                                "content", "tool_calls", "islowerr"})
    CHECK_MESSAGE(index.find(miss) == -1, miss);
  // Names one letter away, many of them hashed to a name's slot.
  for (std::string_view name : kNames)
    for (std::size_t i = 0; i < name.size(); ++i)
      for (char c = 'a'; c <= 'z'; ++c) {
        std::string near(name);
        near[i] = c;
        if (std::find(std::begin(kNames), std::end(kNames), near) == std::end(kNames))
          CHECK_MESSAGE(index.find(near) == -1, near);
      }
}

TEST_CASE("str methods: each method by its name, with positional and keyword arguments") {
  CHECK(render("{{ ' a '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ 'xxa'.lstrip('x') }}|{{ 'axx'.rstrip('x') }}|"
               "{{ ' a '.lstrip() }}|{{ ' a '.rstrip() }}|{{ 'a'.strip(none) }}") == "a|a|a|a|a | a|a");
  CHECK(render("{{ 'a b  c'.split() }}|{{ 'a,b,c'.split(',') }}|{{ 'a,b,c'.split(',', 1) }}|"
               "{{ 'a,b,c'.rsplit(',', 1) }}|{{ 'a,b,c'.split(sep=',', maxsplit=1) }}|{{ 'abc'.split('x') }}|"
               "{{ 'a b'.rsplit() }}") ==
        "['a', 'b', 'c']|['a', 'b', 'c']|['a', 'b,c']|['a,b', 'c']|['a', 'b,c']|"
        "['abc']|['a', 'b']");
  CHECK(render("{{ 'a\\nb\\r\\nc'.splitlines() }}|{{ 'a\\nb'.splitlines(True) }}|"
               "{{ 'a\\nb'.splitlines(keepends=True) }}") == "['a', 'b', 'c']|['a\\n', 'b']|['a\\n', 'b']");
  CHECK(render("{{ 'abc'.startswith('a') }}|{{ 'abc'.endswith(('x', 'c')) }}|{{ 'abc'.startswith('b', 1) }}|"
               "{{ 'abc'.endswith('b', 0, 2) }}") == "True|True|True|True");
  CHECK(render("{{ 'aBc'.upper() }}|{{ 'aBc'.lower() }}|{{ 'ab cd'.title() }}|{{ 'aBc'.capitalize() }}|"
               "{{ 'Straße'.casefold() }}|{{ 'aBc'.swapcase() }}") == "ABC|abc|Ab Cd|Abc|strasse|AbC");
  CHECK(render("{{ 'aaa'.replace('a', 'b') }}|{{ 'aaa'.replace('a', 'b', 2) }}|{{ 'abcb'.find('b') }}|"
               "{{ 'abcb'.rfind('b') }}|{{ 'abcb'.index('c') }}|{{ 'abcb'.rindex('b') }}|{{ 'abcb'.count('b') }}") ==
        "bbb|bba|1|3|2|3|2");
  CHECK(render("{{ '-'.join(['a', 'b']) }}|{{ '12'.isdigit() }}|{{ 'ab'.isalpha() }}|{{ 'a1'.isalnum() }}|"
               "{{ ' '.isspace() }}|{{ 'AB'.isupper() }}|{{ 'ab'.islower() }}|{{ 'Ab'.istitle() }}") ==
        "a-b|True|True|True|True|True|True|True");
  CHECK(render("{{ '½'.isnumeric() }}|{{ '12'.isdecimal() }}|{{ 'a_1'.isidentifier() }}|{{ 'é'.isascii() }}|"
               "{{ 'a\\tb'.isprintable() }}") == "True|True|True|False|False");
  CHECK(render("{{ 'a=b=c'.partition('=') }}|{{ 'a=b=c'.rpartition('=') }}|{{ 'abc'.removeprefix('a') }}|"
               "{{ 'abc'.removesuffix('c') }}|{{ '-5'.zfill(4) }}") ==
        "('a', '=', 'b=c')|('a=b', '=', 'c')|bc|ab|-005");
  CHECK(render("{{ 'a'.center(5, '*') }}|{{ 'a'.ljust(3, '.') }}|{{ 'a'.rjust(3) }}|{{ 'a\\tb'.expandtabs(4) }}|"
               "{{ 'a\\tb'.expandtabs(tabsize=2) }}|{{ '{}-{x}'.format(1, x=2) }}|{{ '{a}'.format_map({'a': 3}) }}") ==
        "**a**|a..|  a|a   b|a b|1-2|3");
}

TEST_CASE("str methods: arguments that do not fit the signature fail as CPython's do") {
  auto fails_with = [](const std::string& src, const char* message) {
    CHECK_THROWS_WITH_AS(render(src), doctest::Contains(message), tmpl::Error);
  };
  fails_with("{{ 'a'.strip('a', 'b') }}", "strip() takes at most 1 argument (2 given)");
  fails_with("{{ 'a'.upper(1) }}", "upper() takes at most 0 arguments (1 given)");
  fails_with("{{ 'a'.strip(chars='a') }}", "strip() takes no keyword arguments");
  fails_with("{{ 'a,b'.split(',', sep=',') }}", "argument for split() given by name ('sep') and position (1)");
  fails_with("{{ 'a'.split(foo=1) }}", "'foo' is an invalid keyword argument for split()");
  fails_with("{{ 'a'.expandtabs(size=1) }}", "'size' is an invalid keyword argument for expandtabs()");
  fails_with("{{ 'a'.startswith() }}", "startswith() takes at least 1 argument (0 given)");
  fails_with("{{ 'a'.split('') }}", "empty separator");
  fails_with("{{ 'a'.strip(1) }}", "strip arg must be None or str");
}

TEST_CASE("filters with an attribute: dotted paths, digit parts, defaults, Markup names, every item alike") {
  const std::string m = R"({"m": [{"role": "user", "content": "a", "f": {"n": 1}, "xs": [1]},
                                  {"role": "assistant", "content": "b", "f": {"n": 0}, "xs": [2]},
                                  {"role": "user", "content": "c", "f": {"m": 2}, "xs": [3]}]})";
  CHECK(render("{{ m | selectattr('role', 'equalto', 'user') | map(attribute='content') | list }}", m) == "['a', 'c']");
  CHECK(render("{{ m | selectattr('xs.0', 'equalto', 3) | map(attribute='content') | join }}", m) == "c");
  CHECK(render("{{ m | rejectattr('f.n') | map(attribute='content') | join }}", m) == "bc");
  CHECK(render("{{ m | selectattr('role') | list | length }}", m) == "3");
  CHECK(render("{{ m | map(attribute='f.n', default=9) | list }}", m) == "[1, 0, 9]");
  CHECK(render("{{ m | join(',', attribute='role') }}", m) == "user,assistant,user");
  CHECK(render("{{ m | sum(attribute='xs.0') }}", m) == "6");
  CHECK(render("{{ m | sort(attribute='role,content') | map(attribute='content') | join }}", m) == "bac");
  CHECK(render("{{ m | selectattr('role' | safe, 'in', ['user']) | list | length }}", m) == "2");
  CHECK(render("{{ m | unique(attribute='role') | map(attribute='content') | join }}", m) == "ab");
  CHECK(render("{{ l | map(attribute='0') | list }}|{{ l | selectattr('1') | list | length }}|"
               "{{ l | sum(attribute='0') }}",
               R"({"l": [[5, 6], [7]]})") == "[5, 7]|1|12");
}

TEST_CASE("`in` of a str: empty needles, needles longer than the text, repeated first bytes") {
  CHECK(render("{{ '' in '' }}|{{ '' in 'a' }}|{{ 'ab' in 'xaab' }}|{{ '<|c|>' in '<<|c' }}|{{ '<|c|>' in 'x<|c|>' }}|"
               "{{ 'é' in 'café' }}|{{ 'abc' in 'ab' }}|{{ 'aab' in 'aaaaaaaaaaaaaaaaaaaaaaaaaab' }}") ==
        "True|True|True|False|True|True|False|True");
}

TEST_CASE("globals: the functions of transformers' environment, every other name undefined") {
  CHECK(render("{{ foo is defined }}|{{ rangex is defined }}|{{ lipsum is defined }}|{{ range(3) | list }}|"
               "{{ dict(a=1) }}|{{ namespace(a=1).a }}|{% set c = cycler('x', 'y') %}{{ c.next() }}{{ c.next() }}"
               "{{ c.next() }}|{% set j = joiner('+') %}{{ j() }}a{{ j() }}b|{{ cycler is defined }}|"
               "{{ d is defined }}|{{ strftime_now is defined }}|{{ raise_exception is defined }}") ==
        "False|False|True|[0, 1, 2]|{'a': 1}|1|xyx|a+b|True|False|True|True");
}

TEST_CASE("strftime_now: each format of the render's instant, however formats and renders alternate") {
  const std::string src = "{{ strftime_now('%Y') }}/{{ strftime_now('%d %b') }}/{{ strftime_now('%Y') }}";
  CHECK(render(src) == "2024/26 Jul/2024");
  CHECK(render(src, "{}", "2025-01-02T00:00:00") == "2025/02 Jan/2025");
  CHECK(render(src) == "2024/26 Jul/2024");
}

TEST_CASE("dict.get: a str key as it is, a marked str key, numbers, None and tuples by their keys") {
  const std::string d = R"({"d": {"a": 1, "\u0001x": 5}, "k": "\u0001x"})";
  CHECK(render("{{ d.get('a') }}|{{ d.get('b', 7) }}|{{ d.get(k) }}|{{ d.get('x') }}|"
               "{{ {1: 'one', none: 'n'}.get(1) }}|{{ {1: 'one', none: 'n'}.get(none) }}|{{ {1: 'one'}.get(1.0) }}|"
               "{{ {(1, 2): 't'}.get((1, 2)) }}",
               d) == "1|7|5|None|one|n|one|t");
}
