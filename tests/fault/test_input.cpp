// Hostile input outside the template: control characters in keys, a Parquet
// cell that expands to 128 MiB from a 6 KB file, a worker that runs out of
// its [workers] max_memory, and a group-mode cache folder without the setgid
// bit. The daemon names each and keeps serving, or refuses with what to do.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "harness.hpp"

extern char** environ;

using namespace tokfeed::testing;

namespace {

std::string write(const TempDir& dir, const std::string& name, const std::string& text) {
  std::ofstream(dir.file(name)) << text;
  return dir.file(name);
}

// Runs `tokfeedd --check-config cfg`: its exit status, stderr and peak RSS (MB).
struct Checked {
  int status;
  std::string err;
  double peak_mb;
};
Checked check_config(const TempDir& dir, const std::string& cfg) {
  std::string err_path = dir.file("check.err"), daemon = bin("tokfeedd");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<char*> argv{daemon.data(), const_cast<char*>("--check-config"), const_cast<char*>(cfg.c_str()), nullptr};
  pid_t pid = -1;
  REQUIRE(posix_spawn(&pid, daemon.c_str(), &fa, nullptr, argv.data(), environ) == 0);
  posix_spawn_file_actions_destroy(&fa);
  int st = 0;
  rusage ru{};
  ::wait4(pid, &st, 0, &ru);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), slurp(err_path), ru.ru_maxrss / 1024.0};
}

std::string sp_job(const std::string& data, const std::string& extra = "") {
  return "[dataset]\npath = \"" + data + "\"\n[tokenizer]\ntype = \"sentencepiece\"\npath = \"" +
         data_path("tokenizers/sp32k/tokenizer.model") + "\"\ntemplate = \"chatml\"\n" + extra;
}

}  // namespace

TEST_CASE("a key starting with U+0001 renders as jinja2 renders it, in tools and in a tool call's arguments") {
  std::string qwen3 = std::string(TOKFEED_TEST_BUILD_DATA) + "/qwen3";
  if (slurp(qwen3 + "/tokenizer_config.json").empty()) return;  // the unpacked tokenizer is absent
  TempDir dir;
  std::string lines;
  for (int i = 0; i < 6; ++i)
    lines += "{\"messages\":[{\"role\":\"user\",\"content\":\"hello " + std::to_string(i) +
             "\"},{\"role\":\"assistant\",\"content\":\"world\"}]}\n";
  lines +=
      R"({"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"ok"}],"tools":[{"type":"function","function":{"name":"f","description":"d","parameters":{"type":"object","properties":{"\u0001a":{"type":"string"},"\u00011":{"type":"integer"}}}}}]})"
      "\n"
      R"({"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"","tool_calls":[{"type":"function","function":{"name":"f","arguments":{"\u0001x":1,"\u00011":2,"\u0001i99999999999999999999999":3}}}]}]})"
      "\n";
  std::string data = write(dir, "data.jsonl", lines);
  std::string cfg = write_job(dir, "[dataset]\npath = \"" + data + "\"\n[tokenizer]\ntype = \"hf\"\npath = \"" + qwen3 +
                                       "/tokenizer.json\"\ntemplate = \"jinja\"\nchat_template = \"" + qwen3 + "\"\n");
  {
    Daemon d(cfg, socket_of(dir));
    CHECK(dump(d.socket()).size() == 2);  // 8 records, all valid, four per batch
    CHECK(d.running());
    CHECK(d.log().find("bad record") == std::string::npos);
  }
  // The model's template under jinja2 as transformers sets it up, on the
  // records as they are.
  std::string ref = write(dir, "ref.py", R"(
import json, sys
import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment
cfg = json.load(open(sys.argv[1] + "/tokenizer_config.json"))
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
env.filters["tojson"] = lambda x, indent=None, separators=None, sort_keys=False: json.dumps(
    x, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys)
t = env.from_string(cfg["chat_template"])
for line in open(sys.argv[2]):
    r = json.loads(line)
    print(json.dumps(t.render(messages=r["messages"], tools=r.get("tools"), add_generation_prompt=False,
                              eos_token=cfg["eos_token"], bos_token=None)))
)");
  Output want = run("/usr/bin/python3 '" + ref + "' '" + qwen3 + "' '" + data + "'");
  if (want.status != 0 && want.err.find("No module named") != std::string::npos) return;
  REQUIRE_MESSAGE(want.status == 0, want.err);
  Output ours = run(bin("tokfeedd") + " render --config '" + cfg + "'");
  REQUIRE_MESSAGE(ours.status == 0, ours.err);
  std::vector<std::string> a = tokfeed::testing::lines(ours.out), b = tokfeed::testing::lines(want.out);
  REQUIRE(a.size() == 8);
  require_equal(a, b, "render");
  CHECK(a[6].find("\\\\u0001a") != std::string::npos);  // the key, escaped as json.dumps escapes it
}

TEST_CASE("a Parquet cell over max_record_bytes is refused from the file's metadata, before it is expanded") {
  TempDir dir;
  std::string path = dir.file("cell.parquet");
  std::string py = write(dir, "make.py", R"(
import sys
import pyarrow as pa, pyarrow.parquet as pq
def conv(i, text=None):
    return [{"role": "user", "content": text or "hello %d" % i}, {"role": "assistant", "content": "world %d" % i}]
t = pa.table({"messages": [conv(i) for i in range(3)]})
w = pq.ParquetWriter(sys.argv[1], t.schema, compression="zstd")
w.write_table(t)
w.write_table(pa.table({"messages": [conv(3, "a" * (128 << 20))]}, schema=t.schema))
w.write_table(pa.table({"messages": [conv(i) for i in range(4, 8)]}, schema=t.schema))
w.close()
)");
  Output made = run("/usr/bin/python3 '" + py + "' '" + path + "'");
  if (made.status != 0 && made.err.find("No module named") != std::string::npos) return;
  REQUIRE_MESSAGE(made.status == 0, made.err);
  Checked c = check_config(dir, write_job(dir, sp_job(path)));
  MESSAGE("a " << slurp(path).size() << "-byte file with a 128 MiB cell: refused, peak RSS " << c.peak_mb << " MB");
  CHECK(c.status == 1);
  CHECK(c.err.find(path + ": row group 1 (rows 3 to 3): column 'messages.list.element.content' holds 134217807 bytes "
                          "uncompressed for 1 row(s), so a row is longer than max_record_bytes = 8388608") !=
        std::string::npos);
  CHECK(c.peak_mb < 128);  // expanded, the cell alone is 128 MiB, and its JSON as much again
}

TEST_CASE("a render that runs out of [workers] max_memory is a bad record named by file:line; the rest is served") {
  TempDir dir;
  std::string lines;
  for (int i = 0; i < 24; ++i)
    lines += "{\"messages\":[{\"role\":\"user\",\"content\":\"hello " + std::to_string(i) +
             "\"},{\"role\":\"assistant\",\"content\":\"world " + std::to_string(i) + "\"}]}\n";
  std::string data = write(dir, "data.jsonl", lines);
  // 160 MB for "hello 3": within the render's budget (256 MiB), past the
  // 64 MB of the child that renders the record to judge it.
  std::string tmpl =
      write(dir, "t.jinja",
            "{%- if messages[0].content == 'hello 3' %}{{ (['x' * 10000000] * 16) | join('') | length }}{% endif %}"
            "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}");
  std::string cfg = write_job(
      dir, "[dataset]\npath = \"" + data +
               "\"\ncheck_rows = \"start\"\n[tokenizer]\ntype = \"sentencepiece\"\npath = \"" +
               data_path("tokenizers/sp32k/tokenizer.model") + "\"\ntemplate = \"jinja\"\nchat_template = \"" + tmpl +
               "\"\n[batch]\nsize = 2\n[workers]\ncount = 2\nmax_memory = 0.064\n[cache]\nenabled = false\n");
  Daemon d(cfg, socket_of(dir));
  std::vector<std::string> got = dump(d.socket());
  CHECK(got.size() == 12);
  CHECK(d.running());
  std::string log = d.log();
  CHECK(log.find(data + ":4: bad record skipped: ") != std::string::npos);
  CHECK(log.find("out of memory ([workers] max_memory)") != std::string::npos);
  CHECK(d.stop(SIGTERM) == 0);
}

TEST_CASE("group mode: a folder without the setgid bit gets it, or the daemon refuses and says what to run") {
  if (::geteuid() != 0) return;  // needs a folder owned by another user
  TempDir dir;
  group* nog = getgrnam("nogroup");
  if (!nog || nog->gr_gid == ::getegid()) return;
  std::string cache = dir.file("shared");
  REQUIRE(::mkdir(cache.c_str(), 0770) == 0);
  REQUIRE(::chown(cache.c_str(), 65534, nog->gr_gid) == 0);  // nobody:nogroup, no setgid
  std::string cfg =
      write_job(dir, sp_job(data_path("sft/mixed-300.jsonl"), "[cache]\ndir = \"" + cache + "\"\nmode = \"group\"\n"));
  Checked refused = check_config(dir, cfg);
  CHECK(refused.status == 1);
  CHECK(refused.err.find("mode = \"group\" needs its files to get the folder's group") != std::string::npos);
  CHECK(refused.err.find("Run: chmod g+s '" + cache + "'") != std::string::npos);
  // Ours (root's), it gets the bit, and what the daemon writes gets its group.
  REQUIRE(::chown(cache.c_str(), 0, nog->gr_gid) == 0);
  Checked fixed = check_config(dir, cfg);
  CHECK_MESSAGE(fixed.status == 0, fixed.err);
  struct stat st;
  REQUIRE(::stat(cache.c_str(), &st) == 0);
  CHECK((st.st_mode & S_ISGID) != 0);
  REQUIRE(::stat((cache + "/index").c_str(), &st) == 0);
  CHECK(st.st_gid == nog->gr_gid);
}
