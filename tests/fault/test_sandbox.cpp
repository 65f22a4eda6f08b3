// Hostile templates and records against a real daemon: each attack is a bad
// record named with its file:line and the limit it passed, the supervisor's
// memory stays small, every other record is served batch for batch as in a
// run without the attack, and SIGTERM stops the daemon at once whatever it
// is rendering. The engine-level bounds are unit tests (test_sandbox.cpp).
#include <doctest/doctest.h>
#include <signal.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "harness.hpp"

using namespace tokfeed::testing;
using Clock = std::chrono::steady_clock;

namespace {

const char* kBase =
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

// 24 two-turn conversations; the one at line 4 says "hello 3".
std::string good_lines(int skip_line = 0) {
  std::string out;
  for (int i = 0; i < 24; ++i)
    if (i + 1 != skip_line)
      out += "{\"messages\":[{\"role\":\"user\",\"content\":\"hello " + std::to_string(i) +
             "\"},{\"role\":\"assistant\",\"content\":\"world " + std::to_string(i) + "\"}]}\n";
  return out;
}

std::string write(const TempDir& dir, const std::string& name, const std::string& text) {
  std::ofstream(dir.file(name)) << text;
  return dir.file(name);
}

// Records judged at start, in children: a bad one is no valid record, so the
// stream equals that of the file without it.
std::string job(const std::string& data, const std::string& tmpl, const std::string& extra = "") {
  return "[dataset]\npath = \"" + data +
         "\"\non_bad_record = \"skip\"\ncheck_rows = \"start\"\n[tokenizer]\ntype = \"sentencepiece\"\npath = \"" +
         data_path("tokenizers/sp32k/tokenizer.model") + "\"\ntemplate = \"jinja\"\nchat_template = \"" + tmpl +
         "\"\n[batch]\nsize = 2\n[workers]\ncount = 2\n" + extra;
}

// The supervisor's peak resident memory, in MB.
double peak_mb(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024;
  return -1;
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

TEST_CASE("hostile templates: each attack is a bad record named with its limit; every other record is served") {
  TempDir dir;
  std::string base = write(dir, "base.jinja", kBase);
  std::vector<std::string> clean;
  {
    // The run without the attack: the same records but line 4.
    std::string data = write(dir, "clean.jsonl", good_lines(4));
    Daemon d(write_job(dir, job(data, base), "clean"), socket_of(dir, "clean"));
    clean = dump(d.socket());
  }
  REQUIRE(clean.size() == 12);  // 23 records, two per batch
  struct Attack {
    const char* name;
    const char* code;
    const char* reason;
  };
  const std::string memory = "the render needed more than 268435456 bytes of memory";
  const Attack attacks[] = {
      {"center", "{{ 'x' | center(4000000000) }}", "would pass the output limit"},
      {"ljust", "{{ 'x'.ljust(4000000000) | length }}", "would pass the output limit"},
      {"indent", "{{ ('x\\n' * 1000) | indent(4000000) | length }}", "bytes of memory"},
      {"replace", "{{ ('x' * 1000000).replace('x', 'y' * 1000) | length }}", "bytes of memory"},
      {"join", "{{ (['x' * 1000000] * 10000) | join('') | length }}", "bytes of memory"},
      {"tojson", "{{ ([[[[[[1]]]]]] * 100000) | tojson(indent=100000) | length }}", "bytes of memory"},
      {"doubling",
       "{% set ns = namespace(s='xxxxxxxx') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
       "bytes of memory"},
      {"slow steps", "{% set s = 'x' * 10000000 %}{% for i in range(100000) %}{% set t = s ~ 'y' %}{% endfor %}",
       "step budget of 2000000 steps"},
  };
  for (const Attack& a : attacks) {
    std::string what = a.name;
    CAPTURE(what);
    std::string name = std::string("attack-") + std::to_string(&a - attacks);
    std::string tmpl =
        write(dir, name + ".jinja",
              std::string("{%- if messages[0].content == 'hello 3' %}") + a.code + "{% endif %}" + kBase);
    std::string data = write(dir, name + ".jsonl", good_lines());
    auto t0 = Clock::now();
    Daemon d(write_job(dir, job(data, tmpl), name), socket_of(dir, name));
    std::vector<std::string> got = dump(d.socket());
    double took = seconds_since(t0);
    double mb = peak_mb(d.pid());
    std::string log = d.log();
    MESSAGE(a.name << ": served in " << took << " s, supervisor peak " << mb << " MB");
    CHECK(log.find(data + ":4: bad record skipped: template " + tmpl + ": ") != std::string::npos);
    CHECK(log.find(a.reason) != std::string::npos);
    CHECK(mb < 1024);  // the attacks ask for 4 GB and more
    CHECK(d.running());
    require_equal(got, clean, a.name);
    CHECK(d.stop(SIGTERM) == 0);
  }
}

TEST_CASE("a namespace that holds itself renders (as jinja2 renders it) and leaks nothing across records") {
  TempDir dir;
  std::string tmpl = write(dir, "self.jinja",
                           std::string("{% set ns = namespace(big='x' * 1000000) %}{% set ns.me = ns %}"
                                       "{%- if messages[0].content == 'hello 3' %}{{ ns.me.me.big | length }}"
                                       "{% endif %}") +
                               kBase);
  std::string data;
  for (int i = 0; i < 20; ++i) data += good_lines();  // 480 records, each render builds a 1 MB cycle
  std::string path = write(dir, "data.jsonl", data);
  Daemon d(write_job(dir, job(path, tmpl, "[cache]\nenabled = false\n")), socket_of(dir));
  std::vector<std::string> got = dump(d.socket());
  CHECK(got.size() == 240);
  double mb = peak_mb(d.pid());
  MESSAGE("480 self-holding namespaces of 1 MB: supervisor peak " << mb << " MB");
  CHECK(mb < 300);  // leaked, they would hold 480 MB
  CHECK(d.log().find("bad record") == std::string::npos);
}

TEST_CASE("a 10k-turn conversation is a bad record within its step budget, and SIGTERM does not wait for it") {
  TempDir dir;
  std::string base = write(dir, "base.jinja", kBase);
  std::string turns = "{\"messages\":[";
  for (int i = 0; i < 5000; ++i)
    turns += std::string(i ? "," : "") + "{\"role\":\"user\",\"content\":\"q" + std::to_string(i) +
             "\"},{\"role\":\"assistant\",\"content\":\"a" + std::to_string(i) + "\"}";
  turns += "]}\n";
  std::vector<std::string> clean;
  {
    Daemon d(write_job(dir, job(write(dir, "clean.jsonl", good_lines(4)), base), "clean"), socket_of(dir, "clean"));
    clean = dump(d.socket());
  }
  {
    // Line 4 is the long conversation.
    std::string lines = good_lines(), data;
    std::size_t at = 0;
    for (int l = 1; l < 4; ++l) at = lines.find('\n', at) + 1;
    data = lines.substr(0, at) + turns + lines.substr(lines.find('\n', at) + 1);
    std::string path = write(dir, "turns.jsonl", data);
    Daemon d(write_job(dir, job(path, base), "turns"), socket_of(dir, "turns"));
    std::vector<std::string> got = dump(d.socket());
    CHECK(d.log().find(path + ":4: bad record skipped: ") != std::string::npos);
    CHECK(d.log().find("the record's renders ran past their budget of 32000000 steps") != std::string::npos);
    require_equal(got, clean, "10k turns");
  }
  {
    // 64 of them, and SIGTERM while the supervisor works through them (an
    // idle machine works through eight in under the 500 ms waited below).
    std::string many;
    for (int i = 0; i < 64; ++i) many += turns;
    std::string path = write(dir, "many.jsonl", many);
    Daemon d(write_job(dir, job(path, base), "many"), socket_of(dir, "many"));
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    auto t0 = Clock::now();
    int rc = d.stop(SIGTERM);
    double took = seconds_since(t0);
    MESSAGE("SIGTERM while indexing 10k-turn conversations: exited in " << took << " s");
    CHECK(rc == 0);
    CHECK(took < 2.0);
  }
}
