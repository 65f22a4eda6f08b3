// The index of one shard: where each valid record starts, 8 bytes a record,
// and the bad records with their reasons. Built once (in parallel over the
// shard's lines), then kept in the cache directory and memory-mapped by later
// starts, so a second start on the same files indexes nothing.
//
// A record's end is not stored: a JSONL record ends at its line's end, and an
// element of a JSON array where its brackets close (record_at()).
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dataset/shard_source.hpp"
#include "records/records.hpp"
#include "tokfeed/shm/segment.hpp"

namespace tokfeed {

enum class ShardKind : uint8_t { kJsonl = 1, kArray = 2 };

struct ShardBad {
  uint32_t line;
  std::string reason;
};

// The text of the record that starts at `offset` (trailing whitespace trimmed).
std::string_view record_at(const char* data, uint64_t size, ShardKind kind, uint64_t offset) noexcept;

// The 1-based line of `offset`: counts the newlines before it.
uint32_t line_at(const char* data, uint64_t offset) noexcept;

// Why record `rec` is bad under `rules` (its size, then its parse), or "":
// the check every record of an index gets.
std::string record_verdict(std::string_view rec, const text::RecordRules& rules);
// The first part of that check: why a record of `bytes` bytes is bad before
// it is parsed (longer than max_record_bytes), or "".
std::string record_size_verdict(uint64_t bytes, const text::RecordRules& rules);

class ShardIndex {
 public:
  // Where a build reports to while it runs; it stops at the next chunk when
  // cancelled.
  using Progress = ShardProgress;

  // Indexes `data` with `threads` threads; every record is parsed and checked
  // against `rules`, or, when it is nullptr, none is: every non-blank line
  // (every element of a JSON array) is a valid record, found by a newline
  // scan alone, and is checked when it is read (check_rows = "when_read").
  // Throws DatasetError for a broken JSON array (naming
  // `name`, line and byte), or when cancelled. `file_mapping`: `data` is a
  // read-only MAP_SHARED mapping of a file (or memfd), whose page-table
  // entries each thread drops once it has read its chunk, so that they are
  // not all torn down at once when the mapping goes; never for other memory
  // (dropping anonymous pages zeroes them).
  static ShardIndex build(const std::string& name, const char* data, uint64_t size, const text::RecordRules* rules,
                          unsigned threads, const Progress& progress, bool file_mapping = false);
  // A Parquet or Arrow shard read in place, of `n` rows: its valid records
  // are its rows but `bad` (1-based row numbers in `line`), and offset(i)
  // is valid record i's 0-based row. Without bad rows it stores nothing
  // (record i is row i). Saved as any index; load it with the row count as
  // `shard_bytes`.
  static ShardIndex rows(uint64_t n, std::vector<ShardBad> bad = {});
  // This index less the valid records `drop` (indices into this index,
  // rising, with their reasons), which join bad() at their lines. `data`:
  // the shard's bytes, or nullptr for a Parquet or Arrow shard's rows.
  ShardIndex without(const std::vector<std::pair<uint64_t, std::string>>& drop, const char* data) const;
  // Maps a saved index; nullopt when it is missing, damaged or not for a
  // shard of `shard_bytes` bytes.
  static std::optional<ShardIndex> load(const std::string& file, uint64_t shard_bytes);
  // Writes the index to `file` (a temporary name, then rename). Returns what
  // went wrong, or "".
  std::string save(const std::string& file) const;

  ShardKind kind() const { return kind_; }
  uint64_t valid() const { return valid_; }
  uint64_t offset(uint64_t i) const { return offsets_ ? offsets_[i] : i; }
  const std::vector<ShardBad>& bad() const { return bad_; }
  uint64_t records() const { return valid_ + bad_.size(); }

 private:
  ShardKind kind_ = ShardKind::kJsonl;
  uint64_t shard_bytes_ = 0;
  uint64_t valid_ = 0;
  // Into owned_ (built here) or map_ (loaded). Both survive a move: a moved
  // vector keeps its buffer and a moved mapping its address, so the
  // defaulted moves keep offsets_ valid.
  const uint64_t* offsets_ = nullptr;
  std::vector<uint64_t> owned_;
  std::vector<ShardBad> bad_;
  shm::Mapping map_;
};

}  // namespace tokfeed
