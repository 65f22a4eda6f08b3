#include "dataset.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace tokfeed {

namespace {

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

}  // namespace

Dataset::Dataset(const DatasetConfig& cfg, const text::RecordRules& rules) : path_(cfg.path) {
  int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw DatasetError(fmt::format("{}: cannot open the dataset: {}", path_, std::strerror(errno)));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    throw DatasetError(fmt::format("{}: cannot stat the dataset: {}", path_, std::strerror(err)));
  }
  size_ = static_cast<uint64_t>(st.st_size);
  if (size_ > 0) {
    void* p = mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      throw DatasetError(fmt::format("{}: cannot map the dataset: {}", path_, std::strerror(err)));
    }
    data_ = static_cast<const char*>(p);
    madvise(p, size_, MADV_SEQUENTIAL);
  }
  ::close(fd);

  std::size_t first = 0;
  while (first < size_ && is_ws(data_[first])) ++first;
  if (first < size_ && data_[first] == '[') index_array(rules, !cfg.skip_bad);
  else index_jsonl(rules, !cfg.skip_bad);
  if (data_) madvise(const_cast<char*>(data_), size_, MADV_RANDOM);

  if (valid_.empty()) {
    std::string why = bad_.empty() ? "the file holds no records"
                                   : fmt::format("all {} records are bad; the first: line {}: {}", bad_.size(),
                                                 bad_[0].line, bad_[0].reason);
    throw DatasetError(fmt::format("{}: no valid records: {}", path_, why));
  }
}

Dataset::~Dataset() {
  if (data_) munmap(const_cast<char*>(data_), size_);
}

void Dataset::add(uint64_t offset, uint64_t length, uint32_t line, const text::RecordRules& rules,
                  bool fail_on_bad, text::Conversation& scratch) {
  std::string reason;
  if (length > UINT32_MAX) reason = "record longer than 4 GiB";
  else reason = text::parse_record(std::string_view(data_ + offset, length), rules, scratch);
  if (reason.empty()) {
    valid_.push_back({offset, static_cast<uint32_t>(length), line});
    return;
  }
  if (fail_on_bad)
    throw DatasetError(fmt::format("{}:{}: bad record: {} (set [dataset] on_bad_record = \"skip\" to skip such "
                                   "records)",
                                   path_, line, reason));
  bad_.push_back({line, std::move(reason)});
}

void Dataset::index_jsonl(const text::RecordRules& rules, bool fail_on_bad) {
  text::Conversation scratch;
  uint64_t pos = 0;
  uint32_t line = 0;
  while (pos < size_) {
    ++line;
    const void* nl = memchr(data_ + pos, '\n', size_ - pos);
    uint64_t end = nl ? static_cast<uint64_t>(static_cast<const char*>(nl) - data_) : size_;
    uint64_t b = pos, e = end;
    while (b < e && is_ws(data_[b])) ++b;
    while (e > b && is_ws(data_[e - 1])) --e;
    if (e > b) add(b, e - b, line, rules, fail_on_bad, scratch);
    pos = end + 1;
  }
}

// Splits a top-level JSON array into its elements without parsing them: a
// bracket matcher that skips strings. Each element is then parsed as a record.
void Dataset::index_array(const text::RecordRules& rules, bool fail_on_bad) {
  text::Conversation scratch;
  uint32_t line = 1;
  uint64_t i = 0;
  auto fail = [&](const std::string& what) {
    throw DatasetError(fmt::format("{}:{}: byte {}: broken JSON array: {}", path_, line, i, what));
  };
  auto skip_ws = [&] {
    while (i < size_ && is_ws(data_[i])) {
      if (data_[i] == '\n') ++line;
      ++i;
    }
  };
  skip_ws();
  ++i;  // '['
  skip_ws();
  if (i < size_ && data_[i] == ']') return;
  for (;;) {
    skip_ws();
    if (i >= size_) fail("unexpected end of file; expected a record or ']'");
    if (data_[i] == ']') fail("trailing comma before ']'");
    uint64_t start = i;
    uint32_t start_line = line;
    int depth = 0;
    bool in_string = false;
    for (; i < size_; ++i) {
      char c = data_[i];
      if (c == '\n') ++line;
      if (in_string) {
        if (c == '\\') ++i;
        else if (c == '"') in_string = false;
        continue;
      }
      if (c == '"') in_string = true;
      else if (c == '{' || c == '[') ++depth;
      else if (c == '}' || c == ']') {
        if (depth == 0) break;
        --depth;
        if (depth == 0) {
          ++i;
          break;
        }
      } else if (c == ',' && depth == 0) {
        break;
      }
    }
    if (in_string || depth != 0) fail("unterminated record");
    uint64_t end = i;
    while (end > start && is_ws(data_[end - 1])) --end;
    add(start, end - start, start_line, rules, fail_on_bad, scratch);
    skip_ws();
    if (i >= size_) fail("unexpected end of file; expected ',' or ']'");
    if (data_[i] == ']') {
      ++i;
      skip_ws();
      if (i < size_) fail("unexpected data after the closing ']'");
      return;
    }
    if (data_[i] != ',') fail(fmt::format("unexpected '{}'; expected ',' or ']'", data_[i]));
    ++i;
  }
}

}  // namespace tokfeed
