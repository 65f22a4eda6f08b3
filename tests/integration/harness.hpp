// Test harness: real tokfeedd processes, real sockets, real shared memory.
// Each test gets its own directory, socket and shm prefix, so tests run in
// parallel and leave nothing behind.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace tokfeed::testing {

std::string bin(const std::string& name);         // path of a built binary
std::string data_path(const std::string& rel);    // path under tests/data
std::string shared_path(const std::string& rel);  // path under ../shared ("" when absent)
std::string slurp(const std::string& path);       // a whole file ("" when unreadable)

class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

struct Output {
  int status;  // exit code, or 128 + signal
  std::string out;
  std::string err;
};

// Runs a shell command, capturing stdout and stderr.
Output run(const std::string& cmd);

// A job config: `body` holds the [dataset]/[tokenizer]/[batch]/... tables;
// [server] is added with this test's socket and prefix, and [cache] with a
// directory of its own unless `body` has one.
std::string write_job(const TempDir& dir, const std::string& body, const std::string& name = "job");
std::string socket_of(const TempDir& dir, const std::string& name = "job");

class Daemon {
 public:
  // Starts tokfeedd --config and waits for its socket. `env` is prepended
  // to the environment (e.g. "TOKFEED_FAULT_CRASH_LINE=7").
  explicit Daemon(const std::string& config, const std::string& socket, const std::string& env = "");
  ~Daemon();
  pid_t pid() const { return pid_; }
  const std::string& socket() const { return socket_; }
  bool running();
  // Waits for the daemon to exit; returns its exit status (or 128 + signal).
  int wait();
  // Sends `sig` and waits for the exit.
  int stop(int sig);
  std::string log() const;
  std::vector<pid_t> worker_pids() const;  // from `tokfeedctl status --json`
  // Waits until no token cache build runs (serving starts while it builds).
  void wait_cache_built() const;

 private:
  std::string socket_;
  std::string log_path_;
  pid_t pid_ = -1;
  int status_ = -1;
};

// `tokfeedctl dump` lines for a rank.
std::vector<std::string> dump(const std::string& socket, uint32_t rank = 0, const std::string& extra = "");
// The independent reference's lines for the same config.
std::vector<std::string> reference(const std::string& config, uint32_t rank = 0, const std::string& extra = "");
// Fails the test at the first batch where `ours` and `ref` differ (and on a
// different count, or an empty reference).
void require_equal(const std::vector<std::string>& ours, const std::vector<std::string>& ref, const std::string& what);

std::vector<std::string> lines(const std::string& s);
// Writes the first `limit` lines of `from` to `to`, and after each line i with
// i % every == at the line bad[(i / every) % bad.size()] (bad records among
// good ones). Returns `to`.
std::string with_bad_lines(const std::string& from, const std::string& to, const std::vector<std::string>& bad,
                           int every, int at, int limit = 1 << 30);
int shm_entries();  // entries in /dev/shm that tokfeed could have named
int open_fds(pid_t pid);
int files_ending(const std::string& dir, const std::string& suffix);  // files in `dir` named *suffix
uint64_t json_int(const std::string& json, const std::string& key);   // first "key": N in a JSON text (0 if none)

}  // namespace tokfeed::testing
