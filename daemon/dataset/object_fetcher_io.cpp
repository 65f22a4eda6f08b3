// The fetcher process's own state: its temporaries, its report, and the
// settings read from its environment (object_fetcher_io.hpp).
#include "dataset/object_fetcher_io.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>

namespace tokfeed::fetcher {

namespace {

// Objects are fetched on several threads; these guard what they share. The
// temporaries' lock is never held across a write to the report, which can
// block while the supervisor is not reading: a stop always gets it.
std::mutex g_tmps_mu;
std::set<std::string> g_tmps;  // the temporaries being written, removed on any exit but a kill -9
std::timed_mutex g_report_mu;  // one report line at a time

}  // namespace

// Removes every temporary and exits. The lock is held to the end, so no
// thread creates a temporary meanwhile.
[[noreturn]] void remove_tmps_and_exit(int code) {
  g_tmps_mu.lock();
  for (const std::string& t : g_tmps) ::unlink(t.c_str());
  std::_Exit(code);
}

// Writes `line` whole, its newlines flattened; the caller holds g_report_mu.
static void write_line(std::string line) {
  std::replace(line.begin(), line.end(), '\n', ' ');
  line += '\n';
  for (std::size_t off = 0; off < line.size();) {
    ssize_t w = ::write(1, line.data() + off, line.size() - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) remove_tmps_and_exit(3);  // the supervisor is gone (SIGPIPE is ignored)
    off += static_cast<std::size_t>(w);
  }
}

// One line of the report.
void report(const std::string& line) {
  std::lock_guard lock(g_report_mu);
  write_line(line);
}

// Creates the temporary `tmp`, known to every exit path before it exists.
int create_tmp(const std::string& tmp) {
  std::lock_guard lock(g_tmps_mu);
  g_tmps.insert(tmp);
  return ::open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
}

// Makes `path` known to every exit path before it is created.
void track(const std::string& path) {
  std::lock_guard lock(g_tmps_mu);
  g_tmps.insert(path);
}

// `tmp` was renamed into place.
void kept(const std::string& tmp) {
  std::lock_guard lock(g_tmps_mu);
  g_tmps.erase(tmp);
}

// Removes every temporary, then reports `message` and exits: the supervisor
// that reads the error finds nothing half written. The temporaries' lock is
// held to the end; the report waits at most 2 s for another line to go out
// (a supervisor that reads nothing is stopping and needs no message).
[[noreturn]] void fail(const std::string& message) {
  g_tmps_mu.lock();
  for (const std::string& t : g_tmps) ::unlink(t.c_str());
  if (g_report_mu.try_lock_for(std::chrono::seconds(2))) write_line("error " + message);
  std::_Exit(2);
}

unsigned streams() {
  const char* s = std::getenv("TOKFEED_OBJECT_STREAMS");
  return s && *s ? static_cast<unsigned>(std::clamp(std::atoi(s), 1, 64)) : 4u;
}

bool is_dataset_key(const std::string& key) {
  const std::string name = key.substr(key.rfind('/') + 1);
  if (name == "dataset_info.json" || name == "state.json" || name == "dataset_dict.json") return false;
  for (const char* ext : {".jsonl", ".json", ".jsonl.gz", ".json.gz", ".jsonl.zst", ".json.zst", ".parquet", ".arrow"})
    if (name.ends_with(ext)) return true;
  return false;
}

int max_retries() {
  const char* s = std::getenv("TOKFEED_OBJECT_RETRIES");
  return s && *s ? std::max(0, std::atoi(s)) : 6;
}
int first_backoff_ms() {
  const char* s = std::getenv("TOKFEED_OBJECT_BACKOFF_MS");
  return s && *s ? std::max(1, std::atoi(s)) : 500;
}

int64_t chunk_bytes() {
#ifdef TOKFEED_FAULT_HOOKS
  if (const char* s = std::getenv("TOKFEED_FAULT_OBJECT_CHUNK"); s && *s) return std::max(1L, std::atol(s));
#endif
  return 8 << 20;
}
void chunk_pause() {
#ifdef TOKFEED_FAULT_HOOKS
  if (const char* s = std::getenv("TOKFEED_FAULT_OBJECT_CHUNK"); s && std::strchr(s, ':'))
    std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(std::strchr(s, ':') + 1)));
#endif
}

bool wanted_only() {
#ifdef TOKFEED_FAULT_HOOKS
  const char* s = std::getenv("TOKFEED_FAULT_OBJECT_WANTED_ONLY");
  return s && *s == '1';
#else
  return false;
#endif
}

}  // namespace tokfeed::fetcher
