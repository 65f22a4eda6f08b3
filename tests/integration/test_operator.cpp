// The operator's view: status and Prometheus metrics agree with what a client
// consumed.
#include <doctest/doctest.h>
#include <signal.h>

#include "harness.hpp"

using namespace tokfeed::testing;

TEST_CASE("metrics: counters, gauges and the client wait histogram match a drained epoch") {
  TempDir dir;
  std::string body = "[dataset]\npath = \"" + data_path("sft/mixed-300.jsonl") +
                     "\"\n[tokenizer]\ntype = \"sentencepiece\"\npath = \"" +
                     data_path("tokenizers/sp32k/tokenizer.model") + "\"\ntemplate = \"mistral\"\n";
  Daemon d(write_job(dir, body), socket_of(dir));
  Output drain = run(bin("tokfeedctl") + " -s '" + d.socket() + "' drain");
  REQUIRE(drain.status == 0);
  CHECK(drain.out.find("\"batches\":75,\"samples\":300") != std::string::npos);
  Output m = run(bin("tokfeedctl") + " -s '" + d.socket() + "' metrics");
  REQUIRE(m.status == 0);
  for (const char* line : {"tokfeed_batches_total 75\n", "tokfeed_samples_total 300\n", "tokfeed_workers_alive 2\n",
                           "tokfeed_worker_restarts_total 0\n", "tokfeed_bad_records_total 0\n",
                           "tokfeed_client_wait_seconds_count{rank=\"0\"} 75\n",
                           "tokfeed_client_wait_seconds_bucket{rank=\"0\",le=\"+Inf\"} 75\n",
                           "# TYPE tokfeed_client_wait_seconds histogram\n"}) {
    CHECK_MESSAGE(m.out.find(line) != std::string::npos, line);
  }
  // tokens = real + padding, as status reports them.
  Output st = run(bin("tokfeedctl") + " -s '" + d.socket() + "' status --json");
  CHECK(st.out.find("\"real_tokens\":147289") != std::string::npos);
  CHECK(m.out.find("tokfeed_tokens_total 321128\n") != std::string::npos);
  CHECK(m.out.find("tokfeed_padding_tokens_total 173839\n") != std::string::npos);
  CHECK(d.stop(SIGTERM) == 0);
}
