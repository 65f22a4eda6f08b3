#include "cache/record_check.hpp"

#include <fmt/format.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "common/child_exit.hpp"
#include "common/fault_hook.hpp"
#include "config/cpu_policy.hpp"
#include "tokfeed/shm/futex.hpp"

namespace tokfeed {

namespace {

std::string describe(int status) {
  if (WIFSIGNALED(status))
    return fmt::format("killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  if (WIFEXITED(status) && WEXITSTATUS(status) == kChildOutOfMemory) return "out of memory ([workers] max_memory)";
  return fmt::format("exited with status {}", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

}  // namespace

RecordCheck::RecordCheck(const Dataset& data, uint32_t children, uint32_t max_crashes, int64_t crash_on_line)
    : data_(data),
      max_crashes_(std::max<uint32_t>(1, max_crashes)),
      crash_on_line_(crash_on_line),
      ranges_(data.pending_ranges()),
      owner_(::getpid()) {
  for (const auto& [from, to] : ranges_) {
    range_pos_.push_back(total_);
    total_ += to - from;
  }
  const uint64_t p = std::max<uint64_t>(1, std::min<uint64_t>(children, total_));
  shared_bytes_ = p * 16 * 8;
  shared_ = mmap(nullptr, shared_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared_ == MAP_FAILED) throw std::runtime_error("record check: cannot map its counters");
  done_ = static_cast<std::atomic<uint64_t>*>(shared_);
  current_ = done_ + p * 8;  // one cache line per counter
  for (uint64_t k = 0; k < p; ++k) {
    Part part;
    part.from = total_ * k / p;
    part.to = total_ * (k + 1) / p;
    part.fd = ::memfd_create("tokfeed-check", MFD_CLOEXEC);
    if (part.fd < 0) throw std::runtime_error(fmt::format("record check: memfd_create: {}", std::strerror(errno)));
    parts_.push_back(part);
  }
}

RecordCheck::~RecordCheck() {
  if (::getpid() != owner_) return;  // a forked child: the children are the supervisor's
  abort();
  for (Part& p : parts_)
    if (p.fd >= 0) ::close(p.fd);
  if (shared_) munmap(shared_, shared_bytes_);
}

uint64_t RecordCheck::record_at(uint64_t pos) const {
  auto it = std::upper_bound(range_pos_.begin(), range_pos_.end(), pos);
  std::size_t k = static_cast<std::size_t>(it - range_pos_.begin()) - 1;
  return ranges_[k].first + (pos - range_pos_[k]);
}

void RecordCheck::start(const ForkFn& fork_child) {
  start_ns_ = shm::monotonic_ns();
  for (Part& p : parts_) {
    if (p.from == p.to) p.finished = true;
    else spawn(p, fork_child);
  }
}

void RecordCheck::spawn(Part& p, const ForkFn& fork_child) {
  std::size_t index = static_cast<std::size_t>(&p - parts_.data());
  p.pid = fork_child([this, index] { child_main(index); });
  if (p.pid < 0) throw std::runtime_error(fmt::format("record check: fork failed: {}", std::strerror(errno)));
}

void RecordCheck::child_main(std::size_t index) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  for (int sig : {SIGTERM, SIGINT, SIGCHLD, SIGHUP, SIGPIPE}) signal(sig, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  const Part& p = parts_[index];
  // Its verdicts' file on 3; nothing else of the supervisor's stays open.
  if (p.fd != 3) ::dup2(p.fd, 3);
  close_range(4, ~0U, 0);
  std::string name = fmt::format("tokfeed-check{}", index);
  prctl(PR_SET_NAME, name.c_str());

  std::atomic<uint64_t>& done = done_[index * 8];
  std::atomic<uint64_t>& current = current_[index * 8];
  std::string entry;
  for (uint64_t pos = p.from + done.load(std::memory_order_relaxed); pos < p.to; ++pos) {
    const uint64_t r = record_at(pos);
    current.store(r + 1, std::memory_order_relaxed);
#ifdef TOKFEED_FAULT_HOOKS
    if (crash_on_line_ >= 0 && data_.line(r) == crash_on_line_) fault_crash();
#endif
    std::string reason = data_.check(r);
    if (!reason.empty()) {
      // One write per entry; the supervisor keeps only whole entries.
      const uint32_t len = static_cast<uint32_t>(reason.size());
      entry.assign(reinterpret_cast<const char*>(&r), 8);
      entry.append(reinterpret_cast<const char*>(&len), 4);
      entry += reason;
      for (std::size_t at = 0; at < entry.size();) {
        ssize_t w = ::write(3, entry.data() + at, entry.size() - at);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) _exit(3);
        at += static_cast<std::size_t>(w);
      }
    }
    done.store(pos + 1 - p.from, std::memory_order_release);
  }
  current.store(0, std::memory_order_relaxed);
  _exit(0);
}

void RecordCheck::collect(Part& p) {
  struct stat st;
  if (::fstat(p.fd, &st) != 0) return;
  std::string buf(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t got = 0;
  while (got < buf.size()) {
    ssize_t n = ::pread(p.fd, buf.data() + got, buf.size() - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  // A child that died mid-write leaves a part of an entry: it is judged again.
  for (std::size_t at = 0; at + 12 <= got;) {
    uint64_t r;
    uint32_t len;
    std::memcpy(&r, buf.data() + at, 8);
    std::memcpy(&len, buf.data() + at + 8, 4);
    if (at + 12 + len > got) break;
    bad_[r] = buf.substr(at + 12, len);
    at += 12 + len;
  }
  // The child's descriptor shares this offset: the next one writes from 0.
  if (::ftruncate(p.fd, 0) != 0 || ::lseek(p.fd, 0, SEEK_SET) < 0)
    throw std::runtime_error(fmt::format("record check: cannot reset its verdicts: {}", std::strerror(errno)));
}

bool RecordCheck::on_exit(pid_t pid, int status, const ForkFn& fork_child, std::vector<std::string>& isolated) {
  for (std::size_t i = 0; i < parts_.size(); ++i) {
    Part& p = parts_[i];
    if (p.pid != pid) continue;
    p.pid = -1;
    collect(p);
    std::atomic<uint64_t>& done = done_[i * 8];
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && p.from + done.load() == p.to) {
      p.finished = true;
      return true;
    }
    // A child died: the record it was rendering may be the cause.
    if (uint64_t cur = current_[i * 8].load(std::memory_order_relaxed); cur > 0) {
      const uint64_t rec = cur - 1;
      const uint32_t n = ++crashes_[rec];
      spdlog::warn("record check {} (pid {}) died while rendering {} ({}); restarting it", i, pid, data_.where(rec),
                   describe(status));
      if (n >= max_crashes_) {
        bad_[rec] =
            fmt::format("rendering it ended the checking process {} times (last: {}); the daemon goes on without it", n,
                        describe(status));
        isolated.push_back(
            fmt::format("{}: record crashed a checking process {} times; it is a bad record", data_.where(rec), n));
        done.store(done.load() + 1, std::memory_order_release);  // past it
        current_[i * 8].store(0, std::memory_order_relaxed);
      }
    }
    if (p.from + done.load() >= p.to) p.finished = true;
    else spawn(p, fork_child);
    return true;
  }
  return false;
}

void RecordCheck::run(const ForkFn& fork_child, std::vector<std::string>& isolated) {
  start(fork_child);
  while (!done()) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, 0);
    if (pid < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(fmt::format("record check: waitpid: {}", std::strerror(errno)));
    }
    on_exit(pid, status, fork_child, isolated);
  }
}

bool RecordCheck::done() const {
  for (const Part& p : parts_)
    if (!p.finished) return false;
  return true;
}

uint64_t RecordCheck::checked() const {
  uint64_t n = 0;
  for (std::size_t i = 0; i < parts_.size(); ++i) n += done_[i * 8].load(std::memory_order_relaxed);
  return n;
}

double RecordCheck::seconds() const { return start_ns_ ? (shm::monotonic_ns() - start_ns_) / 1e9 : 0; }

std::vector<pid_t> RecordCheck::pids() const {
  std::vector<pid_t> out;
  for (const Part& p : parts_)
    if (p.pid > 0) out.push_back(p.pid);
  return out;
}

void RecordCheck::abort() {
  for (Part& p : parts_) {
    if (p.pid <= 0) continue;
    ::kill(p.pid, SIGKILL);
    ::waitpid(p.pid, nullptr, 0);
    p.pid = -1;
  }
}

void check_records(const JobConfig& cfg, Dataset& data) {
  if (!data.pending()) return;
  int64_t crash_on_line = -1;
#ifdef TOKFEED_FAULT_HOOKS
  if (const char* s = std::getenv("TOKFEED_FAULT_CRASH_LINE")) crash_on_line = std::atoll(s);
#endif
  const uint32_t children = std::max(1u, std::min(8u, std::thread::hardware_concurrency()));
  RecordCheck check(data, children, cfg.workers.max_crashes, crash_on_line);
  const uint64_t cap = child_memory_cap(cfg);
  std::fflush(nullptr);  // nothing buffered is written twice
  auto fork_child = [cap](const std::function<void()>& child) {
    pid_t pid = ::fork();
    if (pid != 0) return pid;
    int code = 1;
    try {
      limit_child_memory(cap);
      child();
      code = 0;
    } catch (const std::bad_alloc&) {
      code = kChildOutOfMemory;
    } catch (...) {
    }
    _exit(code);
  };
  std::vector<std::string> isolated;
  check.run(fork_child, isolated);
  for (const std::string& r : isolated) std::fprintf(stderr, "warning: %s\n", r.c_str());
  data.apply_verdicts(cfg, check.bad());
}

}  // namespace tokfeed
