// Forking a worker or cache builder: the child never returns into the
// supervisor's stack, runs none of its destructors or atexit handlers, and
// maps no more than [workers] max_memory beyond what it inherits.
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "supervisor/supervisor.hpp"

namespace tokfeed {

namespace asio = boost::asio;

namespace {

// A line on stderr from a forked child, written whole with one write(2):
// the supervisor's logger and its locks are not the child's to use.
void child_log(const std::string& what) {
  std::string line = fmt::format("tokfeedd child {}: error: {}\n", getpid(), what);
  ssize_t n = ::write(STDERR_FILENO, line.data(), line.size());
  (void)n;
}

}  // namespace

pid_t Supervisor::fork_child(const std::function<void()>& child, int rank_index) {
  io_.notify_fork(asio::io_context::fork_prepare);
  pid_t pid = fork();
  if (pid == 0) {
    // The child never returns into the supervisor's stack: whatever happens,
    // it ends in _exit, so none of the supervisor's destructors or atexit
    // handlers (the socket, the segments, the cache's files) run in it.
    int code = 1;
    try {
      const std::vector<int>& cpus = rank_index >= 0 ? cpu_plan_.per_rank[rank_index] : builder_cpus_;
      if (std::string err = apply_cpu_policy(cpus, cfg_.workers); !err.empty())
        child_log(fmt::format("[workers] cpus/nice/policy not applied: {}", err));
      if (std::string err = limit_child_memory(child_memory_cap(cfg_)); !err.empty())
        child_log(fmt::format("[workers] max_memory not applied: {}", err));
      child();  // never returns
      code = 0;
    } catch (const std::bad_alloc&) {
      child_log(fmt::format("out of memory ([workers] max_memory = {} GB)", child_memory_cap(cfg_) / 1e9));
      code = kChildOutOfMemory;
    } catch (const std::exception& e) {
      child_log(e.what());
    } catch (...) {
      child_log("unknown exception");
    }
    _exit(code);
  }
  io_.notify_fork(asio::io_context::fork_parent);
  return pid;
}

}  // namespace tokfeed
