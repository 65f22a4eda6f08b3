// An object fetched footer first (object_store.hpp, docs/data_model.md 1.1):
// a Parquet object's footer, then its row groups one by one, into a sparse
// temporary of the object's size, beside a completion map that says which
// groups are whole. The daemon plans from the footer and serves the groups
// that are whole while the others arrive.
//
// The map (`<temporary>.map`), written by the fetcher before it reports the
// object, shared by every process that maps it (MAP_SHARED):
//
//   offset 0   PartialHeader (64 bytes): magic "TFPART1\0", version, groups,
//              the object's size, `completed` (a futex word)
//   offset 64  PartialGroup[groups] (32 bytes each): the group's bytes in the
//              object [begin, end), `done`, `wanted`
//
// Invariants.
// - The footer is written before the map exists: a reader that finds the map
//   reads the footer.
// - A group's `done` is set (release) only after every byte of its range is
//   written to the temporary (pwrite returned); a reader reads a group's
//   bytes only after it loaded `done` (acquire) as 1. Nothing half written
//   is ever read: the rest of the temporary is a hole.
// - `completed` counts the groups done; the fetcher bumps it (release) and
//   wakes its waiters after each group.
// - `wanted` is a reader's request: the fetcher fetches the groups readers
//   wait for before the others. It is a hint; a lost one only costs time.
// - Ranges partition [0, footer start): every byte of the file but the
//   footer belongs to exactly one group, so a group's range holds every page
//   Parquet's reader reads for it.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tokfeed/shm/segment.hpp"

namespace tokfeed {

inline constexpr char kPartialMagic[8] = {'T', 'F', 'P', 'A', 'R', 'T', '1', '\0'};
inline constexpr uint32_t kPartialVersion = 1;

struct PartialHeader {
  char magic[8];
  uint32_t version;
  uint32_t groups;
  uint64_t size;                    // the object's bytes (the temporary's size)
  std::atomic<uint32_t> completed;  // groups done; futex word
  uint32_t reserved0;
  uint64_t reserved[4];
};
struct PartialGroup {
  uint64_t begin, end;         // the group's bytes in the object
  std::atomic<uint32_t> done;  // 1 once [begin, end) is written; SYNC POINT: the fetcher's release, a reader's acquire
  std::atomic<uint32_t> wanted;  // 1 once a reader waits for it
  uint64_t reserved;
};
static_assert(sizeof(PartialHeader) == 64 && sizeof(PartialGroup) == 32);
static_assert(std::is_standard_layout_v<PartialHeader> && std::is_standard_layout_v<PartialGroup>);
static_assert(std::atomic<uint32_t>::is_always_lock_free);

// The map's size for `groups` groups.
constexpr uint64_t partial_map_bytes(uint32_t groups) { return sizeof(PartialHeader) + 32ull * groups; }

// A reader's view of a completion map, mapped shared and writable (its
// `wanted` flags). Made in the supervisor before it forks: the workers
// inherit the mapping.
class PartialObject {
 public:
  // Maps `map_path` and checks it against the object (`url`, for messages)
  // of `size` bytes. Throws DatasetError naming the object when it is not a
  // map of that object.
  PartialObject(const std::string& map_path, const std::string& url, uint64_t size);
  // The fetcher's side: writes the map of an object of `size` bytes whose
  // groups hold `ranges` to `map_path` (whole before it returns: the caller
  // reports it after) and maps it. Throws DatasetError.
  PartialObject(const std::string& map_path, const std::string& url, uint64_t size,
                const std::vector<std::pair<uint64_t, uint64_t>>& ranges);

  uint32_t groups() const { return header()->groups; }
  // Whether group `g` is whole in the temporary.
  bool done(uint32_t g) const { return group(g).done.load(std::memory_order_acquire) == 1; }
  // Asks for group `g` and waits until it is whole. The fetcher's failures
  // stop the daemon (the supervisor follows its report), so this waits
  // until then.
  void wait(uint32_t g) const;
  const std::string& url() const { return url_; }

  // The fetcher's side.
  std::pair<uint64_t, uint64_t> range(uint32_t g) const { return {group(g).begin, group(g).end}; }
  bool wanted(uint32_t g) const { return group(g).wanted.load(std::memory_order_relaxed) != 0; }
  // Group `g`'s range is written: readers may read it.
  void set_done(uint32_t g);

 private:
  const PartialHeader* header() const { return map_.at<const PartialHeader>(0); }
  PartialGroup& group(uint32_t g) const {
    return const_cast<PartialGroup*>(map_.at<const PartialGroup>(sizeof(PartialHeader)))[g];
  }
  shm::Mapping map_;
  std::string url_;
};

// The byte ranges of a Parquet object's row groups, from its footer: `tail`
// holds the object's last bytes (at least the footer, its length and the
// magic), `size` its size. The ranges partition [0, the footer's start) in
// row group order (invariants above). Returns "" or why the tail is not a
// Parquet footer this build can read (the object is then fetched whole).
// `need` is set to the tail's length that holds the whole footer when
// `tail` is too short for it.
std::string parquet_group_ranges(const uint8_t* tail, uint64_t tail_len, uint64_t size,
                                 std::vector<std::pair<uint64_t, uint64_t>>& out, uint64_t& need);

}  // namespace tokfeed
