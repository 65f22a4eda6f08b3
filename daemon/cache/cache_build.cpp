#include "cache/cache_build.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "common/fault_hook.hpp"
#include "encode/sample_encoder.hpp"
#include "tokfeed/shm/futex.hpp"

namespace tokfeed {

namespace {

constexpr std::size_t kFlushTokens = 1 << 18;  // 1 MiB of tokens per write
// ... or this many records, whichever comes first: what a build that stops
// keeps is whole up to its last write.
constexpr uint64_t kFlushRecords = 64;
constexpr uint64_t kFactBytes = 5;  // per record in a part's facts: u32 length, u8 flags

void write_all(int fd, const void* p, std::size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n) {
    ssize_t w = ::write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      spdlog::error("token cache: write failed: {}", std::strerror(errno));
      _exit(3);
    }
    c += w;
    n -= static_cast<std::size_t>(w);
  }
}

}  // namespace

FactsTable::~FactsTable() { munmap(map_, bytes_); }

CacheBuild::CacheBuild(const JobConfig& cfg, const Dataset& data, const text::Tokenizer& tok, CacheKey key,
                       uint32_t parts, int64_t crash_on_line, bool facts_only)
    : cfg_(cfg),
      data_(data),
      tok_(tok),
      key_(key),
      crash_on_line_(crash_on_line),
      facts_only_(facts_only),
      records_(data.size()),
      owner_(::getpid()) {
  uint64_t p = std::max<uint64_t>(1, std::min<uint64_t>(parts, records_));
  // Lengths and flags are written by the builders straight into memory the
  // supervisor sees: no results travel through pipes.
  shared_bytes_ = records_ * 4 + p * 16 * 8 + records_ + 64;
  shared_ = mmap(nullptr, shared_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared_ == MAP_FAILED) throw std::runtime_error(fmt::format("token cache: cannot map {} bytes", shared_bytes_));
  char* base = static_cast<char*>(shared_);
  done_ = reinterpret_cast<std::atomic<uint64_t>*>(base);
  current_ = done_ + p * 8;  // one cache line per counter
  lengths_ = reinterpret_cast<uint32_t*>(base + p * 16 * 8);
  flags_ = reinterpret_cast<uint8_t*>(lengths_ + records_);
  for (uint64_t k = 0; k < p; ++k) {
    Part part;
    part.from = records_ * k / p;
    part.to = records_ * (k + 1) / p;
    if (!facts_only_) {
      part.path = fmt::format("{}{}.part", part_prefix(cfg.cache.dir, key, static_cast<uint32_t>(p)), k);
      part.facts = fmt::format("{}{}.facts", part_prefix(cfg.cache.dir, key, static_cast<uint32_t>(p)), k);
    }
    parts_.push_back(part);
  }
  if (!facts_only_)
    for (std::size_t k = 0; k < parts_.size(); ++k) kept_ += recover(k);
}

std::string CacheBuild::part_prefix(const std::string& dir, const CacheKey& key, uint32_t parts) {
  return fmt::format("{}/{}.p{}-", dir, key.hex(), parts);
}

uint64_t CacheBuild::recover(std::size_t k) {
  const Part& p = parts_[k];
  int fd = ::open(p.facts.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  struct stat st, tokens;
  std::string facts;
  if (::fstat(fd, &st) == 0 && ::stat(p.path.c_str(), &tokens) == 0) {
    facts.resize(std::min<uint64_t>(static_cast<uint64_t>(st.st_size) / kFactBytes, p.to - p.from) * kFactBytes);
    ssize_t n = ::pread(fd, facts.data(), facts.size(), 0);
    facts.resize(n > 0 ? static_cast<std::size_t>(n) / kFactBytes * kFactBytes : 0);
  }
  ::close(fd);
  // A record counts when its facts and all its tokens reached the files.
  uint64_t m = 0, bytes = 0;
  for (; (m + 1) * kFactBytes <= facts.size(); ++m) {
    uint32_t len;
    std::memcpy(&len, facts.data() + m * kFactBytes, 4);
    if (bytes + uint64_t{len} * 4 > static_cast<uint64_t>(tokens.st_size)) break;
    bytes += uint64_t{len} * 4;
    lengths_[p.from + m] = len;
    flags_[p.from + m] = static_cast<uint8_t>(facts[m * kFactBytes + 4]);
  }
  done_[k * 8].store(m, std::memory_order_relaxed);
  return m;
}

// The parts stay: the next start with the same key builds only the rest
// (publish() removes them).
CacheBuild::~CacheBuild() {
  if (::getpid() != owner_) return;  // a forked child: the mapping is the supervisor's
  abort();
  if (shared_) munmap(shared_, shared_bytes_);
}

void CacheBuild::start(const ForkFn& fork_child) {
  start_ns_ = shm::monotonic_ns();
  for (std::size_t k = 0; k < parts_.size(); ++k) {
    Part& p = parts_[k];
    if (!facts_only_) {
      for (const std::string& f : {p.path, p.facts}) {
        int fd = ::open(f.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0) throw std::runtime_error(fmt::format("{}: cannot create: {}", f, std::strerror(errno)));
        ::close(fd);
      }
    }
    if (p.from + done_[k * 8].load(std::memory_order_relaxed) == p.to) p.finished = true;  // kept whole
    else spawn(p, fork_child);
  }
}

void CacheBuild::spawn(Part& p, const ForkFn& fork_child) {
  std::size_t index = static_cast<std::size_t>(&p - parts_.data());
  // Only the records whose tokens reached the file count as done: cut the
  // file back to them and go on from there.
  uint64_t done = done_[index * 8].load(std::memory_order_acquire);
  uint64_t bytes = 0;
  for (uint64_t r = p.from; r < p.from + done; ++r) bytes += uint64_t{lengths_[r]} * 4;
  int fd = -1, facts_fd = -1;
  auto reopen = [](const std::string& path, uint64_t at) {
    int f = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (f < 0 || ::ftruncate(f, static_cast<off_t>(at)) != 0 || ::lseek(f, static_cast<off_t>(at), SEEK_SET) < 0)
      throw std::runtime_error(fmt::format("{}: cannot reopen: {}", path, std::strerror(errno)));
    return f;
  };
  if (!facts_only_) {
    fd = reopen(p.path, bytes);
    facts_fd = reopen(p.facts, done * kFactBytes);
  }
  p.pid = fork_child([this, index, fd, facts_fd] { builder_main(index, fd, facts_fd); });
  if (fd >= 0) ::close(fd);
  if (facts_fd >= 0) ::close(facts_fd);
  if (p.pid < 0) throw std::runtime_error(fmt::format("token cache: fork failed: {}", std::strerror(errno)));
}

void CacheBuild::builder_main(std::size_t index, int fd, int facts_fd) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  for (int sig : {SIGTERM, SIGINT, SIGCHLD, SIGHUP, SIGPIPE}) signal(sig, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  if (fd >= 0) {
    // Tokens on 3, facts on 4; nothing else of the supervisor's stays open.
    int t = ::fcntl(fd, F_DUPFD_CLOEXEC, 10), f = ::fcntl(facts_fd, F_DUPFD_CLOEXEC, 10);
    ::dup3(t, 3, O_CLOEXEC);
    ::dup3(f, 4, O_CLOEXEC);
    fd = 3;
    facts_fd = 4;
  }
  close_range(fd >= 0 ? 5 : 3, ~0U, 0);
  std::string name = fmt::format("tokfeed-cache{}", index);
  prctl(PR_SET_NAME, name.c_str());

  const Part& p = parts_[index];
  std::atomic<uint64_t>& done = done_[index * 8];
  std::atomic<uint64_t>& current = current_[index * 8];
  SampleEncoder enc(cfg_, data_, tok_);
  text::EncodedSample s;
  std::vector<uint32_t> buf;
  buf.reserve(kFlushTokens + cfg_.batch.max_length);
#ifdef TOKFEED_FAULT_HOOKS
  // Test-only fault hook: each record takes this long more to build.
  const char* slow = std::getenv("TOKFEED_FAULT_BUILD_RECORD_US");
  const useconds_t slow_us = slow ? static_cast<useconds_t>(std::atoi(slow)) : 0;
#endif
  uint64_t r = p.from + done.load(std::memory_order_relaxed);
  uint64_t flushed = r;
  std::string facts;
  auto flush = [&](uint64_t upto) {
    if (fd >= 0) {
      // Tokens first, then the facts that make them count.
      write_all(fd, buf.data(), buf.size() * 4);
      facts.clear();
      for (uint64_t i = flushed; i < upto; ++i) {
        facts.append(reinterpret_cast<const char*>(&lengths_[i]), 4);
        facts.push_back(static_cast<char>(flags_[i]));
      }
      write_all(facts_fd, facts.data(), facts.size());
    }
    buf.clear();
    flushed = upto;
    done.store(upto - p.from, std::memory_order_release);
  };
  for (; r < p.to; ++r) {
    if (flags_[r] & cache_flags::kIsolated) continue;  // isolated by the supervisor: no tokens
    current.store(r + 1, std::memory_order_relaxed);
#ifdef TOKFEED_FAULT_HOOKS
    if (crash_on_line_ >= 0 && data_.line(r) == crash_on_line_) fault_crash();
    if (slow_us) ::usleep(slow_us);
#endif
    if (!enc.encode(r, s)) {
      // The file changed after indexing: keep nothing of it.
      lengths_[r] = 0;
      flags_[r] = cache_flags::kDropped;
    } else {
      std::size_t before = buf.size();
      append_sample(s, buf);
      lengths_[r] = static_cast<uint32_t>(buf.size() - before);
      flags_[r] = sample_flags(s);
    }
    if (buf.size() >= kFlushTokens || r + 1 - flushed >= kFlushRecords) flush(r + 1);
  }
  flush(p.to);
  current.store(0, std::memory_order_relaxed);
  _exit(0);
}

bool CacheBuild::on_exit(pid_t pid, int status, const ForkFn& fork_child, std::vector<std::string>& isolated) {
  for (std::size_t i = 0; i < parts_.size(); ++i) {
    Part& p = parts_[i];
    if (p.pid != pid) continue;
    p.pid = -1;
    uint64_t done = done_[i * 8].load(std::memory_order_acquire);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && p.from + done == p.to) {
      p.finished = true;
      return true;
    }
    // A builder died: the record it was encoding may be the cause.
    uint64_t cur = current_[i * 8].load(std::memory_order_relaxed);
    if (cur > 0) {
      uint64_t rec = cur - 1;
      uint32_t n = ++crashes_[rec];
      spdlog::warn(
          "token cache builder {} (pid {}) died while encoding {} ({}); restarting it", i, pid, data_.where(rec),
          WIFSIGNALED(status) ? fmt::format("killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)))
                              : fmt::format("exited with status {}", WEXITSTATUS(status)));
      if (n >= cfg_.workers.max_crashes) {
        lengths_[rec] = 0;
        flags_[rec] = cache_flags::kIsolated;
        isolated.push_back(fmt::format("{}: record crashed a worker {} times; skipping it", data_.where(rec), n));
      }
    }
    spawn(p, fork_child);
    return true;
  }
  return false;
}

bool CacheBuild::done() const {
  for (const Part& p : parts_)
    if (!p.finished) return false;
  return true;
}

CacheProgress CacheBuild::progress() const {
  CacheProgress pr;
  pr.total = records_;
  pr.kept = kept_;
  for (std::size_t i = 0; i < parts_.size(); ++i) pr.done += done_[i * 8].load(std::memory_order_relaxed);
  pr.seconds = start_ns_ ? (shm::monotonic_ns() - start_ns_) / 1e9 : 0;
  return pr;
}

std::vector<pid_t> CacheBuild::pids() const {
  std::vector<pid_t> out;
  for (const Part& p : parts_)
    if (p.pid > 0) out.push_back(p.pid);
  return out;
}

void CacheBuild::abort() {
  for (Part& p : parts_) {
    if (p.pid <= 0) continue;
    ::kill(p.pid, SIGKILL);
    ::waitpid(p.pid, nullptr, 0);
    p.pid = -1;
  }
}

std::unique_ptr<FactsTable> CacheBuild::take_facts() {
  auto t = std::make_unique<FactsTable>(shared_, shared_bytes_, lengths_, flags_, records_);
  shared_ = nullptr;  // the table unmaps it
  return t;
}

void CacheBuild::publish() {
  std::string bin_tmp = fmt::format("{}.tmp.{}", store_path(cfg_.cache.dir, key_, "bin"), getpid());
  int out = ::open(bin_tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out < 0) throw std::runtime_error(fmt::format("{}: cannot create: {}", bin_tmp, std::strerror(errno)));
  for (const Part& p : parts_) {
    int in = ::open(p.path.c_str(), O_RDONLY | O_CLOEXEC);
    if (in < 0) throw std::runtime_error(fmt::format("{}: cannot open: {}", p.path, std::strerror(errno)));
    for (;;) {
      ssize_t n = ::copy_file_range(in, nullptr, out, nullptr, 1 << 30, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw std::runtime_error(fmt::format("{}: copy failed: {}", bin_tmp, std::strerror(errno)));
      if (n == 0) break;
    }
    ::close(in);
  }
  ::close(out);
  TokenStore::publish(cfg_.cache.dir, key_, lengths_, flags_, records_, bin_tmp);
  for (const Part& p : parts_) {
    ::unlink(p.path.c_str());
    ::unlink(p.facts.c_str());
  }
}

}  // namespace tokfeed
