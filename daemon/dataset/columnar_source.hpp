// Parquet and Arrow IPC shards (docs/data_model.md 1.1), read through the
// Apache Arrow C++ library: each row becomes one line of JSON, the record a
// JSONL shard would hold, so that formats, `columns` renames and bad records
// work as they do for JSONL. ShardBytes writes these lines into a spool file
// that every worker maps, as it does for a compressed shard.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace tokfeed {

struct ShardProgress;  // shard_source.hpp

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
  // A small binary form kept beside the spool; parse() returns false for
  // anything else.
  std::string serialize() const;
  bool parse(std::string_view bytes);
};

// Reads every row of `path` in order and hands `sink` its JSON text, one line
// ('\n'-terminated) per row: a column or struct field that is null is left
// out, as a missing key; a null list element is `null`. `progress.bytes`
// advances through the file's bytes; `progress.cancel` stops between groups.
// Throws DatasetError naming the file (and the row group or record batch) for
// a file that is not Parquet or Arrow, is truncated or corrupt, or when this
// build has no Arrow.
ColumnarLayout columnar_to_jsonl(const std::string& path, ColumnarKind kind,
                                 const std::function<void(std::string_view)>& sink, const ShardProgress& progress);

}  // namespace tokfeed
