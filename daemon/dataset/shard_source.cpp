#include "dataset/shard_source.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <glob.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>
#include <zlib.h>
#include <zstd.h>

#include <chrono>
#include <thread>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>

#include "dataset/dataset_error.hpp"

namespace tokfeed {

namespace fs = std::filesystem;

namespace {

bool is_dataset_file(const std::string& name) {
  // The metadata `datasets` writes beside its shards is not data.
  if (name == "dataset_info.json" || name == "state.json" || name == "dataset_dict.json") return false;
  for (const char* ext : {".jsonl", ".json", ".jsonl.gz", ".json.gz", ".jsonl.zst", ".json.zst", ".parquet", ".arrow"})
    if (name.ends_with(ext)) return true;
  return false;
}

bool is_regular(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// A file mapped read-only and shared, with its stat; unmapped when destroyed.
struct Mapped {
  shm::Mapping map;  // none for an empty file
  struct stat st {};
  const char* data() const { return map.at<const char>(0); }
  uint64_t size() const { return static_cast<uint64_t>(st.st_size); }
};

// Maps all of `fd` read-only and shared, and closes it. `what` names the
// file in an error.
Mapped map_fd(int fd, const std::string& what) {
  Mapped m;
  if (::fstat(fd, &m.st) != 0) {
    int err = errno;
    ::close(fd);
    throw DatasetError(fmt::format("{}: cannot stat it: {}", what, std::strerror(err)));
  }
  if (m.size() > 0) {
    void* p = ::mmap(nullptr, m.size(), PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      throw DatasetError(fmt::format("{}: cannot map it: {}", what, std::strerror(err)));
    }
    m.map = shm::Mapping(-1, p, m.size());
  }
  ::close(fd);
  return m;
}

Mapped map_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw DatasetError(fmt::format("{}: cannot open the dataset: {}", path, std::strerror(errno)));
  return map_fd(fd, path);
}

void write_all(int fd, const void* p, std::size_t n, const std::string& what) {
  const char* c = static_cast<const char*>(p);
  while (n) {
    ssize_t w = ::write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0)
      throw DatasetError(
          fmt::format("{}: cannot write the decompressed shard: {}; free space there, or set [cache] "
                      "dir elsewhere",
                      what, std::strerror(errno)));
    c += w;
    n -= static_cast<std::size_t>(w);
  }
}

// Decompresses `in` into `fd`. Several gzip members or zstd frames follow
// each other as one stream; anything else is corrupt input.
void decompress(const std::string& path, Compression c, const Mapped& in, int fd, const std::string& out_name,
                const ShardProgress& progress) {
  std::vector<char> buf(1 << 20);
  uint64_t reported = 0;
  // After each piece of output: progress, and a stop.
  auto advance = [&](uint64_t pos) {
    if (progress.bytes) progress.bytes->fetch_add(pos - reported, std::memory_order_relaxed);
    reported = pos;
    progress.chunk_pause();
    return !progress.cancelled();
  };
  auto stopped = [&] { return DatasetError(path + ": decompressing stopped: the daemon is shutting down"); };
  auto at = [&](uint64_t offset, const std::string& what) {
    return DatasetError(
        fmt::format("{}: byte {} of the compressed file: {}; the file is damaged: fetch or "
                    "compress it again",
                    path, offset, what));
  };
  if (in.size() == 0) throw at(0, "the compressed file is empty");
  if (c == Compression::kGzip) {
    z_stream z{};
    if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) throw DatasetError(path + ": cannot start zlib");
    uint64_t pos = 0;
    bool in_member = false;
    while (pos < in.size()) {
      in_member = true;
      std::size_t chunk = static_cast<std::size_t>(std::min<uint64_t>(in.size() - pos, 1u << 30));
      z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data() + pos));
      z.avail_in = static_cast<uInt>(chunk);
      z.next_out = reinterpret_cast<Bytef*>(buf.data());
      z.avail_out = static_cast<uInt>(buf.size());
      int rc = inflate(&z, Z_NO_FLUSH);
      pos += chunk - z.avail_in;
      write_all(fd, buf.data(), buf.size() - z.avail_out, out_name);
      if (!advance(pos)) {
        inflateEnd(&z);
        throw stopped();
      }
      if (rc == Z_STREAM_END) {
        in_member = false;
        inflateReset(&z);
        // gzip(1) ignores zero bytes after the last member (tape padding).
        if (std::all_of(in.data() + pos, in.data() + in.size(), [](char b) { return b == 0; })) break;
      } else if (rc == Z_BUF_ERROR && z.avail_in == 0 && pos >= in.size()) {
        break;
      } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
        std::string msg = z.msg ? z.msg : fmt::format("zlib error {}", rc);
        inflateEnd(&z);
        throw at(pos, "corrupt gzip data (" + msg + ")");
      }
    }
    inflateEnd(&z);
    if (in_member) throw at(in.size(), "truncated gzip stream (it ends inside a member)");
    return;
  }
  ZSTD_DCtx* z = ZSTD_createDCtx();
  ZSTD_inBuffer src{in.data(), static_cast<std::size_t>(in.size()), 0};
  std::size_t last = 0;
  while (src.pos < src.size) {
    ZSTD_outBuffer dst{buf.data(), buf.size(), 0};
    last = ZSTD_decompressStream(z, &dst, &src);
    if (ZSTD_isError(last)) {
      std::string msg = ZSTD_getErrorName(last);
      ZSTD_freeDCtx(z);
      throw at(src.pos, "corrupt zstd data (" + msg + ")");
    }
    write_all(fd, buf.data(), dst.pos, out_name);
    if (!advance(src.pos)) {
      ZSTD_freeDCtx(z);
      throw stopped();
    }
  }
  // Flush what the last frame still holds.
  for (;;) {
    ZSTD_outBuffer dst{buf.data(), buf.size(), 0};
    if (last == 0) break;
    last = ZSTD_decompressStream(z, &dst, &src);
    if (ZSTD_isError(last) || dst.pos == 0) break;
    write_all(fd, buf.data(), dst.pos, out_name);
  }
  ZSTD_freeDCtx(z);
  if (last != 0) throw at(in.size(), "truncated zstd stream (it ends inside a frame)");
}

std::string content_key(const Mapped& in) {
  XXH128_hash_t h = XXH3_128bits(in.data(), static_cast<std::size_t>(in.size()));
  return fmt::format("{:016x}{:016x}", h.high64, h.low64);
}

}  // namespace

void ShardProgress::chunk_pause() const {
#ifdef TOKFEED_FAULT_HOOKS
  if (slow_chunk_ms) std::this_thread::sleep_for(std::chrono::milliseconds(slow_chunk_ms));
#endif
}

Compression compression_of(const std::string& path) noexcept {
  if (path.ends_with(".gz")) return Compression::kGzip;
  if (path.ends_with(".zst")) return Compression::kZstd;
  return Compression::kNone;
}

std::vector<std::string> resolve_shards(const std::string& name, const std::string& path) {
  std::vector<std::string> out;
  if (path.find_first_of("*?[") != std::string::npos) {
    glob_t g{};
    int rc = ::glob(path.c_str(), GLOB_NOSORT, nullptr, &g);
    if (rc == 0)
      for (std::size_t i = 0; i < g.gl_pathc; ++i)
        if (is_regular(g.gl_pathv[i])) out.emplace_back(g.gl_pathv[i]);
    ::globfree(&g);
    if (out.empty()) throw DatasetError(fmt::format("{}: the glob matches no file; check the dataset's path", name));
  } else if (fs::is_directory(path)) {
    std::error_code ec;
    if (fs::exists(fs::path(path) / "dataset_dict.json", ec))
      throw DatasetError(fmt::format(
          "{}: a `datasets` DatasetDict folder: name one of its splits' folders (e.g. {}/train)", name, path));
    for (auto it = fs::recursive_directory_iterator(path, fs::directory_options::none, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (it->is_regular_file(ec) && is_dataset_file(it->path().filename().string()))
        out.push_back(it->path().string());
    }
    if (ec) throw DatasetError(fmt::format("{}: cannot list the directory: {}", name, ec.message()));
    if (out.empty())
      throw DatasetError(
          fmt::format("{}: the directory holds no .jsonl, .json, .jsonl.gz, .json.gz, .jsonl.zst, "
                      ".json.zst, .parquet or .arrow file",
                      name));
  } else {
    out.push_back(path);
  }
  std::sort(out.begin(), out.end());  // bytewise: std::string compares chars as unsigned
  return out;
}

ShardBytes ShardBytes::open(const std::string& path, const std::string& spool_dir, const ShardProgress& progress) {
  ShardBytes s;
  Mapped in = map_file(path);
  Compression c = compression_of(path);
  // A Parquet or Arrow shard is mapped as it is, and read in place.
  if (c == Compression::kNone) {
    s.map_ = std::move(in.map);
    std::error_code ec;
    fs::path real = fs::weakly_canonical(path, ec);
    s.identity_ = fmt::format("file\n{}\n{}\n{}\n{}", ec ? path : real.string(), in.size(),
                              in.st.st_mtim.tv_sec * 1'000'000'000LL + in.st.st_mtim.tv_nsec, in.st.st_ino);
    s.file_ = path;
    s.ino_ = in.st.st_ino;
    s.dev_ = in.st.st_dev;
    return s;
  }
  std::string key = content_key(in);
  s.identity_ = "spool\n" + key;
  auto fill = [&](int w, const std::string& out_name) { decompress(path, c, in, w, out_name, progress); };
  int fd = -1;
  if (spool_dir.empty()) {
    fd = ::memfd_create("tokfeed-shard", MFD_CLOEXEC);
    if (fd < 0) throw DatasetError(fmt::format("{}: memfd_create failed: {}", path, std::strerror(errno)));
    try {
      fill(fd, path);
    } catch (...) {
      ::close(fd);
      throw;
    }
  } else {
    std::error_code ec;
    fs::create_directories(spool_dir, ec);
    std::string spool = fmt::format("{}/{}.jsonl", spool_dir, key);
    fd = ::open(spool.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      // Written under a temporary name and renamed: a crash leaves no
      // half-written spool under the final name.
      std::string tmp = fmt::format("{}.tmp.{}.{}", spool, getpid(), std::random_device{}());
      int w = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
      if (w < 0)
        throw DatasetError(fmt::format("{}: cannot create {}: {}; set [cache] dir to a writable directory", path, tmp,
                                       std::strerror(errno)));
      try {
        fill(w, tmp);
      } catch (...) {
        ::close(w);
        ::unlink(tmp.c_str());
        throw;
      }
      if (::fsync(w) != 0 || ::rename(tmp.c_str(), spool.c_str()) != 0) {
        int err = errno;
        ::close(w);
        ::unlink(tmp.c_str());
        throw DatasetError(fmt::format("{}: cannot keep the spool {}: {}", path, spool, std::strerror(err)));
      }
      fd = w;
    }
  }
  Mapped spooled = map_fd(fd, path + " (decompressed)");
  s.map_ = std::move(spooled.map);
  if (!spool_dir.empty()) {
    s.file_ = fmt::format("{}/{}.jsonl", spool_dir, key);
    s.ino_ = spooled.st.st_ino;
    s.dev_ = spooled.st.st_dev;
  }
  return s;
}

std::string ShardBytes::shrunk() const {
  struct stat st;
  // A file replaced under its name leaves the mapped one whole.
  if (file_.empty() || ::stat(file_.c_str(), &st) != 0 || st.st_ino != ino_ || st.st_dev != dev_ ||
      static_cast<uint64_t>(st.st_size) >= size())
    return {};
  return fmt::format(
      "{}: the file shrank from {} to {} bytes while tokfeedd served it (truncated or rewritten in "
      "place), so its records can no longer be read; restore it, or restart tokfeedd to index what it "
      "holds now (write new data to another file and rename it over the old one: that is safe)",
      file_, size(), st.st_size);
}

}  // namespace tokfeed
