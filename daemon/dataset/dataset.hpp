// The job's datasets (docs/data_model.md 1 and 1.1): every shard mapped once
// in the supervisor, indexed and validated before the workers fork, so every
// worker shares the same pages and the same index. A Parquet or Arrow shard
// is read in place: its footer gives the row count, and a row is decoded when
// it is read. Its rows are checked at start (decoded once, on several
// threads; the verdicts kept in the index cache), or, with check_rows =
// "when_read", as they are read (verdict()), every row being a record.
//
// Valid records are numbered over the datasets in config order, each one's
// shards in sorted order, each shard in file order. The index keeps 8 bytes
// per valid record (where it starts); a record's end is found when it is read.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.hpp"
#include "dataset/columnar_source.hpp"
#include "dataset/dataset_error.hpp"
#include "dataset/mixture.hpp"
#include "dataset/object_partial.hpp"
#include "dataset/object_store.hpp"
#include "dataset/shard_index.hpp"
#include "dataset/shard_source.hpp"
#include "records/records.hpp"

namespace tokfeed {

struct BadRecord {
  std::string file;  // the shard
  uint32_t line;
  std::string reason;
};

// One dataset of the job, as status shows it.
struct DatasetInfo {
  std::string name;  // its path as the config wrote it
  uint64_t shards = 0;
  uint64_t bytes = 0;    // shard bytes, decompressed
  uint64_t records = 0;  // valid + bad
  uint64_t valid = 0;    // Parquet and Arrow rows not checked at start count as valid
  uint64_t bad = 0;
  uint64_t samples = 0;   // per epoch (c_d); of an evaluation dataset: per pass
  uint64_t held_out = 0;  // valid records held out for evaluation ([eval] split_ratio)
  uint64_t indexed = 0;   // shards indexed at this start (the others came from the index cache)
};

// Where indexing stands, for the log, status and systemd while it runs.
struct IndexProgress {
  std::atomic<uint64_t> bytes_done{0};  // of the shards' files as stored (compressed ones count compressed)
  std::atomic<uint64_t> bytes_total{0};
  std::atomic<uint64_t> shards_done{0};
  std::atomic<uint64_t> shards_total{0};
  std::atomic<uint64_t> records{0};
  // Set by the supervisor on shutdown: indexing stops at the next chunk with
  // a DatasetError, so a stop is not held up by a long index.
  std::atomic<bool> cancel{false};
  // Test-only fault hook (TOKFEED_FAULT_HOOKS): every chunk waits this long.
  uint32_t slow_chunk_ms = 0;
  // Objects of s3:// datasets, fetched before they are indexed.
  ObjectProgress objects;
};

// The rules a dataset's records are checked against (its format, columns and
// placeholders, and the template's alternation rule).
text::RecordRules record_rules(const JobConfig& cfg, std::size_t dataset);

class Dataset {
 public:
  // Resolves, maps and indexes every dataset of `cfg`, reusing and writing
  // the index cache and spool in `[cache] dir` when the cache is enabled.
  // Throws DatasetError for an unreadable or damaged file, a dataset without
  // valid records, or a bad record under on_bad_record = "fail"; ConfigError
  // for weights that leave no room.
  // `check_rows`: check every Parquet and Arrow row at start even under
  // check_rows = "when_read", so that bad() lists the bad ones (tokfeedd
  // --check-config); the records and their numbers stay the same.
  //
  // Nothing is rendered here: where a dataset's template renders records
  // (template = "jinja"/"auto", or a built-in one that takes tools), the
  // records of the shards indexed at this start are only read, and
  // pending() is true until apply_verdicts() gets the verdicts of check(i),
  // which the caller runs in forked children (RecordCheck). Until then only
  // record(), check(), where(), line() and pending_ranges() may be used.
  explicit Dataset(const JobConfig& cfg, IndexProgress* progress = nullptr, bool check_rows = false);

  // Objects fetched footer first (check_rows = "when_read") arrive while the
  // daemon serves: the supervisor calls this from its loop to follow their
  // fetch (status's `dataset.objects`). Returns "" or why a fetch failed,
  // naming the object: the daemon cannot go on.
  std::string poll_objects();
  // The plan reads `records` (valid-record numbers) in this order soon: their
  // row groups still being fetched are asked for in it (record k with
  // priority 2 + k / `per_batch`).
  void want_soon(const std::vector<uint64_t>& records, uint32_t per_batch) const;
  // Whether objects are still being fetched after planning.
  bool objects_pending() const { return !fetches_.empty(); }

  // Records still to be judged by check(): [from, to) ranges of record numbers.
  bool pending() const;
  std::vector<std::pair<uint64_t, uint64_t>> pending_ranges() const;
  // Record i's full verdict (rendered under its template when it has one):
  // "" when valid. For children; deterministic.
  std::string check(uint64_t i) const;
  // The bad records among the pending ones (record number → reason): they
  // leave the index as the index's own bad records do, the saved index
  // keeps every verdict, and the dataset is complete. Throws DatasetError as
  // the constructor does (a bad record under on_bad_record = "fail", a
  // dataset without valid records).
  void apply_verdicts(const JobConfig& cfg, const std::map<uint64_t, std::string>& bad);
  Dataset(const Dataset&) = delete;
  Dataset& operator=(const Dataset&) = delete;

  // Valid records, 0..size()-1 (a Parquet or Arrow row counts as valid
  // until verdict() says otherwise). A row's text lives in a buffer of the
  // calling thread, until its next call.
  uint64_t size() const { return shard_first_.back(); }
  std::string_view record(uint64_t i) const {
    const Shard& s = shard_of(i);
    if (s.rows) return row_text(s, s.index.offset(i - s.first)).text;
    return record_at(s.bytes.data(), s.bytes.size(), s.index.kind(), s.index.offset(i - s.first));
  }
  // Why record i is bad, or "": only a record not checked at start can be
  // (check_rows = "when_read": a Parquet or Arrow row, or a JSONL line; the
  // check the index gives every other JSONL record, or the failure to decode
  // its group). Deterministic: a function of the record.
  std::string verdict(uint64_t i) const;
  // Whether a JSONL shard's records are checked as they are read: a bad one
  // is then left out where the plan puts it, so the plan needs the facts
  // that say which (a Parquet or Arrow row read so is left out where its
  // batch is built).
  bool jsonl_checked_when_read() const {
    for (const Shard& s : shards_)
      if (s.unchecked) return true;
    return false;
  }
  // Whether record i was checked at start (else verdict() and its render
  // judge it as it is read).
  bool checked_at_start(uint64_t i) const {
    const Shard& s = shard_of(i);
    return !s.unchecked && (!s.rows || s.rows_checked);
  }
  // "shard:line" of valid record i, and its line alone (both count the
  // shard's newlines up to it: for messages, not for hot paths).
  std::string where(uint64_t i) const;
  uint32_t line(uint64_t i) const;
  // The dataset record i belongs to.
  std::size_t dataset_of(uint64_t i) const { return shard_of(i).dataset; }

  uint64_t file_bytes() const { return bytes_; }
  uint64_t records_total() const { return size() + bad_.size(); }
  const std::vector<BadRecord>& bad() const { return bad_; }
  const std::vector<DatasetInfo>& datasets() const { return info_; }
  const Mixture& mixture() const { return mixture_; }
  // The evaluation set (section 7): the held-out records, then the
  // [[eval.datasets]]; empty (per_epoch() 0) without [eval].
  const Mixture& eval_mixture() const { return eval_mixture_; }
  double index_seconds() const { return seconds_; }
  // The files of `[cache] dir` (`dir`) this job reads: each shard's saved
  // index and spool.
  std::vector<std::string> cache_files(const std::string& dir) const {
    std::vector<std::string> out;
    for (const Shard& s : shards_) {
      out.push_back(dir + "/index/" + s.index_name);
      if (s.rows) out.push_back(rows_ok_name(out.back()));
      if (!s.object.empty()) out.push_back(s.object);
      else if (!s.bytes.file().empty() && s.bytes.file() != s.path) out.push_back(s.bytes.file());
    }
    return out;
  }
  // "" while every shard's file is whole; else the first that shrank under
  // its mapping (ShardBytes::shrunk()).
  std::string shrunk() const {
    for (const Shard& s : shards_)
      if (std::string why = s.bytes.shrunk(); !why.empty()) return why;
    return {};
  }
  // The mark beside a Parquet or Arrow shard's index name `index`: every row
  // passed the checks at start.
  static std::string rows_ok_name(const std::string& index) {
    return index.substr(0, index.size() - 4) + "-rows-ok.tfx";
  }
  // Each shard's valid record count and the name of its index, in order: the
  // index's identity of the shard (path, size, mtime, inode and edges, or a
  // spool's content hash) and the rules that chose its valid records.
  std::vector<std::pair<uint64_t, std::string>> identities() const {
    std::vector<std::pair<uint64_t, std::string>> out;
    for (const Shard& s : shards_) out.emplace_back(s.index.valid(), s.index_name);
    return out;
  }

 private:
  struct Shard {
    std::string path;
    std::size_t dataset;
    uint64_t first;          // its first valid record
    bool indexed = false;    // at this start, not read from the index cache
    std::string index_name;  // its saved index's file name in `[cache] dir/index/`
    std::string object;      // an object's file in `[cache] dir/objects/` (once complete); "" for a local file
    ShardBytes bytes;
    ShardIndex index;
    std::unique_ptr<ColumnarRows> rows;  // a Parquet or Arrow shard's rows
    bool rows_checked = false;           // all checked at start: verdict() has nothing to say
    bool when_read = false;              // check_rows = "when_read", checked here for tokfeedd --check-config
    bool pending = false;                // its renders are still to be judged (apply_verdicts())
    std::vector<ColumnarBad> reported;   // bad rows the plan keeps (check_rows = "when_read"); JSONL: `row` is the line
    // A JSONL shard under check_rows = "when_read": every non-blank line is
    // a record, checked as it is read (verdict()).
    bool unchecked = false;
  };
  struct RowText {
    uint64_t shard = 0;  // ColumnarRows::id()
    uint64_t row = UINT64_MAX;
    std::string text;
    std::string error;  // its group cannot be decoded
  };
  const Shard& shard_of(uint64_t i) const;
  // The text of row `row` of columnar shard `s`, kept per thread.
  const RowText& row_text(const Shard& s, uint64_t row) const;
  // `path`: the shard as messages name it (an object's URL); `local`: the
  // file read. `disk_bytes`: the file's size as stored, which progress counts.
  // `object`: an object's file in the cache once complete ("" for a local
  // file); `partial`: its completion map while it is fetched footer first.
  void load_shard(const JobConfig& cfg, std::size_t d, const std::string& path, const std::string& local,
                  uint64_t disk_bytes, IndexProgress* progress, bool check_rows, const std::string& object,
                  std::shared_ptr<PartialObject> partial);
  // A Parquet or Arrow shard, into `s`: its layout, and its rows checked
  // when its dataset fails on bad records or `check_rows` (under "skip" a
  // bad row is only reported).
  void load_columnar(const JobConfig& cfg, std::size_t d, Shard& s, const ShardProgress& report, bool check_rows);
  // Lists the bad records of unchecked JSONL shard `s` in its `reported`.
  void report_unchecked(Shard& s);
  // Keeps a shard's verdicts in `[cache] dir/index/` once all are known.
  void save_checked(const JobConfig& cfg, Shard& s);
  // Numbers the records, lists the bad ones and draws the mixtures.
  void finish(const JobConfig& cfg);

  std::vector<Shard> shards_;
  std::vector<std::unique_ptr<ObjectFetch>> fetches_;  // going on after planning (footers first)
  std::vector<uint64_t> shard_first_{0};               // shards + 1 entries
  std::vector<BadRecord> bad_;
  std::vector<DatasetInfo> info_;
  std::vector<text::RecordRules> rules_;        // per dataset
  std::vector<text::RecordRules> index_rules_;  // the same, rendering nothing (defer_render)
  Mixture mixture_;
  Mixture eval_mixture_;
  uint64_t bytes_ = 0;
  double seconds_ = 0;
  uint64_t t0_ = 0;
};

}  // namespace tokfeed
