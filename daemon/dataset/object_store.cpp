// The supervisor's side of a fetch: starts the fetcher program, follows its
// report line by line, and returns the files it completed (object_store.hpp).
//
// The report, one line per event, a text field last:
//   objects N BYTES            what the URL names
//   object I SIZE URL          each of them, in order
//   fetch I                    object I is being fetched (absent when reused);
//                              several may be at once
//   progress I BYTES           bytes of object I written so far
//   retry I ATTEMPT MS REASON  a read failed; retried after MS
//   partial I LOCAL            object I's footer is at LOCAL.tmp.<pid>, its
//                              completion map at LOCAL.tmp.<pid>.map
//                              (object_partial.hpp); LOCAL once complete
//   ready I REUSED LOCAL       object I is complete at LOCAL
//   done                       every object is ready
//   error MESSAGE              nothing more comes; MESSAGE names the object
#include "dataset/object_store.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <spawn.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <algorithm>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <utility>

#include "dataset/dataset_error.hpp"

extern char** environ;

namespace tokfeed {

namespace {

// The program that runs the fetcher: $TOKFEED_OBJECT_FETCHER, else this
// program itself (tokfeedd), which takes `--object-fetcher`.
std::string fetcher_program() {
  if (const char* p = std::getenv("TOKFEED_OBJECT_FETCHER"); p && *p) return p;
  return "/proc/self/exe";
}

// A started fetcher: its pid and the read end of its report.
struct Fetcher {
  pid_t pid = -1;
  int fd = -1;

  Fetcher() = default;
  Fetcher(Fetcher&& o) noexcept : pid(std::exchange(o.pid, -1)), fd(std::exchange(o.fd, -1)) {}
  Fetcher& operator=(Fetcher&&) = delete;
  ~Fetcher() {
    if (fd >= 0) ::close(fd);
    if (pid > 0) {
      ::kill(pid, SIGTERM);
      ::waitpid(pid, nullptr, 0);  // ECHILD if the supervisor's SIGCHLD handler reaped it first
    }
  }
  // How it ended, once its report has ended ("" when not known).
  std::string exit_status() {
    int status = 0;
    pid_t got = ::waitpid(pid, &status, 0);
    pid = -1;
    if (got <= 0) return {};
    if (WIFSIGNALED(status)) return fmt::format(" (killed by signal {})", WTERMSIG(status));
    if (WIFEXITED(status)) return fmt::format(" (exit code {})", WEXITSTATUS(status));
    return {};
  }
};

Fetcher spawn_fetcher(const std::string& name, const std::string& url, const std::string& cache_dir, bool footers) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0)
    throw DatasetError(fmt::format("{}: cannot start the object fetcher: pipe: {}", name, std::strerror(errno)));
  // posix_spawn (a vfork and an exec): safe in this threaded process, and the
  // fetcher starts as a fresh image with nothing of the supervisor's state.
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, p[1], 1);
  std::string prog = fetcher_program();
  std::vector<std::string> args = {"tokfeedd", "--object-fetcher", cache_dir, url};
  if (footers) args.push_back("footers");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  Fetcher f;
  int rc = ::posix_spawn(&f.pid, prog.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(p[1]);
  if (rc != 0) {
    ::close(p[0]);
    f.pid = -1;
    throw DatasetError(fmt::format("{}: cannot start the object fetcher {}: {}", name, prog, std::strerror(rc)));
  }
  f.fd = p[0];
  return f;
}

// The next line of the report: kLine, or kEnd at its end, or kNone when
// `wait` is false and no whole line is there yet. Checks `cancel` every
// 100 ms while it waits.
enum class Next { kLine, kEnd, kNone };
Next next_line(Fetcher& f, std::string& buf, std::string& line, const std::atomic<bool>* cancel,
               const std::string& name, bool wait = true) {
  for (;;) {
    if (std::size_t nl = buf.find('\n'); nl != std::string::npos) {
      line.assign(buf, 0, nl);
      buf.erase(0, nl + 1);
      return Next::kLine;
    }
    if (cancel && cancel->load(std::memory_order_relaxed))
      throw DatasetError(name + ": fetching stopped: the daemon is shutting down");
    pollfd pfd{f.fd, POLLIN, 0};
    int n = ::poll(&pfd, 1, wait ? 100 : 0);
    if (n < 0 && errno != EINTR) throw DatasetError(fmt::format("{}: poll: {}", name, std::strerror(errno)));
    if (n <= 0) {
      if (!wait) return Next::kNone;
      continue;
    }
    char chunk[4096];
    ssize_t got = ::read(f.fd, chunk, sizeof chunk);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return Next::kEnd;
    buf.append(chunk, static_cast<std::size_t>(got));
  }
}

void set_text(ObjectProgress* p, std::string ObjectProgress::*field, std::string value) {
  if (!p) return;
  std::lock_guard lock(p->mu);
  p->*field = std::move(value);
}

}  // namespace

bool is_object_url(const std::string& path) noexcept { return path.starts_with("s3://"); }

std::string fetch_line(const ObjectProgress& p) {
  std::string current;
  {
    std::lock_guard lock(p.mu);
    current = p.current;
  }
  if (current.empty()) return {};
  auto load = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  return fmt::format("fetching objects: {}/{}, {:.1f}/{:.1f} MB, {} retries; now {}", load(p.objects_done),
                     load(p.objects_total), load(p.bytes_done) / 1e6, load(p.bytes_total) / 1e6, load(p.retries),
                     current);
}

// What the report has said so far.
struct ObjectFetch::State {
  State(std::string n, std::string d, ObjectProgress* p, const std::atomic<bool>* c, Fetcher fetcher)
      : name(std::move(n)), cache_dir(std::move(d)), progress(p), cancel(c), f(std::move(fetcher)) {}

  std::string name, cache_dir;
  ObjectProgress* progress;
  const std::atomic<bool>* cancel;
  Fetcher f;
  pid_t fetcher_pid = f.pid;  // kept after it ends
  bool idle = false;          // step(false) found no line
  std::string buf, line;
  std::optional<std::size_t> listed;  // the objects line's count
  std::vector<FetchedObject> out;
  std::vector<uint64_t> written;   // per object, for progress
  std::set<std::size_t> fetching;  // begun, not ready
  std::vector<bool> ready;
  std::vector<bool> partial;  // its footer and map are there
  bool done = false;

  // Takes the report's next line; false when the report ended without
  // "done". With `wait` false, returns true at once when no line is there.
  bool step(bool wait = true);
  [[noreturn]] void died();
};

bool ObjectFetch::State::step(bool wait) {
  const Next got = next_line(f, buf, line, cancel, name, wait);
  idle = got == Next::kNone;
  if (idle) return true;
  if (got == Next::kEnd) return false;
  std::istringstream in(line);
  std::string verb;
  in >> verb;
  auto rest = [&] {
    std::string s;
    std::getline(in >> std::ws, s);
    return s;
  };
  if (verb == "objects") {
    uint64_t n = 0, bytes = 0;
    in >> n >> bytes;
    listed = n;
    if (progress) {
      progress->objects_total.fetch_add(n, std::memory_order_relaxed);
      progress->bytes_total.fetch_add(bytes, std::memory_order_relaxed);
    }
  } else if (verb == "object") {
    FetchedObject o;
    std::size_t i = 0;
    in >> i >> o.size;
    o.url = rest();
    out.push_back(std::move(o));
    written.push_back(0);
    ready.push_back(false);
    partial.push_back(false);
  } else if (verb == "fetch" || verb == "progress" || verb == "retry" || verb == "ready" || verb == "partial") {
    std::size_t i = 0;
    in >> i;
    if (i >= out.size()) return false;  // a report out of order: treated as a fetcher that failed
    if (verb == "fetch") {
      fetching.insert(i);
      set_text(progress, &ObjectProgress::current, out[i].url);
      spdlog::info("{}: fetching {} ({:.1f} MB) into {}/objects", name, out[i].url, out[i].size / 1e6, cache_dir);
    } else if (verb == "partial") {
      out[i].local = rest();
      partial[i] = true;
      spdlog::info("{}: its footer is fetched; its row groups follow, those the workers wait for first", out[i].url);
    } else if (verb == "progress") {
      uint64_t bytes = 0;
      in >> bytes;
      if (progress && bytes > written[i]) progress->bytes_done.fetch_add(bytes - written[i], std::memory_order_relaxed);
      written[i] = std::max(written[i], bytes);
    } else if (verb == "retry") {
      uint64_t attempt = 0, ms = 0;
      in >> attempt >> ms;
      std::string why = rest();
      spdlog::warn("{}: read failed (attempt {}), retrying in {} ms: {}", out[i].url, attempt, ms, why);
      if (progress) progress->retries.fetch_add(1, std::memory_order_relaxed);
      set_text(progress, &ObjectProgress::last_retry, out[i].url + ": " + why);
    } else {
      int reused = 0;
      in >> reused;
      out[i].local = rest();
      if (progress) {
        if (out[i].size > written[i])
          progress->bytes_done.fetch_add(out[i].size - written[i], std::memory_order_relaxed);
        progress->objects_done.fetch_add(1, std::memory_order_relaxed);
        if (reused) progress->objects_reused.fetch_add(1, std::memory_order_relaxed);
      }
      written[i] = out[i].size;
      ready[i] = true;
      fetching.erase(i);
    }
  } else if (verb == "done") {
    set_text(progress, &ObjectProgress::current, "");
    if (std::find(ready.begin(), ready.end(), false) != ready.end()) return false;
    done = true;
    f.exit_status();
  } else if (verb == "error") {
    set_text(progress, &ObjectProgress::current, "");
    throw DatasetError(rest());
  }
  return true;
}

void ObjectFetch::State::died() {
  // The report ended early: the fetcher died. Nothing it left is used.
  std::string where;
  for (std::size_t i : fetching) where += (where.empty() ? " while fetching " : ", ") + out[i].url;
  std::string how = f.exit_status();
  set_text(progress, &ObjectProgress::current, "");
  throw DatasetError(
      fmt::format("{}: the object fetcher stopped{}{} before it finished; its log above says why, "
                  "and a restart fetches what is missing",
                  name, how, where));
}

ObjectFetch::ObjectFetch(const std::string& name, const std::string& url, const std::string& cache_dir,
                         ObjectProgress* progress, const std::atomic<bool>* cancel, bool footers) {
  if (cache_dir.empty())
    throw DatasetError(fmt::format("{}: objects are fetched into [cache] dir, and none is set: set [cache] dir", name));
  s_ = std::make_unique<State>(name, cache_dir, progress, cancel, spawn_fetcher(name, url, cache_dir, footers));
  while (!s_->listed || s_->out.size() < *s_->listed)
    if (!s_->step()) s_->died();
}

ObjectFetch::~ObjectFetch() = default;

const std::vector<FetchedObject>& ObjectFetch::objects() const { return s_->out; }

const std::string& ObjectFetch::local(std::size_t i) {
  while (!s_->ready.at(i))
    if (!s_->step()) s_->died();
  return s_->out[i].local;
}

ObjectFetch::Readable ObjectFetch::readable(std::size_t i) {
  while (!s_->ready.at(i) && !s_->partial.at(i))
    if (!s_->step()) s_->died();
  if (s_->ready[i]) return {s_->out[i].local, {}, {}};
  const std::string tmp = fmt::format("{}.tmp.{}", s_->out[i].local, s_->fetcher_pid);
  return {s_->out[i].local, tmp, tmp + ".map"};
}

std::string ObjectFetch::poll() {
  if (s_->done) return {};
  try {
    while (!s_->done) {
      if (!s_->step(/*wait=*/false)) s_->died();
      if (s_->idle) break;  // nothing more now
    }
  } catch (const DatasetError& e) {
    s_->done = true;  // reported once
    return e.what();
  }
  return {};
}

bool ObjectFetch::done() const { return s_->done; }

std::vector<FetchedObject> fetch_objects(const std::string& name, const std::string& url, const std::string& cache_dir,
                                         ObjectProgress* progress, const std::atomic<bool>* cancel) {
  ObjectFetch fetch(name, url, cache_dir, progress, cancel);
  for (std::size_t i = 0; i < fetch.objects().size(); ++i) fetch.local(i);
  return fetch.objects();
}

}  // namespace tokfeed
