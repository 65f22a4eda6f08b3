// The process's CPU time in seconds, which the tokenizer benchmarks report
// throughput against (other jobs on a shared machine do not inflate it as
// they do wall time).
#pragma once

#include <ctime>

inline double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}
