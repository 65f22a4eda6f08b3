// The dataset: memory-mapped once in the supervisor, indexed and validated
// before the workers fork, so every worker shares the same pages and index.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "config.hpp"
#include "text/records.hpp"

namespace tokfeed {

class DatasetError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct BadRecord {
  uint32_t line;
  std::string reason;
};

class Dataset {
 public:
  // Maps and indexes `cfg.path`; every record is parsed and checked against
  // `rules`. Throws DatasetError for an unreadable file, a broken JSON array,
  // no valid records, or a bad record under on_bad_record = "fail".
  Dataset(const DatasetConfig& cfg, const text::RecordRules& rules);
  ~Dataset();
  Dataset(const Dataset&) = delete;
  Dataset& operator=(const Dataset&) = delete;

  const std::string& path() const { return path_; }
  uint64_t file_bytes() const { return size_; }
  uint64_t records_total() const { return valid_.size() + bad_.size(); }

  // Valid records, numbered 0..size()-1 in file order.
  uint64_t size() const { return valid_.size(); }
  std::string_view record(uint64_t i) const {
    return std::string_view(data_ + valid_[i].offset, valid_[i].length);
  }
  uint32_t line(uint64_t i) const { return valid_[i].line; }
  const std::vector<BadRecord>& bad() const { return bad_; }

 private:
  struct Ref {
    uint64_t offset;
    uint32_t length;
    uint32_t line;
  };
  void index_jsonl(const text::RecordRules& rules, bool fail_on_bad);
  void index_array(const text::RecordRules& rules, bool fail_on_bad);
  void add(uint64_t offset, uint64_t length, uint32_t line, const text::RecordRules& rules, bool fail_on_bad,
           text::Conversation& scratch);

  std::string path_;
  const char* data_ = nullptr;
  uint64_t size_ = 0;
  std::vector<Ref> valid_;
  std::vector<BadRecord> bad_;
};

}  // namespace tokfeed
