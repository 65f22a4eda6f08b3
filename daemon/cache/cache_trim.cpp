#include "cache/cache_trim.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>

namespace tokfeed {

namespace fs = std::filesystem;

namespace {

struct Entry {
  std::vector<std::string> files;
  uint64_t bytes = 0;
  int64_t last_use_ns = 0;
  std::vector<std::string> locks;  // a token store's: held while a daemon builds it or has it open
  bool keep = false;
};

int64_t ns(const struct timespec& t) { return t.tv_sec * 1'000'000'000LL + t.tv_nsec; }

void add_file(Entry& e, const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return;
  e.files.push_back(path);
  e.bytes += static_cast<uint64_t>(st.st_size);
  e.last_use_ns = std::max({e.last_use_ns, ns(st.st_atim), ns(st.st_mtim)});
}

// The regular files directly in `dir`, by name, without temporaries.
std::vector<std::string> listing(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (name.find(".tmp.") == std::string::npos) out.push_back(name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

void mark_used(const std::vector<std::string>& files) {
  const struct timespec times[2] = {{0, UTIME_NOW}, {0, UTIME_OMIT}};
  for (const std::string& f : files) ::utimensat(AT_FDCWD, f.c_str(), times, 0);  // best effort
}

TrimReport trim_cache(const std::string& dir, uint64_t max_bytes, const std::vector<std::string>& keep) {
  std::vector<Entry> entries;
  // Token stores: <key>.idx, <key>.bin, <key>.lock and <key>.use, and the
  // parts an interrupted build left (<key>.p<P>-<k>.part and .facts),
  // grouped by key.
  std::map<std::string, Entry> stores;
  for (const std::string& name : listing(dir)) {
    for (std::string_view ext : {".idx", ".bin", ".lock", ".use", ".part", ".facts"}) {
      if (!name.ends_with(ext)) continue;
      Entry& e = stores[name.substr(0, name.find('.'))];
      add_file(e, dir + "/" + name);
      if (ext == ".lock" || ext == ".use") e.locks.push_back(dir + "/" + name);
    }
  }
  for (auto& [key, e] : stores) entries.push_back(std::move(e));
  for (const auto& [sub, ext] : {std::pair{"index", ".tfx"}, std::pair{"spool", ".jsonl"}}) {
    for (const std::string& name : listing(dir + "/" + sub)) {
      if (!name.ends_with(ext)) continue;
      Entry e;
      add_file(e, dir + "/" + sub + "/" + name);
      if (!e.files.empty()) entries.push_back(std::move(e));
    }
  }
  // Objects fetched from a store (dataset/object_store.hpp); not those being
  // written.
  for (const std::string& name : listing(dir + "/objects")) {
    if (name.find(".tmp.") != std::string::npos) continue;
    Entry e;
    add_file(e, dir + "/objects/" + name);
    if (!e.files.empty()) entries.push_back(std::move(e));
  }

  TrimReport r;
  for (Entry& e : entries) {
    r.bytes_before += e.bytes;
    for (const std::string& f : e.files) e.keep |= std::find(keep.begin(), keep.end(), f) != keep.end();
  }
  r.bytes_after = r.bytes_before;
  std::stable_sort(entries.begin(), entries.end(),
                   [](const Entry& a, const Entry& b) { return a.last_use_ns < b.last_use_ns; });
  for (const Entry& e : entries) {
    if (r.bytes_after <= max_bytes) break;
    if (e.keep) continue;
    // A daemon building this store holds `.lock`, one serving it `.use`:
    // then leave it. Held exclusively here while the files go.
    std::vector<int> held;
    bool busy = false;
    for (const std::string& l : e.locks) {
      int fd = ::open(l.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) continue;
      held.push_back(fd);
      busy |= ::flock(fd, LOCK_EX | LOCK_NB) != 0;
    }
    if (busy) {
      for (int fd : held) ::close(fd);
      ++r.in_use;
      continue;
    }
    uint64_t gone = 0;
    for (const std::string& f : e.files) {
      struct stat st;
      if (::stat(f.c_str(), &st) == 0 && ::unlink(f.c_str()) == 0) gone += static_cast<uint64_t>(st.st_size);
    }
    for (int fd : held) ::close(fd);
    r.bytes_after -= std::min(r.bytes_after, gone);
    std::string names;
    for (const std::string& f : e.files) names += (names.empty() ? "" : ", ") + fs::path(f).filename().string();
    r.removed.push_back(fmt::format("{} ({} bytes)", names, gone));
  }
  return r;
}

}  // namespace tokfeed
