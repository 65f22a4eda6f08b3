#include "harness.hpp"

#include <doctest/doctest.h>

#include "tokfeed/proto/frame.hpp"

#include <dirent.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <thread>

namespace tokfeed::testing {

std::string bin(const std::string& name) {
  if (name == "tokfeedd") return std::string(TOKFEED_BIN_DIR) + "/daemon/tokfeedd";
  return std::string(TOKFEED_BIN_DIR) + "/tools/" + name;
}

std::string data_path(const std::string& rel) { return std::string(TOKFEED_TEST_DATA) + "/" + rel; }

std::string shared_path(const std::string& rel) {
  std::string p = std::string(TOKFEED_SHARED_DIR) + "/" + rel;
  struct stat st;
  return stat(p.c_str(), &st) == 0 ? p : "";
}

TempDir::TempDir() {
  char tmpl[] = "/tmp/tokfeed-test.XXXXXX";
  if (!mkdtemp(tmpl)) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}

TempDir::~TempDir() { std::system(("rm -rf '" + path_ + "'").c_str()); }

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Output run(const std::string& cmd) {
  char tmpl[] = "/tmp/tokfeed-err.XXXXXX";
  int fd = mkstemp(tmpl);
  close(fd);
  std::string full = "( " + cmd + " ) 2>" + tmpl;
  FILE* p = popen(full.c_str(), "r");
  std::string out;
  char buf[1 << 16];
  std::size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int st = pclose(p);
  Output o{WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), std::move(out), slurp(tmpl)};
  unlink(tmpl);
  return o;
}

std::string socket_of(const TempDir& dir, const std::string& name) { return dir.file(name + ".sock"); }

std::string write_job(const TempDir& dir, const std::string& body, const std::string& name) {
  std::string path = dir.file(name + ".toml");
  std::ofstream out(path);
  out << body << "\n[server]\nsocket = \"" << socket_of(dir, name) << "\"\nshm_prefix = \"test-"
      << dir.path().substr(dir.path().rfind('.') + 1) << "-" << name << "\"\n";
  // Each test's token cache lives in its directory, not in the user's.
  if (body.find("[cache]") == std::string::npos) out << "\n[cache]\ndir = \"" << dir.file("cache") << "\"\n";
  return path;
}

Daemon::Daemon(const std::string& config, const std::string& socket, const std::string& env)
    : socket_(socket), log_path_(config + ".log") {
  pid_ = fork();
  if (pid_ == 0) {
    std::string cmd = (env.empty() ? "" : "exec env " + env + " ") + (env.empty() ? "exec " : "") + bin("tokfeedd") +
                      " --config '" + config + "' 2>'" + log_path_ + "'";
    execl("/bin/sh", "sh", "-c", cmd.c_str(), nullptr);
    _exit(127);
  }
  // Ready means this daemon listens on the socket. A killed daemon's
  // socket file may still accept a connection while a child of it that
  // holds the listening socket has yet to die: the listener's pid tells.
  for (int i = 0; i < 400; ++i) {
    std::string error;
    int fd = proto::connect_unix(socket_, error);
    if (fd >= 0) {
      ucred peer{};
      socklen_t len = sizeof peer;
      const bool ours = ::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &len) == 0 && peer.pid == pid_;
      ::close(fd);
      if (ours) return;
    }
    if (!running()) throw std::runtime_error("tokfeedd exited at start: " + log());
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  throw std::runtime_error("tokfeedd did not bind its socket: " + log());
}

Daemon::~Daemon() {
  if (running()) stop(SIGKILL);
}

bool Daemon::running() {
  if (status_ >= 0) return false;
  int st;
  pid_t r = waitpid(pid_, &st, WNOHANG);
  if (r == pid_) {
    status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return false;
  }
  return true;
}

int Daemon::wait() {
  if (status_ >= 0) return status_;
  int st;
  waitpid(pid_, &st, 0);
  status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return status_;
}

int Daemon::stop(int sig) {
  if (running()) kill(pid_, sig);
  return wait();
}

std::string Daemon::log() const { return slurp(log_path_); }

std::vector<pid_t> Daemon::worker_pids() const {
  Output o = run(bin("tokfeedctl") + " -s '" + socket_ + "' status --json");
  std::vector<pid_t> pids;
  std::size_t pos = o.out.find("\"workers\":[");
  std::size_t end = o.out.find("]", pos);
  while (pos != std::string::npos && (pos = o.out.find("\"pid\":", pos + 1)) != std::string::npos && pos < end)
    pids.push_back(static_cast<pid_t>(std::atol(o.out.c_str() + pos + 6)));
  return pids;
}

std::string with_bad_lines(const std::string& from, const std::string& to, const std::vector<std::string>& bad,
                           int every, int at, int limit) {
  std::ifstream in(from);
  std::ofstream out(to);
  std::string line;
  for (int i = 0; i < limit && std::getline(in, line); ++i) {
    out << line << "\n";
    if (i % every == at) out << bad[static_cast<size_t>(i / every) % bad.size()] << "\n";
  }
  return to;
}

std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  std::string l;
  while (std::getline(in, l))
    if (!l.empty()) out.push_back(l);
  return out;
}

std::vector<std::string> dump(const std::string& socket, uint32_t rank, const std::string& extra) {
  Output o = run(bin("tokfeedctl") + " -s '" + socket + "' dump --rank " + std::to_string(rank) + " " + extra);
  if (o.status != 0) throw std::runtime_error("tokfeedctl dump failed: " + o.err);
  return lines(o.out);
}

std::vector<std::string> reference(const std::string& config, uint32_t rank, const std::string& extra) {
  Output o = run("/usr/bin/python3 " + std::string(TOKFEED_SOURCE_DIR) + "/tests/reference/tokfeed_ref.py --config '" +
                 config + "' --rank " + std::to_string(rank) + " " + extra);
  if (o.status != 0) throw std::runtime_error("reference failed: " + o.err);
  return lines(o.out);
}

int shm_entries() {
  // Only names tokfeed could leave: other tests running in parallel (torch's
  // DataLoader peer, the ring tests) create and remove their own entries.
  int n = 0;
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d)) {
      std::string_view name = e->d_name;
      if (name.find("tokfeed") != std::string_view::npos || name.starts_with("test-")) ++n;
    }
    closedir(d);
  }
  return n;
}

int files_ending(const std::string& dir, const std::string& suffix) {
  int n = 0;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) n += std::string(e->d_name).ends_with(suffix);
    closedir(d);
  }
  return n;
}

uint64_t json_int(const std::string& json, const std::string& key) {
  std::smatch m;
  if (std::regex_search(json, m, std::regex("\"" + key + "\": *([0-9]+)"))) return std::stoull(m[1]);
  return 0;
}

int open_fds(pid_t pid) {
  int n = 0;
  if (DIR* d = opendir(("/proc/" + std::to_string(pid) + "/fd").c_str())) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') ++n;
    closedir(d);
  }
  return n;
}

// Two dump streams, line for line: stops at the first batch that differs.
void require_equal(const std::vector<std::string>& ours, const std::vector<std::string>& ref, const std::string& what) {
  REQUIRE(!ref.empty());
  REQUIRE(ours.size() == ref.size());
  for (std::size_t i = 0; i < ours.size(); ++i) {
    INFO(what << " batch " << i);
    REQUIRE(ours[i] == ref[i]);
  }
}

}  // namespace tokfeed::testing

namespace tokfeed::testing {

void Daemon::wait_cache_built() const {
  std::string st;
  for (int i = 0; i < 3000; ++i) {
    st = run(bin("tokfeedctl") + " -s '" + socket_ + "' status --json").out;
    if (st.find("\"cache\":{\"state\":\"") != std::string::npos &&
        st.find("\"cache\":{\"state\":\"building\"") == std::string::npos &&
        st.find("\"cache\":{\"state\":\"waiting\"") == std::string::npos)
      return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  throw std::runtime_error("the token cache was not built within 3000 status polls: " + st.substr(0, 300));
}

}  // namespace tokfeed::testing
