// Prefix renders resumed from the full render (daemon/template/resume.hpp):
// wherever a render of messages[:k] is resumed, it must equal the render of
// messages[:k] run in full: the text, the provenance, the steps counted, the
// error. Over the model templates and conversations of ../shared/templates,
// and over templates built to read what the prefixes see differently.
#include <doctest/doctest.h>

#include <filesystem>
#include <functional>
#include <optional>
#include <fstream>
#include <string>
#include <vector>

#include "template/json_value.hpp"
#include "template/template.hpp"
#include "chat/chat_jinja.hpp"

using namespace tokfeed;
using tmpl::Template;
using tmpl::Value;

namespace {

namespace fs = std::filesystem;

struct Outcome {
  std::string text, error;
  std::vector<std::tuple<std::size_t, std::size_t, uint32_t>> pieces;
  std::vector<char> seen;
  uint64_t steps = 0;
  bool operator==(const Outcome&) const = default;
};

// One render of messages[:k] (add_generation_prompt g): in full, or resumed.
Outcome outcome(const Template& t, const tmpl::Vars& vars, const tmpl::RenderLimits& limits, const Value& messages,
                std::size_t k, bool g, const tmpl::Resumes* resumes) {
  tmpl::Vars v = vars;
  const auto& all = messages.list->items;
  v.emplace_back("messages", Value::new_list(std::vector<Value>(all.begin(), all.begin() + static_cast<long>(k))));
  v.emplace_back("add_generation_prompt", Value::boolean(g));
  tmpl::Provenance prov;
  for (const Value& m : all) prov.messages.push_back(m.is_dict() ? m.dict.get() : nullptr);
  Outcome o;
  tmpl::RecordScope scope(uint64_t{1} << 40);
  try {
    o.text = resumes ? t.resume(*resumes, k, g, limits, nullptr, &prov).value() : t.render(v, limits, nullptr, &prov);
  } catch (const tmpl::Error& e) {
    o.error = e.what();
  }
  for (const auto& p : prov.pieces) o.pieces.emplace_back(p.begin, p.end, p.message);
  o.seen = prov.seen;
  o.steps = scope.used();
  return o;
}

// Renders all of `messages` keeping every resume point, then checks each
// one that is ready against the full render. Returns which (k, g) resumed
// from a point, as "k+" (with the prompt) and "k-" (without).
std::string check_resumes(const Template& t, const tmpl::Vars& vars, const Value& messages) {
  tmpl::RenderLimits limits;
  tmpl::Vars v = vars;
  v.emplace_back("messages", messages);
  v.emplace_back("add_generation_prompt", Value::boolean(false));
  tmpl::Provenance prov;
  for (const Value& m : messages.list->items) prov.messages.push_back(m.is_dict() ? m.dict.get() : nullptr);
  const std::size_t n = messages.list->items.size();
  tmpl::Resumes resumes;
  resumes.want.assign(n + 1, 3);
  std::string f;
  try {
    f = t.render(v, limits, nullptr, &prov, &resumes);
  } catch (const tmpl::Error&) {
    return "fails";
  }
  std::string ready;
  // Twice, in order and then backwards, each resumed text given back: the
  // later renders start from buffers that hold less or more of F than they
  // need, and a tail of another prefix's own.
  for (int pass = 0; pass < 2; ++pass)
    for (std::size_t j = 0; j <= n; ++j) {
      const std::size_t k = pass == 0 ? j : n - j;
      for (bool g : {false, true}) {
        if (!resumes.ready(k, g)) continue;
        Outcome full = outcome(t, vars, limits, messages, k, g, nullptr);
        const std::size_t before = resumes.resumed;
        Outcome resumed = outcome(t, vars, limits, messages, k, g, &resumes);
        if (pass == 0 && resumes.resumed != before) ready += std::to_string(k) + (g ? "+" : "-");
        INFO("k = " << k << ", add_generation_prompt = " << g << std::string(pass ? ", backwards" : ""));
        // The bytes resume() says the text starts with are the full render's
        // (the label rule compares only what follows them); a render in full
        // says none.
        CHECK(resumes.same <= resumed.text.size());
        CHECK(resumed.text.compare(0, resumes.same, f, 0, resumes.same) == 0);
        if (resumes.resumed == before) CHECK(resumes.same == 0);
        CHECK(resumed.text == full.text);
        CHECK(resumed.error == full.error);
        CHECK(resumed.pieces == full.pieces);
        CHECK(resumed.seen == full.seen);
        CHECK(resumed.steps == full.steps);
        resumes.recycle(std::move(resumed.text), resumes.same);
      }
    }
  return ready;
}

std::string ready_for(const std::string& src, const std::string& messages_json) {
  return check_resumes(Template::parse(src), {}, tmpl::parse_json(messages_json));
}

const char* kFour =
    R"([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
        {"role": "user", "content": "c"}, {"role": "assistant", "content": "d"}])";

}  // namespace

TEST_CASE("resume: a plain loop resumes every prefix, the prompt after it included") {
  CHECK(ready_for("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
                  "{% if add_generation_prompt %}<assistant>{% endif %}",
                  kFour) == "0-0+1-1+2-2+3-3+");
}

TEST_CASE("resume: a resumed render says how much of the full render's text it starts with") {
  const Template t = Template::parse(
      "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
      "{% if add_generation_prompt %}<assistant>{% endif %}");
  const Value messages = tmpl::parse_json(kFour);
  tmpl::Vars v{{"messages", messages}, {"add_generation_prompt", Value::boolean(false)}};
  tmpl::Resumes resumes;
  resumes.want.assign(5, 3);
  const std::string f = t.render(v, tmpl::RenderLimits{}, nullptr, nullptr, &resumes);
  REQUIRE(f == "<user>a<assistant>b<user>c<assistant>d");
  REQUIRE(resumes.ready(3, true));
  CHECK(t.resume(resumes, 3, true, tmpl::RenderLimits{}).value() == "<user>a<assistant>b<user>c<assistant>");
  CHECK(resumes.same == 26);  // the output before the iteration over message 3
  REQUIRE(resumes.ready(1, false));
  CHECK(t.resume(resumes, 1, false, tmpl::RenderLimits{}).value() == "<user>a");
  CHECK(resumes.same == 7);
  CHECK(t.resume(resumes, 0, false, tmpl::RenderLimits{}).value().empty());
  CHECK(resumes.same == 0);
}

TEST_CASE("resume: outputs past the first buffer reuse the texts given back") {
  // Twelve messages of 1,000 bytes: the output outgrows the room every
  // render starts with, so the texts check_resumes gives back serve later
  // prefixes (in order, then backwards), which copy only what they lack.
  std::string messages = "[";
  for (int i = 0; i < 12; ++i) {
    messages += std::string(i ? ", " : "") + R"({"role": ")" + (i % 2 ? "assistant" : "user") + R"(", "content": ")" +
                std::string(1000, static_cast<char>('a' + i)) + "\"}";
  }
  messages += "]";
  CHECK(ready_for("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
                  "{% if add_generation_prompt %}<assistant>{% endif %}",
                  messages) == "0-0+1-1+2-2+3-3+4-4+5-5+6-6+7-7+8-8+9-9+10-10+11-11+");
}

TEST_CASE("resume: what the prefixes read differently spoils exactly the prefixes that read it") {
  // loop.last in the iteration over message j: the prefix messages[:j+1],
  // which resumes inside the loop instead, running that iteration as its
  // last.
  CHECK(ready_for("{% for m in messages %}{{ m.content }}{% if loop.last %}.{% endif %}{% endfor %}"
                  "{% if add_generation_prompt %}G{% endif %}",
                  kFour) == "0-0+1-1+2-2+3-3+");
  CHECK(ready_for("{% for m in messages %}{{ m.content }}{% if m.role == 'assistant' and loop.last %}.{% endif %}"
                  "{% endfor %}{% if add_generation_prompt %}G{% endif %}",
                  kFour) == "0-0+1-1+2-2+3-3+");
  // Counts from the end, the length, the last message: every prefix after
  // (but the one whose last iteration is where it is read).
  CHECK(ready_for("{% for m in messages %}{{ loop.revindex }}{% endfor %}", kFour) == "0-0+1-1+");
  CHECK(ready_for("{{ messages | length }}{% for m in messages %}{{ m.content }}{% endfor %}", kFour) == "");
  CHECK(ready_for("{{ messages[-1].content }}{% for m in messages %}{{ m.content }}{% endfor %}", kFour) == "");
  // The next message, by index: the prefix that ends before it.
  CHECK(ready_for("{% for m in messages %}{{ m.content }}{{ messages[loop.index0 + 1] is defined }}{% endfor %}",
                  kFour) == "0-0+1-1+2-2+3-3+");
  CHECK(ready_for("{% for m in messages %}{% if loop.index0 > 0 %}{{ messages[loop.index0 - 1].role }}{% endif %}"
                  "{% endfor %}",
                  kFour) == "0-0+1-1+2-2+3-3+");
  // messages[0] before the loop: messages[:0] lacks it.
  CHECK(ready_for("{{ messages[0].role }}{% for m in messages %}{{ m.content }}{% endfor %}", kFour) == "1-1+2-2+3-3+");
  // The prompt read inside the loop spoils the prompt's renders alone.
  CHECK(ready_for("{% for m in messages %}{{ m.content }}{% if add_generation_prompt %}!{% endif %}{% endfor %}",
                  kFour) == "0-0+1-1+2-3-");
}

TEST_CASE("resume: inside the loop, the last iteration runs in the loop's scope as F had it") {
  // What an iteration sets is gone at the next one's start (as jinja2 runs
  // loops); a namespace changed by the iterations before; loop.cycle,
  // previtem.
  CHECK(ready_for("{% set ns = namespace(n=0) %}{% for m in messages %}{% if loop.first %}{% set p = '^' %}{% endif %}"
                  "{{ p }}{{ loop.cycle('x', 'y') }}{{ loop.previtem.content if loop.previtem }}{% set p = m.content %}"
                  "{% set ns.n = ns.n + loop.index %}{% if not loop.last %},{% endif %}{% endfor %}{{ ns.n }}"
                  "{% if add_generation_prompt %}G{% endif %}",
                  kFour) == "0-0+1-1+2-2+3-3+");
  // A macro defined in the loop's scope is gone at the next iteration's
  // start too: points inside the loop, as for any.
  CHECK(ready_for("{% for m in messages %}{% macro f() %}{{ m.content }}{% endmacro %}{{ f() }}"
                  "{% if loop.last %}.{% endif %}{% endfor %}",
                  kFour) == "0-0+1-1+2-2+3-3+");
}

TEST_CASE("resume: state the loop mutates after a resume point is the point's") {
  // A namespace counted on by later iterations; an iterator used up.
  CHECK(ready_for("{% set ns = namespace(c=0, l=[]) %}{% for m in messages %}{% set ns.c = ns.c + 1 %}"
                  "{% set ns.l = ns.l + [m.content] %}{% endfor %}{{ ns.c }}{{ ns.l | join(',') }}",
                  kFour) == "0-0+1-1+2-2+3-3+");
  CHECK(ready_for("{% set it = ['x', 'y', 'z', 'w'] | map('upper') %}{% for m in messages %}"
                  "{% for v in it %}{{ v }}{% break %}{% endfor %}{% endfor %}{{ it | list }}",
                  kFour) == "0-0+1-1+2-2+3-3+");
  // A namespace that holds itself, and one held twice.
  CHECK(ready_for("{% set ns = namespace(n=0) %}{% set ns.me = ns %}{% set pair = [ns, ns] %}"
                  "{% for m in messages %}{% set me = ns.me %}{% set me.n = ns.n + 1 %}{% endfor %}"
                  "{{ pair[0].n }}{{ pair[1].me.n }}",
                  kFour) == "0-0+1-1+2-2+3-3+");
}

TEST_CASE("resume: points of iterations that set nothing share their copies, until a set or an iterator") {
  // The namespace is set in the user messages' iterations only: the points
  // after an iteration that set nothing keep the copies of the one before,
  // those after a set make new ones.
  CHECK(ready_for("{% set ns = namespace(n=0, s='') %}{% for m in messages %}{% if m.role == 'user' %}"
                  "{% set ns.n = ns.n + 1 %}{% set ns.s = ns.s ~ m.content %}{% endif %}{{ ns.n }}{% endfor %}"
                  "{{ ns.n }}{{ ns.s }}{% if add_generation_prompt %}G{% endif %}",
                  kFour) == "0-0+1-1+2-2+3-3+");
  // An iterator stored in the namespace after the loop started, used up by
  // the iterations after without a set: each point copies it as it is then.
  CHECK(ready_for("{% set ns = namespace(it=none) %}{% for m in messages %}{% if loop.first %}"
                  "{% set ns.it = ['x', 'y', 'z'] | map('upper') %}{% elif loop.index0 == 1 %}"
                  "{{ ns.it | list | join }}{% endif %}{% endfor %}[{{ ns.it | list | join }}]",
                  kFour) == "0-0+1-1+2-2+3-3+");
}

TEST_CASE("resume: a namespace attribute set to the value it holds changes nothing") {
  // ns.n is set in every iteration, to a new value in those over messages 0
  // and 2 alone: the points after the others keep the copies before, those
  // after a new value make new ones (each prefix prints its own value).
  CHECK(ready_for("{% set ns = namespace(n=-1, s='a', l=[1]) %}{% for m in messages %}"
                  "{% set ns.n = loop.index0 // 2 %}{% set ns.s = 'ab'[:1] %}{{ m.content }}{% endfor %}"
                  "{{ ns.n }}{{ ns.s }}{% if add_generation_prompt %}G{% endif %}",
                  kFour) == "0-0+1-1+2-2+3-3+");
  // Another list with the same items is another value.
  CHECK(ready_for("{% set ns = namespace(l=[0]) %}{% for m in messages %}{% if loop.index0 == 2 %}"
                  "{% set ns.l = [0] %}{% endif %}{{ m.content }}{% endfor %}{{ ns.l }}",
                  kFour) == "0-0+1-1+2-2+3-3+");
}

TEST_CASE("resume: the loop over messages[1:], inside an if, after a system message") {
  const char* sys = R"([{"role": "system", "content": "s"}, {"role": "user", "content": "a"},
                        {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}])";
  const char* src =
      "{% if messages[0].role == 'system' %}{% set sys = messages[0].content %}{% set messages = messages[1:] %}"
      "{% else %}{% set sys = '' %}{% endif %}[{{ sys }}]"
      "{% if true %}{% for m in messages %}{{ m.content }}{% endfor %}{% set tail = 'T' %}{% endif %}{{ tail }}"
      "{% if add_generation_prompt %}G{% endif %}";
  CHECK(ready_for(src, sys) == "1-1+2-2+3-3+");
}

// The loop deeper in `if`s, in an elif's body and an else's: the way the
// parser found to it (Stmt::top_path) leads the resumed render out again
// through what follows it at each level.
TEST_CASE("resume: the loop in an elif's body two ifs deep, then what follows it at each level") {
  const char* src =
      "{% set x = 1 %}{% if x == 2 %}no{% elif x == 1 %}A{% if x %}{% if false %}n{% else %}B"
      "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}C{% endif %}D{% endif %}E"
      "{% else %}z{% endif %}{% if add_generation_prompt %}G{% endif %}";
  CHECK(ready_for(src, kFour) == "0-0+1-1+2-2+3-3+");
}

TEST_CASE("resume: a loop that scans the messages before the one that renders them") {
  const char* scan =
      "{% set ns = namespace(sys='', n=0) %}{% for m in messages %}{% if m.role == 'system' %}"
      "{% set ns.sys = m.content %}{% endif %}{% endfor %}[{{ ns.sys }}]"
      "{% for m in messages %}{% set ns.n = ns.n + 1 %}{{ m.content }}{% endfor %}{{ ns.n }}"
      "{% if add_generation_prompt %}G{% endif %}";
  CHECK(ready_for(scan, R"([{"role": "system", "content": "s"}, {"role": "user", "content": "a"},
                           {"role": "assistant", "content": "b"}])") == "0-0+1-1+2-2+");
  // The system message later on: the prefixes before it run the scan
  // themselves and resume in the loop that renders, where what they wrote
  // before it is the full render's (none here: they print no system prompt).
  CHECK(ready_for(scan, R"([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                           {"role": "system", "content": "s"}, {"role": "user", "content": "c"}])") == "3-3+");
  // A scan that writes, reads the last message, uses up an iterator: the
  // prefixes resume in it, and run the loop that renders themselves.
  CHECK(ready_for("{% for m in messages %}{{ m.role[0] }}{% endfor %}|{% for m in messages %}{{ m.content }}"
                  "{% endfor %}{% if add_generation_prompt %}G{% endif %}",
                  kFour) == "0-0+1-1+2-2+3-3+");
  // Each prefix's last message, printed in every iteration: each prefix
  // runs the scan itself and resumes at the start of the first iteration of
  // the loop that renders.
  CHECK(ready_for("{% set ns = namespace(l='') %}{% for m in messages %}{% if loop.last %}{% set ns.l = m.content %}"
                  "{% endif %}{% endfor %}{% for m in messages %}{{ m.content }}{{ ns.l }}{% endfor %}",
                  kFour) == "0-0+1-1+2-2+3-3+");
  CHECK(
      ready_for("{% set it = ['x', 'y', 'z', 'w'] | map('upper') %}{% for m in messages %}{% for v in it %}"
                "{% break %}{% endfor %}{% endfor %}{% for m in messages %}{{ m.content }}{% endfor %}{{ it | list }}",
                kFour) == "0-0+1-1+2-2+3-3+");
}

TEST_CASE("resume: loops that compute what the loop that writes reads run in each prefix") {
  // DeepSeek-V3.2's shape: the system prompt collected, the last user
  // message found, then the loop that writes. A prefix before the last user
  // message runs the first two itself and resumes in the third where every
  // comparison with the last user's index before its point comes out as its
  // own would.
  const std::string t =
      "{% set ns = namespace(sys='') %}{% for m in messages %}{% if m.role == 'system' %}{% set ns.sys = m.content %}"
      "{% endif %}{% endfor %}[{{ ns.sys }}]{% set last = namespace(i=-1) %}{% for m in messages %}"
      "{% if m.role == 'user' %}{% set last.i = loop.index0 %}{% endif %}{% endfor %}{% for m in messages %}"
      "{% if m.role == 'assistant' and loop.index0 > last.i %}<think>{% endif %}{{ m.content }}{% endfor %}"
      "{% if add_generation_prompt %}G{% endif %}";
  const char* seven =
      R"([{"role": "system", "content": "s"}, {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
          {"role": "user", "content": "c"}, {"role": "assistant", "content": "d"},
          {"role": "user", "content": "e"}, {"role": "assistant", "content": "f"}])";
  CHECK(ready_for(t, seven) == "1-1+2-2+3-3+4-4+5-5+6-6+");
}

TEST_CASE("resume: a template that reads the messages as a whole before its loop") {
  // Qwen3's last query, found by a reversed scan: a prefix whose last user
  // message differs resumes where the loop's comparison with it comes out
  // as in the full render for every iteration before its point; where the
  // last iteration compares otherwise (messages[:2]: `1 > 0` where the full
  // render has `1 > 2`), at the start of that iteration.
  CHECK(ready_for("{% set ns = namespace(multi=true, last=messages | length - 1) %}{% for m in messages[::-1] %}"
                  "{% set i = (messages | length - 1) - loop.index0 %}{% if ns.multi and m.role == 'user' %}"
                  "{% set ns.multi = false %}{% set ns.last = i %}{% endif %}{% endfor %}{% for m in messages %}"
                  "{% if loop.index0 > ns.last %}*{% endif %}{{ m.content }}{% endfor %}"
                  "{% if add_generation_prompt %}G{% endif %}",
                  kFour) == "0-0+1-1+2-2+3-3+");
  // Llama 3.1's first user message taken out when the list is not empty;
  // the empty prefix raises before the loop, as in full.
  CHECK(
      ready_for("{% if messages | length != 0 %}{% set first = messages[0].content %}{% set messages = messages[1:] %}"
                "{% else %}{{ raise_exception('none') }}{% endif %}[{{ first }}]{% for m in messages %}"
                "{{ m.content }}{% endfor %}{% if add_generation_prompt %}G{% endif %}",
                kFour) == "1-1+2-2+3-3+");
  // A value read from add_generation_prompt before the loop: the renders
  // with the prompt differ there.
  CHECK(ready_for("{% set p = add_generation_prompt %}{% for m in messages %}{{ m.content }}{% endfor %}{{ p }}",
                  kFour) == "0-1-2-3-");
  // A prefix that runs up to the loop itself shares what it found there
  // with the render of the same prefix with the other prompt, unless it
  // read the prompt before the loop.
  CHECK(ready_for("{% set ns = namespace(n=messages | length) %}{% set p = add_generation_prompt %}"
                  "{% for m in messages %}{{ m.content }}{% endfor %}{{ p }}",
                  kFour) == "0-1-2-3-");
  CHECK(ready_for("{% set ns = namespace(n=messages | length) %}{% for m in messages %}{{ m.content }}{% endfor %}"
                  "{% if add_generation_prompt %}G{{ ns.n }}{% endif %}",
                  kFour) == "0-0+1-1+2-2+3-3+");
  // The same contents, but one namespace where the full render has two
  // names for one: no prefix resumes.
  CHECK(ready_for("{% set ns = namespace(n=0) %}{% set a = ns if messages | length > 3 else namespace(n=0) %}"
                  "{% for m in messages %}{% set a.n = a.n + 1 %}{% endfor %}{{ ns.n }}"
                  "{% if add_generation_prompt %}G{% endif %}",
                  kFour) == "");
  // A macro defined before the loop is the same function in both renders.
  CHECK(ready_for("{% macro f(x) %}<{{ x }}>{% endmacro %}{% set n = messages | length > 0 %}"
                  "{% for m in messages %}{{ f(m.content) }}{% endfor %}{{ n }}",
                  kFour) == "1-1+2-2+3-3+");
}

namespace {

// Qwen3's scan for the last user query, before the loop `body`.
std::string last_query(const std::string& body, const std::string& after = "") {
  return "{% set ns = namespace(multi=true, last=messages | length - 1, flag='x') %}{% for m in messages[::-1] %}"
         "{% set i = (messages | length - 1) - loop.index0 %}{% if ns.multi and m.role == 'user' %}"
         "{% set ns.multi = false %}{% set ns.last = i %}{% endif %}{% endfor %}{% for m in messages %}" +
         body + "{% endfor %}" + after + "{% if add_generation_prompt %}G{% endif %}";
}

const char* kSix =
    R"([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
        {"role": "user", "content": "c"}, {"role": "assistant", "content": "d"},
        {"role": "user", "content": "e"}, {"role": "assistant", "content": "f"}])";

}  // namespace

TEST_CASE("resume: a value the prefix computed otherwise before the loop, consumed by comparisons alone") {
  // The comparison's outcome in each iteration before the point decides;
  // where the loop reads loop.last, the point inside it serves the prefix
  // whose last iteration compares otherwise (messages[:2], messages[:4]).
  CHECK(ready_for(last_query("{% if loop.index0 > ns.last %}{% if loop.last %}*{% endif %}{% endif %}{{ m.content }}"),
                  kSix) == "0-0+1-1+2-2+3-3+4-4+5-5+");
  // A prefix whose last iteration the point inside the loop cannot reach
  // (an earlier iteration compares otherwise) resumes from the latest point
  // before it and runs the iterations from there.
  CHECK(ready_for(last_query("{% if ns.last < loop.index0 %}*{% endif %}{{ m.content }}{% if loop.last %}.{% endif %}"),
                  R"([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                      {"role": "tool", "content": "t"}, {"role": "assistant", "content": "d"},
                      {"role": "user", "content": "e"}, {"role": "assistant", "content": "f"}])") ==
        "0-0+1-1+2-2+3-3+4-4+5-5+");
  // Other operators, the value on either side.
  CHECK(ready_for(last_query("{% if ns.last == loop.index0 + 1 %}>{% endif %}{% if 2 != ns.last %}!{% endif %}"
                             "{{ m.content }}"),
                  kSix) == "0-0+1-1+2-2+3-3+4-4+5-5+");
  // Read after the loop, where the loop did not set it: the prefix's own.
  CHECK(ready_for(last_query("{% if loop.index0 > ns.last %}*{% endif %}{{ m.content }}", "[{{ ns.last }}]"), kSix) ==
        "0-0+1-1+2-2+3-3+4-4+5-5+");
  // Set in the loop before the point: from there on, the full render's is
  // the prefix's (the comparisons after the set are not the prefix's to agree with).
  CHECK(ready_for(last_query("{% if loop.index0 > ns.last %}*{% endif %}{% if loop.index0 == 1 %}{% set ns.last = 9 %}"
                             "{% endif %}{{ m.content }}",
                             "[{{ ns.last }}]"),
                  kSix) == "0-0+1-1+2-2+3-3+4-4+5-5+");
}

TEST_CASE("resume: a value the prefix computed otherwise, read as a value, resumes before the first read") {
  // Printed in the loop, computed with, tested for truth, compared twice in
  // one chain or with another such value, read by key, copied to a
  // variable: the prefixes whose value is the full render's resume from
  // their points (messages[:5], whose last query is 4 as in full, and
  // messages[:0], whose loop reads nothing), the others at the start of
  // the loop's first iteration, running the loop themselves.
  for (const char* body :
       {"{{ ns.last }}", "{% if loop.index0 > ns.last + 0 %}*{% endif %}", "{% if ns.last %}*{% endif %}",
        "{% if 0 <= ns.last < loop.index0 %}*{% endif %}", "{% if ns.last > ns.multi %}*{% endif %}",
        "{% if ns['last'] > loop.index0 %}*{% endif %}", "{% set l = ns.last %}{% if l > loop.index0 %}*{% endif %}",
        "{% if ns.last | string == '4' %}*{% endif %}"}) {
    INFO(body);
    CHECK(ready_for(last_query(std::string(body) + "{{ m.content }}"), kSix) == "0-0+1-1+2-2+3-3+4-4+5-5+");
  }
  // Passed to a macro: the loop reads ahead (a macro may), so each prefix
  // resumes from the point inside the loop before the first such read,
  // running the iterations from there itself.
  CHECK(ready_for("{% macro f(n) %}{{ n.last }}{% endmacro %}" + last_query("{{ f(ns) }}{{ m.content }}"), kSix) ==
        "0-0+1-1+2-2+3-3+4-4+5-5+");
  // A comparison whose outcome differs is what renders otherwise: the
  // resumed render must not have taken the full render's branch.
  CHECK(ready_for(last_query("{% if loop.index0 > ns.last %}*{% endif %}{{ m.content }}"),
                  R"([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                      {"role": "assistant", "content": "c"}, {"role": "user", "content": "d"}])") ==
        "0-0+1-1+2-2+3-3+");
  // Found by another scan: as above. The namespace also reachable through a
  // list, where its attributes may be read unseen: no prefix whose value
  // differs resumes (no slot is watched, no point is taken inside the loop).
  const std::string scan =
      "{% set ns = namespace(last=-1) %}{% for m in messages[::-1] %}{% if m.role == 'user' and ns.last < 0 %}"
      "{% set ns.last = messages | length - 1 - loop.index0 %}{% endif %}{% endfor %}";
  CHECK(ready_for(scan + "{% for m in messages %}{% if loop.index0 > ns.last %}*{% endif %}{{ m.content }}{% endfor %}",
                  kSix) == "0-0+1-1+2-2+3-3+4-4+5-5+");
  CHECK(ready_for(scan + "{% set all = [ns] %}{% for m in messages %}{% if loop.index0 > all[0].last %}*{% endif %}"
                         "{{ m.content }}{% endfor %}",
                  kSix) == "5-5+");
}

TEST_CASE("resume: the length of the messages compared before the loop") {
  // The prefixes whose length gives the full render's outcome resume from
  // their points; the others run up to the loop themselves.
  CHECK(ready_for("{% if messages | length > 2 %}[long]{% endif %}{% for m in messages %}{{ m.content }}{% endfor %}"
                  "{% if add_generation_prompt %}G{% endif %}",
                  kFour) == "3-3+");
  CHECK(ready_for("{% if 1 < messages | count %}[more]{% else %}[one]{% endif %}{% for m in messages %}{{ m.content }}"
                  "{% endfor %}",
                  kFour) == "2-2+3-3+");
  // Where the outcome is the same for them all, none runs it again.
  CHECK(ready_for("{% if messages | length >= 0 %}[any]{% endif %}{% for m in messages %}{{ m.content }}{% endfor %}",
                  kFour) == "0-0+1-1+2-2+3-3+");
  // Compared with itself, or used as a number: every prefix runs up to the loop.
  CHECK(ready_for("{% if messages | length == messages | length %}={% endif %}{% for m in messages %}{{ m.content }}"
                  "{% endfor %}",
                  kFour) == "0-0+1-1+2-2+3-3+");
  CHECK(ready_for("{{ messages | length > 2 }}{% for m in messages %}{{ m.content }}{% endfor %}", kFour) == "3-3+");
}

TEST_CASE("resume: a loop over the messages that follow concerns the prefixes where its iterations change something") {
  // The first tool message of a run gathers the run: the loop over
  // messages[i:] breaks at the message after it. Its iterations over the
  // run's messages write them; the one that breaks changes nothing, so the
  // prefix that ends before it resumes too (its own loop over messages[i:]
  // ends there), its steps less those the full render took from there.
  // (messages[:3] ends with the run's first message: it resumes inside the
  // loop, running that iteration, the loop over the run included, itself.)
  const char* run =
      R"([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
          {"role": "tool", "content": "c"}, {"role": "tool", "content": "d"},
          {"role": "assistant", "content": "e"}, {"role": "user", "content": "f"}])";
  const std::string head =
      "{% for m in messages %}{% if m.role == 'tool' and messages[loop.index0 - 1].role != 'tool' %}[";
  const std::string tail =
      "]{% elif m.role != 'tool' %}{{ m.content }}{% endif %}{% endfor %}"
      "{% if add_generation_prompt %}G{% endif %}";
  CHECK(ready_for(head +
                      "{% for x in messages[loop.index0:] %}{% if x.role != 'tool' %}{% break %}{% endif %}"
                      "{{ x.content }}{% endfor %}" +
                      tail,
                  run) == "0-0+1-1+2-2+3-3+4-4+5-5+");
  // One that reaches the end: its iterations after the run change nothing.
  CHECK(ready_for(head +
                      "{% for x in messages[loop.index0:] %}{% if x.role == 'tool' %}{{ x.content }}{% endif %}"
                      "{% endfor %}" +
                      tail,
                  run) == "0-0+1-1+2-2+3-3+4-4+5-5+");
  // A flag set by the first message of a kind after the assistant's: the
  // prefixes that end before it lack the set (gpt-oss looks for a final
  // answer after a tool call); a set to the value the flag holds changes
  // nothing.
  const std::string flag =
      "{% for m in messages %}{{ m.content }}{% if m.role == 'assistant' %}"
      "{% set ns = namespace(found=false) %}";
  const std::string shown = "{{ ns.found }}{% endif %}{% endfor %}{% if add_generation_prompt %}G{% endif %}";
  CHECK(ready_for(flag +
                      "{% for x in messages[loop.index0 + 1:] %}{% if x.role == 'tool' %}"
                      "{% set ns.found = true %}{% endif %}{% endfor %}" +
                      shown,
                  run) == "0-0+1-1+2-2+3-3+4-4+5-5+");
  CHECK(ready_for(flag +
                      "{% for x in messages[loop.index0 + 1:] %}{% if x.role == 'user' %}"
                      "{% set ns.found = true %}{% endif %}{% endfor %}" +
                      shown,
                  run) == "0-0+1-1+2-2+");
  // One whose body reads `loop` (its length, its last item), one with a
  // filter or an else: every prefix after it reads differently.
  CHECK(ready_for(head +
                      "{% for x in messages[loop.index0:] %}{% if x.role != 'tool' %}{% break %}{% endif %}"
                      "{{ x.content }}{{ loop.length }}{% endfor %}" +
                      tail,
                  run) == "0-0+1-1+2-2+3-3+");
  CHECK(ready_for(head + "{% for x in messages[loop.index0:] if x.role == 'tool' %}{{ x.content }}{% endfor %}" + tail,
                  run) == "0-0+1-1+2-2+3-3+");
  CHECK(ready_for(head +
                      "{% for x in messages[loop.index0:] %}{% if x.role != 'tool' %}{% break %}{% endif %}"
                      "{{ x.content }}{% else %}!{% endfor %}" +
                      tail,
                  run) == "0-0+1-1+2-2+3-3+");
  // Where another loop over the messages follows, every iteration it
  // reaches concerns the prefixes without its message.
  CHECK(ready_for(head +
                      "{% for x in messages[loop.index0:] %}{% if x.role != 'tool' %}{% break %}{% endif %}"
                      "{{ x.content }}{% endfor %}" +
                      tail + "{% for m in messages %}{% endfor %}",
                  run) == "0-0+1-1+2-2+3-3+5-5+");
}

TEST_CASE("resume: loops it cannot resume render in full") {
  // A second loop over the messages runs in full after the first.
  CHECK(ready_for("{% for m in messages %}{% endfor %}{% for m in messages %}{{ m.content }}{% endfor %}", kFour) ==
        "0-0+1-1+2-2+3-3+");
  // A filtered loop, a loop with else, a loop inside a macro: none; a
  // break: none after it.
  CHECK(ready_for("{% for m in messages if m.role == 'user' %}{{ m.content }}{% endfor %}", kFour) == "");
  CHECK(ready_for("{% for m in messages %}{{ m.content }}{% else %}none{% endfor %}", kFour) == "");
  CHECK(ready_for("{% macro r() %}{% for m in messages %}{{ m.content }}{% endfor %}{% endmacro %}{{ r() }}", kFour) ==
        "");
  CHECK(ready_for("{% for m in messages %}{% if loop.index0 == 2 %}{% break %}{% endif %}{{ m.content }}"
                  "{% endfor %}",
                  kFour) == "0-0+1-1+2-2+");
  // The loop stored in a namespace, a macro that closes over it.
  CHECK(ready_for("{% set ns = namespace() %}{% for m in messages %}{% set ns.l = loop %}{% endfor %}{{ ns.l.index }}",
                  kFour) == "0-0+1-1+");
  // A prefix the template refuses fails as its full render does.
  CHECK(ready_for("{% for m in messages %}{{ m.content }}{% endfor %}"
                  "{% if add_generation_prompt and messages | length < 3 %}{{ raise_exception('no') }}{% endif %}",
                  kFour) == "0-0+1-1+2-2+3-3+");
}

TEST_CASE("resume: every model template and conversation of ../shared/templates") {
  const fs::path dir = fs::path(TOKFEED_SHARED_DIR) / "templates";
  if (!fs::exists(dir / "conversations.jsonl")) return;  // ../shared is absent
  std::vector<std::string> lines;
  std::ifstream f(dir / "conversations.jsonl");
  for (std::string line; std::getline(f, line) && lines.size() < 100;)
    if (!line.empty()) lines.push_back(line);
  std::size_t ready = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (!entry.is_directory()) continue;
    text::ChatSource src;
    src.path = entry.path().string();
    src.instant = "2024-07-26";
    src.kwargs_json = R"({"date_string": "26 Jul 2024"})";
    auto spec = text::load_chat_template(src);
    text::RecordRules rules;
    for (const std::string& line : lines) {
      Value messages, tools;
      if (!text::record_to_chat(line, rules, false, messages, tools).empty()) continue;
      tmpl::Vars vars = spec->globals;
      vars.emplace_back("tools", tools);
      vars.emplace_back("documents", Value::none());
      INFO(entry.path().filename().string() << ": " << line.substr(0, 80));
      ready += check_resumes(spec->tmpl, vars, messages).size();
    }
  }
  CHECK(ready > 1000);
}

TEST_CASE("resume: a record budget that ends before the point renders in full, which says where it stops") {
  Template t = Template::parse(
      "{% for m in messages %}{{ m.content }}{% endfor %}{% if add_generation_prompt %}G"
      "{% endif %}");
  Value messages = tmpl::parse_json(kFour);
  tmpl::Vars vars{{"messages", messages}, {"add_generation_prompt", Value::boolean(false)}};
  tmpl::Resumes resumes;
  resumes.want.assign(5, 3);
  tmpl::RenderLimits limits;
  CHECK(t.render(vars, limits, nullptr, nullptr, &resumes) == "abcd");
  REQUIRE(resumes.ready(3, true));
  CHECK(t.resume(resumes, 3, true, limits).value() == "abcG");
  {
    tmpl::RecordScope plenty(1000);
    CHECK(t.resume(resumes, 3, true, limits).value() == "abcG");
  }
  tmpl::RecordScope scarce(10);
  CHECK_FALSE(t.resume(resumes, 3, true, limits).has_value());
}

TEST_CASE("resume: a prefix that runs up to the loop itself starts at the set that first read what it sees otherwise") {
  // The output and the tools loop before it are the full render's; the
  // set of `ns` reads the messages' length, which every prefix sees
  // otherwise.
  const std::string src =
      "{{ 'sys:' }}{% set a = 'x' %}{% if tools %}{% for t in tools %}[{{ t }}]{% endfor %}{% endif %}"
      "{% set ns = namespace(n=messages | length) %}{% for m in messages %}{{ m.content }}{% endfor %}"
      "{% if add_generation_prompt %}G{{ ns.n }}{{ a }}{% endif %}";
  const Template t = Template::parse(src);
  const Value messages = tmpl::parse_json(kFour);
  const tmpl::Vars vars{{"tools", tmpl::parse_json("[1, 2, 3]")}};
  CHECK(check_resumes(t, vars, messages) == "0-0+1-1+2-2+3-3+");
  // Under every step budget, the render of messages[:2] with the prompt
  // ends as the render in full does (resume() may leave it to that).
  tmpl::Vars full = vars, prefix = vars;
  full.emplace_back("messages", messages);
  full.emplace_back("add_generation_prompt", Value::boolean(false));
  const auto& all = messages.list->items;
  prefix.emplace_back("messages", Value::new_list(std::vector<Value>(all.begin(), all.begin() + 2)));
  prefix.emplace_back("add_generation_prompt", Value::boolean(true));
  auto ends = [&](const std::function<std::string()>& render) {
    try {
      return render();
    } catch (const tmpl::Error& e) {
      return std::string("error: ") + e.what();
    }
  };
  int resumed = 0;
  for (uint64_t max = 1; max < 80; ++max) {
    INFO("max_steps = " << max);
    tmpl::RenderLimits limits;
    tmpl::Resumes resumes;
    resumes.want.assign(5, 3);
    t.render(full, tmpl::RenderLimits{}, nullptr, nullptr, &resumes);
    REQUIRE(resumes.ready(2, true));
    limits.max_steps = max;
    const std::string want = ends([&] { return t.render(prefix, limits); });
    std::optional<std::string> got;
    const std::string error = ends([&] {
      got = t.resume(resumes, 2, true, limits);
      return std::string();
    });
    if (!error.empty()) CHECK(error == want);
    else if (got) CHECK(*got == want);
    resumed += got.has_value() && resumes.resumed > 0;
  }
  CHECK(resumed > 0);
}
