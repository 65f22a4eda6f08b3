// CPU isolation from the trainer ([workers] cpus, nice, policy): where the
// workers and cache builders may run and at what priority. Resolved once in
// the supervisor, applied in each forked child before it does any work.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>
#include <vector>

#include "config/config.hpp"

namespace tokfeed {

// "16-23,30" -> {16..23, 30}: ascending, each once. Returns "" or what is
// wrong with the list.
std::string parse_cpu_list(std::string_view s, std::vector<int>& out);
std::string format_cpu_list(const std::vector<int>& cpus);

struct CpuPlan {
  // The cores of each served rank's workers, by rank index (empty: unpinned).
  std::vector<std::vector<int>> per_rank;
  std::string summary;  // what was chosen and why, for the log and status
};

// [workers] cpus: "" leaves the children unpinned; a list pins every child
// to it; "auto" pins each rank's children to one hardware thread per core of
// the NUMA node of its GPU (local rank N is /dev/nvidiaN, found through
// /proc/driver/nvidia and sysfs), and, where it cannot tell, leaves them
// unpinned and says why.
CpuPlan plan_cpus(const JobConfig& cfg);

// In a forked child: pins it to `cpus` (none: left as is), then sets its nice
// value and scheduling policy. Returns "" or what was refused.
std::string apply_cpu_policy(const std::vector<int>& cpus, const WorkersConfig& w);

// Caps what a forked child may map beyond what it inherited (the dataset's
// and the rings' mappings, the supervisor's heap): RLIMIT_AS = now + `cap`
// ([workers] max_memory; 0: no cap). Returns what went wrong, or "".
std::string limit_child_memory(uint64_t cap);

// What status shows of a process: its allowed cores (Cpus_allowed_list),
// CPU seconds used (user + system), nice value and policy.
struct ProcCpu {
  std::string cpus;
  double cpu_s = 0;
  int nice = 0;
  std::string policy;
};
ProcCpu read_proc_cpu(pid_t pid);

}  // namespace tokfeed
