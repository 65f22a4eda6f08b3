// A Parquet file read in place (daemon/dataset/columnar_source.hpp), written
// here by Arrow's own Parquet writer: the layout from the footer, rows in any
// order as the same JSON text, the decoded-group cache held to its bound, and
// the check of every row on several threads.
#include <arrow/api.h>
#include <arrow/io/memory.h>
#include <doctest/doctest.h>
#include <parquet/arrow/writer.h>
#include <parquet/file_reader.h>
#include <parquet/metadata.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "dataset/columnar_source.hpp"
#include "dataset/dataset_error.hpp"
#include "dataset/object_partial.hpp"
#include "dataset/shard_source.hpp"

using namespace tokfeed;

namespace {

// `rows` rows in groups of `group` rows: {"messages": [{"role": "user",
// "content": "q<i>"}, {"role": "assistant", "content": "a<i>"}], "id": i},
// with `id` null on every 5th row.
std::string parquet_bytes(int rows, int group) {
  auto role = arrow::field("role", arrow::utf8()), content = arrow::field("content", arrow::utf8());
  auto msg = arrow::struct_({role, content});
  arrow::StringBuilder roles, contents;
  arrow::Int64Builder ids;
  std::vector<int32_t> offsets{0};
  for (int i = 0; i < rows; ++i) {
    REQUIRE(roles.Append("user").ok());
    REQUIRE(contents.Append("q" + std::to_string(i)).ok());
    REQUIRE(roles.Append("assistant").ok());
    REQUIRE(contents.Append("a" + std::to_string(i) + " \"quoted\"").ok());
    offsets.push_back(offsets.back() + 2);
    REQUIRE((i % 5 == 0 ? ids.AppendNull() : ids.Append(i)).ok());
  }
  std::shared_ptr<arrow::Array> r, c, id;
  REQUIRE(roles.Finish(&r).ok());
  REQUIRE(contents.Finish(&c).ok());
  REQUIRE(ids.Finish(&id).ok());
  auto structs = std::make_shared<arrow::StructArray>(msg, 2 * rows, arrow::ArrayVector{r, c});
  auto off = arrow::Buffer::Wrap(offsets);
  auto messages = std::make_shared<arrow::ListArray>(arrow::list(msg), rows, off, structs);
  auto schema = arrow::schema({arrow::field("messages", arrow::list(msg)), arrow::field("id", arrow::int64())});
  auto table = arrow::Table::Make(schema, {messages, id});
  auto sink = arrow::io::BufferOutputStream::Create().ValueOrDie();
  REQUIRE(parquet::arrow::WriteTable(*table, arrow::default_memory_pool(), sink, group).ok());
  auto buf = sink->Finish().ValueOrDie();
  return buf->ToString();
}

std::string want(int i) {
  std::string s = "{\"messages\":[{\"role\":\"user\",\"content\":\"q" + std::to_string(i) +
                  "\"},{\"role\":\"assistant\",\"content\":\"a" + std::to_string(i) + " \\\"quoted\\\"\"}]";
  if (i % 5 != 0) s += ",\"id\":" + std::to_string(i);
  return s + "}";
}

}  // namespace

TEST_CASE("a Parquet file read in place: footer layout, rows in any order, a bounded cache") {
  const int rows = 1000, group = 100;
  const std::string bytes = parquet_bytes(rows, group);
  ColumnarRows pq("mem.parquet", ColumnarKind::kParquet, bytes.data(), bytes.size());
  const ColumnarLayout& l = pq.layout();
  CHECK(l.rows() == rows);
  CHECK(l.group_rows == std::vector<uint64_t>(rows / group, group));
  CHECK(l.columns == std::vector<std::string>{"messages", "id"});
  CHECK(columnar_cached_groups() == 0);  // the footer alone was read

  // Every row, in a shuffled order (each read may decode another group):
  // the JSON text of its record, as a JSONL line would hold it.
  std::vector<int> order(rows);
  for (int i = 0; i < rows; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), std::mt19937(7));
  std::string text;
  std::size_t most = 0;
  for (int i : order) {
    pq.row(static_cast<uint64_t>(i), text);
    REQUIRE(text == want(i));
    most = std::max(most, columnar_cached_groups());
  }
  CHECK(most == 4);  // the cache held at most 4 decoded groups of the 10

  // Checked on 3 threads, each with its own reader: the bad rows in order.
  std::vector<ColumnarBad> bad = pq.check_rows(
      [](std::string_view rec) { return rec.find("\"id\"") == std::string_view::npos ? "no id" : ""; }, 3, {});
  REQUIRE(bad.size() == rows / 5);
  for (std::size_t k = 0; k < bad.size(); ++k) {
    CHECK(bad[k].row == 5 * k);
    CHECK(bad[k].reason == "no id");
  }
}

TEST_CASE("a damaged row group is named; a file that is not Parquet is refused") {
  std::string bytes = parquet_bytes(300, 100);
  CHECK_THROWS_WITH_AS(ColumnarRows("x.parquet", ColumnarKind::kParquet, bytes.data(), bytes.size() / 2),
                       doctest::Contains("x.parquet: cannot read it as a Parquet file"), DatasetError);
  // Row group 1's pages overwritten: its rows cannot be read, and say where.
  ColumnarRows good("y.parquet", ColumnarKind::kParquet, bytes.data(), bytes.size());
  std::string text;
  good.row(150, text);
  const std::string row150 = text;
  auto meta =
      parquet::ParquetFileReader::Open(std::make_shared<arrow::io::BufferReader>(arrow::Buffer::FromString(bytes)))
          ->metadata();
  auto chunk = meta->RowGroup(1)->ColumnChunk(0);
  const int64_t at = chunk->has_dictionary_page() ? chunk->dictionary_page_offset() : chunk->data_page_offset();
  std::fill(bytes.begin() + at, bytes.begin() + at + 32, '\xff');  // its first page header
  ColumnarRows broken("y.parquet", ColumnarKind::kParquet, bytes.data(), bytes.size());
  broken.row(50, text);  // group 0 is whole
  CHECK(text == want(50));
  CHECK_THROWS_WITH_AS(broken.row(150, text),
                       doctest::Contains("y.parquet: row group 1 (from row 100): cannot read it"), DatasetError);
  CHECK(row150 == want(150));
}

TEST_CASE("footer first: rows read from a file that holds its footer and the groups written so far") {
  const int rows = 300, group = 16;
  const std::string whole = parquet_bytes(rows, group);
  const uint64_t size = whole.size();

  // The ranges from the tail: a short tail asks for the footer's length.
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  uint64_t need = 0;
  const auto* tail = reinterpret_cast<const uint8_t*>(whole.data());
  CHECK(parquet_group_ranges(tail + size - 64, 64, size, ranges, need) != "");
  REQUIRE(need > 64);
  REQUIRE(parquet_group_ranges(tail + size - need, need, size, ranges, need) == "");
  CHECK(need == 0);
  REQUIRE(ranges.size() == (rows + group - 1) / group);
  // They partition [0, the footer's start), in row group order here.
  CHECK(ranges.front().first == 0);
  for (std::size_t g = 1; g < ranges.size(); ++g) CHECK(ranges[g].first == ranges[g - 1].second);
  const uint64_t footer = ranges.back().second;
  CHECK(footer < size);
  std::vector<std::pair<uint64_t, uint64_t>> none;
  CHECK(parquet_group_ranges(tail, size / 2, size, none, need) == "no Parquet magic at its end");

  // The file as the fetcher leaves it: zeros but the footer, then its groups
  // one by one, in a shuffled order, on another thread, each marked done
  // once written. Every row read meanwhile is the row of the whole file.
  std::string sparse(size, '\0');
  std::copy(whole.begin() + static_cast<std::ptrdiff_t>(footer), whole.end(),
            sparse.begin() + static_cast<std::ptrdiff_t>(footer));
  char dir[] = "/tmp/tokfeed-partial-XXXXXX";
  REQUIRE(::mkdtemp(dir) != nullptr);
  const std::string map = std::string(dir) + "/obj.map";
  PartialObject writer(map, "s3://b/obj.parquet", size, ranges);
  auto reader = std::make_shared<PartialObject>(map, "s3://b/obj.parquet", size);
  CHECK_THROWS_AS(PartialObject(map, "s3://b/obj.parquet", size + 1), DatasetError);
  ColumnarRows pq("s3://b/obj.parquet", ColumnarKind::kParquet, sparse.data(), sparse.size());
  REQUIRE(pq.layout().rows() == rows);
  pq.set_partial(reader);
  std::vector<uint32_t> order(ranges.size());
  for (uint32_t g = 0; g < order.size(); ++g) order[g] = g;
  std::shuffle(order.begin(), order.end(), std::mt19937(3));
  std::thread fetcher([&] {
    for (uint32_t g : order) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      std::copy(whole.begin() + static_cast<std::ptrdiff_t>(ranges[g].first),
                whole.begin() + static_cast<std::ptrdiff_t>(ranges[g].second),
                sparse.begin() + static_cast<std::ptrdiff_t>(ranges[g].first));
      writer.set_done(g);
    }
  });
  std::vector<int> rows_order(rows);
  for (int i = 0; i < rows; ++i) rows_order[i] = i;
  std::shuffle(rows_order.begin(), rows_order.end(), std::mt19937(11));
  std::string text;
  for (int i : rows_order) {
    pq.row(static_cast<uint64_t>(i), text);
    REQUIRE(text == want(i));
  }
  fetcher.join();
  // A reader that waited asked for its group: the fetcher's priority 1.
  uint32_t asked = 0;
  for (uint32_t g = 0; g < ranges.size(); ++g) asked += writer.wanted(g) == 1;
  CHECK(asked >= 1);
  writer.want(0, 5);  // never later than asked
  CHECK(writer.wanted(0) <= 5);
  std::filesystem::remove_all(dir);
}
