// A columnar shard's layout: which row group a row of the file is in.
#include <doctest/doctest.h>

#include "dataset/columnar_source.hpp"

using namespace tokfeed;

TEST_CASE("columnar layout: a row's group and row") {
  ColumnarLayout l;
  l.kind = ColumnarKind::kParquet;
  l.group_rows = {3, 0, 2};
  l.columns = {"messages", "id", ""};
  CHECK(l.rows() == 5);
  CHECK(l.where(0) == "row group 0, row 0");
  CHECK(l.where(2) == "row group 0, row 2");
  CHECK(l.where(3) == "row group 2, row 0");  // group 1 is empty
  CHECK(l.where(4) == "row group 2, row 1");
  l.kind = ColumnarKind::kArrow;
  CHECK(l.where(1) == "record batch 0, row 1");
}

TEST_CASE("columnar shards by name") {
  CHECK(columnar_kind("a/train-00000-of-00002.parquet") == ColumnarKind::kParquet);
  CHECK(columnar_kind("saved/data-00000-of-00003.arrow") == ColumnarKind::kArrow);
  CHECK(columnar_kind("data.jsonl") == ColumnarKind::kNone);
  CHECK(columnar_kind("data.parquet.gz") == ColumnarKind::kNone);
}
