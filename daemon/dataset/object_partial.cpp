#include "dataset/object_partial.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "dataset/dataset_error.hpp"
#include "tokfeed/shm/futex.hpp"

#ifdef TOKFEED_WITH_ARROW
#include <parquet/exception.h>
#include <parquet/metadata.h>
#endif

#include <algorithm>
#include <numeric>

namespace tokfeed {

PartialObject::PartialObject(const std::string& map_path, const std::string& url, uint64_t size) : url_(url) {
  auto bad = [&](const std::string& why) {
    return DatasetError(
        fmt::format("{}: cannot read the fetcher's completion map {}: {}; restart tokfeedd", url, map_path, why));
  };
  const int fd = ::open(map_path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) throw bad(std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < sizeof(PartialHeader)) {
    ::close(fd);
    throw bad("it is shorter than its header");
  }
  void* base = ::mmap(nullptr, static_cast<std::size_t>(st.st_size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (base == MAP_FAILED) throw bad(std::strerror(errno));
  map_ = shm::Mapping(-1, base, static_cast<std::size_t>(st.st_size));
  const PartialHeader* h = header();
  if (std::memcmp(h->magic, kPartialMagic, sizeof kPartialMagic) != 0 || h->version != kPartialVersion)
    throw bad("not a completion map of this version");
  if (h->size != size || partial_map_bytes(h->groups) > static_cast<uint64_t>(st.st_size))
    throw bad(fmt::format("it describes {} bytes in {} groups, for an object of {} bytes", h->size, h->groups, size));
}

PartialObject::PartialObject(const std::string& map_path, const std::string& url, uint64_t size,
                             const std::vector<std::pair<uint64_t, uint64_t>>& ranges)
    : url_(url) {
  auto bad = [&](const std::string& why) {
    return DatasetError(
        fmt::format("{}: cannot write the completion map {}: {}; set [cache] dir to a writable "
                    "directory with room",
                    url, map_path, why));
  };
  const int fd = ::open(map_path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw bad(std::strerror(errno));
  const uint64_t bytes = partial_map_bytes(static_cast<uint32_t>(ranges.size()));
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const int err = errno;
    ::close(fd);
    throw bad(std::strerror(err));
  }
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (base == MAP_FAILED) throw bad(std::strerror(errno));
  map_ = shm::Mapping(-1, base, bytes);
  auto* h = map_.at<PartialHeader>(0);
  h->version = kPartialVersion;
  h->groups = static_cast<uint32_t>(ranges.size());
  h->size = size;
  for (uint32_t g = 0; g < ranges.size(); ++g) group(g).begin = ranges[g].first, group(g).end = ranges[g].second;
  // The magic last: a map is never read before it is reported, and one
  // left by a fetcher killed meanwhile reads as no map.
  std::atomic_thread_fence(std::memory_order_release);
  std::memcpy(h->magic, kPartialMagic, sizeof kPartialMagic);
}

void PartialObject::set_done(uint32_t g) {
  group(g).done.store(1, std::memory_order_release);  // SYNC POINT: a reader's acquire in done()
  auto& completed = const_cast<std::atomic<uint32_t>&>(header()->completed);
  completed.fetch_add(1, std::memory_order_release);  // SYNC POINT: wait()'s load
  shm::futex_wake_all(completed);
}

#ifdef TOKFEED_WITH_ARROW

std::string parquet_group_ranges(const uint8_t* tail, uint64_t tail_len, uint64_t size,
                                 std::vector<std::pair<uint64_t, uint64_t>>& out, uint64_t& need) {
  out.clear();
  need = 0;
  if (tail_len < 8 || size < 12 || std::memcmp(tail + tail_len - 4, "PAR1", 4) != 0)
    return "no Parquet magic at its end";
  uint32_t len = 0;
  std::memcpy(&len, tail + tail_len - 8, 4);  // little-endian, as Parquet writes it
  if (uint64_t{len} + 12 > size) return "its footer length is past its start";
  if (uint64_t{len} + 8 > tail_len) {
    need = uint64_t{len} + 8;
    return "the footer is longer than the tail read";
  }
  const uint64_t footer = size - 8 - len;
  std::vector<uint64_t> starts;
  try {
    uint32_t used = len;
    auto meta = parquet::FileMetaData::Make(tail + tail_len - 8 - len, &used);
    for (int g = 0; g < meta->num_row_groups(); ++g) {
      auto rg = meta->RowGroup(g);
      int64_t start = INT64_MAX;
      for (int c = 0; c < rg->num_columns(); ++c) {
        auto col = rg->ColumnChunk(c);
        int64_t s = col->data_page_offset();
        if (col->has_dictionary_page() && col->dictionary_page_offset() > 0)
          s = std::min(s, col->dictionary_page_offset());
        start = std::min(start, s);
      }
      if (rg->num_columns() == 0) start = static_cast<int64_t>(footer);
      if (start < 0 || static_cast<uint64_t>(start) > footer)
        return fmt::format("row group {} starts past the footer", g);
      starts.push_back(static_cast<uint64_t>(start));
    }
  } catch (const std::exception& e) {
    return std::string("cannot read its footer: ") + e.what();
  }
  // Each group from its start to the next group's in the file (the first
  // from the file's start, the last to the footer): the ranges cover every
  // byte before the footer, whatever sits between the groups.
  std::vector<std::size_t> order(starts.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return starts[a] < starts[b]; });
  out.assign(starts.size(), {0, 0});
  for (std::size_t k = 0; k < order.size(); ++k)
    out[order[k]] = {k == 0 ? 0 : starts[order[k]], k + 1 < order.size() ? starts[order[k + 1]] : footer};
  return {};
}

#else

std::string parquet_group_ranges(const uint8_t*, uint64_t, uint64_t, std::vector<std::pair<uint64_t, uint64_t>>& out,
                                 uint64_t& need) {
  out.clear();
  need = 0;
  return "this build has no Parquet reader";
}

#endif

void PartialObject::wait(uint32_t g) const {
  if (done(g)) return;
  group(g).wanted.store(1, std::memory_order_relaxed);
  const std::atomic<uint32_t>& completed = header()->completed;
  for (;;) {
    // SYNC POINT: `completed` is read before `done`; the fetcher sets
    // `done`, then bumps `completed` and wakes: no wake is missed.
    const uint32_t seen = completed.load(std::memory_order_acquire);
    if (done(g)) return;
    shm::futex_wait(completed, seen, std::chrono::milliseconds(200));
  }
}

}  // namespace tokfeed
