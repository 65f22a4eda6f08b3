// Bad input gets a clear error that names the file, line, key or field, and
// what to do; bad records are counted under "skip" and fatal under "fail".
#include <doctest/doctest.h>
#include <signal.h>

#include <fstream>

#include "harness.hpp"

using namespace tokfeed::testing;

namespace {

std::string tok() {
  return "[tokenizer]\ntype = \"sentencepiece\"\npath = \"" + data_path("tokenizers/sp32k/tokenizer.model") +
         "\"\ntemplate = \"mistral\"\n";
}

Output check(const TempDir& dir, const std::string& body) {
  return run(bin("tokfeedd") + " --check-config '" + write_job(dir, body) + "'");
}

std::string write(const TempDir& dir, const std::string& name, const std::string& content) {
  std::ofstream(dir.file(name)) << content;
  return dir.file(name);
}

const char* kGood = R"({"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"}]})";

}  // namespace

TEST_CASE("config errors name the key and what is expected") {
  TempDir dir;
  std::string data = write(dir, "d.jsonl", std::string(kGood) + "\n");
  std::string ds = "[dataset]\npath = \"" + data + "\"\n";
  struct Case {
    std::string body, expect;
  } cases[] = {
      {ds + tok() + "[batch]\nsize = 0\n", "[batch] size: 0 is out of range"},
      {ds + tok() + "[batch]\nsize = \"four\"\n", "[batch] size: expected an integer"},
      {ds + tok() + "[batch]\npadding = \"left\"\n", "[batch] padding: 'left' is not one of: longest | max_length"},
      {ds + tok() + "[batch]\nsise = 4\n", "[batch] unknown key 'sise'"},
      {ds + tok() + "[bach]\nsize = 4\n", "unknown section [bach]"},
      {"[dataset]\npath = \"" + dir.file("missing.jsonl") + "\"\n" + tok(), "[dataset] path: file not found"},
      {ds + "[tokenizer]\ntype = \"sentencepiece\"\npath = \"nope.model\"\n", "[tokenizer] path: file not found"},
      {ds + tok() + "[ranks]\nworld_size = 2\nserve = [2]\n", "rank 2 is outside"},
      {ds + tok() + "[batch\n", "invalid TOML"},
      {ds + tok() + "[cache]\nmax_gb = -1\n", "[cache] max_gb: -1 is out of range: expected a number of GB >= 0"},
      {ds + tok() + "[cache]\nmax_gb = \"10G\"\n", "[cache] max_gb: expected a number of GB >= 0 (0: no bound)"},
  };
  for (const Case& c : cases) {
    INFO(c.body);
    Output o = check(dir, c.body);
    CHECK(o.status != 0);
    CHECK_MESSAGE(o.err.find(c.expect) != std::string::npos, o.err);
    CHECK(o.err.find("job.toml") != std::string::npos);
  }
}

TEST_CASE("bad records: counted and reported by line under skip, fatal under fail") {
  TempDir dir;
  std::string g = kGood;
  std::string data = write(dir, "d.jsonl",
                           g + "\n" +                      // 1
                               "{\"messages\": [oops\n" +  // 2 malformed
                               R"({"messages":[{"role":"tool","content":"x"},{"role":"assistant","content":"y"}]})"
                               "\n" +  // 3
                               R"({"messages":[]})"
                               "\n" +  // 4 empty
                               R"({"messages":[{"role":"user","content":""},{"role":"assistant","content":"y"}]})"
                               "\n" +  // 5
                               R"({"messages":[{"role":"user","content":"x"}]})"
                               "\n" +  // 6 no assistant
                               R"({"body":"plain"})"
                               "\n" +  // 7 no format
                               "\n" +
                               g + "\n");  // 9
  std::string body = "[dataset]\npath = \"" + data + "\"\n" + tok();
  Output o = check(dir, body);
  CHECK(o.status == 0);
  CHECK(o.out.find("9 records, 2 valid, 6 bad") == std::string::npos);  // blank line 8 is not a record
  CHECK(o.out.find("8 records, 2 valid, 6 bad") != std::string::npos);
  for (const char* expect : {":2: malformed JSON", ":3: unknown role 'tool'", ":4: no assistant turn",
                             ":5: empty user turn", ":6: no assistant turn", ":7: unrecognized record"}) {
    CHECK_MESSAGE(o.out.find(expect) != std::string::npos, expect);
  }

  Output fail = check(dir, "[dataset]\npath = \"" + data + "\"\non_bad_record = \"fail\"\n" + tok());
  CHECK(fail.status != 0);
  CHECK(fail.err.find("d.jsonl:2: bad record: malformed JSON") != std::string::npos);
  CHECK(fail.err.find("on_bad_record = \"skip\"") != std::string::npos);
}

TEST_CASE("a broken JSON array names the file, line and byte") {
  TempDir dir;
  std::string data = write(dir, "a.json", std::string("[\n  ") + kGood + ",\n]\n");
  Output o = check(dir, "[dataset]\npath = \"" + data + "\"\n" + tok());
  CHECK(o.status != 0);
  CHECK(o.err.find("a.json:3: byte") != std::string::npos);
  CHECK(o.err.find("trailing comma") != std::string::npos);
}

TEST_CASE("over-long samples are truncated or dropped and counted") {
  TempDir dir;
  std::string long_text(4000, 'a');
  for (std::size_t i = 1; i < long_text.size(); i += 2) long_text[i] = ' ';
  std::string rec =
      R"({"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":")" + long_text + "\"}]}";
  std::string data = write(dir, "d.jsonl", std::string(kGood) + "\n" + rec + "\n");
  for (const char* trunc : {"right", "drop"}) {
    std::string body = "[dataset]\npath = \"" + data + "\"\n" + tok() +
                       "[batch]\nsize = 2\nmax_length = 64\ntruncation = \"" + trunc +
                       "\"\n[schedule]\nshuffle = false\n";
    std::string cfg = write_job(dir, body, trunc);
    Daemon d(cfg, socket_of(dir, trunc));
    auto batches = dump(d.socket());
    REQUIRE(batches.size() == 1);
    Output st = run(bin("tokfeedctl") + " -s '" + d.socket() + "' status --json");
    if (std::string(trunc) == "right") {
      CHECK(st.out.find("\"truncated\":1") != std::string::npos);
      CHECK(batches[0].find("\"input_ids\":[[") != std::string::npos);
    } else {
      CHECK(st.out.find("\"too_long\":1,") != std::string::npos);
    }
    CHECK(batches == reference(cfg));
  }
}

TEST_CASE("too little shared memory is a clear start-up error with the bytes needed and free") {
  TempDir dir;
  std::string mnt = dir.file("shm");
  run("mkdir -p '" + mnt + "'");
  if (run("mount -t tmpfs -o size=256k tokfeed-test '" + mnt + "'").status != 0) {
    MESSAGE("cannot mount a small tmpfs here (not root?); skipped");
    return;
  }
  std::string data = write(dir, "d.jsonl", std::string(kGood) + "\n");
  std::string body = "[dataset]\npath = \"" + data + "\"\n" + tok() + "[batch]\nsize = 8\nmax_length = 4096\n";
  std::string cfg = write_job(dir, body);
  // write_job appends [server]; point the segments at the small tmpfs.
  run("sed -i 's|^\\[server\\]$|[server]\\nshm_dir = \"" + mnt + "\"|' '" + cfg + "'");
  Output o = run(bin("tokfeedd") + " --config '" + cfg + "'");
  Output c = run(bin("tokfeedd") + " --check-config '" + cfg + "'");
  run("umount '" + mnt + "'");
  CHECK(o.status != 0);
  CHECK_MESSAGE(o.err.find("not enough shared memory for the data segment: need") != std::string::npos, o.err);
  CHECK(o.err.find("free") != std::string::npos);
  CHECK(o.err.find("--shm-size") != std::string::npos);
  CHECK(c.status != 0);
  CHECK(c.err.find("needs") != std::string::npos);
}

TEST_CASE("an unknown filter in a branch is a --check-config warning with its line:column; elsewhere a load error") {
  TempDir dir;
  std::string data = write(dir, "d.jsonl", std::string(kGood) + "\n");
  std::string sp = "[tokenizer]\ntype = \"sentencepiece\"\npath = \"" + data_path("tokenizers/sp32k/tokenizer.model") +
                   "\"\ntemplate = \"jinja\"\nchat_template = \"";
  std::string ds = "[dataset]\npath = \"" + data + "\"\n";
  // jinja2 3.x: inside an `if`, the filter is looked up only when reached.
  std::string soft = write(dir, "soft.jinja",
                           "{% for m in messages %}{{ m.content }}\n"
                           "{% if m.args is string %}{{ m.args | from_json }}{% endif %}{% endfor %}");
  Output o = check(dir, ds + sp + soft + "\"\n");
  CHECK(o.status == 0);
  CHECK(o.out.find("# warning: chat template") != std::string::npos);
  CHECK(o.out.find("2:38: unknown filter 'from_json'") != std::string::npos);
  CHECK(o.out.find("refused") == std::string::npos);  // the first record renders
  // Outside a branch, jinja2 refuses the template when it compiles it.
  std::string hard = write(dir, "hard.jinja", "{% for m in messages %}\n  {{ m.content | from_json }}{% endfor %}");
  Output h = check(dir, ds + sp + hard + "\"\n");
  CHECK(h.status != 0);
  CHECK(h.err.find("2:") != std::string::npos);
  CHECK(h.err.find("from_json") != std::string::npos);
}
