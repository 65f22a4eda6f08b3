#include "dataset/columnar_source.hpp"

#include <fmt/format.h>

#include <cstring>

#include "dataset/dataset.hpp"
#include "template/pystr.hpp"

#ifdef TOKFEED_WITH_ARROW
#include <arrow/api.h>
#include <arrow/io/file.h>
#include <arrow/ipc/reader.h>
#include <parquet/arrow/reader.h>
#include <parquet/exception.h>
#include <parquet/file_reader.h>

#include <malloc.h>

#include <algorithm>
#include <charconv>
#include <condition_variable>
#include <mutex>
#include <chrono>
#include <cmath>
#include <memory>
#include <thread>
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

// kind (1 byte), group count, the counts, column count, then per column its
// length and bytes; integers as 8 little-endian bytes.
std::string ColumnarLayout::serialize() const {
  std::string out(1, static_cast<char>(kind));
  auto put = [&](uint64_t v) { out.append(reinterpret_cast<const char*>(&v), 8); };
  put(group_rows.size());
  for (uint64_t r : group_rows) put(r);
  put(columns.size());
  for (const std::string& c : columns) put(c.size()), out += c;
  return out;
}

bool ColumnarLayout::parse(std::string_view b) {
  std::size_t at = 1;
  auto get = [&](uint64_t& v) {
    if (b.size() - at < 8) return false;
    std::memcpy(&v, b.data() + at, 8);
    at += 8;
    return true;
  };
  uint64_t n;
  if (b.empty() ||
      (b[0] != static_cast<char>(ColumnarKind::kParquet) && b[0] != static_cast<char>(ColumnarKind::kArrow)))
    return false;
  kind = static_cast<ColumnarKind>(b[0]);
  if (!get(n) || n > b.size() / 8) return false;
  group_rows.resize(n);
  for (uint64_t& r : group_rows)
    if (!get(r)) return false;
  if (!get(n) || n > b.size() / 8) return false;
  columns.resize(n);
  for (std::string& c : columns) {
    uint64_t len;
    if (!get(len) || b.size() - at < len) return false;
    c.assign(b.substr(at, len));
    at += len;
  }
  return at == b.size();
}

#ifndef TOKFEED_WITH_ARROW

bool columnar_supported() noexcept { return false; }

ColumnarLayout columnar_to_jsonl(const std::string& path, ColumnarKind, const std::function<void(std::string_view)>&,
                                 const ShardProgress&) {
  throw DatasetError(
      fmt::format("{}: this tokfeedd was built without Apache Arrow, so it cannot read Parquet or Arrow files; "
                  "run scripts/deps.sh (it installs pyarrow, whose C++ libraries tokfeed links) and build again "
                  "(cmake -DTOKFEED_WITH_ARROW=ON requires them), or convert the dataset to JSONL",
                  path));
}

#else

bool columnar_supported() noexcept { return true; }

namespace {

template <class T>
void json_number(T v, std::string& out) {
  if constexpr (std::is_floating_point_v<T>) {
    if (!std::isfinite(v)) {
      out += "null";  // JSON has no NaN or infinity
      return;
    }
  }
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

// Writes element i of one array as JSON; built once per record batch.
class Writer {
 public:
  // Holds the array: an accessor may hand out a new one each call.
  explicit Writer(std::shared_ptr<arrow::Array> a) : owner_(std::move(a)), array_(*owner_) {}
  virtual ~Writer() = default;
  bool null(int64_t i) const { return array_.IsNull(i); }
  // Element i (not null) as a JSON value.
  virtual void value(int64_t i, std::string& out) const = 0;
  void write(int64_t i, std::string& out) const {
    if (null(i)) out += "null";
    else value(i, out);
  }

 protected:
  std::shared_ptr<arrow::Array> owner_;
  const arrow::Array& array_;
};

std::unique_ptr<Writer> make_writer(const std::shared_ptr<arrow::Array>& a);

class NullWriter final : public Writer {
 public:
  using Writer::Writer;
  void value(int64_t, std::string& out) const override { out += "null"; }
};

class BoolWriter final : public Writer {
 public:
  using Writer::Writer;
  void value(int64_t i, std::string& out) const override {
    out += static_cast<const arrow::BooleanArray&>(array_).Value(i) ? "true" : "false";
  }
};

template <class ArrayT>
class NumberWriter final : public Writer {
 public:
  using Writer::Writer;
  void value(int64_t i, std::string& out) const override {
    json_number(static_cast<const ArrayT&>(array_).Value(i), out);
  }
};

template <class ArrayT>
class StringWriter final : public Writer {
 public:
  using Writer::Writer;
  void value(int64_t i, std::string& out) const override {
    tmpl::json_quote(static_cast<const ArrayT&>(array_).GetView(i), out);
  }
};

// JSON text (Arrow's canonical arrow.json extension type, which HF
// `datasets` writes for values of mixed types: its `Json` feature): the value
// it holds, on one line (a line break outside a string is whitespace; inside
// one it is invalid JSON either way).
template <class ArrayT>
class JsonTextWriter final : public Writer {
 public:
  using Writer::Writer;
  void value(int64_t i, std::string& out) const override {
    std::string_view v = static_cast<const ArrayT&>(array_).GetView(i);
    std::size_t at = out.size();
    out.append(v);
    for (std::size_t k = at; k < out.size(); ++k)
      if (out[k] == '\n' || out[k] == '\r') out[k] = ' ';
    if (v.find_first_not_of(" \t\n\r") == std::string_view::npos) out += "null";
  }
};

// Any other type (dates, decimals, ...): its text, as a JSON string.
class TextWriter final : public Writer {
 public:
  using Writer::Writer;
  void value(int64_t i, std::string& out) const override {
    auto s = array_.GetScalar(i);
    tmpl::json_quote(s.ok() ? (*s)->ToString() : std::string(), out);
  }
};

template <class ArrayT>
class ListWriter final : public Writer {
 public:
  explicit ListWriter(std::shared_ptr<arrow::Array> a)
      : Writer(std::move(a)), values_(make_writer(static_cast<const ArrayT&>(array_).values())) {}
  void value(int64_t i, std::string& out) const override {
    const auto& l = static_cast<const ArrayT&>(array_);
    int64_t b = l.value_offset(i), n = l.value_length(i);
    out += '[';
    for (int64_t k = 0; k < n; ++k) {
      if (k) out += ',';
      values_->write(b + k, out);
    }
    out += ']';
  }

 private:
  std::unique_ptr<Writer> values_;
};

// A struct is an object; its null fields are left out (missing keys).
class StructWriter final : public Writer {
 public:
  explicit StructWriter(std::shared_ptr<arrow::Array> a) : Writer(std::move(a)) {
    const auto& s = static_cast<const arrow::StructArray&>(array_);
    for (int f = 0; f < s.num_fields(); ++f) {
      std::string key;
      tmpl::json_quote(s.struct_type()->field(f)->name(), key);
      key += ':';
      fields_.push_back({std::move(key), make_writer(s.field(f))});
    }
  }
  void value(int64_t i, std::string& out) const override {
    out += '{';
    bool first = true;
    for (const auto& [key, w] : fields_) {
      if (w->null(i)) continue;
      if (!first) out += ',';
      first = false;
      out += key;
      w->value(i, out);
    }
    out += '}';
  }

 private:
  std::vector<std::pair<std::string, std::unique_ptr<Writer> > > fields_;
};

// A map with string keys is an object (a null value is left out); with other
// keys, a list of {"key": ..., "value": ...}.
class MapWriter final : public Writer {
 public:
  explicit MapWriter(std::shared_ptr<arrow::Array> a) : Writer(std::move(a)) {
    const auto& m = static_cast<const arrow::MapArray&>(array_);
    auto id = m.keys()->type_id();
    string_keys_ = id == arrow::Type::STRING || id == arrow::Type::LARGE_STRING || id == arrow::Type::STRING_VIEW;
    keys_ = make_writer(m.keys());
    items_ = make_writer(m.items());
  }
  void value(int64_t i, std::string& out) const override {
    const auto& m = static_cast<const arrow::MapArray&>(array_);
    int64_t b = m.value_offset(i), n = m.value_length(i);
    out += string_keys_ ? '{' : '[';
    bool first = true;
    for (int64_t k = b; k < b + n; ++k) {
      if (string_keys_ && items_->null(k)) continue;
      if (!first) out += ',';
      first = false;
      if (string_keys_) {
        keys_->write(k, out);
        out += ':';
        items_->write(k, out);
      } else {
        out += "{\"key\":";
        keys_->write(k, out);
        out += ",\"value\":";
        items_->write(k, out);
        out += '}';
      }
    }
    out += string_keys_ ? '}' : ']';
  }

 private:
  bool string_keys_ = false;
  std::unique_ptr<Writer> keys_, items_;
};

class DictionaryWriter final : public Writer {
 public:
  explicit DictionaryWriter(std::shared_ptr<arrow::Array> a)
      : Writer(std::move(a)), dict_(make_writer(static_cast<const arrow::DictionaryArray&>(array_).dictionary())) {}
  void value(int64_t i, std::string& out) const override {
    dict_->write(static_cast<const arrow::DictionaryArray&>(array_).GetValueIndex(i), out);
  }

 private:
  std::unique_ptr<Writer> dict_;
};

std::unique_ptr<Writer> make_writer(const std::shared_ptr<arrow::Array>& a) {
  using T = arrow::Type;
  if (a->type_id() == T::EXTENSION) {
    const auto& ext = static_cast<const arrow::ExtensionArray&>(*a);
    std::shared_ptr<arrow::Array> storage = ext.storage();
    if (static_cast<const arrow::ExtensionType&>(*a->type()).extension_name() == "arrow.json") {
      switch (storage->type_id()) {
        case T::STRING: return std::make_unique<JsonTextWriter<arrow::StringArray> >(storage);
        case T::LARGE_STRING: return std::make_unique<JsonTextWriter<arrow::LargeStringArray> >(storage);
        case T::STRING_VIEW: return std::make_unique<JsonTextWriter<arrow::StringViewArray> >(storage);
        default: break;
      }
    }
    return make_writer(storage);  // other extensions: their storage
  }
  switch (a->type_id()) {
    case T::NA: return std::make_unique<NullWriter>(a);
    case T::BOOL: return std::make_unique<BoolWriter>(a);
    case T::INT8: return std::make_unique<NumberWriter<arrow::Int8Array> >(a);
    case T::INT16: return std::make_unique<NumberWriter<arrow::Int16Array> >(a);
    case T::INT32: return std::make_unique<NumberWriter<arrow::Int32Array> >(a);
    case T::INT64: return std::make_unique<NumberWriter<arrow::Int64Array> >(a);
    case T::UINT8: return std::make_unique<NumberWriter<arrow::UInt8Array> >(a);
    case T::UINT16: return std::make_unique<NumberWriter<arrow::UInt16Array> >(a);
    case T::UINT32: return std::make_unique<NumberWriter<arrow::UInt32Array> >(a);
    case T::UINT64: return std::make_unique<NumberWriter<arrow::UInt64Array> >(a);
    case T::FLOAT: return std::make_unique<NumberWriter<arrow::FloatArray> >(a);
    case T::DOUBLE: return std::make_unique<NumberWriter<arrow::DoubleArray> >(a);
    case T::STRING: return std::make_unique<StringWriter<arrow::StringArray> >(a);
    case T::LARGE_STRING: return std::make_unique<StringWriter<arrow::LargeStringArray> >(a);
    case T::STRING_VIEW: return std::make_unique<StringWriter<arrow::StringViewArray> >(a);
    case T::LIST: return std::make_unique<ListWriter<arrow::ListArray> >(a);
    case T::LARGE_LIST: return std::make_unique<ListWriter<arrow::LargeListArray> >(a);
    case T::LIST_VIEW: return std::make_unique<ListWriter<arrow::ListViewArray> >(a);
    case T::LARGE_LIST_VIEW: return std::make_unique<ListWriter<arrow::LargeListViewArray> >(a);
    case T::FIXED_SIZE_LIST: return std::make_unique<ListWriter<arrow::FixedSizeListArray> >(a);
    case T::STRUCT: return std::make_unique<StructWriter>(a);
    case T::MAP: return std::make_unique<MapWriter>(a);
    case T::DICTIONARY: return std::make_unique<DictionaryWriter>(a);
    default: return std::make_unique<TextWriter>(a);
  }
}

// Appends one JSON line per row of `batch` to `buf` (a null column is left
// out), handing `buf` to `sink` whenever it holds `flush` bytes.
void write_rows(const arrow::RecordBatch& batch, std::string& buf, const std::function<void(std::string_view)>& sink,
                std::size_t flush = 1u << 20) {
  std::vector<std::pair<std::string, std::unique_ptr<Writer> > > cols;
  for (int c = 0; c < batch.num_columns(); ++c) {
    std::string key;
    tmpl::json_quote(batch.schema()->field(c)->name(), key);
    key += ':';
    cols.emplace_back(std::move(key), make_writer(batch.column(c)));
  }
  for (int64_t r = 0; r < batch.num_rows(); ++r) {
    buf += '{';
    bool first = true;
    for (const auto& [key, w] : cols) {
      if (w->null(r)) continue;
      if (!first) buf += ',';
      first = false;
      buf += key;
      w->value(r, buf);
    }
    buf += "}\n";
    if (buf.size() >= flush) {
      sink(buf);
      buf.clear();
    }
  }
}

// The error for group `g` of `path` (Parquet row group or Arrow record
// batch), which starts at the file's row `first`.
DatasetError damaged(const std::string& path, ColumnarKind kind, std::size_t g, uint64_t first,
                     const std::string& what) {
  const char* group = kind == ColumnarKind::kArrow ? "record batch" : "row group";
  return DatasetError(
      fmt::format("{}: {} {} (from row {}): cannot read it: {}; the file is damaged or truncated: "
                  "fetch or write it again",
                  path, group, g, first, what));
}
DatasetError damaged(const std::string& path, const ColumnarLayout& layout, std::size_t g, const std::string& what) {
  return damaged(path, layout.kind, g, layout.rows(), what);
}

template <class T>
T ok(arrow::Result<T> r, const std::function<DatasetError(const std::string&)>& fail) {
  if (!r.ok()) throw fail(r.status().ToString());
  return std::move(r).ValueUnsafe();
}

void columns_of(const arrow::Schema& s, ColumnarLayout& layout) {
  for (const auto& f : s.fields()) layout.columns.push_back(f->name());
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

// A Parquet file's row groups as JSON lines into `sink`, in order. Several
// threads, each with its own reader of the mapped file, convert whole row
// groups; each waits for its turn to hand its group's text on, so at most one
// group per thread is held.
void parquet_rows(const std::string& path, const std::shared_ptr<arrow::io::RandomAccessFile>& file,
                  parquet::arrow::FileReader& first_reader, uint64_t size, ColumnarLayout& layout,
                  const std::function<void(std::string_view)>& sink, const std::function<void(uint64_t)>& advance,
                  uint64_t max_row_bytes) {
  auto meta = first_reader.parquet_reader()->metadata();
  const int groups = first_reader.num_row_groups();
  std::vector<uint64_t> first_row{0}, end_byte{0};
  for (int g = 0; g < groups; ++g) {
    check_row_group(path, *meta->RowGroup(g), g, first_row.back(), max_row_bytes);
    first_row.push_back(first_row.back() + static_cast<uint64_t>(std::max<int64_t>(0, meta->RowGroup(g)->num_rows())));
    end_byte.push_back(std::min(size, end_byte.back() + static_cast<uint64_t>(std::max<int64_t>(
                                                            0, meta->RowGroup(g)->total_compressed_size()))));
  }
  layout.group_rows.assign(static_cast<std::size_t>(groups), 0);
  std::mutex mu;
  std::condition_variable turn;
  int next_write = 0, failed_group = groups;
  std::exception_ptr error;
  std::atomic<int> next{0};
  auto fail_at = [&](int g, std::exception_ptr e) {
    std::lock_guard lock(mu);
    if (g < failed_group) failed_group = g, error = std::move(e);
    turn.notify_all();
  };
  auto work = [&](parquet::arrow::FileReader* reader) {
    for (int g; (g = next.fetch_add(1)) < groups;) {
      std::string text;
      uint64_t rows = 0;
      try {
        auto fail = [&](const std::string& what) {
          return damaged(path, ColumnarKind::kParquet, static_cast<std::size_t>(g), first_row[g], what);
        };
#if ARROW_VERSION_MAJOR >= 24
        auto table = ok(reader->ReadRowGroup(g), fail);
#else
        std::shared_ptr<arrow::Table> table;
        if (auto st = reader->ReadRowGroup(g, &table); !st.ok()) throw fail(st.ToString());
#endif
        arrow::TableBatchReader batches(table);
        for (;;) {
          std::shared_ptr<arrow::RecordBatch> batch;
          if (auto st = batches.ReadNext(&batch); !st.ok()) throw fail(st.ToString());
          if (!batch) break;
          write_rows(*batch, text, {}, SIZE_MAX);
        }
        rows = static_cast<uint64_t>(table->num_rows());
      } catch (...) {
        fail_at(g, std::current_exception());
        return;
      }
      std::unique_lock lock(mu);
      turn.wait(lock, [&] { return next_write == g || failed_group < groups; });
      if (failed_group < groups) return;
      try {
        sink(text);
        layout.group_rows[static_cast<std::size_t>(g)] = rows;
        advance(end_byte[g + 1]);
      } catch (...) {
        failed_group = g, error = std::current_exception();
        turn.notify_all();
        return;
      }
      ++next_write;
      turn.notify_all();
    }
  };
  const unsigned threads = std::clamp<unsigned>(std::thread::hardware_concurrency(), 1, 8);
  std::vector<std::unique_ptr<parquet::arrow::FileReader> > readers;
  for (unsigned t = 1; t < std::min<unsigned>(threads, static_cast<unsigned>(groups)); ++t) {
    auto r = parquet::arrow::OpenFile(file, arrow::default_memory_pool());
    if (!r.ok()) break;  // fewer threads then
    readers.push_back(std::move(r).ValueUnsafe());
  }
  std::vector<std::thread> pool;
  for (auto& r : readers) pool.emplace_back(work, r.get());
  work(&first_reader);
  for (std::thread& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace

ColumnarLayout columnar_to_jsonl(const std::string& path, ColumnarKind kind,
                                 const std::function<void(std::string_view)>& sink, const ShardProgress& progress) {
  ColumnarLayout layout;
  layout.kind = kind;
  std::string buf;
  uint64_t reported = 0;
  std::function<void(uint64_t)> advance = [&](uint64_t pos) {
    if (progress.bytes && pos > reported) progress.bytes->fetch_add(pos - reported, std::memory_order_relaxed);
    reported = std::max(reported, pos);
#ifdef TOKFEED_FAULT_HOOKS
    if (progress.slow_chunk_ms) std::this_thread::sleep_for(std::chrono::milliseconds(progress.slow_chunk_ms));
#endif
    if (progress.cancel && progress.cancel->load(std::memory_order_relaxed))
      throw DatasetError(path + ": reading stopped: the daemon is shutting down");
  };
  auto whole = [&](const std::string& what) {
    const char* format = kind == ColumnarKind::kParquet ? "a Parquet" : "an Arrow IPC";
    return DatasetError(
        fmt::format("{}: cannot read it as {} file: {}; the file is damaged, truncated or not in "
                    "that format: fetch or write it again",
                    path, format, what));
  };
  try {
    auto file = ok(arrow::io::MemoryMappedFile::Open(path, arrow::io::FileMode::READ), whole);
    const uint64_t size = static_cast<uint64_t>(ok(file->GetSize(), whole));
    if (kind == ColumnarKind::kParquet) {
      auto reader = ok(parquet::arrow::OpenFile(file, arrow::default_memory_pool()), whole);
      std::shared_ptr<arrow::Schema> schema;
      if (auto st = reader->GetSchema(&schema); !st.ok()) throw whole(st.ToString());
      columns_of(*schema, layout);
      parquet_rows(path, file, *reader, size, layout, sink, advance, progress.max_row_bytes);
    } else {
      char magic[6] = {};
      if (auto r = file->ReadAt(0, 6, magic); !r.ok()) throw whole(r.status().ToString());
      if (std::memcmp(magic, "ARROW1", 6) == 0) {
        auto reader = ok(arrow::ipc::RecordBatchFileReader::Open(file), whole);
        columns_of(*reader->schema(), layout);
        for (int g = 0; g < reader->num_record_batches(); ++g) {
          auto batch =
              ok(reader->ReadRecordBatch(g), [&](const std::string& w) { return damaged(path, layout, g, w); });
          write_rows(*batch, buf, sink);
          layout.group_rows.push_back(static_cast<uint64_t>(batch->num_rows()));
          advance(size * (g + 1) / reader->num_record_batches());
        }
      } else {
        auto reader = ok(arrow::ipc::RecordBatchStreamReader::Open(file), whole);
        columns_of(*reader->schema(), layout);
        for (std::size_t g = 0;; ++g) {
          std::shared_ptr<arrow::RecordBatch> batch;
          if (auto st = reader->ReadNext(&batch); !st.ok()) throw damaged(path, layout, g, st.ToString());
          if (!batch) break;
          write_rows(*batch, buf, sink);
          layout.group_rows.push_back(static_cast<uint64_t>(batch->num_rows()));
          advance(static_cast<uint64_t>(std::max<int64_t>(0, ok(file->Tell(), whole))));
        }
      }
    }
  } catch (const DatasetError&) {
    throw;
  } catch (const std::exception& e) {  // parquet::ParquetException and the like
    throw whole(e.what());
  }
  if (!buf.empty()) sink(buf);
  advance(0);
  // Workers fork from this process: leave them no freed decoding buffers.
  arrow::default_memory_pool()->ReleaseUnused();
  ::malloc_trim(0);
  return layout;
}

#endif

}  // namespace tokfeed
