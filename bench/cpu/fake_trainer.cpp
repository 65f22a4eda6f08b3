// A CPU-bound fake trainer: pinned by its caller to its cores, it takes a
// batch from tokfeed, then does a fixed amount of arithmetic (the "step"),
// and prints the step times (compute only, in ms) as one JSON line.
//
//   bench_cpu_trainer SOCKET STEPS WORK
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tokfeed/client.hpp"

namespace {

// `work` rounds of a dependent multiply-add chain: a core's worth of work
// that the compiler cannot drop.
uint64_t busy(uint64_t work) {
  volatile uint64_t seed = 88172645463325252ull;
  uint64_t x = seed;
  for (uint64_t i = 0; i < work; ++i) x = x * 6364136223846793005ull + 1442695040888963407ull;
  return x;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s SOCKET STEPS WORK\n", argv[0]);
    return 2;
  }
  tokfeed::ClientOptions opt;
  opt.socket = argv[1];
  const int steps = std::atoi(argv[2]);
  const uint64_t work = std::strtoull(argv[3], nullptr, 10);
  std::unique_ptr<tokfeed::Client> client;
  if (opt.socket != "-") {
    if (auto st = tokfeed::Client::connect(opt, client); !st.ok()) {
      std::fprintf(stderr, "%s\n", st.message().c_str());
      return 1;
    }
  }
  std::vector<double> ms;
  uint64_t sink = 0;
  tokfeed::Batch batch;
  for (int s = 0; s < steps + 10; ++s) {  // the first 10: warm-up
    if (client) {
      if (auto st = client->next(batch); !st.ok()) {
        std::fprintf(stderr, "%s\n", st.message().c_str());
        return 1;
      }
    }
    auto t0 = std::chrono::steady_clock::now();
    sink += busy(work);
    double t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (s >= 10) ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  std::printf(
      "{\"p50\": %.3f, \"p90\": %.3f, \"mean\": %.3f, \"sink\": %llu}\n", ms[ms.size() / 2], ms[ms.size() * 9 / 10],
      [&] {
        double a = 0;
        for (double x : ms) a += x;
        return a / ms.size();
      }(),
      static_cast<unsigned long long>(sink % 10));
  return 0;
}
