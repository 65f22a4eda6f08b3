// Fuzz target: the shard index over arbitrary bytes, as the daemon builds it
// before fork. The first input byte picks the record format and the thread
// count; the rest is the shard (JSONL, or a JSON array when it starts with
// '['). A broken array is a DatasetError; anything else must index. Beyond
// "no crash", it checks what the workers rely on: offsets rise and stay in
// the shard, each valid record read back by record_at() passes the same
// check, nothing depends on the thread count, and a saved index loads back
// equal.
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "fuzz_check.hpp"
#include "dataset/dataset.hpp"
#include "dataset/shard_index.hpp"

using namespace tokfeed;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  // The shard lives in a larger buffer, as in a mapping: padding follows it.
  std::string buf(reinterpret_cast<const char*>(data) + 1, size - 1);
  const uint64_t n = buf.size();
  buf.append(text::kParsePadding, '\0');
  text::RecordRules rules;
  static const text::Format kFormats[] = {text::Format::kAuto, text::Format::kMessages, text::Format::kShareGpt,
                                          text::Format::kAlpaca, text::Format::kQueryResponse};
  rules.format = kFormats[mode % 5];
  rules.require_alternation = (mode & 0x08) != 0;
  ShardIndex one, two;
  try {
    one = ShardIndex::build("fuzz.jsonl", buf.data(), n, &rules, 1, {});
  } catch (const DatasetError&) {
    return 0;  // a broken JSON array
  }
  two = ShardIndex::build("fuzz.jsonl", buf.data(), n, &rules, 1 + (mode >> 6), {});
  fuzz_check(one.valid() == two.valid() && one.bad().size() == two.bad().size(), "same records with any thread count");
  for (uint64_t i = 0; i < one.valid(); ++i) {
    fuzz_check(one.offset(i) == two.offset(i), "same offsets with any thread count");
    fuzz_check(one.offset(i) < n, "offset inside the shard");
    fuzz_check(i == 0 || one.offset(i) > one.offset(i - 1), "offsets rise");
    std::string_view rec = record_at(buf.data(), n, one.kind(), one.offset(i));
    fuzz_check(!rec.empty() && rec.data() + rec.size() <= buf.data() + n, "record inside the shard");
    fuzz_check(text::check_record(rec, rules).empty(), "a valid record reads back valid");
  }
  for (const ShardBad& b : one.bad())
    fuzz_check(b.line >= 1 && !b.reason.empty(), "bad records have a line and a reason");
  // A saved index loads back equal.
  char path[] = "/tmp/fuzz-shard-XXXXXX";
  int fd = mkstemp(path);
  if (fd >= 0) {
    ::close(fd);
    ::unlink(path);
    if (one.save(path).empty()) {
      std::optional<ShardIndex> back = ShardIndex::load(path, n);
      fuzz_check(back.has_value(), "a saved index loads");
      fuzz_check(back->valid() == one.valid() && back->bad().size() == one.bad().size(), "loaded counts equal");
      for (uint64_t i = 0; i < one.valid(); ++i) fuzz_check(back->offset(i) == one.offset(i), "loaded offsets equal");
      for (std::size_t k = 0; k < one.bad().size(); ++k)
        fuzz_check(back->bad()[k].line == one.bad()[k].line && back->bad()[k].reason == one.bad()[k].reason,
                   "loaded bad records equal");
      ::unlink(path);
    }
  }
  return 0;
}
