#include "dataset/columnar_json.hpp"

#ifdef TOKFEED_WITH_ARROW
#include <arrow/api.h>

#include <charconv>
#include <cmath>

#include "template/pystr.hpp"

namespace tokfeed {

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

}  // namespace

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

namespace {

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

}  // namespace

RowJson::RowJson(std::shared_ptr<arrow::RecordBatch> batch) : batch_(std::move(batch)) {
  for (int c = 0; c < batch_->num_columns(); ++c) {
    std::string key;
    tmpl::json_quote(batch_->schema()->field(c)->name(), key);
    key += ':';
    cols_.emplace_back(std::move(key), make_writer(batch_->column(c)));
  }
}

RowJson::~RowJson() = default;

void RowJson::write(int64_t r, std::string& out) const {
  out += '{';
  bool first = true;
  for (const auto& [key, w] : cols_) {
    if (w->null(r)) continue;
    if (!first) out += ',';
    first = false;
    out += key;
    w->value(r, out);
  }
  out += '}';
}

}  // namespace tokfeed
#endif
