#include "dataset/shard_index.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

#include "chat/chat_jinja.hpp"
#include "common/fault_hook.hpp"
#include "dataset/dataset_error.hpp"

namespace tokfeed {

namespace {

// A record's verdict: under its dataset's model template when it has one.
#ifdef TOKFEED_FAULT_HOOKS
// Test-only fault hook: rendering a record that holds
// TOKFEED_FAULT_CRASH_RENDER ends the process as TOKFEED_FAULT_CRASH_HOW says
// ("oom": an allocation past any address-space limit).
void render_fault(std::string_view rec) {
  static const char* what = std::getenv("TOKFEED_FAULT_CRASH_RENDER");
  if (!what || *what == '\0' || rec.find(what) == std::string_view::npos) return;
  const char* how = std::getenv("TOKFEED_FAULT_CRASH_HOW");
  if (how && std::string_view(how) == "oom") {
    void* p = ::operator new (uint64_t{1} << 46);  // 64 TiB: std::bad_alloc under [workers] max_memory
    ::operator delete(p);
  }
  fault_crash();
}
#endif

// Under rules.defer_render nothing is rendered: a record the template would
// render is judged on its messages alone here, and rendered in a child.
std::string check(std::string_view rec, const text::RecordRules& rules, bool padded) {
  static thread_local tmpl::Value messages, tools;
  static thread_local text::Rendered rendered;
  static thread_local text::PlainFound plain;
  if (rules.chat) {
    // A plain-text record (told apart in the same parse): no template renders it.
    std::size_t prompt = 0;
    if (rules.defer_render) return text::record_to_chat(rec, rules, padded, messages, tools, &prompt, &plain);
#ifdef TOKFEED_FAULT_HOOKS
    render_fault(rec);
#endif
    tmpl::RecordScope budget(rules.chat->limits);  // every render of the record's label rule shares it
    return text::check_chat_record(rec, rules, padded);
  }
  if (std::string reason; text::plain_record(rec, rules, padded, plain.record, reason)) return reason;
#ifdef TOKFEED_FAULT_HOOKS
  if (rules.renders() && !rules.defer_render) render_fault(rec);
#endif
  if (text::tool_record(rec, rules, padded, messages, tools)) {
    if (rules.defer_render) return {};
    tmpl::RecordScope budget(rules.tool_chat->limits);
    return text::render_labeled(*rules.tool_chat, messages, tools, rules.loss, rendered);
  }
  return text::check_record(rec, rules, padded);
}

constexpr char kMagic[8] = {'T', 'O', 'K', 'F', 'S', 'H', 'X', '1'};
constexpr uint32_t kVersion = 3;
// JSONL shards are indexed in chunks of about this size (cut after a
// newline), shared out among the threads. The cut points depend only on the
// bytes, so the index does not depend on the thread count.
constexpr uint64_t kChunkBytes = 8u << 20;

// The saved index: this header, `valid` uint64 offsets, then per bad record
// a uint32 line, a uint32 length and the reason's bytes. Little-endian.
struct Header {
  char magic[8];
  uint32_t version;
  uint32_t kind;
  uint64_t valid;
  uint64_t bad;
  uint64_t shard_bytes;
  uint64_t bad_bytes;
  uint64_t reserved[2];
};
static_assert(sizeof(Header) == 64);

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

// The reason a record of `bytes` bytes is bad before it is read, or "".
std::string size_reason(uint64_t bytes, const text::RecordRules& rules) {
  if (rules.max_bytes && bytes > rules.max_bytes)
    return fmt::format(
        "record of {} bytes is longer than max_record_bytes = {} (left unparsed; raise max_record_bytes for this "
        "dataset to keep it)",
        bytes, rules.max_bytes);
  if (bytes > UINT32_MAX) return "record longer than 4 GiB";
  return {};
}

// The end of the JSON value that starts at `i` (an array element): a bracket
// matcher that skips strings. Stops at a ',' or ']' at depth 0 or after the
// closing bracket of the value. Counts newlines into `*lines` when given.
// Returns false for an unterminated value.
bool element_end(const char* d, uint64_t size, uint64_t& i, uint32_t* lines) {
  int depth = 0;
  bool in_string = false;
  for (; i < size; ++i) {
    char c = d[i];
    if (c == '\n' && lines) ++*lines;
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '{' || c == '[') ++depth;
    else if (c == '}' || c == ']') {
      if (depth == 0) break;
      if (--depth == 0) {
        ++i;
        break;
      }
    } else if (c == ',' && depth == 0) {
      break;
    }
  }
  return !in_string && depth == 0;
}

struct Part {
  std::vector<uint64_t> offsets;
  std::vector<ShardBad> bad;  // lines relative to the part's first line
  uint32_t lines = 0;         // newlines in the part
};

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22  // Linux 5.14
#endif

// Maps the pages of [p, p + n) in one call: far cheaper than a page fault
// every few pages when all of them are read next. Older kernels refuse it;
// then they fault.
void populate(const char* p, uint64_t n) {
  if (n == 0) return;
  uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  uintptr_t b = reinterpret_cast<uintptr_t>(p) & ~(page - 1);
  ::madvise(reinterpret_cast<void*>(b),  // NOLINT(performance-no-int-to-ptr): page-aligned for madvise
            reinterpret_cast<uintptr_t>(p) + n - b, MADV_POPULATE_READ);
}

// Drops this process's page-table entries for the whole pages inside
// [p, p + n) of a read-only MAP_SHARED file mapping; the page cache keeps the
// bytes, and a later read maps them again. Only for such mappings: on
// anonymous memory this would zero it.
void release(const char* p, uint64_t n) {
  uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  uintptr_t b = (reinterpret_cast<uintptr_t>(p) + page - 1) & ~(page - 1);
  uintptr_t e = (reinterpret_cast<uintptr_t>(p) + n) & ~(page - 1);
  if (e > b)
    ::madvise(reinterpret_cast<void*>(b),  // NOLINT(performance-no-int-to-ptr): page-aligned for madvise
              e - b, MADV_DONTNEED);
}

// One chunk of a JSONL shard: [b, e), starting at a line start.
// `rules`: nullptr takes every non-blank line as a record, unread.
void index_lines(const char* d, uint64_t size, uint64_t b, uint64_t e, const text::RecordRules* rules, Part& out,
                 const ShardIndex::Progress& progress, bool file_mapping) {
  populate(d + b, e - b);  // each thread its own chunk, in parallel
  uint64_t pos = b;
  uint32_t line = 0;
  while (pos < e) {
    // A shutdown does not wait for the rest of the chunk (the caller sees
    // the flag and drops the part).
    if (progress.cancelled()) return;
    ++line;
    const void* nl = std::memchr(d + pos, '\n', e - pos);
    uint64_t end = nl ? static_cast<uint64_t>(static_cast<const char*>(nl) - d) : e;
    uint64_t s = pos, t = end;
    while (s < t && is_ws(d[s])) ++s;
    while (t > s && is_ws(d[t - 1])) --t;
    if (t > s && !rules) {
      out.offsets.push_back(s);
    } else if (t > s) {
      std::string_view rec(d + s, t - s);
      std::string reason = size_reason(t - s, *rules);
      if (reason.empty()) reason = check(rec, *rules, t + text::kParsePadding <= size);
      if (reason.empty()) {
        out.offsets.push_back(s);
      } else {
        out.bad.push_back({line, std::move(reason)});
      }
    }
    pos = end + 1;
  }
  out.lines = line;  // every chunk but the last ends with a newline
  if (file_mapping) release(d + b, e - b);
  if (progress.bytes) progress.bytes->fetch_add(e - b, std::memory_order_relaxed);
  if (progress.records) progress.records->fetch_add(out.offsets.size() + out.bad.size(), std::memory_order_relaxed);
}

}  // namespace

std::string_view record_at(const char* data, uint64_t size, ShardKind kind, uint64_t offset) noexcept {
  uint64_t end;
  if (kind == ShardKind::kJsonl) {
    const void* nl = std::memchr(data + offset, '\n', size - offset);
    end = nl ? static_cast<uint64_t>(static_cast<const char*>(nl) - data) : size;
  } else {
    end = offset;
    element_end(data, size, end, nullptr);
  }
  while (end > offset && is_ws(data[end - 1])) --end;
  return std::string_view(data + offset, end - offset);
}

std::string record_size_verdict(uint64_t bytes, const text::RecordRules& rules) { return size_reason(bytes, rules); }

std::string record_verdict(std::string_view rec, const text::RecordRules& rules) {
  std::string reason = size_reason(rec.size(), rules);
  return reason.empty() ? check(rec, rules, false) : reason;
}

ShardIndex ShardIndex::rows(uint64_t n, std::vector<ShardBad> bad) {
  ShardIndex x;
  x.shard_bytes_ = n;  // offsets are rows: load(file, n) checks them against the row count
  if (bad.empty()) {
    x.valid_ = n;
    return x;
  }
  x.owned_.reserve(n - bad.size());
  std::size_t k = 0;
  for (uint64_t r = 0; r < n; ++r) {
    if (k < bad.size() && bad[k].line == r + 1) ++k;
    else x.owned_.push_back(r);
  }
  x.bad_ = std::move(bad);
  x.valid_ = x.owned_.size();
  x.offsets_ = x.owned_.data();
  return x;
}

ShardIndex ShardIndex::without(const std::vector<std::pair<uint64_t, std::string>>& drop, const char* data) const {
  std::vector<ShardBad> bad = bad_;
  uint64_t at = 0;
  uint32_t line = 1;
  for (const auto& [i, reason] : drop) {
    if (data) {
      line += static_cast<uint32_t>(std::count(data + at, data + offset(i), '\n'));
      at = offset(i);
    } else {
      line = static_cast<uint32_t>(offset(i) + 1);
    }
    bad.push_back({line, reason});
  }
  std::stable_sort(bad.begin(), bad.end(), [](const ShardBad& a, const ShardBad& b) { return a.line < b.line; });
  if (!data) return rows(shard_bytes_, std::move(bad));
  ShardIndex x;
  x.kind_ = kind_;
  x.shard_bytes_ = shard_bytes_;
  x.owned_.reserve(valid_ - drop.size());
  std::size_t k = 0;
  for (uint64_t i = 0; i < valid_; ++i) {
    if (k < drop.size() && drop[k].first == i) ++k;
    else x.owned_.push_back(offset(i));
  }
  x.bad_ = std::move(bad);
  x.valid_ = x.owned_.size();
  x.offsets_ = x.owned_.data();
  return x;
}

uint32_t line_at(const char* data, uint64_t offset) noexcept {
  return static_cast<uint32_t>(1 + std::count(data, data + offset, '\n'));
}

ShardIndex ShardIndex::build(const std::string& name, const char* d, uint64_t size, const text::RecordRules* rules,
                             unsigned threads, const Progress& progress, bool file_mapping) {
  ShardIndex x;
  x.shard_bytes_ = size;
  uint64_t first = 0;
  while (first < size && is_ws(d[first])) ++first;

  if (first < size && d[first] == '[') {
    // One JSON array: split it into elements without parsing them, then parse
    // each element as a record.
    x.kind_ = ShardKind::kArray;
    populate(d, size);
    uint32_t line = 1 + static_cast<uint32_t>(std::count(d, d + first, '\n'));
    uint64_t i = first + 1;
    auto fail = [&](const std::string& what) {
      throw DatasetError(fmt::format("{}:{}: byte {}: broken JSON array: {}", name, line, i, what));
    };
    auto skip_ws = [&] {
      for (; i < size && is_ws(d[i]); ++i)
        if (d[i] == '\n') ++line;
    };
    skip_ws();
    if (i < size && d[i] == ']') {
      ++i;
    } else {
      for (;;) {
        skip_ws();
        if (i >= size) fail("unexpected end of file; expected a record or ']'");
        if (d[i] == ']') fail("trailing comma before ']'");
        uint64_t start = i;
        uint32_t start_line = line;
        if (!element_end(d, size, i, &line)) fail("unterminated record");
        uint64_t end = i;
        while (end > start && is_ws(d[end - 1])) --end;
        std::string_view rec(d + start, end - start);
        if (progress.cancelled()) throw DatasetError(name + ": indexing stopped: the daemon is shutting down");
        std::string reason = rules ? size_reason(end - start, *rules) : "";
        if (reason.empty() && rules) reason = check(rec, *rules, false);
        if (reason.empty()) {
          x.owned_.push_back(start);
        } else {
          x.bad_.push_back({start_line, std::move(reason)});
        }
        skip_ws();
        if (i >= size) fail("unexpected end of file; expected ',' or ']'");
        if (d[i] == ']') {
          ++i;
          break;
        }
        if (d[i] != ',') fail(fmt::format("unexpected '{}'; expected ',' or ']'", d[i]));
        ++i;
      }
    }
    skip_ws();
    if (i < size) fail("unexpected data after the closing ']'");
    if (progress.bytes) progress.bytes->fetch_add(size, std::memory_order_relaxed);
    if (progress.records) progress.records->fetch_add(x.owned_.size() + x.bad_.size(), std::memory_order_relaxed);
  } else {
    // JSONL: chunks cut after a newline, taken by the threads in turn.
    x.kind_ = ShardKind::kJsonl;
    std::vector<uint64_t> cut{0};
    while (cut.back() < size) {
      uint64_t at = cut.back() + kChunkBytes;
      const void* nl = at < size ? std::memchr(d + at, '\n', size - at) : nullptr;
      cut.push_back(nl ? static_cast<uint64_t>(static_cast<const char*>(nl) - d) + 1 : size);
    }
    const std::size_t chunks = cut.size() - 1;
    std::vector<Part> parts(chunks);
    std::atomic<std::size_t> next{0};
    std::atomic<bool> cancelled{false};
    auto work = [&] {
      for (std::size_t c; (c = next.fetch_add(1)) < chunks;) {
        if (progress.cancelled()) {
          cancelled = true;
          return;
        }
        progress.chunk_pause();
        index_lines(d, size, cut[c], cut[c + 1], rules, parts[c], progress, file_mapping);
        if (progress.cancelled()) {
          cancelled = true;
          return;
        }
      }
    };
    threads = std::max(1u, std::min<unsigned>(threads, static_cast<unsigned>(chunks)));
    std::vector<std::thread> pool;
    for (unsigned t = 1; t < threads; ++t) pool.emplace_back(work);
    work();
    for (std::thread& th : pool) th.join();
    if (cancelled) throw DatasetError(name + ": indexing stopped: the daemon is shutting down");
    uint64_t total = 0;
    for (const Part& p : parts) total += p.offsets.size();
    x.owned_.reserve(total);
    uint32_t base = 0;
    for (Part& p : parts) {
      x.owned_.insert(x.owned_.end(), p.offsets.begin(), p.offsets.end());
      for (ShardBad& b : p.bad) x.bad_.push_back({base + b.line, std::move(b.reason)});
      base += p.lines;
    }
  }
  x.valid_ = x.owned_.size();
  x.offsets_ = x.owned_.data();
  return x;
}

std::optional<ShardIndex> ShardIndex::load(const std::string& file, uint64_t shard_bytes) {
  int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  struct stat st;
  if (::fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < sizeof(Header)) {
    ::close(fd);
    return std::nullopt;
  }
  uint64_t bytes = static_cast<uint64_t>(st.st_size);
  void* p = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) return std::nullopt;
  ShardIndex x;
  x.map_ = shm::Mapping(-1, p, bytes);
  Header h;
  std::memcpy(&h, p, sizeof h);
  if (std::memcmp(h.magic, kMagic, 8) != 0 || h.version != kVersion || h.shard_bytes != shard_bytes ||
      (h.kind != static_cast<uint32_t>(ShardKind::kJsonl) && h.kind != static_cast<uint32_t>(ShardKind::kArray)) ||
      h.valid > bytes / 8 || sizeof(Header) + h.valid * 8 + h.bad_bytes != bytes)
    return std::nullopt;
  x.kind_ = static_cast<ShardKind>(h.kind);
  x.shard_bytes_ = h.shard_bytes;
  x.valid_ = h.valid;
  x.offsets_ = reinterpret_cast<const uint64_t*>(static_cast<const char*>(p) + sizeof(Header));
  // Trust nothing read from disk: offsets rise and stay inside the shard.
  for (uint64_t i = 0; i < x.valid_; ++i)
    if (x.offsets_[i] >= shard_bytes || (i && x.offsets_[i] <= x.offsets_[i - 1])) return std::nullopt;
  const char* b = static_cast<const char*>(p) + sizeof(Header) + h.valid * 8;
  const char* end = static_cast<const char*>(p) + bytes;
  for (uint64_t k = 0; k < h.bad; ++k) {
    uint32_t line, len;
    if (end - b < 8) return std::nullopt;
    std::memcpy(&line, b, 4);
    std::memcpy(&len, b + 4, 4);
    b += 8;
    if (static_cast<uint64_t>(end - b) < len) return std::nullopt;
    x.bad_.push_back({line, std::string(b, len)});
    b += len;
  }
  if (b != end) return std::nullopt;
  return x;
}

std::string ShardIndex::save(const std::string& file) const {
  std::string tmp = fmt::format("{}.tmp.{}.{}", file, getpid(), std::random_device{}());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return fmt::format("cannot create {}: {}", tmp, std::strerror(errno));
  std::string tail;
  for (const ShardBad& b : bad_) {
    uint32_t line = b.line, len = static_cast<uint32_t>(b.reason.size());
    tail.append(reinterpret_cast<const char*>(&line), 4);
    tail.append(reinterpret_cast<const char*>(&len), 4);
    tail += b.reason;
  }
  Header h{};
  std::memcpy(h.magic, kMagic, 8);
  h.version = kVersion;
  h.kind = static_cast<uint32_t>(kind_);
  h.valid = valid_;
  h.bad = bad_.size();
  h.shard_bytes = shard_bytes_;
  h.bad_bytes = tail.size();
  bool ok = true;
  auto put = [&](const void* p, uint64_t n) {
    const char* c = static_cast<const char*>(p);
    while (ok && n) {
      ssize_t w = ::write(fd, c, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) ok = false;
      else c += w, n -= static_cast<uint64_t>(w);
    }
  };
  put(&h, sizeof h);
  put(offsets_, valid_ * 8);
  put(tail.data(), tail.size());
  std::string err = ok ? "" : fmt::format("cannot write {}: {}", tmp, std::strerror(errno));
  ::close(fd);
  if (err.empty() && ::rename(tmp.c_str(), file.c_str()) != 0)
    err = fmt::format("cannot rename {}: {}", tmp, std::strerror(errno));
  if (!err.empty()) ::unlink(tmp.c_str());
  return err;
}

}  // namespace tokfeed
