// The shard index over a shard of many chunks: the same offsets, bad records
// (with their lines) whatever the thread count, and a record's text read back
// by record_at() equal to its line.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "dataset/shard_index.hpp"

using tokfeed::ShardIndex;

namespace {

// About 20 MiB of JSONL, so the index cuts it into three 8 MiB chunks; every
// 1000th line is bad and every 777th blank.
std::string big_shard(std::vector<std::string>& lines) {
  std::string out;
  for (int i = 0; out.size() < (20u << 20); ++i) {
    std::string line;
    if (i % 1000 == 999) line = "{\"query\": \"broken\"";
    else if (i % 777 == 776) line = "";
    else
      line = "{\"query\": \"question " + std::to_string(i) + std::string(i % 50, 'x') + "\", \"response\": \"answer " +
             std::to_string(i) + "\"}";
    lines.push_back(line);
    out += line + "\n";
  }
  return out;
}

}  // namespace

TEST_CASE("shard index: many chunks give the same index and lines with 1, 2 and 8 threads") {
  std::vector<std::string> lines;
  std::string data = big_shard(lines);
  tokfeed::text::RecordRules rules;
  ShardIndex one = ShardIndex::build("big.jsonl", data.data(), data.size(), &rules, 1, {});
  std::size_t blank = 0, broken = 0;
  for (const std::string& l : lines) blank += l.empty(), broken += !l.empty() && l.back() != '}';
  CHECK(one.valid() == lines.size() - blank - broken);
  REQUIRE(one.bad().size() == broken);
  // Bad records carry their line in the whole shard, across chunk cuts.
  for (const tokfeed::ShardBad& b : one.bad()) {
    REQUIRE(b.line >= 1);
    CHECK(lines[b.line - 1] == "{\"query\": \"broken\"");
  }
  // Each valid record reads back as its whole line.
  std::size_t v = 0;
  for (const std::string& l : lines) {
    if (l.empty() || l.back() != '}') continue;
    CHECK(tokfeed::record_at(data.data(), data.size(), one.kind(), one.offset(v++)) == l);
  }
  for (unsigned threads : {2u, 8u}) {
    ShardIndex other = ShardIndex::build("big.jsonl", data.data(), data.size(), &rules, threads, {});
    REQUIRE(other.valid() == one.valid());
    for (uint64_t i = 0; i < one.valid(); i += 97) CHECK(other.offset(i) == one.offset(i));
    for (std::size_t k = 0; k < one.bad().size(); ++k) CHECK(other.bad()[k].line == one.bad()[k].line);
  }
  // A byte that breaks one valid record makes that record bad, at its line.
  std::string changed = data;
  std::size_t at = changed.find("\"answer 5\"");
  changed[at] = '?';
  ShardIndex c = ShardIndex::build("big.jsonl", changed.data(), changed.size(), &rules, 2, {});
  CHECK(c.valid() == one.valid() - 1);
  REQUIRE(c.bad().size() == one.bad().size() + 1);
  uint32_t line = static_cast<uint32_t>(1 + std::count(changed.begin(), changed.begin() + at, '\n'));
  bool found = false;
  for (const tokfeed::ShardBad& b : c.bad()) found |= b.line == line;
  CHECK(found);
}

TEST_CASE("shard index without checks: every non-blank line is a record, at the offset a checked index gives it") {
  std::vector<std::string> lines;
  std::string data = big_shard(lines);
  tokfeed::text::RecordRules rules;
  ShardIndex checked = ShardIndex::build("big.jsonl", data.data(), data.size(), &rules, 2, {});
  for (unsigned threads : {1u, 2u, 8u}) {
    ShardIndex all = ShardIndex::build("big.jsonl", data.data(), data.size(), nullptr, threads, {});
    CHECK(all.bad().empty());
    REQUIRE(all.valid() == checked.valid() + checked.bad().size());
    // Line by line: blank lines take no record; broken ones do, unread.
    std::size_t a = 0, c = 0;
    for (const std::string& l : lines) {
      if (l.empty()) continue;
      const std::string_view rec = tokfeed::record_at(data.data(), data.size(), all.kind(), all.offset(a));
      REQUIRE(rec == l);
      if (l.back() == '}') CHECK(checked.offset(c++) == all.offset(a));
      ++a;
    }
    CHECK(a == all.valid());
  }
}

TEST_CASE("shard index without checks: CRLF, blank and indented lines, no final newline, as a checked index") {
  const std::string rec = "{\"query\": \"q\", \"response\": \"r\"}";
  const std::string data = "\r\n" + rec + "\r\n   \r\n\t" + rec + " \r\n\n" + rec + "\r\n" + rec;
  tokfeed::text::RecordRules rules;
  ShardIndex checked = ShardIndex::build("crlf.jsonl", data.data(), data.size(), &rules, 1, {});
  ShardIndex all = ShardIndex::build("crlf.jsonl", data.data(), data.size(), nullptr, 1, {});
  REQUIRE(checked.valid() == 4);
  REQUIRE(checked.bad().empty());
  REQUIRE(all.valid() == 4);
  for (uint64_t i = 0; i < 4; ++i) {
    CHECK(all.offset(i) == checked.offset(i));
    CHECK(tokfeed::record_at(data.data(), data.size(), all.kind(), all.offset(i)) == rec);
  }
  CHECK(tokfeed::line_at(data.data(), all.offset(1)) == 4);
  CHECK(tokfeed::line_at(data.data(), all.offset(3)) == 7);
  // A JSON array: every element, unread, as the checked index finds them.
  const std::string array = "[\n" + rec + ",\n{\"query\": 1},\n" + rec + "\n]\n";
  ShardIndex arr_checked = ShardIndex::build("a.json", array.data(), array.size(), &rules, 1, {});
  ShardIndex arr_all = ShardIndex::build("a.json", array.data(), array.size(), nullptr, 1, {});
  CHECK(arr_checked.valid() == 2);
  CHECK(arr_checked.bad().size() == 1);
  REQUIRE(arr_all.valid() == 3);
  CHECK(arr_all.offset(0) == arr_checked.offset(0));
  CHECK(arr_all.offset(2) == arr_checked.offset(1));
  CHECK(tokfeed::record_at(array.data(), array.size(), arr_all.kind(), arr_all.offset(1)) == "{\"query\": 1}");
}
