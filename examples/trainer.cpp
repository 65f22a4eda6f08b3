// An example trainer loop in C++: attaches as a rank, takes batches for the
// configured epochs while simulating a training step, and reports what the
// data plane delivered.
//
//   example_trainer --socket /tmp/tokfeed-demo.sock --rank 0 --step-ms 20
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include "tokfeed/client.hpp"

int main(int argc, char** argv) {
  CLI::App app{"example trainer: consumes tokfeed batches with a simulated training step"};
  tokfeed::ClientOptions opt;
  double step_ms = 20;
  uint64_t epoch = 0, step = 0;
  app.add_option("--socket", opt.socket, "daemon socket")->required();
  app.add_option("--rank", opt.rank, "rank")->capture_default_str();
  app.add_option("--step-ms", step_ms, "simulated training step (ms)")->capture_default_str();
  app.add_option("--epoch", epoch, "resume at epoch")->capture_default_str();
  app.add_option("--step", step, "resume at step")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  opt.start = {epoch, step};

  using clock = std::chrono::steady_clock;
  std::unique_ptr<tokfeed::Client> client;
  if (auto st = tokfeed::Client::connect(opt, client); !st.ok()) {
    std::fprintf(stderr, "example_trainer: cannot attach: %s\n", st.message().c_str());
    return 1;
  }
  const uint64_t per_epoch = client->batches_per_epoch();
  const uint64_t total = per_epoch * client->epochs();
  // One line, rewritten in place: where in the run we are, the rates so far,
  // and when the epoch and the run will end at those rates.
  auto progress = [&](uint64_t batches, uint64_t samples, uint64_t real, clock::duration elapsed) {
    double s = std::chrono::duration<double>(elapsed).count();
    double per_batch = batches ? s / double(batches) : 0;
    uint64_t done = opt.start.epoch * per_epoch + opt.start.step + batches;  // batches since the run began
    uint64_t epoch = per_epoch ? std::min(done, total ? total - 1 : 0) / per_epoch : 0;
    uint64_t left_epoch = per_epoch ? (epoch + 1) * per_epoch - std::min(done, (epoch + 1) * per_epoch) : 0;
    std::fprintf(stderr,
                 "\r  epoch %llu/%llu  batch %llu/%llu  %.1f samples/s  %.0f tokens/s  ETA epoch %.0f s, run %.0f s   ",
                 static_cast<unsigned long long>(epoch + 1), static_cast<unsigned long long>(client->epochs()),
                 static_cast<unsigned long long>(done - epoch * per_epoch), static_cast<unsigned long long>(per_epoch),
                 s > 0 ? samples / s : 0.0, s > 0 ? real / s : 0.0, per_batch * double(left_epoch),
                 per_batch * double(total - std::min(done, total)));
  };
  auto t0 = clock::now();
  double waited = 0;
  uint64_t batches = 0, samples = 0, tokens = 0, real = 0;
  tokfeed::Batch batch;
  tokfeed::Status st;
  for (;;) {
    auto w0 = clock::now();
    st = client->next(batch);
    waited += std::chrono::duration<double>(clock::now() - w0).count();
    if (!st.ok()) break;
    ++batches;
    samples += batch.rows();
    tokens += uint64_t{batch.rows()} * batch.seq_len();
    real += batch.real_tokens();
    batch.release();  // a real trainer releases after the host-to-device copy
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(step_ms));
    if (batches % 25 == 0 || batches == total) progress(batches, samples, real, clock::now() - t0);
  }
  std::fprintf(stderr, "\n");
  if (st.code() != tokfeed::Code::kEndOfStream) {
    std::fprintf(stderr, "example_trainer: %s: %s\n", std::string(st.code_name()).c_str(), st.message().c_str());
    return 1;
  }
  double secs = std::chrono::duration<double>(clock::now() - t0).count();
  std::printf("batches        %llu\n", static_cast<unsigned long long>(batches));
  std::printf("samples/s      %.1f\n", samples / secs);
  std::printf("real tokens/s  %.0f\n", real / secs);
  std::printf("pad fraction   %.1f%%\n", tokens ? 100.0 * (1.0 - double(real) / double(tokens)) : 0.0);
  std::printf("stall          %.2f%% of wall time waiting for data\n", 100.0 * waited / secs);
  return 0;
}
