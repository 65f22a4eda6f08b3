// The supervisor renders nothing: the records a template renders are judged
// in forked children, and a record whose render ends its child (abort,
// SIGSEGV, out of [workers] max_memory) is a bad record named by file:line
// once it has ended max_crashes of them; the daemon serves every other
// record as a run without it does. The test-only hook
// TOKFEED_FAULT_CRASH_RENDER makes rendering one record (wherever it is
// rendered to judge it) end the process: in the supervisor, it would end
// the daemon.
#include <doctest/doctest.h>
#include <signal.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "harness.hpp"

using namespace tokfeed::testing;

namespace {

const char* kTemplate =
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

// 24 two-turn conversations; line 7 says "hello 6".
std::string lines(int skip_line = 0) {
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

std::string job(const TempDir& dir, const std::string& data, const std::string& cache, const char* on_bad = "skip",
                const std::string& tmpl = kTemplate) {
  return "[dataset]\npath = \"" + data + "\"\non_bad_record = \"" + on_bad +
         "\"\n[tokenizer]\ntype = \"sentencepiece\"\npath = \"" + data_path("tokenizers/sp32k/tokenizer.model") +
         "\"\ntemplate = \"jinja\"\nchat_template = \"" + write(dir, "t.jinja", tmpl) +
         "\"\n[batch]\nsize = 2\n[schedule]\nshuffle = false\n[workers]\ncount = 2\nmax_memory = 2\n" +
         (cache.empty() ? "[cache]\nenabled = false\n" : "[cache]\ndir = \"" + cache + "\"\n");
}

}  // namespace

TEST_CASE("a record whose render ends its child is a bad record named by file:line; the supervisor serves the rest") {
  TempDir dir;
  // Records checked at start, in children (JSONL's default is "when_read").
  auto at_start = [](std::string body) {
    return body.replace(body.find("[tokenizer]"), 0, "check_rows = \"start\"\n");
  };
  std::vector<std::string> clean;
  {
    std::string data = write(dir, "clean.jsonl", lines(7));
    Daemon d(write_job(dir, at_start(job(dir, data, dir.file("cache-clean"))), "clean"), socket_of(dir, "clean"));
    clean = dump(d.socket());
  }
  REQUIRE(clean.size() == 12);  // 23 records, two per batch
  const std::string data = write(dir, "t.jsonl", lines());
  for (const char* how : {"abort", "segv", "oom"}) {
    for (bool cache : {true, false}) {
      std::string name = std::string(how) + (cache ? "-cache" : "-off");
      CAPTURE(name);
      std::string cfg = write_job(dir, at_start(job(dir, data, cache ? dir.file("cache-" + name) : "")), name);
      Daemon d(cfg, socket_of(dir, name),
               std::string("TOKFEED_FAULT_CRASH_RENDER='hello 6\"' TOKFEED_FAULT_CRASH_HOW=") + how);
      std::vector<std::string> got = dump(d.socket());
      CHECK(d.running());
      CHECK(got == clean);
      Output st = run(bin("tokfeedctl") + " -s '" + d.socket() + "' status --json");
      CHECK(st.status == 0);
      std::string log = d.log();
      CHECK(log.find("t.jsonl:7: record crashed a checking process 3 times; it is a bad record") != std::string::npos);
      CHECK(log.find("t.jsonl:7: bad record skipped: rendering it ended the checking process 3 times") !=
            std::string::npos);
      if (std::string(how) == "oom") CHECK(log.find("out of memory ([workers] max_memory)") != std::string::npos);
      CHECK(d.stop(SIGTERM) == 0);
      if (cache) {
        // The verdicts were kept with the index: the next start renders
        // nothing to judge, and serves the same stream.
        Daemon again(cfg, socket_of(dir, name));
        CHECK(dump(again.socket()) == clean);
        CHECK(again.log().find("in forked children to check them") == std::string::npos);
      }
    }
  }
}

TEST_CASE("on_bad_record = \"fail\": a record the template refuses stops the start once the children judged it") {
  TempDir dir;
  // Line 5's content makes the template raise.
  std::string text = lines();
  const std::string boom = "hello 4\"";
  text.replace(text.find(boom), boom.size(), "boom\"");
  std::string data = write(dir, "t.jsonl", text);
  const std::string raising =
      "{%- for m in messages %}{% if m.content == 'boom' %}{{ raise_exception('no boom here') }}{% endif %}"
      "{{ m.role }}: {{ m.content }}\n{% endfor %}";
  std::string body = job(dir, data, dir.file("cache"), "fail", raising);
  Output out = run("timeout 60 " + bin("tokfeedd") + " --config '" + write_job(dir, body) + "' 2>&1");
  CHECK(out.status != 0);
  CHECK(out.out.find("t.jsonl:5: bad record:") != std::string::npos);
  CHECK(out.out.find("no boom here") != std::string::npos);
  // --check-config judges the same way, in children, and says the same.
  Output cc = run("timeout 60 " + bin("tokfeedd") + " --check-config '" + write_job(dir, body, "cc") + "' 2>&1");
  CHECK(cc.status != 0);
  CHECK(cc.out.find("t.jsonl:5: bad record:") != std::string::npos);
}

TEST_CASE(
    "check_rows = \"when_read\": nothing is rendered before serving; a record the template refuses is named "
    "when encoded and left out, as a run without it") {
  TempDir dir;
  std::string text = lines();
  const std::string boom = "hello 4\"";
  text.replace(text.find(boom), boom.size(), "boom\"");
  const std::string data = write(dir, "t.jsonl", text);
  const std::string clean = write(dir, "clean.jsonl", lines(5));
  const std::string raising =
      "{%- for m in messages %}{% if m.content == 'boom' %}{{ raise_exception('no boom here') }}{% endif %}"
      "<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
      "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
  // keep_untrained with right truncation: only the bad record is left out.
  auto when_read = [&](std::string body) {
    body.replace(body.find("[tokenizer]"), 0, "check_rows = \"when_read\"\n");
    return body.replace(body.find("[batch]\n") + 8, 0, "keep_untrained = true\n");
  };
  std::vector<std::string> reference;
  {
    Daemon d(write_job(dir, when_read(job(dir, clean, "", "skip", raising)), "clean"), socket_of(dir, "clean"));
    reference = dump(d.socket());
  }
  REQUIRE(reference.size() == 12);  // 23 records in batches of 2
  for (const char* cache : {"", "cache"}) {
    CAPTURE(cache);
    const std::string c = *cache ? dir.file(cache) : "";
    Daemon d(write_job(dir, when_read(job(dir, data, c, "skip", raising)), "wr"), socket_of(dir, "wr"));
    CHECK(dump(d.socket()) == reference);
    const std::string log = d.log();
    CHECK(log.find("in forked children to check them") == std::string::npos);  // no render pass before serving
    CHECK(log.find("t.jsonl:5: bad record: ") != std::string::npos);
    CHECK(log.find("no boom here") != std::string::npos);
    // The store is published once every record is built.
    for (int i = 0; i < 1500 && *cache && files_ending(c, ".idx") == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  Daemon warm(write_job(dir, when_read(job(dir, data, dir.file("cache"), "skip", raising)), "wr"),
              socket_of(dir, "wr"));
  CHECK(dump(warm.socket()) == reference);
  CHECK(warm.log().find("reused in") != std::string::npos);
}
