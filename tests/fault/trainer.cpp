// A trainer for the client-death test: a real process using the C++ client.
//
//   fault_trainer SOCKET COUNT
//
// Attaches as rank 0, reads COUNT batches and prints "index checksum" for
// each, then "held" once it is holding them all (it never releases them),
// and waits to be killed.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "tokfeed/client.hpp"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: fault_trainer SOCKET COUNT\n");
    return 2;
  }
  tokfeed::ClientOptions opt;
  opt.socket = argv[1];
  opt.verify_checksums = true;
  std::unique_ptr<tokfeed::Client> c;
  if (auto st = tokfeed::Client::connect(opt, c); !st.ok()) {
    std::fprintf(stderr, "attach: %s\n", st.message().c_str());
    return 1;
  }
  std::vector<tokfeed::Batch> held(std::strtoul(argv[2], nullptr, 10));
  for (auto& b : held) {
    if (auto st = c->next(b); !st.ok()) {
      std::fprintf(stderr, "next: %s\n", st.message().c_str());
      return 1;
    }
    std::printf("%llu %llu\n", static_cast<unsigned long long>(b.index()),
                static_cast<unsigned long long>(b.checksum()));
  }
  std::printf("held\n");
  std::fflush(stdout);
  for (;;) pause();
}
