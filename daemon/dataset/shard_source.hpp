// A dataset's shards (docs/data_model.md 1.1): which files a path names, and
// each shard's bytes mapped read-only and shared, compressed shards through a
// decompressed spool file so that workers can map them too. Parquet and Arrow
// shards are mapped as they are (columnar_source.hpp reads them).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "tokfeed/shm/segment.hpp"

namespace tokfeed {

// The shards `path` names: the file itself; every regular file a glob
// matches; or every dataset file below a directory. Sorted bytewise. Throws
// DatasetError when there is none; `name` is the path as the config wrote it.
std::vector<std::string> resolve_shards(const std::string& name, const std::string& path);

enum class Compression : uint8_t { kNone, kGzip, kZstd };

// Where a long pass over a shard (decompressing, indexing) reports to while
// it runs, and what stops it; any may be null.
struct ShardProgress {
  std::atomic<uint64_t>* bytes = nullptr;     // advanced by the bytes read or scanned
  std::atomic<uint64_t>* records = nullptr;   // advanced by the records found
  const std::atomic<bool>* cancel = nullptr;  // stops the pass at its next chunk, with a DatasetError
  uint32_t slow_chunk_ms = 0;                 // test-only fault hook: each chunk waits this long
  // A Parquet row group whose column chunk holds more than this per row
  // (its metadata says so) is refused before it is decompressed: some row
  // would pass max_record_bytes (0: no bound).
  uint64_t max_row_bytes = 0;

  bool cancelled() const noexcept { return cancel && cancel->load(std::memory_order_relaxed); }
  // The test-only wait of one chunk (slow_chunk_ms; nothing in a build
  // without fault hooks).
  void chunk_pause() const;
};
Compression compression_of(const std::string& path) noexcept;

// A shard's bytes, mapped read-only and MAP_SHARED: forked workers share the
// pages. Move-only; unmapped when destroyed.
class ShardBytes {
 public:
  // Maps `path`, decompressing it first when it is compressed: into
  // `spool_dir/<content hash>.jsonl` (kept, and reused by later starts), or
  // into an anonymous memory file when `spool_dir` is empty. `progress.bytes`
  // is advanced by the compressed bytes consumed; `progress.cancel` stops a
  // decompression between two 1 MiB pieces of output (leaving no spool).
  // Throws DatasetError naming the file and the compressed byte offset of
  // corrupt input, or when cancelled.
  static ShardBytes open(const std::string& path, const std::string& spool_dir, const ShardProgress& progress);

  const char* data() const { return map_.at<const char>(0); }
  uint64_t size() const { return map_.size(); }
  // The identity the shard's index is cached under: the file's path, size,
  // mtime and inode; a spool's content hash.
  const std::string& identity() const { return identity_; }
  // The file mapped: the shard itself, or its spool ("" when in memory).
  const std::string& file() const { return file_; }
  // "" while the mapped file is whole; else what happened to it, naming it.
  // A file truncated under its mapping makes reading past its new end raise
  // SIGBUS: the supervisor asks this when a child dies of one.
  std::string shrunk() const;

 private:
  shm::Mapping map_;  // no mapping for an empty shard
  std::string identity_;
  std::string file_;  // the mapped file: the shard or its spool ("" for memory)
  ino_t ino_ = 0;
  dev_t dev_ = 0;
};

}  // namespace tokfeed
