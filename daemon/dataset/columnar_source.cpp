#include "dataset/columnar_source.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>

#include "dataset/dataset_error.hpp"
#include "dataset/object_partial.hpp"
#include "dataset/shard_source.hpp"

#ifdef TOKFEED_WITH_ARROW
#include <arrow/api.h>
#include <arrow/io/memory.h>
#include <arrow/ipc/reader.h>
#include <arrow/util/byte_size.h>
#include <parquet/arrow/reader.h>
#include <parquet/exception.h>
#include <parquet/file_reader.h>

#include <malloc.h>

#include <chrono>
#include <cstring>
#include <list>
#include <mutex>
#include <thread>

#include "dataset/columnar_json.hpp"
#endif

namespace tokfeed {

ColumnarKind columnar_kind(const std::string& path) noexcept {
  if (path.ends_with(".parquet")) return ColumnarKind::kParquet;
  if (path.ends_with(".arrow")) return ColumnarKind::kArrow;
  return ColumnarKind::kNone;
}

std::string ColumnarLayout::where(uint64_t row) const {
  const char* group = kind == ColumnarKind::kArrow ? "record batch" : "row group";
  uint64_t g = 0;
  for (; g < group_rows.size() && row >= group_rows[g]; ++g) row -= group_rows[g];
  return fmt::format("{} {}, row {}", group, g, row);
}

uint64_t ColumnarLayout::rows() const {
  uint64_t n = 0;
  for (uint64_t r : group_rows) n += r;
  return n;
}

void ColumnarRows::set_partial(std::shared_ptr<const PartialObject> partial) {
  if (partial && partial->groups() != layout_.group_rows.size())
    throw DatasetError(fmt::format("{}: the fetcher's completion map has {} groups and the footer {}; restart tokfeedd",
                                   path_, partial->groups(), layout_.group_rows.size()));
  partial_ = std::move(partial);
}

#ifndef TOKFEED_WITH_ARROW

bool columnar_supported() noexcept { return false; }
std::size_t columnar_cached_groups() noexcept { return 0; }

struct ColumnarRows::Reader {};

ColumnarRows::ColumnarRows(std::string path, ColumnarKind, const char*, uint64_t, uint64_t)
    : path_(std::move(path)), id_(0) {
  throw DatasetError(
      fmt::format("{}: this tokfeedd was built without Apache Arrow, so it cannot read Parquet or Arrow files; "
                  "run scripts/deps.sh (it installs pyarrow, whose C++ libraries tokfeed links) and build again "
                  "(cmake -DTOKFEED_WITH_ARROW=ON requires them), or convert the dataset to JSONL",
                  path_));
}
ColumnarRows::~ColumnarRows() = default;
void ColumnarRows::row(uint64_t, std::string&) const {}
std::vector<ColumnarBad> ColumnarRows::check_rows(const std::function<std::string(std::string_view)>&, unsigned,
                                                  const ShardProgress&) const {
  return {};
}

#else

bool columnar_supported() noexcept { return true; }

namespace {

using Batches = std::vector<std::shared_ptr<arrow::RecordBatch> >;

// The decoded groups one process keeps: at most this many and, past the one
// in use, at most this many bytes of decoded buffers (docs/data_model.md 1.1).
constexpr std::size_t kCachedGroups = 4;
constexpr uint64_t kCachedGroupBytes = 64ull << 20;

template <class T>
T ok(arrow::Result<T> r, const std::function<DatasetError(const std::string&)>& fail) {
  if (!r.ok()) throw fail(r.status().ToString());
  return std::move(r).ValueUnsafe();
}

// One decoded group: its record batches, each with its rows' first row in the
// group and its JSON writers (made when a row of it is first read).
struct Group {
  uint64_t shard = 0;  // ColumnarRows::id_
  std::size_t index = 0;
  Batches batches;
  std::vector<int64_t> first;  // batches + 1 entries
  std::vector<std::unique_ptr<RowJson> > json;
  uint64_t bytes = 0;  // decoded buffers held (0 for buffers in the mapping)
};

// This process's decoded groups, the most recently used first. A forked
// worker starts with a copy of its parent's (the supervisor reads none while
// serving) and keeps its own from then on. Never destroyed: a shard may
// outlive static destruction.
struct Cache {
  std::mutex mu;
  std::list<Group> groups;
  uint64_t bytes = 0;
};
Cache& cache() {
  static Cache* c = new Cache;
  return *c;
}
std::atomic<uint64_t> g_next_id{1};

}  // namespace

std::size_t columnar_cached_groups() noexcept {
  Cache& c = cache();
  std::lock_guard lock(c.mu);
  return c.groups.size();
}

// Arrow's readers of one file: a Parquet reader, or an IPC file reader, or
// an IPC stream read forward from its start (and opened again to go back).
struct ColumnarRows::Reader {
  std::shared_ptr<arrow::Buffer> bytes;  // the mapping, not owned
  std::unique_ptr<parquet::arrow::FileReader> parquet;
  std::shared_ptr<arrow::ipc::RecordBatchFileReader> ipc_file;
  std::shared_ptr<arrow::ipc::RecordBatchStreamReader> ipc_stream;
  std::size_t stream_next = 0;  // the record batch ipc_stream reads next

  std::shared_ptr<arrow::io::RandomAccessFile> file() const { return std::make_shared<arrow::io::BufferReader>(bytes); }
};

namespace {

DatasetError damaged(const std::string& path, ColumnarKind kind, std::size_t g, uint64_t first,
                     const std::string& what) {
  const char* group = kind == ColumnarKind::kArrow ? "record batch" : "row group";
  return DatasetError(
      fmt::format("{}: {} {} (from row {}): cannot read it: {}; the file is damaged or truncated: "
                  "fetch or write it again",
                  path, group, g, first, what));
}

// Refuses row group `g` from its metadata alone when a column chunk holds
// more uncompressed bytes per row than a record may have: at least one of
// its cells would pass max_record_bytes once expanded (a 1 GiB cell
// compresses to kilobytes), so it is never decompressed.
void check_row_group(const std::string& path, parquet::RowGroupMetaData& rg, int g, uint64_t first,
                     uint64_t max_row_bytes) {
  const int64_t rows = std::max<int64_t>(1, rg.num_rows());
  if (max_row_bytes == 0) return;
  for (int c = 0; c < rg.num_columns(); ++c) {
    auto chunk = rg.ColumnChunk(c);
    const int64_t bytes = chunk->total_uncompressed_size();
    if (bytes <= 0 || static_cast<uint64_t>(bytes / rows) <= max_row_bytes) continue;
    throw DatasetError(fmt::format(
        "{}: row group {} (rows {} to {}): column '{}' holds {} bytes uncompressed for {} row(s), so a row is "
        "longer than max_record_bytes = {}; it is refused before it is decompressed: drop or split that row, or "
        "raise max_record_bytes",
        path, g, first, first + static_cast<uint64_t>(rows) - 1, chunk->path_in_schema()->ToDotString(), bytes, rows,
        max_row_bytes));
  }
}

bool is_ipc_file(const arrow::Buffer& b) { return b.size() >= 6 && std::memcmp(b.data(), "ARROW1", 6) == 0; }

std::unique_ptr<parquet::arrow::FileReader> open_parquet(const std::shared_ptr<arrow::io::RandomAccessFile>& f,
                                                         const std::function<DatasetError(const std::string&)>& fail) {
  // The system allocator: a group's buffers go back to the system when it
  // leaves the cache.
  return ok(parquet::arrow::OpenFile(f, arrow::system_memory_pool()), fail);
}

// Group `g` of a Parquet file, decoded.
Batches read_parquet_group(parquet::arrow::FileReader& r, int g,
                           const std::function<DatasetError(const std::string&)>& fail) {
#if ARROW_VERSION_MAJOR >= 24
  auto table = ok(r.ReadRowGroup(g), fail);
#else
  std::shared_ptr<arrow::Table> table;
  if (auto st = r.ReadRowGroup(g, &table); !st.ok()) throw fail(st.ToString());
#endif
  Batches out;
  arrow::TableBatchReader batches(table);
  for (;;) {
    std::shared_ptr<arrow::RecordBatch> b;
    if (auto st = batches.ReadNext(&b); !st.ok()) throw fail(st.ToString());
    if (!b) break;
    out.push_back(std::move(b));
  }
  return out;
}

void fill(Group& grp, Batches batches, bool count_bytes) {
  grp.batches = std::move(batches);
  grp.first.assign(1, 0);
  for (const auto& b : grp.batches) {
    grp.first.push_back(grp.first.back() + b->num_rows());
    if (count_bytes) grp.bytes += static_cast<uint64_t>(arrow::util::TotalBufferSize(*b));
  }
  grp.json.resize(grp.batches.size());
}

}  // namespace

ColumnarRows::ColumnarRows(std::string path, ColumnarKind kind, const char* data, uint64_t size, uint64_t max_row_bytes)
    : path_(std::move(path)), id_(g_next_id.fetch_add(1)), reader_(std::make_unique<Reader>()) {
  layout_.kind = kind;
  auto whole = [&](const std::string& what) {
    const char* format = kind == ColumnarKind::kParquet ? "a Parquet" : "an Arrow IPC";
    return DatasetError(
        fmt::format("{}: cannot read it as {} file: {}; the file is damaged, truncated or not in "
                    "that format: fetch or write it again",
                    path_, format, what));
  };
  static const uint8_t kEmpty = 0;
  reader_->bytes = std::make_shared<arrow::Buffer>(size ? reinterpret_cast<const uint8_t*>(data) : &kEmpty,
                                                   static_cast<int64_t>(size));
  try {
    if (kind == ColumnarKind::kParquet) {
      reader_->parquet = open_parquet(reader_->file(), whole);
      std::shared_ptr<arrow::Schema> schema;
      if (auto st = reader_->parquet->GetSchema(&schema); !st.ok()) throw whole(st.ToString());
      for (const auto& f : schema->fields()) layout_.columns.push_back(f->name());
      auto meta = reader_->parquet->parquet_reader()->metadata();
      for (int g = 0; g < meta->num_row_groups(); ++g) {
        check_row_group(path_, *meta->RowGroup(g), g, layout_.rows(), max_row_bytes);
        layout_.group_rows.push_back(static_cast<uint64_t>(std::max<int64_t>(0, meta->RowGroup(g)->num_rows())));
        group_bytes_.push_back(static_cast<uint64_t>(std::max<int64_t>(0, meta->RowGroup(g)->total_compressed_size())));
      }
    } else {
      // The batches' headers only: their buffers are slices of the mapping
      // (an uncompressed file, as `datasets` writes, decodes nothing here).
      std::shared_ptr<arrow::Schema> schema;
      int64_t last = 0;
      auto count = [&](const arrow::RecordBatch& b, int64_t pos) {
        layout_.group_rows.push_back(static_cast<uint64_t>(b.num_rows()));
        group_bytes_.push_back(static_cast<uint64_t>(std::max<int64_t>(0, pos - last)));
        last = pos;
      };
      if (is_ipc_file(*reader_->bytes)) {
        reader_->ipc_file = ok(arrow::ipc::RecordBatchFileReader::Open(reader_->file()), whole);
        schema = reader_->ipc_file->schema();
        const int n = reader_->ipc_file->num_record_batches();
        for (int g = 0; g < n; ++g) {
          auto b = ok(reader_->ipc_file->ReadRecordBatch(g), [&](const std::string& w) {
            return damaged(path_, kind, static_cast<std::size_t>(g), layout_.rows(), w);
          });
          count(*b, static_cast<int64_t>(size) * (g + 1) / n);
        }
      } else {
        auto f = reader_->file();
        auto stream = ok(arrow::ipc::RecordBatchStreamReader::Open(f), whole);
        schema = stream->schema();
        for (std::size_t g = 0;; ++g) {
          std::shared_ptr<arrow::RecordBatch> b;
          if (auto st = stream->ReadNext(&b); !st.ok()) throw damaged(path_, kind, g, layout_.rows(), st.ToString());
          if (!b) break;
          count(*b, ok(f->Tell(), whole));
        }
      }
      for (const auto& f : schema->fields()) layout_.columns.push_back(f->name());
    }
  } catch (const DatasetError&) {
    throw;
  } catch (const std::exception& e) {  // parquet::ParquetException and the like
    throw whole(e.what());
  }
  group_first_.assign(1, 0);
  for (uint64_t r : layout_.group_rows) group_first_.push_back(group_first_.back() + r);
}

ColumnarRows::~ColumnarRows() {
  Cache& c = cache();
  std::lock_guard lock(c.mu);
  for (auto it = c.groups.begin(); it != c.groups.end();) {
    if (it->shard == id_) {
      c.bytes -= it->bytes;
      it = c.groups.erase(it);
    } else {
      ++it;
    }
  }
}

void ColumnarRows::row(uint64_t row, std::string& out) const {
  const std::size_t g =
      static_cast<std::size_t>(std::upper_bound(group_first_.begin(), group_first_.end(), row) - group_first_.begin()) -
      1;
  const int64_t in_group = static_cast<int64_t>(row - group_first_[g]);
  auto fail = [&](const std::string& what) { return damaged(path_, layout_.kind, g, group_first_[g], what); };
  if (partial_) partial_->wait(static_cast<uint32_t>(g));  // the group's bytes are whole from here on
  Cache& c = cache();
  std::lock_guard lock(c.mu);
  auto it =
      std::find_if(c.groups.begin(), c.groups.end(), [&](const Group& k) { return k.shard == id_ && k.index == g; });
  if (it != c.groups.end()) {
    c.groups.splice(c.groups.begin(), c.groups, it);
  } else {
    Group grp;
    grp.shard = id_;
    grp.index = g;
    try {
      Reader& r = *reader_;
      if (r.parquet) {
        fill(grp, read_parquet_group(*r.parquet, static_cast<int>(g), fail), true);
      } else if (r.ipc_file) {
        fill(grp, {ok(r.ipc_file->ReadRecordBatch(static_cast<int>(g)), fail)}, false);
      } else {
        if (!r.ipc_stream || r.stream_next > g) {
          r.ipc_stream = ok(arrow::ipc::RecordBatchStreamReader::Open(r.file()), fail);
          r.stream_next = 0;
        }
        std::shared_ptr<arrow::RecordBatch> b;
        for (; r.stream_next <= g; ++r.stream_next)
          if (auto st = r.ipc_stream->ReadNext(&b); !st.ok() || !b)
            throw fail(st.ok() ? "no such batch" : st.ToString());
        fill(grp, {std::move(b)}, false);
      }
    } catch (const DatasetError&) {
      throw;
    } catch (const std::exception& e) {
      throw fail(e.what());
    }
    c.bytes += grp.bytes;
    c.groups.push_front(std::move(grp));
    // Keep the group in use; drop the least recently used past the bounds.
    // The heap keeps the freed buffers for the next group: giving them back
    // (malloc_trim) saves about a third of a worker's memory but halves its
    // decoding rate, as every group then faults its pages in afresh.
    while (c.groups.size() > kCachedGroups || (c.groups.size() > 1 && c.bytes > kCachedGroupBytes)) {
      c.bytes -= c.groups.back().bytes;
      c.groups.pop_back();
    }
  }
  Group& grp = c.groups.front();
  const std::size_t b =
      static_cast<std::size_t>(std::upper_bound(grp.first.begin(), grp.first.end(), in_group) - grp.first.begin()) - 1;
  if (b >= grp.batches.size()) throw fail("the group holds fewer rows than its header says");
  if (!grp.json[b]) grp.json[b] = std::make_unique<RowJson>(grp.batches[b]);
  out.clear();
  grp.json[b]->write(in_group - grp.first[b], out);
}

std::vector<ColumnarBad> ColumnarRows::check_rows(const std::function<std::string(std::string_view)>& verdict,
                                                  unsigned threads, const ShardProgress& progress) const {
  const std::size_t groups = layout_.group_rows.size();
  std::vector<std::vector<ColumnarBad> > bad(groups);
  std::atomic<std::size_t> next{0};
  std::mutex mu;
  std::size_t failed = groups;
  std::exception_ptr error;
  std::atomic<bool> cancelled{false};
  // Each thread decodes whole groups with its own reader and keeps none.
  auto work = [&] {
    std::unique_ptr<parquet::arrow::FileReader> pq;
    std::string text;
    try {
      if (layout_.kind == ColumnarKind::kParquet)
        pq = open_parquet(reader_->file(), [&](const std::string& w) { return damaged(path_, layout_.kind, 0, 0, w); });
    } catch (...) {
      std::lock_guard lock(mu);
      if (!error) failed = 0, error = std::current_exception();
      return;
    }
    for (std::size_t g; (g = next.fetch_add(1)) < groups;) {
      if (progress.cancelled()) {
        cancelled = true;
        return;
      }
      progress.chunk_pause();
      if (partial_) partial_->wait(static_cast<uint32_t>(g));
      auto fail = [&](const std::string& what) { return damaged(path_, layout_.kind, g, group_first_[g], what); };
      try {
        Batches batches;
        if (pq) {
          batches = read_parquet_group(*pq, static_cast<int>(g), fail);
        } else {
          // An Arrow file's batches: read (from the mapping) by row(), one
          // group at a time, through this process's cache.
          std::string one;
          for (uint64_t r = group_first_[g]; r < group_first_[g + 1]; ++r) {
            row(r, one);
            if (std::string why = verdict(one); !why.empty()) bad[g].push_back({r, std::move(why)});
          }
        }
        uint64_t r = group_first_[g];
        for (const auto& b : batches) {
          RowJson json(b);
          for (int64_t i = 0; i < b->num_rows(); ++i, ++r) {
            text.clear();
            json.write(i, text);
            if (std::string why = verdict(text); !why.empty()) bad[g].push_back({r, std::move(why)});
          }
        }
        if (r != group_first_[g + 1] && pq) throw fail("the group holds another number of rows than its header says");
      } catch (...) {
        std::lock_guard lock(mu);
        if (g < failed) failed = g, error = std::current_exception();
        return;
      }
      if (progress.bytes) progress.bytes->fetch_add(group_bytes_[g], std::memory_order_relaxed);
      if (progress.records) progress.records->fetch_add(layout_.group_rows[g], std::memory_order_relaxed);
    }
  };
  if (layout_.kind != ColumnarKind::kParquet) threads = 1;  // read in place: nothing to share out
  threads = std::max(1u, std::min<unsigned>(threads, static_cast<unsigned>(std::max<std::size_t>(groups, 1))));
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  // Workers fork from this process: leave them no freed decoding buffers.
  ::malloc_trim(0);
  if (error) std::rethrow_exception(error);
  if (cancelled) throw DatasetError(path_ + ": reading stopped: the daemon is shutting down");
  std::vector<ColumnarBad> out;
  for (auto& v : bad)
    for (ColumnarBad& b : v) out.push_back(std::move(b));
  return out;
}

#endif

}  // namespace tokfeed
