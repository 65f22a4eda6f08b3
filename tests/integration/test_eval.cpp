// The evaluation stream ([eval], docs/data_model.md section 7): daemon ->
// rings -> client equals the independent reference byte for byte; passes
// repeat identically; reading it never changes the training stream; every
// [eval] key is checked.
#include <doctest/doctest.h>
#include <signal.h>

#include <cstring>
#include <memory>

#include "harness.hpp"
#include "tokfeed/client.hpp"

using namespace tokfeed::testing;

namespace {

std::string job(const std::string& rest) {
  return "[dataset]\npath = \"" + data_path("sft/mixed-300.jsonl") +
         "\"\n[tokenizer]\ntype = \"sentencepiece\"\npath = \"" + data_path("tokenizers/sp32k/tokenizer.model") +
         "\"\ntemplate = \"mistral\"\n" + rest;
}

// A batch's tensors, bytes and all: what must not change.
std::string content(const tokfeed::Batch& b) {
  std::string out;
  for (std::size_t i = 0; i < b.tensor_count(); ++i) {
    const tokfeed::TensorView& t = b.tensor(i);
    out += std::string(t.name) + ":";
    out.append(static_cast<const char*>(t.data), t.nbytes);
  }
  return out;
}

std::unique_ptr<tokfeed::Client> connect(const std::string& socket, tokfeed::Split split, uint32_t rank = 0) {
  tokfeed::ClientOptions o;
  o.socket = socket;
  o.rank = rank;
  o.split = split;
  std::unique_ptr<tokfeed::Client> c;
  tokfeed::Status st = tokfeed::Client::connect(o, c);
  INFO(st.message());
  REQUIRE(st.ok());
  return c;
}

}  // namespace

TEST_CASE("split_ratio 0.05 and [[eval.datasets]] over two ranks equal the reference, padded and packed") {
  for (const char* batch :
       {"[batch]\nsize = 4\nmax_length = 256\n", "[batch]\nsize = 2\nmax_length = 256\npadding = \"packed\"\n"}) {
    INFO(batch);
    TempDir dir;
    std::string cfg =
        write_job(dir, job(std::string(batch) +
                           "[schedule]\nseed = 5\n[ranks]\nworld_size = 2\n[eval]\nsplit_ratio = 0.05\nbatch_size = 3\n"
                           "[[eval.datasets]]\npath = \"" +
                           data_path("sft/alpaca-100.jsonl") + "\"\nsamples = 30\n"));
    Daemon d(cfg, socket_of(dir));
    for (uint32_t r : {0u, 1u}) {
      INFO("rank " << r);
      // The training stream never holds a held-out record: it equals the
      // reference's, which leaves them out by section 7.
      require_equal(dump(d.socket(), r), reference(cfg, r), "train");
      std::vector<std::string> one = dump(d.socket(), r, "--split eval");
      require_equal(one, reference(cfg, r, "--split eval --passes 1"), "eval pass");
      // Later passes: the same batches again, with the pass as their epoch.
      std::vector<std::string> three =
          dump(d.socket(), r, "--split eval --epoch 1 --count " + std::to_string(3 * one.size()));
      std::vector<std::string> ref3 = reference(cfg, r, "--split eval --passes 4");
      require_equal(three, std::vector<std::string>(ref3.begin() + one.size(), ref3.end()), "eval passes 1-3");
    }
    CHECK(d.stop(SIGTERM) == 0);
  }
}

TEST_CASE("evaluations between training batches leave the training stream's bytes unchanged") {
  TempDir dir;
  std::string cfg = write_job(dir, job("[batch]\nsize = 4\n[schedule]\nepochs = 2\n[workers]\ncount = 2\nslots = 3\n"
                                       "[eval]\nsplit_ratio = 0.1\nbatch_size = 5\nworkers = 2\n"));
  Daemon d(cfg, socket_of(dir));
  std::vector<std::string> straight;
  {
    auto train = connect(d.socket(), tokfeed::Split::kTrain);
    tokfeed::Batch b;
    while (train->next(b).ok()) straight.push_back(content(b));
  }
  REQUIRE(straight.size() > 100);
  std::vector<std::string> mixed, first_pass;
  {
    auto train = connect(d.socket(), tokfeed::Split::kTrain);
    auto eval = connect(d.socket(), tokfeed::Split::kEval);
    const uint64_t B = eval->batches_per_epoch();
    REQUIRE(B > 1);
    tokfeed::Batch b, e;
    for (uint64_t i = 0; train->next(b).ok(); ++i) {
      mixed.push_back(content(b));
      if (i % 17 != 3) continue;
      tokfeed::Position before = train->position();
      std::vector<std::string> pass;
      for (uint64_t k = 0; k < B; ++k) {
        REQUIRE(eval->next(e).ok());
        CHECK(e.step() == k);
        pass.push_back(content(e));
      }
      if (first_pass.empty()) first_pass = pass;
      CHECK(pass == first_pass);  // every pass byte-identical
      CHECK(train->position().epoch == before.epoch);
      CHECK(train->position().step == before.step);
    }
  }
  REQUIRE(mixed.size() == straight.size());
  for (std::size_t i = 0; i < mixed.size(); ++i) {
    INFO("training batch " << i);
    REQUIRE(mixed[i] == straight[i]);
  }
  CHECK(d.stop(SIGTERM) == 0);
}

TEST_CASE("[eval] keys are checked, and errors name them") {
  TempDir dir;
  struct Case {
    std::string body;
    std::string want;
  };
  const Case cases[] = {
      {"[eval]\nsplit_ratio = 1.5\n", "[eval] split_ratio: 1.5 is out of range"},
      {"[eval]\nsplit_ratio = \"5%\"\n", "[eval] split_ratio: expected a number in [0, 1)"},
      {"[eval]\nbatch_size = 0\n", "[eval] batch_size: 0 is out of range"},
      {"[eval]\nworkers = 0\n", "[eval] workers: 0 is out of range"},
      {"[eval]\nsplit_ratio = 0.1\nbatchsize = 4\n", "[eval] unknown key 'batchsize'"},
      {"[eval]\ndatasets = 3\n", "[eval] datasets: expected a non-empty array of tables"},
      {"[[eval.datasets]]\npath = \"" + data_path("sft/alpaca-100.jsonl") + "\"\nweight = 0.5\n",
       "[eval.datasets.0] weight: an evaluation set is not mixed"},
      {"[[eval.datasets]]\npath = \"nope.jsonl\"\n", "[eval.datasets.0] path: file not found"},
      {"[[eval.datasets]]\npath = \"" + data_path("sft/alpaca-100.jsonl") + "\"\nformt = \"alpaca\"\n",
       "[eval.datasets.0] unknown key 'formt'"},
  };
  for (const Case& c : cases) {
    INFO(c.body);
    std::string cfg = write_job(dir, job(c.body));
    Output o = run(bin("tokfeedd") + " --check-config '" + cfg + "'");
    CHECK(o.status != 0);
    CHECK(o.err.find(c.want) != std::string::npos);
  }
}

TEST_CASE("--check-config reports both splits; a job without [eval] refuses an eval attach") {
  TempDir dir;
  std::string cfg = write_job(dir, job("[ranks]\nworld_size = 2\n[eval]\nsplit_ratio = 0.05\nbatch_size = 2\n"));
  Output o = run(bin("tokfeedd") + " --check-config '" + cfg + "'");
  INFO(o.err);
  REQUIRE(o.status == 0);
  CHECK(o.out.find("# train split: ") != std::string::npos);
  CHECK(o.out.find("# eval split: ") != std::string::npos);
  CHECK(o.out.find("held out for evaluation") != std::string::npos);
  CHECK(o.out.find("batches per evaluation pass") != std::string::npos);
  CHECK(o.out.find("[eval]\nsplit_ratio = 0.05\nbatch_size = 2\n") != std::string::npos);

  std::string plain = write_job(dir, job("[workers]\ncount = 1\n"), "plain");
  Output p = run(bin("tokfeedd") + " --check-config '" + plain + "'");
  CHECK(p.out.find("# eval split: none") != std::string::npos);
  Daemon d(plain, socket_of(dir, "plain"));
  Output e = run(bin("tokfeedctl") + " -s '" + d.socket() + "' dump --split eval");
  CHECK(e.status != 0);
  CHECK(e.err.find("no evaluation data") != std::string::npos);
  CHECK(d.stop(SIGTERM) == 0);
}

TEST_CASE("uneven ranks: a pass ends one batch early where the last step has no row for a rank") {
  // 15 held out + 1 = 16 samples over 3 ranks of 5 rows: one full step, then
  // one row for rank 2 alone; ranks 0 and 1 have 1 batch a pass, rank 2 two.
  TempDir dir;
  std::string cfg =
      write_job(dir, job("[ranks]\nworld_size = 3\n[eval]\nsplit_ratio = 0.05\nbatch_size = 5\n[[eval.datasets]]\n"
                         "path = \"" +
                         data_path("sft/alpaca-100.jsonl") + "\"\nsamples = 1\n"));
  Output o = run(bin("tokfeedd") + " --check-config '" + cfg + "'");
  CHECK(o.out.find("# warning: evaluation passes end unevenly (1 or 2 batches per rank)") != std::string::npos);
  Daemon d(cfg, socket_of(dir));
  const std::size_t want[] = {1, 1, 2};
  for (uint32_t r : {0u, 1u, 2u}) {
    INFO("rank " << r);
    std::vector<std::string> ours = dump(d.socket(), r, "--split eval --count " + std::to_string(2 * want[r]));
    CHECK(ours.size() == 2 * want[r]);
    require_equal(ours, reference(cfg, r, "--split eval --passes 2"), "eval");
    Output drain = run(bin("tokfeedctl") + " -s '" + d.socket() + "' drain --split eval --rank " + std::to_string(r));
    CHECK(drain.out.find("\"batches\":" + std::to_string(want[r]) + ",") != std::string::npos);
  }
  CHECK(d.stop(SIGTERM) == 0);
}

TEST_CASE("bad JSONL records checked when read, in the held-out split and in [[eval.datasets]], equal the reference") {
  // Bad lines among the records that split_ratio holds out and among those of
  // an evaluation dataset: each stays in its split's plan and is left out of
  // its batch when read (docs/data_model.md 1.1 and 7), in every pass.
  TempDir data_dir;
  const std::vector<std::string> bad = {
      "{\"messages\": [",
      "{\"messages\":[{\"role\":\"user\",\"content\":\"only a question\"}]}",
      "{\"messages\":[{\"role\":\"user\",\"content\":\"\"},{\"role\":\"assistant\",\"content\":\"x\"}]}",
      "{\"messages\":[{\"role\":\"assistant\",\"content\":\"a\"},{\"role\":\"assistant\",\"content\":\"b\"}]}",
  };
  const std::string train = with_bad_lines(data_path("sft/mixed-300.jsonl"), data_dir.file("train.jsonl"), bad, 7, 3);
  const std::string held = with_bad_lines(data_path("sft/alpaca-100.jsonl"), data_dir.file("eval.jsonl"), bad, 5, 3);
  for (const char* batch :
       {"[batch]\nsize = 4\nmax_length = 256\n", "[batch]\nsize = 2\nmax_length = 256\npadding = \"packed\"\n"}) {
    INFO(batch);
    TempDir dir;
    std::string cfg =
        write_job(dir, "[dataset]\npath = \"" + train + "\"\n[tokenizer]\ntype = \"sentencepiece\"\npath = \"" +
                           data_path("tokenizers/sp32k/tokenizer.model") + "\"\ntemplate = \"mistral\"\n" + batch +
                           "[schedule]\nseed = 9\n[ranks]\nworld_size = 2\n[eval]\nsplit_ratio = 0.2\nbatch_size = 3\n"
                           "[[eval.datasets]]\npath = \"" +
                           held + "\"\nsamples = 40\n");
    Daemon d(cfg, socket_of(dir));
    for (uint32_t r : {0u, 1u}) {
      INFO("rank " << r);
      require_equal(dump(d.socket(), r), reference(cfg, r), "train");
      std::vector<std::string> ref = reference(cfg, r, "--split eval --passes 2");
      REQUIRE(!ref.empty());
      std::vector<std::string> both = dump(d.socket(), r, "--split eval --count " + std::to_string(ref.size()));
      require_equal(both, ref, "eval passes 0-1");
    }
    CHECK(d.stop(SIGTERM) == 0);
  }
}
