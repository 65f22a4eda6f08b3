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
#include "common/hash128.hpp"
#include "encode/sample_encoder.hpp"
#include "tokfeed/shm/futex.hpp"

namespace tokfeed {

namespace {

constexpr std::size_t kFlushTokens = 1 << 18;  // 1 MiB of tokens per write
// ... or this many records, whichever comes first: what a build that stops
// keeps is whole up to its last write.
constexpr uint64_t kFlushRecords = 64;
constexpr uint64_t kFlushNs = 2'000'000;  // ... or once this long has passed since the last write
constexpr uint64_t kFactBytes = 5;        // per record in a part's facts: u32 length, u8 flags
// A builder meeting a record a worker tokenizes waits for it up to 200 ms.
constexpr int kClaimWaits = 4000;
constexpr useconds_t kClaimWaitUs = 50;

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
                       uint32_t parts, int64_t crash_on_line, bool facts_only, const std::vector<uint32_t>& order)
    : cfg_(cfg),
      data_(data),
      tok_(tok),
      key_(key),
      crash_on_line_(crash_on_line),
      facts_only_(facts_only),
      records_(data.size()),
      owner_(::getpid()) {
  if (!order.empty() && order.size() != records_)
    throw std::invalid_argument("token cache: the build order does not hold every record once");
  const uint64_t p = std::max<uint64_t>(1, std::min<uint64_t>(parts, records_));
  // Lengths, flags and places are written by the builders straight into
  // memory the supervisor and the workers see: no results travel through
  // pipes. Counters first (each builder's two on cache lines of their own,
  // then one line of shared ones), then the per-record arrays.
  const uint64_t counters = p * 16 * 8 + 64;
  const uint64_t arrays = (records_ * 4 + records_ * 2 + 7) / 8 * 8;
  shared_bytes_ = counters + arrays + records_ * 24 + 64;
  shared_ = mmap(nullptr, shared_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared_ == MAP_FAILED) throw std::runtime_error(fmt::format("token cache: cannot map {} bytes", shared_bytes_));
  char* base = static_cast<char*>(shared_);
  done_ = reinterpret_cast<std::atomic<uint64_t>*>(base);
  current_ = done_ + p * 8;  // one cache line per counter
  // The shared line: records ready, the progress and waiting words, records
  // found by workers, and found records handed to the builders.
  auto* shared_line = reinterpret_cast<std::atomic<uint64_t>*>(base + p * 16 * 8);
  ready_total_ = shared_line;
  auto* words = reinterpret_cast<std::atomic<uint32_t>*>(shared_line + 1);
  lengths_ = reinterpret_cast<uint32_t*>(base + counters);
  flags_ = reinterpret_cast<uint8_t*>(lengths_ + records_);
  ready_ = reinterpret_cast<std::atomic<uint8_t>*>(flags_ + records_);
  offsets_ = reinterpret_cast<uint64_t*>(base + counters + arrays);
  auto* found = reinterpret_cast<std::atomic<uint64_t>*>(offsets_ + records_);
  view_.found_at_ = offsets_ + 2 * records_;
  view_.records_ = records_;
  view_.lengths_ = lengths_;
  view_.flags_ = flags_;
  view_.offsets_ = offsets_;
  view_.ready_ = ready_;
  view_.ready_total_ = ready_total_;
  view_.progress_ = words;
  view_.waiting_ = words + 1;
  view_.found_ = found;
  view_.found_total_ = shared_line + 2;
  handed_ = shared_line + 3;

  // The order's blocks are dealt round robin: block b to part b mod P.
  order_hash_ = order_hash(order);
  parts_.resize(p);
  for (uint64_t j = 0; j < records_; ++j) {
    const uint32_t rec = order.empty() ? static_cast<uint32_t>(j) : order[j];
    parts_[(j / kBuildBlock) % p].records.push_back(rec);
  }
  for (uint64_t k = 0; k < p; ++k) {
    if (facts_only_) continue;
    parts_[k].path = fmt::format("{}{}.part", part_prefix(), k);
    parts_[k].facts = fmt::format("{}{}.facts", part_prefix(), k);
  }
  if (!facts_only_)
    for (std::size_t k = 0; k < parts_.size(); ++k) kept_ += recover(k);
  for (uint32_t k = 0; !facts_only_ && k < parts; ++k) {
    int fd = memfd_create(fmt::format("tokfeed-found{}", k).c_str(), MFD_CLOEXEC);
    if (fd < 0) throw std::runtime_error(fmt::format("token cache: memfd_create failed: {}", std::strerror(errno)));
    found_fds_.push_back(fd);
  }
}

void BuildFacts::wait(std::chrono::nanoseconds timeout) const {
  const uint32_t seen = progress_->load(std::memory_order_acquire);
  waiting_->fetch_add(1, std::memory_order_seq_cst);
  shm::futex_wait(*progress_, seen, timeout);
  waiting_->fetch_sub(1, std::memory_order_relaxed);
}

bool BuildFacts::claim(uint64_t i, uint32_t claimer) const {
  uint64_t none = 0;
  return !built(i) && found_[i].compare_exchange_strong(none, kClaimed | claimer, std::memory_order_relaxed,
                                                        std::memory_order_relaxed);
}

void BuildFacts::publish_found(uint64_t i, uint32_t length, uint8_t flags, uint32_t file, uint64_t at) const {
  found_at_[i] = at == kNoTokens ? kNoTokens : (uint64_t{file} << 48) | at;
  // SYNC POINT: pairs with found()'s, length()'s and found_word()'s acquire
  // loads: the tokens in the hand-off file and their place come first.
  found_[i].store(kFound | uint64_t{flags} << 32 | length, std::memory_order_release);
  found_total_->fetch_add(1, std::memory_order_relaxed);
  progress_->fetch_add(1, std::memory_order_release);
  if (waiting_->load(std::memory_order_seq_cst)) shm::futex_wake_all(*progress_);
}

std::string CacheBuild::part_prefix(const std::string& dir, const CacheKey& key, uint32_t parts,
                                    const std::string& order) {
  return fmt::format("{}/{}.p{}-{}-", dir, key.hex(), parts, order);
}

std::string CacheBuild::order_hash(const std::vector<uint32_t>& order) {
  Hash128 h;
  h.add(order.data(), order.size() * sizeof(uint32_t));
  return h.hex().substr(0, 16);
}

std::string CacheBuild::part_prefix() const {
  return part_prefix(cfg_.cache.dir, key_, static_cast<uint32_t>(parts_.size()), order_hash_);
}

uint64_t CacheBuild::recover(std::size_t k) {
  const Part& p = parts_[k];
  int fd = ::open(p.facts.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  struct stat st, tokens;
  std::string facts;
  if (::fstat(fd, &st) == 0 && ::stat(p.path.c_str(), &tokens) == 0) {
    facts.resize(std::min<uint64_t>(static_cast<uint64_t>(st.st_size) / kFactBytes, p.records.size()) * kFactBytes);
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
    const uint32_t rec = p.records[m];
    lengths_[rec] = len;
    flags_[rec] = static_cast<uint8_t>(facts[m * kFactBytes + 4]);
    offsets_[rec] = (uint64_t{k} << 48) | bytes;
    ready_[rec].store(1, std::memory_order_relaxed);
    bytes += uint64_t{len} * 4;
  }
  done_[k * 8].store(m, std::memory_order_relaxed);
  ready_total_->fetch_add(m, std::memory_order_relaxed);
  return m;
}

// The parts stay: the next start with the same key builds only the rest
// (publish() removes them).
CacheBuild::~CacheBuild() {
  if (::getpid() != owner_) return;  // a forked child: the mapping is the supervisor's
  abort();
  for (int fd : part_fds_) ::close(fd);
  // Workers still hold the hand-off files: empty them, so their pages go now.
  for (int fd : found_fds_) {
    if (::ftruncate(fd, 0) != 0) spdlog::warn("token cache: cannot empty a hand-off file: {}", std::strerror(errno));
    ::close(fd);
  }
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
      int ro = ::open(p.path.c_str(), O_RDONLY | O_CLOEXEC);
      if (ro < 0) throw std::runtime_error(fmt::format("{}: cannot open: {}", p.path, std::strerror(errno)));
      part_fds_.push_back(ro);
    }
    if (done_[k * 8].load(std::memory_order_relaxed) == p.records.size()) p.finished = true;  // kept whole
    else spawn(p, fork_child);
  }
}

void CacheBuild::spawn(Part& p, const ForkFn& fork_child) {
  std::size_t index = static_cast<std::size_t>(&p - parts_.data());
  // Only the records whose tokens reached the file count as done: cut the
  // file back to them and go on from there.
  uint64_t done = done_[index * 8].load(std::memory_order_acquire);
  uint64_t bytes = 0;
  for (uint64_t m = 0; m < done; ++m) bytes += uint64_t{lengths_[p.records[m]]} * 4;
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
  // Tokens on 3, facts on 4, the workers' hand-off files from 5 on; nothing
  // else of the supervisor's stays open.
  const int found_n = static_cast<int>(found_fds_.size()), above = 5 + found_n;
  std::vector<int> moved;
  if (fd >= 0) {
    moved = {::fcntl(fd, F_DUPFD_CLOEXEC, above), ::fcntl(facts_fd, F_DUPFD_CLOEXEC, above)};
    for (int f : found_fds_) moved.push_back(::fcntl(f, F_DUPFD_CLOEXEC, above));
    for (std::size_t k = 0; k < moved.size(); ++k)
      if (moved[k] < 0 || ::dup3(moved[k], 3 + static_cast<int>(k), O_CLOEXEC) < 0) _exit(5);
    fd = 3;
    facts_fd = 4;
  }
  close_range(fd >= 0 ? static_cast<unsigned>(above) : 3, ~0U, 0);
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
  uint64_t m = done.load(std::memory_order_relaxed);  // of the part's records
  uint64_t flushed = m;
  uint64_t bytes = 0;  // tokens in the file before buf
  for (uint64_t i = 0; i < m; ++i) bytes += uint64_t{lengths_[p.records[i]]} * 4;
  uint64_t flushed_ns = shm::monotonic_ns();
  std::string facts;
  auto flush = [&](uint64_t upto) {
    if (fd >= 0) {
      // Tokens first, then the facts that make them count.
      write_all(fd, buf.data(), buf.size() * 4);
      facts.clear();
      for (uint64_t i = flushed; i < upto; ++i) {
        facts.append(reinterpret_cast<const char*>(&lengths_[p.records[i]]), 4);
        facts.push_back(static_cast<char>(flags_[p.records[i]]));
      }
      write_all(facts_fd, facts.data(), facts.size());
    }
    // SYNC POINT: pairs with BuildFacts::built()'s acquire: a record's
    // length, flags, place and tokens are written before it reads ready.
    for (uint64_t i = flushed; i < upto; ++i) ready_[p.records[i]].store(1, std::memory_order_release);
    ready_total_->fetch_add(upto - flushed, std::memory_order_release);
    buf.clear();
    flushed = upto;
    flushed_ns = shm::monotonic_ns();
    done.store(upto, std::memory_order_release);
    view_.progress_->fetch_add(1, std::memory_order_release);
    if (view_.waiting_->load(std::memory_order_seq_cst)) shm::futex_wake_all(*view_.progress_);
  };
  const uint64_t count = p.records.size();
  for (; m < count; ++m) {
    const uint32_t r = p.records[m];
    if (!(flags_[r] & cache_flags::kIsolated)) {  // isolated by the supervisor: no tokens
      current.store(uint64_t{r} + 1, std::memory_order_relaxed);
#ifdef TOKFEED_FAULT_HOOKS
      if (crash_on_line_ >= 0 && data_.line(r) == crash_on_line_) fault_crash();
      if (slow_us) ::usleep(slow_us);
#endif
      // Taken by a worker (not by this part's builder before a restart):
      // its tokens come shortly, unless the worker died.
      const uint64_t mine = BuildFacts::kClaimed | BuildFacts::kBuilder | index;
      uint64_t w = view_.found_word(r);
      if (w == 0 && view_.claim(r, BuildFacts::kBuilder | static_cast<uint32_t>(index))) w = mine;
      for (int spin = 0; (w & BuildFacts::kClaimed) && w != mine && spin < kClaimWaits; ++spin) {
        ::usleep(kClaimWaitUs);
        w = view_.found_word(r);
      }
      if ((w & BuildFacts::kFound) && take_found(r, w, fd >= 0, buf)) {
        if (fd >= 0) handed_->fetch_add(1, std::memory_order_relaxed);
      } else if (!enc.encode(r, s)) {
        // Bad when read, or the file changed after indexing: keep nothing of it.
        lengths_[r] = 0;
        flags_[r] = cache_flags::kBad;
      } else {
        std::size_t before = buf.size();
        append_sample(s, buf);
        lengths_[r] = static_cast<uint32_t>(buf.size() - before);
        flags_[r] = sample_flags(s);
      }
    }
    offsets_[r] = (uint64_t{index} << 48) | (bytes + (buf.size() - lengths_[r]) * 4);
    // Whole blocks of records reach the file together, and a slow record
    // no later than a few milliseconds after it is encoded: workers wait
    // for the plan's prefix.
    if (buf.size() >= kFlushTokens || m + 1 - flushed >= kFlushRecords ||
        shm::monotonic_ns() - flushed_ns >= kFlushNs) {
      bytes += buf.size() * 4;
      flush(m + 1);
    }
  }
  bytes += buf.size() * 4;
  flush(count);
  current.store(0, std::memory_order_relaxed);
  _exit(0);
}

bool CacheBuild::take_found(uint64_t r, uint64_t word, bool tokens, std::vector<uint32_t>& buf) {
  const auto len = static_cast<uint32_t>(word);
  const uint64_t at = view_.found_at(r);
  if (tokens) {
    if (at == BuildFacts::kNoTokens) return false;
    // The hand-off files are on 5, 6, ... (builder_main).
    const std::size_t before = buf.size();
    buf.resize(before + len);
    const ssize_t n = ::pread(5 + static_cast<int>(at >> 48), buf.data() + before, std::size_t{len} * 4,
                              static_cast<off_t>(at & ((uint64_t{1} << 48) - 1)));
    if (n != static_cast<ssize_t>(len) * 4) {
      buf.resize(before);
      return false;
    }
  }
  lengths_[r] = len;
  flags_[r] = static_cast<uint8_t>(word >> 32);
  return true;
}

bool CacheBuild::on_exit(pid_t pid, int status, const ForkFn& fork_child, std::vector<std::string>& isolated) {
  for (std::size_t i = 0; i < parts_.size(); ++i) {
    Part& p = parts_[i];
    if (p.pid != pid) continue;
    p.pid = -1;
    uint64_t done = done_[i * 8].load(std::memory_order_acquire);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && done == p.records.size()) {
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
  // The parts hold records in build order; the store holds them in record
  // order: gather each record's tokens from its part.
  std::vector<std::pair<const char*, std::size_t>> maps;
  for (std::size_t k = 0; k < parts_.size(); ++k) {
    struct stat st;
    if (::fstat(part_fds_[k], &st) != 0)
      throw std::runtime_error(fmt::format("{}: cannot stat: {}", parts_[k].path, std::strerror(errno)));
    const std::size_t n = static_cast<std::size_t>(st.st_size);
    void* m = n ? mmap(nullptr, n, PROT_READ, MAP_SHARED, part_fds_[k], 0) : nullptr;
    if (m == MAP_FAILED)
      throw std::runtime_error(fmt::format("{}: cannot map: {}", parts_[k].path, std::strerror(errno)));
    maps.emplace_back(static_cast<const char*>(m), n);
  }
  std::string buf;
  auto write_out = [&] {
    for (std::size_t w = 0; w < buf.size();) {
      ssize_t n = ::write(out, buf.data() + w, buf.size() - w);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw std::runtime_error(fmt::format("{}: write failed: {}", bin_tmp, std::strerror(errno)));
      w += static_cast<std::size_t>(n);
    }
    buf.clear();
  };
  for (uint64_t r = 0; r < records_; ++r) {
    const uint64_t n = uint64_t{lengths_[r]} * 4, at = view_.offset(r);
    const auto& [base, size] = maps[view_.part(r)];
    if (at + n > size) throw std::runtime_error(fmt::format("token cache: record {} lies past its part's end", r));
    buf.append(base + at, n);
    if (buf.size() >= (std::size_t{1} << 22)) write_out();
  }
  write_out();
  for (auto& [base, size] : maps)
    if (base) munmap(const_cast<char*>(base), size);
  ::close(out);
  TokenStore::publish(cfg_.cache.dir, key_, lengths_, flags_, records_, bin_tmp);
  for (const Part& p : parts_) {
    ::unlink(p.path.c_str());
    ::unlink(p.facts.c_str());
  }
}

}  // namespace tokfeed
