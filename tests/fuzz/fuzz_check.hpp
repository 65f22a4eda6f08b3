// A fuzz target's invariant: a broken one aborts, which libFuzzer reports
// with the input that broke it.
#pragma once

#include <cstdio>
#include <cstdlib>

inline void fuzz_check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz: invariant broken: %s\n", what);
    std::abort();
  }
}
