// Arrow rows as JSON records (docs/data_model.md 1.1): a row of a record
// batch becomes the object a JSONL line would hold. Built with Arrow only.
#pragma once

#ifdef TOKFEED_WITH_ARROW
#include <arrow/record_batch.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace tokfeed {

class Writer;  // one column's values as JSON

// Writes the rows of one record batch: a column that is null in a row is
// left out of its object (a missing key). Holds the batch.
class RowJson {
 public:
  explicit RowJson(std::shared_ptr<arrow::RecordBatch> batch);
  ~RowJson();
  RowJson(const RowJson&) = delete;
  RowJson& operator=(const RowJson&) = delete;

  // Appends row `r`'s object to `out`, on one line.
  void write(int64_t r, std::string& out) const;

 private:
  std::shared_ptr<arrow::RecordBatch> batch_;
  std::vector<std::pair<std::string, std::unique_ptr<Writer>>> cols_;  // quoted key and ':', writer
};

}  // namespace tokfeed
#endif
