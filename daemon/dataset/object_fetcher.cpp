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
#include "dataset/object_fetcher_io.hpp"
#include "dataset/object_partial.hpp"
#include "dataset/object_store.hpp"

#if defined(TOKFEED_WITH_ARROW) && defined(TOKFEED_WITH_S3)
#include <arrow/buffer.h>
#include <arrow/filesystem/s3fs.h>
#include <arrow/io/interfaces.h>
#include <arrow/util/key_value_metadata.h>
#endif

namespace tokfeed {

namespace {

using namespace fetcher;  // NOLINT: this file is the fetcher

#if defined(TOKFEED_WITH_ARROW) && defined(TOKFEED_WITH_S3)

namespace afs = arrow::fs;

// No retries inside the SDK: every retry is this file's, with its backoff
// and its report.
class NoRetry : public afs::S3RetryStrategy {
 public:
  bool ShouldRetry(const AWSErrorDetail&, int64_t) override { return false; }
  int64_t CalculateDelayBeforeNextRetry(const AWSErrorDetail&, int64_t) override { return 0; }
};

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
  Fetch(std::string cache_dir, std::string url, bool footers)
      : dir_(std::move(cache_dir) + "/objects"), url_(std::move(url)), footers_(footers) {}

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
    if (footers_) {
      fetch_footers_first(objects);
    } else {
      // Several objects at once (a store's bandwidth is per connection),
      // each by one thread, in key order.
      std::atomic<std::size_t> next{0};
      run_threads(std::min<std::size_t>(streams(), objects.size()), [&] {
        for (std::size_t i; (i = next.fetch_add(1)) < objects.size();) fetch(i, objects[i]);
      });
    }
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

  // One object being fetched: where it goes, and its file in the store.
  struct Target {
    std::size_t i = 0;
    const Object* o = nullptr;
    std::string etag, local, tmp;
    int fd = -1;
    std::mutex mu;  // guards `file`, opened again after a failure
    std::shared_ptr<arrow::io::RandomAccessFile> file;
    std::atomic<uint64_t> written{0};
    uint64_t tail = 0;                   // bytes read from its end (its footer)
    std::unique_ptr<PartialObject> map;  // footer first: its completion map
    std::vector<char> started;           // per group (under the scheduler's lock)
    uint32_t left = 0;                   // groups not yet written (under the scheduler's lock)
    bool whole_started = false;          // without a map: the one task (under the scheduler's lock)
  };

  // Opens object `i` and its temporary; null when a complete copy is in the
  // cache (reported ready).
  std::unique_ptr<Target> begin(std::size_t i, const Object& o) {
    auto t = std::make_unique<Target>();
    t->i = i;
    t->o = &o;
    t->file = open(i, o, t->etag);
    Hash128 h;
    h.field("tokfeed object v1");
    h.field(o.url());
    h.field(t->etag);
    h.field(std::to_string(o.size));
    const std::string base = o.path.substr(o.path.rfind('/') + 1);
    t->local = fmt::format("{}/{}-{}", dir_, h.hex().substr(0, 24), base);
    if (std::error_code ec; std::filesystem::file_size(t->local, ec) == o.size && !ec) {
      report(fmt::format("ready {} 1 {}", i, t->local));
      return nullptr;
    }
    remove_stale(t->local);
    report(fmt::format("fetch {}", i));
    t->tmp = fmt::format("{}.tmp.{}", t->local, ::getpid());
    t->fd = create_tmp(t->tmp);
    if (t->fd < 0)
      fail(fmt::format("{}: cannot create {}: {}; set [cache] dir to a writable directory", o.url(), t->tmp,
                       std::strerror(errno)));
    return t;
  }

  // Copies [from, to) of the object into its temporary, in ranged reads.
  void copy(Target& t, uint64_t from, uint64_t to) {
    const Object& o = *t.o;
    for (uint64_t done = from; done < to;) {
      if (done != from) chunk_pause();
      const int64_t n = static_cast<int64_t>(std::min<uint64_t>(chunk_bytes(), to - done));
      std::shared_ptr<arrow::Buffer> buf = retried(
          o.url(),
          [&]() -> arrow::Result<std::shared_ptr<arrow::Buffer>> {
            std::shared_ptr<arrow::io::RandomAccessFile> file;
            {
              std::lock_guard lock(t.mu);
              file = t.file;
            }
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
                if (!now.empty() && !t.etag.empty() && now != t.etag)
                  fail(
                      fmt::format("{}: the object changed while it was fetched (ETag {} became {}); restart "
                                  "tokfeedd to fetch the new one",
                                  o.url(), t.etag, now));
                std::lock_guard lock(t.mu);
                t.file = *again;
              }
            }
            return r;
          },
          t.i, /*listing=*/false);
      const char* p = reinterpret_cast<const char*>(buf->data());
      for (int64_t off = 0; off < n;) {
        ssize_t w = ::pwrite(t.fd, p + off, static_cast<std::size_t>(n - off), static_cast<off_t>(done + off));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0)
          fail(fmt::format("{}: cannot write {}: {}; free space in [cache] dir or set it elsewhere", o.url(), t.tmp,
                           std::strerror(errno)));
        off += w;
      }
      done += static_cast<uint64_t>(n);
      report(fmt::format("progress {} {}", t.i, t.written.fetch_add(static_cast<uint64_t>(n)) + n));
    }
  }

  // Keeps the complete temporary under its name; its map goes.
  void finish(Target& t) {
    if (::fsync(t.fd) != 0 || ::close(t.fd) != 0 || ::rename(t.tmp.c_str(), t.local.c_str()) != 0)
      fail(fmt::format("{}: cannot keep {}: {}", t.o->url(), t.local, std::strerror(errno)));
    kept(t.tmp);
    if (t.map) {
      ::unlink((t.tmp + ".map").c_str());
      kept(t.tmp + ".map");
    }
    report(fmt::format("ready {} 0 {}", t.i, t.local));
  }

  void fetch(std::size_t i, const Object& o) {
    std::unique_ptr<Target> t = begin(i, o);
    if (!t) return;
    copy(*t, 0, o.size);
    finish(*t);
  }

  // Footer first: the footer of a Parquet object, then its map, reported
  // (`partial`); an object that is not Parquet, or whose footer cannot be
  // read here, gets no map and is fetched whole.
  void footer(Target& t) {
    const Object& o = *t.o;
    if (!o.path.ends_with(".parquet") || o.size < 12) return;
    if (::ftruncate(t.fd, static_cast<off_t>(o.size)) != 0)
      fail(fmt::format("{}: cannot size {}: {}; free space in [cache] dir or set it elsewhere", o.url(), t.tmp,
                       std::strerror(errno)));
    std::vector<std::pair<uint64_t, uint64_t>> ranges;
    std::string why;
    for (uint64_t want = std::min<uint64_t>(o.size, 64 << 10);;) {
      copy(t, o.size - want, o.size - t.tail);
      t.tail = want;
      std::vector<uint8_t> tail(want);
      if (::pread(t.fd, tail.data(), want, static_cast<off_t>(o.size - want)) != static_cast<ssize_t>(want))
        fail(fmt::format("{}: cannot read back {}: {}", o.url(), t.tmp, std::strerror(errno)));
      uint64_t need = 0;
      why = parquet_group_ranges(tail.data(), want, o.size, ranges, need);
      if (need == 0 || need > o.size) break;
      want = need;
    }
    if (why.empty() && ranges.empty()) why = "it holds no row group";
    if (!why.empty()) {
      std::fprintf(stderr, "%s: fetched whole, not footer first: %s\n", o.url().c_str(), why.c_str());
      return;
    }
    const std::string map = t.tmp + ".map";
    track(map);
    try {
      t.map = std::make_unique<PartialObject>(map, o.url(), o.size, ranges);
    } catch (const std::exception& e) {
      fail(e.what());
    }
    t.started.assign(ranges.size(), 0);
    t.left = static_cast<uint32_t>(ranges.size());
    report(fmt::format("partial {} {}", t.i, t.local));
  }

  // Footers first: every object's footer (so the daemon plans from them),
  // then the row groups, those readers wait for first; one stream of
  // `streams()` is kept for them (when there are two or more).
  void fetch_footers_first(const std::vector<Object>& objects) {
    std::vector<std::unique_ptr<Target>> targets(objects.size());
    const unsigned n = std::max<unsigned>(1, std::min<std::size_t>(streams(), objects.size()));
    std::atomic<std::size_t> next{0};
    run_threads(n, [&] {
      for (std::size_t i; (i = next.fetch_add(1)) < objects.size();) {
        targets[i] = begin(i, objects[i]);
        if (targets[i]) footer(*targets[i]);
      }
    });
    std::mutex mu;
    unsigned in_order = 0;  // threads on groups nobody waits for
    const unsigned order_limit = wanted_only() ? 0 : n > 1 ? n - 1 : 1;
    // The next task: a target and its group (UINT32_MAX: the whole object);
    // false when every task has begun.
    auto pick = [&](Target*& t, uint32_t& g, bool& ordered) {
      for (;;) {
        {
          std::lock_guard lock(mu);
          bool left = false;
          for (auto& x : targets)
            for (uint32_t k = 0; x && x->map && k < x->started.size(); ++k)
              if (!x->started[k] && x->map->wanted(k)) {
                x->started[k] = 1, t = x.get(), g = k, ordered = false;
                return true;
              }
          for (auto& x : targets) {
            if (!x) continue;
            for (uint32_t k = 0; x->map && k < x->started.size(); ++k)
              if (!x->started[k]) {
                left = true;
                if (in_order >= order_limit) break;
                x->started[k] = 1, t = x.get(), g = k, ordered = true, ++in_order;
                return true;
              }
            if (!x->map && !x->whole_started) {
              left = true;
              if (in_order >= order_limit) continue;
              x->whole_started = true, t = x.get(), g = UINT32_MAX, ordered = true, ++in_order;
              return true;
            }
          }
          if (!left) return false;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    };
    run_threads(n, [&] {
      Target* t = nullptr;
      uint32_t g = 0;
      bool ordered = false;
      while (pick(t, g, ordered)) {
        if (g == UINT32_MAX) {
          copy(*t, 0, t->o->size - t->tail);
          finish(*t);
        } else {
          auto [from, to] = t->map->range(g);
          copy(*t, from, std::max(from, std::min(to, t->o->size - t->tail)));  // the tail is there
          t->map->set_done(g);
        }
        bool last = false;
        {
          std::lock_guard lock(mu);
          if (ordered) --in_order;
          if (g != UINT32_MAX) last = --t->left == 0;
        }
        if (last) finish(*t);
      }
    });
  }

  template <class F>
  static void run_threads(unsigned n, F&& body) {
    std::vector<std::thread> threads;
    for (unsigned k = 0; k < n; ++k) threads.emplace_back(body);
    for (std::thread& t : threads) t.join();
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
  bool footers_;
  std::shared_ptr<afs::S3FileSystem> fs_;
};

#endif

}  // namespace

int object_fetcher_main(int argc, char** argv) {
  // argv: tokfeedd --object-fetcher CACHE_DIR URL [footers]
  const bool footers = argc == 5 && std::strcmp(argv[4], "footers") == 0;
  // The supervisor's death stops the fetcher. A fetch footer first outlives
  // the supervisor's thread that started it (PR_SET_PDEATHSIG follows that
  // thread), so it watches its parent process instead.
  if (!footers) ::prctl(PR_SET_PDEATHSIG, SIGTERM);
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
  if (argc != 4 && !footers) {
    std::fprintf(stderr, "usage: tokfeedd --object-fetcher CACHE_DIR URL [footers] (started by tokfeedd itself)\n");
    return 2;
  }
  if (footers)
    std::thread([parent = ::getppid()] {
      while (::getppid() == parent) std::this_thread::sleep_for(std::chrono::milliseconds(200));
      ::kill(::getpid(), SIGTERM);  // taken by the thread above
    }).detach();
  const std::string url = argv[3];
  if (!is_object_url(url)) fail(url + ": not an object URL (s3://bucket/key)");
#if defined(TOKFEED_WITH_ARROW) && defined(TOKFEED_WITH_S3)
  Fetch(argv[2], url, footers).run();
  return 0;
#else
  fail(url +
       ": this tokfeedd was built without Apache Arrow's S3FileSystem, which reads s3:// datasets; rebuild it "
       "with Arrow (scripts/deps.sh, TOKFEED_WITH_ARROW=ON; the pyarrow wheel has S3) or copy the objects to a "
       "local path");
#endif
}

}  // namespace tokfeed
