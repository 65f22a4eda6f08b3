// Parquet and Arrow IPC shards (docs/data_model.md 1.1), read in place
// through the Apache Arrow C++ library. Planning needs only the row count:
// a Parquet file's footer has it, an Arrow file's record batch headers do.
// A row is decoded when it is read: its row group (Parquet) or record batch
// (Arrow) is decoded into this process's small cache of decoded groups, and
// the row becomes the JSON object a JSONL line would hold, so that formats,
// `columns` renames and bad records work as they do for JSONL.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tokfeed {

struct ShardProgress;  // shard_source.hpp
class PartialObject;   // object_partial.hpp

enum class ColumnarKind : uint8_t { kNone, kParquet, kArrow };

// What a shard's name says it holds: .parquet, .arrow (an IPC stream, as
// `datasets.save_to_disk` writes, or an IPC file), else kNone.
ColumnarKind columnar_kind(const std::string& path) noexcept;

// Whether this build reads Parquet and Arrow files (TOKFEED_WITH_ARROW).
bool columnar_supported() noexcept;

// A columnar shard's row groups (Parquet) or record batches (Arrow IPC), and
// its top-level columns: what names a row in a message.
struct ColumnarLayout {
  ColumnarKind kind = ColumnarKind::kNone;
  std::vector<uint64_t> group_rows;  // rows in each group, in file order
  std::vector<std::string> columns;  // the schema's top-level fields

  // "row group 2, row 17" (0-based, as pyarrow counts) for the file's row
  // `row` (0-based), or "record batch 2, row 17" for an Arrow file.
  std::string where(uint64_t row) const;
  uint64_t rows() const;
};

// The decoded groups this process's cache holds now.
std::size_t columnar_cached_groups() noexcept;

// A bad row: its 0-based number in the file and why.
struct ColumnarBad {
  uint64_t row;
  std::string reason;
};

// One columnar shard over its bytes (mapped by the caller, and kept mapped
// while this lives). Rows are read through the calling process's cache of
// decoded groups (every worker has its own: the 4 most recently read groups,
// and past the one in use at most 64 MiB of decoded buffers; an Arrow file's
// batches are read from the mapping and count nothing). Safe to use from
// several threads.
class ColumnarRows {
 public:
  // Reads the layout: a Parquet file's footer; an Arrow IPC file's schema
  // and record batch headers (its buffers stay in the mapping). Throws
  // DatasetError naming the file for one that is not Parquet or Arrow, is
  // truncated or corrupt, or when this build has no Arrow; and a Parquet row
  // group whose metadata shows a cell past `max_row_bytes` (0: no bound),
  // before anything is decompressed.
  ColumnarRows(std::string path, ColumnarKind kind, const char* data, uint64_t size, uint64_t max_row_bytes = 0);
  ~ColumnarRows();
  ColumnarRows(const ColumnarRows&) = delete;
  ColumnarRows& operator=(const ColumnarRows&) = delete;

  const ColumnarLayout& layout() const { return layout_; }
  const std::string& path() const { return path_; }
  // Unique in this process, for caches of rows.
  uint64_t id() const { return id_; }
  // The shard is an object still being fetched footer first: a group is
  // read once `partial` says it is whole (row() and check_rows() wait for
  // it). Throws DatasetError when the map's groups are not the footer's.
  void set_partial(std::shared_ptr<const PartialObject> partial);

  // Row `row`'s record (0-based in the file) as one line of JSON, into
  // `out` (replacing what it held): a column or struct field that is null is
  // left out, as a missing key; a null list element is `null`. Throws
  // DatasetError naming the file and group when the group cannot be decoded.
  void row(uint64_t row, std::string& out) const;

  // Reads every row, on up to `threads` threads, and asks `verdict` about
  // each row's text ("" when it is good). Returns the bad rows in file order.
  // Writes nothing. `progress.bytes` advances through the file's bytes;
  // `progress.cancel` stops it between groups. Throws DatasetError for a
  // group that cannot be decoded (the first such group), or when cancelled.
  std::vector<ColumnarBad> check_rows(const std::function<std::string(std::string_view)>& verdict, unsigned threads,
                                      const ShardProgress& progress) const;

 private:
  struct Reader;  // Arrow's readers of the file
  std::string path_;
  ColumnarLayout layout_;
  std::vector<uint64_t> group_first_;  // each group's first row, then the row count
  std::vector<uint64_t> group_bytes_;  // each group's bytes in the file (progress)
  uint64_t id_;                        // names this shard's groups in the process's cache
  std::unique_ptr<Reader> reader_;
  std::shared_ptr<const PartialObject> partial_;  // null once the file is whole
};

}  // namespace tokfeed
