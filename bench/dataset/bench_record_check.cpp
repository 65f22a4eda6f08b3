// The dataset index's record check, one thread, records in memory: in place
// (check_record with the record inside a larger buffer: the On Demand scan
// first, the full parse for what it leaves) against the full parse alone
// (the same call without the padding), on each JSONL file given. Run by
// bench/dataset/run.py (docs/benchmarks.md, "Dataset indexing"); prints a
// markdown table. Exits 1 if the two give a different verdict on any record.
//
//   bench_record_check [--reps N] FILE...
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "records/record_fields.hpp"
#include "records/records.hpp"

using tokfeed::text::check_record;
using tokfeed::text::kParsePadding;
using tokfeed::text::RecordRules;

namespace {

struct Lines {
  std::string text;  // the file, then kParsePadding spaces
  std::vector<std::string_view> records;
};

Lines read_lines(const char* path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "%s: cannot be read\n", path);
    std::exit(2);
  }
  Lines l;
  std::ostringstream ss;
  ss << in.rdbuf();
  l.text = ss.str();
  const std::size_t size = l.text.size();
  l.text.append(kParsePadding, ' ');
  for (std::size_t pos = 0; pos < size;) {
    std::size_t end = std::min(l.text.find('\n', pos), size);
    std::string_view r(l.text.data() + pos, end - pos);
    while (!r.empty() && (r.back() == '\r' || r.back() == ' ')) r.remove_suffix(1);
    if (!r.empty()) l.records.push_back(r);
    pos = end + 1;
  }
  return l;
}

// Best seconds of `reps` passes over every record.
double best_of(int reps, const Lines& l, const RecordRules& rules, bool in_place) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    std::size_t valid = 0;
    auto t0 = std::chrono::steady_clock::now();
    for (std::string_view rec : l.records) valid += check_record(rec, rules, in_place).empty();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, s);
    if (valid > l.records.size()) std::abort();  // keeps the loop's result live
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 5;
  std::vector<const char*> files;
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--reps" && i + 1 < argc) reps = std::max(1, std::atoi(argv[++i]));
    else files.push_back(argv[i]);
  }
  if (files.empty()) {
    std::fprintf(stderr, "usage: bench_record_check [--reps N] FILE...\n");
    return 2;
  }
  RecordRules rules;
  std::printf(
      "| file | MB | records | backslashes per KB | full parse GB/s | in place GB/s | ratio | "
      "left to the full parse |\n|---|---:|---:|---:|---:|---:|---:|---:|\n");
  int rc = 0;
  for (const char* path : files) {
    Lines l = read_lines(path);
    std::size_t bytes = 0, left = 0, backslashes = 0;
    for (std::string_view r : l.records) {
      bytes += r.size();
      backslashes += static_cast<std::size_t>(std::count(r.begin(), r.end(), '\\'));
      if (check_record(r, rules, true) != check_record(r, rules, false)) {
        std::fprintf(stderr, "%s: verdicts differ on: %.*s\n", path, static_cast<int>(r.size()), r.data());
        rc = 1;
      }
      left += !tokfeed::text::detail::scan_accepts(r, rules);
    }
    double full = best_of(reps, l, rules, false), fast = best_of(reps, l, rules, true);
    std::printf("| %s | %.1f | %zu | %.1f | %.2f | %.2f | %.2fx | %zu |\n", path, bytes / 1e6, l.records.size(),
                backslashes * 1000.0 / std::max<std::size_t>(bytes, 1), bytes / full / 1e9, bytes / fast / 1e9,
                full / fast, left);
  }
  return rc;
}
