#include "config/cpu_policy.hpp"

#include <dirent.h>
#include <fmt/format.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

namespace tokfeed {

namespace {

std::string read_line(const std::string& path) {
  std::ifstream in(path);
  std::string s;
  std::getline(in, s);
  return s;
}

std::vector<int> allowed_now() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> out;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return out;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) out.push_back(c);
  return out;
}

// The NUMA node of the GPU with device minor `minor`, from the driver's
// /proc/driver/nvidia/gpus/<pci>/information and the PCI device's numa_node.
// -1 with `why` set when it cannot tell.
int gpu_node(uint32_t minor, std::string& why) {
  const std::string root = "/proc/driver/nvidia/gpus";
  DIR* d = opendir(root.c_str());
  if (!d) {
    why = "no " + root + " (no NVIDIA driver here)";
    return -1;
  }
  std::string bdf;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream in(root + "/" + e->d_name + "/information");
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("Device Minor:", 0) != 0) continue;
      if (std::stoul(line.substr(13)) == minor) bdf = e->d_name;
    }
  }
  closedir(d);
  if (bdf.empty()) {
    why = fmt::format("no GPU with device minor {} in {}", minor, root);
    return -1;
  }
  std::string node = read_line("/sys/bus/pci/devices/" + bdf + "/numa_node");
  int n = node.empty() ? -1 : std::atoi(node.c_str());
  if (n < 0) {
    // One node, or firmware that does not say: node 0 when it is the only one.
    if (access("/sys/devices/system/node/node0", F_OK) == 0 && access("/sys/devices/system/node/node1", F_OK) != 0)
      return 0;
    why = fmt::format("GPU {} ({}) has no NUMA node in sysfs", minor, bdf);
  }
  return n;
}

// One hardware thread per core of node `n` (the first of each sibling set).
std::vector<int> node_cores(int n) {
  std::vector<int> cpus, out;
  parse_cpu_list(read_line(fmt::format("/sys/devices/system/node/node{}/cpulist", n)), cpus);
  for (int c : cpus) {
    std::vector<int> sib;
    parse_cpu_list(read_line(fmt::format("/sys/devices/system/cpu/cpu{}/topology/thread_siblings_list", c)), sib);
    if (sib.empty() || sib.front() == c) out.push_back(c);
  }
  return out;
}

std::vector<int> intersect(const std::vector<int>& a, const std::vector<int>& b) {
  std::vector<int> out;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
  return out;
}

}  // namespace

std::string parse_cpu_list(std::string_view s, std::vector<int>& out) {
  out.clear();
  std::size_t i = 0;
  auto number = [&](int& v) {
    while (i < s.size() && s[i] == ' ') ++i;
    auto [p, ec] = std::from_chars(s.data() + i, s.data() + s.size(), v);
    if (ec != std::errc() || v < 0 || v >= CPU_SETSIZE) return false;
    i = static_cast<std::size_t>(p - s.data());
    while (i < s.size() && s[i] == ' ') ++i;
    return true;
  };
  while (i < s.size()) {
    int a, b;
    if (!number(a)) return fmt::format("expected a CPU number in [0, {}) at \"{}\"", CPU_SETSIZE, s.substr(i));
    b = a;
    if (i < s.size() && s[i] == '-') {
      ++i;
      if (!number(b) || b < a) return fmt::format("bad range ending at \"{}\"", s.substr(i));
    }
    for (int c = a; c <= b; ++c) out.push_back(c);
    if (i < s.size() && s[i] != ',') return fmt::format("expected ',' at \"{}\"", s.substr(i));
    if (i < s.size()) ++i;
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out.empty() ? "an empty list" : "";
}

std::string format_cpu_list(const std::vector<int>& cpus) {
  std::string out;
  for (std::size_t i = 0; i < cpus.size();) {
    std::size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    out += (out.empty() ? "" : ",") + (j > i ? fmt::format("{}-{}", cpus[i], cpus[j]) : std::to_string(cpus[i]));
    i = j + 1;
  }
  return out;
}

CpuPlan plan_cpus(const JobConfig& cfg) {
  CpuPlan plan;
  const std::size_t ranks = cfg.ranks.serve.size();
  plan.per_rank.resize(ranks);
  const std::string& want = cfg.workers.cpus;
  const std::vector<int> allowed = allowed_now();
  if (want.empty()) {
    plan.summary = fmt::format("unpinned (the daemon's cores: {})", format_cpu_list(allowed));
    return plan;
  }
  if (want != "auto") {
    std::vector<int> list;
    parse_cpu_list(want, list);  // checked by load_config
    std::vector<int> use = intersect(list, allowed);
    if (use.empty()) {
      plan.summary =
          fmt::format("unpinned: none of cpus {} is among the daemon's cores {}", want, format_cpu_list(allowed));
      return plan;
    }
    for (auto& r : plan.per_rank) r = use;
    plan.summary = fmt::format("pinned to {}", format_cpu_list(use));
    if (use.size() < list.size())
      plan.summary += fmt::format(" (of {}: the rest are outside the daemon's cores)", want);
    return plan;
  }
  std::map<int, std::vector<uint32_t>> by_node;
  for (std::size_t ri = 0; ri < ranks; ++ri) {
    const uint32_t rank = cfg.ranks.serve[ri];
    const uint32_t local = cfg.ranks.local_ranks ? rank % cfg.ranks.local_ranks : rank;
    std::string why;
    int node = gpu_node(local, why);
    std::vector<int> cores = node >= 0 ? intersect(node_cores(node), allowed) : std::vector<int>{};
    if (node >= 0 && cores.empty()) why = fmt::format("NUMA node {} has none of the daemon's cores", node);
    if (cores.empty()) {
      plan.summary += fmt::format("{}rank {}: unpinned ({})", plan.summary.empty() ? "auto: " : "; ", rank, why);
      continue;
    }
    plan.per_rank[ri] = cores;
    plan.summary += fmt::format("{}rank {}: GPU {} on NUMA node {}: cores {}", plan.summary.empty() ? "auto: " : "; ",
                                rank, local, node, format_cpu_list(cores));
  }
  return plan;
}

std::string apply_cpu_policy(const std::vector<int>& cpus, const WorkersConfig& w) {
  std::string err;
  if (!cpus.empty()) {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int c : cpus) CPU_SET(c, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0)
      err += fmt::format("sched_setaffinity({}): {}; ", format_cpu_list(cpus), std::strerror(errno));
  }
  if (w.batch_policy) {
    sched_param p{};
    if (sched_setscheduler(0, SCHED_BATCH, &p) != 0) err += fmt::format("SCHED_BATCH: {}; ", std::strerror(errno));
  }
  if (w.nice != 0 && setpriority(PRIO_PROCESS, 0, w.nice) != 0)
    err += fmt::format("nice {}: {}; ", w.nice, std::strerror(errno));
  if (!err.empty()) err.resize(err.size() - 2);
  return err;
}

ProcCpu read_proc_cpu(pid_t pid) {
  ProcCpu out;
  if (pid <= 0) return out;
  std::ifstream st("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(st, line);)
    if (line.rfind("Cpus_allowed_list:", 0) == 0) out.cpus = line.substr(line.find_first_not_of(" \t", 18));
  // /proc/PID/stat: fields after the parenthesized name; utime and stime are
  // fields 14 and 15, nice 19, policy 41.
  std::string stat = read_line("/proc/" + std::to_string(pid) + "/stat");
  std::size_t close = stat.rfind(')');
  if (close == std::string::npos) return out;
  std::istringstream in(stat.substr(close + 2));
  std::vector<std::string> f{"", "", ""};  // fields 1-2 (pid, comm) and a pad, so f[k] is field k
  for (std::string x; in >> x;) f.push_back(x);
  if (f.size() > 41) {
    const double hz = static_cast<double>(sysconf(_SC_CLK_TCK));
    out.cpu_s = (std::stod(f[14]) + std::stod(f[15])) / hz;
    out.nice = std::stoi(f[19]);
    int pol = std::stoi(f[41]);
    out.policy = pol == SCHED_BATCH ? "batch" : pol == SCHED_IDLE ? "idle" : pol == SCHED_OTHER ? "other" : "rt";
  }
  return out;
}

std::string limit_child_memory(uint64_t cap) {
  if (cap == 0) return {};
  unsigned long long pages = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%llu", &pages) != 1) pages = 0;
    std::fclose(f);
  }
  uint64_t now = pages * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  rlimit lim{static_cast<rlim_t>(now + cap), static_cast<rlim_t>(now + cap)};
  if (::setrlimit(RLIMIT_AS, &lim) != 0) return std::strerror(errno);
  return {};
}

}  // namespace tokfeed
