// The fetcher process (`tokfeedd --object-fetcher CACHE_DIR URL`): lists the
// objects a dataset URL names and copies each into CACHE_DIR/objects through
// Arrow's S3FileSystem, reporting on stdout (object_store.cpp documents the
// lines). It is the only process of the daemon that initialises S3: started
// by exec, never forked from the supervisor (object_store.hpp).
//
// Endpoint, region and credentials are the AWS SDK's, as Arrow's
// S3Options::FromUri sets them up (docs/data_model.md 1.1): AWS_ENDPOINT_URL,
// AWS_REGION / AWS_DEFAULT_REGION, AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY /
// AWS_SESSION_TOKEN, AWS_PROFILE, AWS_CONFIG_FILE / AWS_SHARED_CREDENTIALS_FILE
// (~/.aws/config, ~/.aws/credentials), web identity and instance roles.
#include <fcntl.h>
#include <fmt/format.h>
#include <fnmatch.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/hash128.hpp"
#include "dataset/object_store.hpp"

#if defined(TOKFEED_WITH_ARROW) && defined(TOKFEED_WITH_S3)
#include <arrow/buffer.h>
#include <arrow/filesystem/s3fs.h>
#include <arrow/io/interfaces.h>
#include <arrow/util/key_value_metadata.h>
#endif

namespace tokfeed {

namespace {

// Objects are fetched on several threads; these guard what they share. The
// temporaries' lock is never held across a write to the report, which can
// block while the supervisor is not reading: a stop always gets it.
std::mutex g_tmps_mu;
std::set<std::string> g_tmps;  // the temporaries being written, removed on any exit but a kill -9
std::timed_mutex g_report_mu;  // one report line at a time

// Removes every temporary and exits. The lock is held to the end, so no
// thread creates a temporary meanwhile.
[[noreturn]] void remove_tmps_and_exit(int code) {
  g_tmps_mu.lock();
  for (const std::string& t : g_tmps) ::unlink(t.c_str());
  std::_Exit(code);
}

// Writes `line` whole, its newlines flattened; the caller holds g_report_mu.
void write_line(std::string line) {
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
  return ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
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

// Objects fetched at once: TOKFEED_OBJECT_STREAMS (default 4).
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

// How many times a failed request is tried again, and the first wait
// (doubled each time, at most 8 s): TOKFEED_OBJECT_RETRIES (default 6: about
// 30 s of waiting in all) and TOKFEED_OBJECT_BACKOFF_MS (default 500).
int max_retries() {
  const char* s = std::getenv("TOKFEED_OBJECT_RETRIES");
  return s && *s ? std::max(0, std::atoi(s)) : 6;
}
int first_backoff_ms() {
  const char* s = std::getenv("TOKFEED_OBJECT_BACKOFF_MS");
  return s && *s ? std::max(1, std::atoi(s)) : 500;
}

#if defined(TOKFEED_WITH_ARROW) && defined(TOKFEED_WITH_S3)

namespace afs = arrow::fs;

// No retries inside the SDK: every retry is this file's, with its backoff
// and its report.
class NoRetry : public afs::S3RetryStrategy {
 public:
  bool ShouldRetry(const AWSErrorDetail&, int64_t) override { return false; }
  int64_t CalculateDelayBeforeNextRetry(const AWSErrorDetail&, int64_t) override { return 0; }
};

// Objects are read in ranged reads of 8 MiB; a failed one is retried alone.
// Test-only fault hook (TOKFEED_FAULT_HOOKS): TOKFEED_FAULT_OBJECT_CHUNK =
// "BYTES:MS" reads BYTES at a time and waits MS after each.
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

struct Object {
  std::string path;  // bucket/key, as Arrow names it
  uint64_t size = 0;
  std::string url() const { return "s3://" + path; }
};

// What to do about a failure, after the object's name.
std::string advice(const arrow::Status& st) {
  const std::string s = st.ToString();
  if (st.IsIOError() &&
      (s.find("ACCESS_DENIED") != std::string::npos || s.find("AccessDenied") != std::string::npos ||
       s.find("InvalidAccessKeyId") != std::string::npos || s.find("SignatureDoesNotMatch") != std::string::npos))
    return "the store refused the credentials: check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, AWS_PROFILE or "
           "~/.aws/credentials";
  return "check that the store is reachable (AWS_ENDPOINT_URL, AWS_REGION) and restart tokfeedd: objects already "
         "fetched are kept";
}

// $SSL_CERT_FILE, else the first CA bundle of the usual distributions that
// exists ("" when none: the TLS library's defaults).
std::string ca_bundle() {
  if (const char* f = std::getenv("SSL_CERT_FILE"); f && *f) return f;
  for (const char* p : {"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt",
                        "/etc/ssl/ca-bundle.pem", "/etc/pki/tls/cacert.pem", "/etc/ssl/cert.pem"})
    if (::access(p, R_OK) == 0) return p;
  return {};
}

class Fetch {
 public:
  Fetch(std::string cache_dir, std::string url) : dir_(std::move(cache_dir) + "/objects"), url_(std::move(url)) {}

  void run() {
    const std::string rest = url_.substr(5);
    const std::size_t slash = rest.find('/');
    bucket_ = rest.substr(0, slash);
    key_ = slash == std::string::npos ? "" : rest.substr(slash + 1);
    if (bucket_.empty()) fail(url_ + ": no bucket: write the dataset's path as s3://bucket/key");
    afs::S3GlobalOptions g = afs::S3GlobalOptions::Defaults();
    if (arrow::Status st = afs::InitializeS3(g); !st.ok()) fail(url_ + ": cannot initialise S3: " + st.ToString());
    connect();
    std::vector<Object> objects = list();
    uint64_t bytes = 0;
    for (const Object& o : objects) bytes += o.size;
    report(fmt::format("objects {} {}", objects.size(), bytes));
    for (const Object& o : objects) report(fmt::format("object {} {} {}", &o - objects.data(), o.size, o.url()));
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);
    if (ec)
      fail(fmt::format("{}: cannot create {}: {}; set [cache] dir to a writable directory", url_, dir_, ec.message()));
    // Several objects at once (a store's bandwidth is per connection), each
    // by one thread, in key order.
    std::atomic<std::size_t> next{0};
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < std::min<std::size_t>(streams(), objects.size()); ++t)
      threads.emplace_back([&] {
        for (std::size_t i; (i = next.fetch_add(1)) < objects.size();) fetch(i, objects[i]);
      });
    for (std::thread& t : threads) t.join();
    fs_.reset();
    report("done");
    (void)afs::FinalizeS3();
  }

 private:
  // `call` until it succeeds, with the backoff. A missing object or bucket
  // fails at once when listing (a retry cannot help), and is retried like
  // any failure once the object was listed: a store that comes back may
  // answer before it holds its objects again.
  template <class F>
  auto retried(const std::string& what, F&& call, std::size_t index = SIZE_MAX, bool listing = true) {
    for (int attempt = 0;; ++attempt) {
      auto r = call();
      if (r.ok()) return std::move(r).ValueOrDie();
      const arrow::Status& st = r.status();
      if (st.IsInvalid() || st.IsNotImplemented()) fail(fmt::format("{}: {}", what, st.ToString()));
      if (listing && (st.ToString().find("does not exist") != std::string::npos ||
                      st.ToString().find("NoSuchBucket") != std::string::npos ||
                      st.ToString().find("NoSuchKey") != std::string::npos))
        fail(fmt::format("{}: no such object or bucket ({}); check the dataset's path and AWS_ENDPOINT_URL", what,
                         st.ToString()));
      if (attempt >= max_retries())
        fail(fmt::format("{}: the object store failed {} time(s) in a row; the last error: {}; {}", what, attempt + 1,
                         st.ToString(), advice(st)));
      const int ms = std::min(8000, first_backoff_ms() << std::min(attempt, 16));
      if (index != SIZE_MAX) report(fmt::format("retry {} {} {} {}", index, attempt + 1, ms, st.ToString()));
      else
        std::fprintf(stderr, "%s: attempt %d failed, retrying in %d ms: %s\n", what.c_str(), attempt + 1, ms,
                     st.ToString().c_str());
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    }
  }

  void connect() {
    std::string path;
    auto opts = retried(url_, [&] { return afs::S3Options::FromUri("s3://" + bucket_, &path); });
    opts.retry_strategy = std::make_shared<NoRetry>();
    // The TLS library inside a wheel's libarrow may look for CA
    // certificates where this system keeps none (pyarrow sets them from
    // Python's ssl module): the system's bundle, as OpenSSL names it.
    if (opts.tls_ca_file_path.empty()) opts.tls_ca_file_path = ca_bundle();
    if (opts.connect_timeout < 0) opts.connect_timeout = 5;
    fs_ = retried(url_, [&] { return afs::S3FileSystem::Make(opts); });
  }

  std::vector<Object> list() {
    std::vector<Object> out;
    const std::size_t glob = key_.find_first_of("*?[");
    auto add = [&](const afs::FileInfo& fi) {
      if (fi.IsFile()) out.push_back({fi.path(), static_cast<uint64_t>(std::max<int64_t>(0, fi.size()))});
    };
    auto below = [&](const std::string& prefix, bool glob) {
      afs::FileSelector sel;
      sel.base_dir = prefix;
      sel.recursive = true;
      sel.allow_not_found = glob;  // a glob below a missing prefix matches nothing
      return retried(url_, [&] { return fs_->GetFileInfo(sel); });
    };
    if (glob != std::string::npos) {
      const std::size_t cut = key_.rfind('/', glob);
      const std::string base = bucket_ + (cut == std::string::npos ? "" : "/" + key_.substr(0, cut));
      const std::string pattern = bucket_ + "/" + key_;
      for (const afs::FileInfo& fi : below(base, true))
        if (::fnmatch(pattern.c_str(), fi.path().c_str(), FNM_PATHNAME) == 0) add(fi);
      if (out.empty())
        fail(url_ + ": the glob matches no object; check the dataset's path (and its bucket) and AWS_ENDPOINT_URL");
    } else {
      const std::string path = key_.empty() ? bucket_ : bucket_ + "/" + key_;
      afs::FileInfo fi = retried(url_, [&] { return fs_->GetFileInfo(path); });
      if (fi.IsFile()) {
        add(fi);
      } else if (fi.type() == afs::FileType::Directory) {
        for (const afs::FileInfo& f : below(path, false))
          if (is_dataset_key(f.path())) add(f);
        if (out.empty())
          fail(url_ +
               ": holds no .jsonl, .json, .jsonl.gz, .json.gz, .jsonl.zst, .json.zst, .parquet or .arrow object");
      } else {
        fail(url_ + ": no such object or bucket; check the dataset's path and AWS_ENDPOINT_URL");
      }
    }
    std::sort(out.begin(), out.end(), [](const Object& a, const Object& b) { return a.path < b.path; });
    return out;
  }

  // The object opened for reading, and its ETag.
  std::shared_ptr<arrow::io::RandomAccessFile> open(std::size_t i, const Object& o, std::string& etag) {
    return retried(
        o.url(),
        [&]() -> arrow::Result<std::shared_ptr<arrow::io::RandomAccessFile>> {
          afs::FileInfo fi(o.path, afs::FileType::File);
          fi.set_size(static_cast<int64_t>(o.size));
          ARROW_ASSIGN_OR_RAISE(auto f, fs_->OpenInputFile(fi));
          ARROW_ASSIGN_OR_RAISE(auto meta, f->ReadMetadata());
          etag.clear();
          if (meta) {
            auto e = meta->Get("ETag");
            if (e.ok()) etag = *e;
          }
          return f;
        },
        i, /*listing=*/false);
  }

  void fetch(std::size_t i, const Object& o) {
    std::string etag;
    auto file = open(i, o, etag);
    Hash128 h;
    h.field("tokfeed object v1");
    h.field(o.url());
    h.field(etag);
    h.field(std::to_string(o.size));
    const std::string base = o.path.substr(o.path.rfind('/') + 1);
    const std::string local = fmt::format("{}/{}-{}", dir_, h.hex().substr(0, 24), base);
    if (std::error_code ec; std::filesystem::file_size(local, ec) == o.size && !ec) {
      report(fmt::format("ready {} 1 {}", i, local));
      return;
    }
    remove_stale(local);
    report(fmt::format("fetch {}", i));
    const std::string tmp = fmt::format("{}.tmp.{}", local, ::getpid());
    int fd = create_tmp(tmp);
    if (fd < 0)
      fail(fmt::format("{}: cannot create {}: {}; set [cache] dir to a writable directory", o.url(), tmp,
                       std::strerror(errno)));
    uint64_t done = 0;
    while (done < o.size) {
      if (done) chunk_pause();
      const int64_t n = static_cast<int64_t>(std::min<uint64_t>(chunk_bytes(), o.size - done));
      std::shared_ptr<arrow::Buffer> buf = retried(
          o.url(),
          [&]() -> arrow::Result<std::shared_ptr<arrow::Buffer>> {
            auto r = file->ReadAt(static_cast<int64_t>(done), n);
            if (r.ok() && (*r)->size() != n)
              return arrow::Status::IOError(
                  fmt::format("short read at byte {}: {} of {} bytes", done, (*r)->size(), n));
            if (!r.ok()) {
              // The connection may be gone: open the object again for the
              // next try, and refuse one that changed meanwhile.
              std::string now;
              auto again = fs_->OpenInputFile(o.path);
              if (again.ok()) {
                auto meta = (*again)->ReadMetadata();
                if (meta.ok() && *meta) {
                  auto e = (*meta)->Get("ETag");
                  if (e.ok()) now = *e;
                }
                if (!now.empty() && !etag.empty() && now != etag) {
                  ::close(fd);
                  fail(
                      fmt::format("{}: the object changed while it was fetched (ETag {} became {}); restart "
                                  "tokfeedd to fetch the new one",
                                  o.url(), etag, now));
                }
                file = *again;
              }
            }
            return r;
          },
          i, /*listing=*/false);
      const char* p = reinterpret_cast<const char*>(buf->data());
      for (int64_t off = 0; off < n;) {
        ssize_t w = ::pwrite(fd, p + off, static_cast<std::size_t>(n - off), static_cast<off_t>(done + off));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
          int err = errno;
          ::close(fd);
          fail(fmt::format("{}: cannot write {}: {}; free space in [cache] dir or set it elsewhere", o.url(), tmp,
                           std::strerror(err)));
        }
        off += w;
      }
      done += static_cast<uint64_t>(n);
      report(fmt::format("progress {} {}", i, done));
    }
    if (::fsync(fd) != 0 || ::close(fd) != 0 || ::rename(tmp.c_str(), local.c_str()) != 0) {
      fail(fmt::format("{}: cannot keep {}: {}", o.url(), local, std::strerror(errno)));
    }
    kept(tmp);
    report(fmt::format("ready {} 0 {}", i, local));
  }

  // Temporaries of `local` whose fetcher is gone.
  static void remove_stale(const std::string& local) {
    namespace fs = std::filesystem;
    const std::string prefix = fs::path(local).filename().string() + ".tmp.";
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(fs::path(local).parent_path(), ec)) {
      const std::string n = e.path().filename().string();
      if (n.rfind(prefix, 0) != 0) continue;
      const pid_t pid = std::atoi(n.c_str() + prefix.size());
      if (pid > 0 && (::kill(pid, 0) == 0 || errno != ESRCH)) continue;  // still being written
      fs::remove(e.path(), ec);
    }
  }

  std::string dir_, url_, bucket_, key_;
  std::shared_ptr<afs::S3FileSystem> fs_;
};

#endif

}  // namespace

int object_fetcher_main(int argc, char** argv) {
  // argv: tokfeedd --object-fetcher CACHE_DIR URL
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  ::close_range(3, ~0U, 0);    // nothing of the supervisor's but the report (stdout) and the log (stderr)
  ::signal(SIGPIPE, SIG_IGN);  // a write to a supervisor that is gone fails, and the temporaries go
  // SIGTERM and SIGINT (a stopping supervisor, or its death) are taken by a
  // thread of their own, which removes the temporaries before the process
  // ends: blocked here, before any thread starts, so every thread inherits it.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  ::pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  std::thread([stop] {
    int sig = 0;
    ::sigwait(&stop, &sig);
    remove_tmps_and_exit(128 + sig);
  }).detach();
  if (argc != 4) {
    std::fprintf(stderr, "usage: tokfeedd --object-fetcher CACHE_DIR URL (started by tokfeedd itself)\n");
    return 2;
  }
  const std::string url = argv[3];
  if (!is_object_url(url)) fail(url + ": not an object URL (s3://bucket/key)");
#if defined(TOKFEED_WITH_ARROW) && defined(TOKFEED_WITH_S3)
  Fetch(argv[2], url).run();
  return 0;
#else
  fail(url +
       ": this tokfeedd was built without Apache Arrow's S3FileSystem, which reads s3:// datasets; rebuild it "
       "with Arrow (scripts/deps.sh, TOKFEED_WITH_ARROW=ON; the pyarrow wheel has S3) or copy the objects to a "
       "local path");
#endif
}

}  // namespace tokfeed
