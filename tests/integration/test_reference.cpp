// Batches from daemon → rings → client equal, byte for byte, what the
// independent Python reference (tests/reference/tokfeed_ref.py) computes
// from docs/data_model.md, for every format and template.
#include <doctest/doctest.h>
#include <signal.h>

#include <fstream>

#include "harness.hpp"

using namespace tokfeed::testing;

namespace {

std::string job(const std::string& dataset, const std::string& tmpl, const std::string& rest,
                const std::string& placeholders = "") {
  return "[dataset]\npath = \"" + dataset + "\"\n" + placeholders + "[tokenizer]\ntype = \"sentencepiece\"\npath = \"" +
         data_path("tokenizers/sp32k/tokenizer.model") + "\"\ntemplate = \"" + tmpl + "\"\n" + rest;
}

void check_equal(const std::string& body, std::vector<uint32_t> ranks = {0}) {
  TempDir dir;
  std::string cfg = write_job(dir, body);
  Daemon d(cfg, socket_of(dir));
  for (uint32_t r : ranks) {
    auto ours = dump(d.socket(), r);
    auto ref = reference(cfg, r);
    REQUIRE(ours.size() == ref.size());
    REQUIRE(!ours.empty());
    for (std::size_t i = 0; i < ours.size(); ++i) {
      INFO("rank " << r << " batch " << i);
      REQUIRE(ours[i] == ref[i]);
    }
  }
  CHECK(d.stop(SIGTERM) == 0);
}

}  // namespace

TEST_CASE("mistral, shuffled, longest padding, mixed formats") {
  check_equal(job(data_path("sft/mixed-300.jsonl"), "mistral", "[batch]\nsize = 4\n"));
}

TEST_CASE("llama2, file order, max_length padding, left truncation") {
  check_equal(job(data_path("sft/mixed-300.jsonl"), "llama2",
                  "[batch]\nsize = 3\nmax_length = 256\npadding = \"max_length\"\ntruncation = \"left\"\n"
                  "[schedule]\nshuffle = false\n"));
}

TEST_CASE("chatml, two ranks, drop truncation, last assistant, int32, drop_last") {
  check_equal(job(data_path("sft/mixed-300.jsonl"), "chatml",
                  "[batch]\nsize = 5\nmax_length = 512\ntruncation = \"drop\"\nloss = \"last_assistant\"\n"
                  "dtype = \"int32\"\n[schedule]\ndrop_last = true\nseed = 7\n[ranks]\nworld_size = 2\n"),
              {0, 1});
}

TEST_CASE("loss = all: every token of the rendering, built-in templates") {
  check_equal(job(data_path("sft/mixed-300.jsonl"), "llama2", "[batch]\nsize = 4\nloss = \"all\"\n"));
  check_equal(job(data_path("sft/mixed-300.jsonl"), "qwen2_5",
                  "[batch]\nsize = 3\nmax_length = 256\nloss = \"all\"\n[schedule]\nshuffle = false\n"));
}

TEST_CASE("qwen2_5 over a JSON array with placeholders, three ranks, two epochs, default system") {
  check_equal(job(data_path("sft/self_cognition.json"), "qwen2_5",
                  "default_system = \"You are a test.\"\n[schedule]\nepochs = 2\n[ranks]\nworld_size = 3\n",
                  "[dataset.placeholders]\nNAME = \"tokfeed-bot\"\nAUTHOR = \"the tokfeed team\"\n"),
              {0, 2});
}

TEST_CASE("qwen2_5 with tool lists, tool calls and tool results, when ../shared has the agent conversations") {
  std::string all = shared_path("templates/conversations.jsonl");
  if (all.empty()) {
    MESSAGE("../shared/templates is absent; skipped");
    return;
  }
  // The first 120 of the 300, for the suite's time (reference.builtin_templates
  // checks all of them against transformers): 33 with tool content.
  TempDir dir;
  std::string conv = dir.file("conversations.jsonl");
  {
    std::ifstream in(all);
    std::ofstream out(conv);
    std::string line;
    for (int i = 0; i < 120 && std::getline(in, line); ++i) out << line << "\n";
  }
  check_equal(job(conv, "qwen2_5", "[batch]\nsize = 3\nloss = \"last_assistant\"\nmax_length = 4096\n"));
}

TEST_CASE("each format, named explicitly") {
  for (const char* f : {"alpaca", "messages", "sharegpt", "query_response"}) {
    INFO(f);
    check_equal(job(data_path(std::string("sft/") + f + "-100.jsonl"), "llama2",
                    std::string("[batch]\nsize = 2\n[schedule]\nseed = 3\n")));
  }
}

TEST_CASE("the shared 10k mixed set, when present") {
  std::string big = shared_path("data/sft/mixed-10k.jsonl");
  if (big.empty()) {
    MESSAGE("../shared/data/sft is absent; skipped");
    return;
  }
  check_equal(job(big, "mistral", "[batch]\nsize = 8\n[workers]\ncount = 2\n"));
}

TEST_CASE("edge records: empty and padded systems, unicode spaces, emoji byte fallback, literal specials") {
  for (const char* tmpl : {"mistral", "llama2", "chatml"}) {
    INFO(tmpl);
    check_equal(job(data_path("sft/edge.jsonl"), tmpl, "[batch]\nsize = 2\n[schedule]\nshuffle = false\n",
                    "[dataset.placeholders]\nNAME = \"tokfeed-bot\"\nEMPTY = \"\"\n"));
  }
}

namespace {

bool have_hf_tokenizers() {
  if (run("/usr/bin/python3 -c 'import tokenizers'").status == 0) return true;
  MESSAGE("HF tokenizers is not installed for /usr/bin/python3 (scripts/deps.sh installs it); skipped");
  return false;
}

std::string hf_job(const std::string& tokenizer, const std::string& tmpl, const std::string& dataset,
                   const std::string& rest) {
  return "[dataset]\npath = \"" + dataset + "\"\n[tokenizer]\ntype = \"hf\"\npath = \"" + tokenizer +
         "\"\ntemplate = \"" + tmpl + "\"\n" + rest;
}

const char* kFileOrder = "[batch]\nsize = 3\n[schedule]\nshuffle = false\n";

}  // namespace

TEST_CASE("Qwen3 tokenizer.json with the qwen2_5 template equals HF tokenizers") {
  if (!have_hf_tokenizers()) return;
  std::string qwen = std::string(TOKFEED_TEST_BUILD_DATA) + "/qwen3/tokenizer.json";
  check_equal(
      hf_job(qwen, "qwen2_5", data_path("sft/mixed-300.jsonl"), "[batch]\nsize = 4\nloss = \"last_assistant\"\n"));
  check_equal(hf_job(qwen, "qwen2_5", data_path("sft/edge.jsonl"), kFileOrder));
  std::string big = shared_path("data/sft/mixed-10k.jsonl");
  if (!big.empty()) check_equal(hf_job(qwen, "qwen2_5", big, "[batch]\nsize = 8\n"));
}

TEST_CASE("qwen3 template with the Qwen3 tokenizer: think blocks, history, last assistant") {
  if (!have_hf_tokenizers()) return;
  std::string qwen = std::string(TOKFEED_TEST_BUILD_DATA) + "/qwen3/tokenizer.json";
  check_equal(hf_job(qwen, "qwen3", data_path("sft/mixed-300.jsonl"), "[batch]\nsize = 4\n"));
  check_equal(hf_job(qwen, "qwen3", data_path("sft/think.jsonl"), kFileOrder));
  check_equal(hf_job(qwen, "qwen3", data_path("sft/think.jsonl"), "[batch]\nsize = 2\nloss = \"last_assistant\"\n"));
  check_equal(hf_job(qwen, "qwen3", data_path("sft/edge.jsonl"), kFileOrder));
}

TEST_CASE("llama3 template with the Llama-3 tokenizer, when ../shared has it") {
  std::string llama = shared_path("tokenizers/llama3/tokenizer.json");
  if (llama.empty()) {
    MESSAGE("../shared/tokenizers/llama3 is absent; skipped");
    return;
  }
  if (!have_hf_tokenizers()) return;
  check_equal(hf_job(llama, "llama3", data_path("sft/mixed-300.jsonl"), "[batch]\nsize = 4\n"));
  check_equal(hf_job(llama, "llama3", data_path("sft/edge.jsonl"), kFileOrder));
  check_equal(hf_job(llama, "llama3", data_path("sft/think.jsonl"),
                     "[batch]\nsize = 2\nloss = \"last_assistant\"\n[schedule]\nseed = 5\n"));
}

TEST_CASE("plain-text records (text, prompt/completion) beside conversations: tokenizer(text)'s special tokens") {
  if (!have_hf_tokenizers()) return;
  const std::string plain = data_path("sft/plain.jsonl");
  // sp32k's tokenizer.json adds <s> before a sequence; its eos is </s>.
  std::string sp_hf = std::string(TOKFEED_TEST_BUILD_DATA) + "/sp32k-hf/tokenizer.json";
  check_equal(hf_job(sp_hf, "llama2", plain, "[batch]\nsize = 3\n"));
  check_equal(hf_job(sp_hf, "chatml", plain, "[batch]\nsize = 2\nloss = \"all\"\n[schedule]\nseed = 9\n"));
  // Long texts cut by truncation, right and left (bounded tokenizing keeps
  // the special tokens on the kept side).
  check_equal(hf_job(sp_hf, "chatml", plain, "[batch]\nsize = 4\nmax_length = 64\ntruncation = \"right\"\n"));
  check_equal(hf_job(sp_hf, "chatml", plain, "[batch]\nsize = 4\nmax_length = 64\ntruncation = \"left\"\n"));
  // Qwen3 adds nothing; its eos is <|im_end|>.
  std::string qwen = std::string(TOKFEED_TEST_BUILD_DATA) + "/qwen3/tokenizer.json";
  check_equal(hf_job(qwen, "qwen2_5", plain, "[batch]\nsize = 3\nloss = \"last_assistant\"\n"));
  check_equal(hf_job(qwen, "qwen2_5", plain, "[batch]\nsize = 2\nmax_length = 48\ntruncation = \"drop\"\n"));
  // A SentencePiece .model adds nothing.
  check_equal(job(plain, "llama2", "[batch]\nsize = 3\n"));
}

TEST_CASE("bad JSONL records: checked when read (the default) or at start, each equals the reference") {
  // 80 records of mixed-300.jsonl with bad ones between them: malformed
  // JSON, not an object, no assistant turn, an empty user turn, roles that
  // do not alternate (mistral), and a blank line, which is no record.
  TempDir data_dir;
  const std::string data = with_bad_lines(
      data_path("sft/mixed-300.jsonl"), data_dir.file("bad.jsonl"),
      {
          "{\"messages\": [",
          "[1, 2]",
          "{\"messages\":[{\"role\":\"user\",\"content\":\"only a question\"}]}",
          "{\"messages\":[{\"role\":\"user\",\"content\":\"\"},{\"role\":\"assistant\",\"content\":\"x\"}]}",
          "{\"messages\":[{\"role\":\"assistant\",\"content\":\"a\"},{\"role\":\"assistant\",\"content\":\"b\"}]}",
          "",
      },
      13, 2, 80);
  const std::string rest = "[batch]\nsize = 3\nmax_length = 512\n[schedule]\nepochs = 2\nseed = 11\n";
  std::vector<std::string> streams;
  for (const char* rows : {"", "check_rows = \"start\"\n", "check_rows = \"when_read\"\n"}) {
    CAPTURE(rows);
    TempDir dir;
    std::string cfg = write_job(dir, job(data, "mistral", rest, rows));
    Daemon d(cfg, socket_of(dir));
    auto ours = dump(d.socket());
    auto ref = reference(cfg, 0);
    REQUIRE(ours.size() == ref.size());
    for (std::size_t i = 0; i < ours.size(); ++i) {
      INFO("batch " << i);
      REQUIRE(ours[i] == ref[i]);
    }
    CHECK(d.stop(SIGTERM) == 0);
    streams.push_back(ours.front());
  }
  // Five bad records kept in the plan shift the shuffled order: the
  // default is "when_read", not "start".
  CHECK(streams[0] != streams[1]);
  CHECK(streams[0] == streams[2]);
}

TEST_CASE("packed, bad JSONL records checked when read: the reference leaves them out where the plan puts them") {
  TempDir data_dir;
  const std::string data = data_dir.file("bad.jsonl");
  {
    std::ifstream in(data_path("sft/mixed-300.jsonl"));
    std::ofstream out(data);
    std::string line;
    for (int i = 0; i < 60 && std::getline(in, line); ++i) {
      out << line << "\n";
      if (i % 9 == 4) out << "{\"messages\":[{\"role\":\"user\",\"content\":\"no answer " << i << "\"}]}\n";
    }
  }
  check_equal(job(data, "chatml",
                  "[batch]\nmax_length = 512\npadding = \"padding_free\"\ntokens = 1024\npack_window = 8\n"
                  "[ranks]\nworld_size = 2\n"),
              {0, 1});
}
