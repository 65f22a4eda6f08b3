// Keeps `[cache] dir` under `[cache] max_gb`: what is least recently used
// goes first (docs/data_model.md 6).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tokfeed {

struct TrimReport {
  uint64_t bytes_before = 0, bytes_after = 0;
  std::vector<std::string> removed;  // one line per entry: its files and bytes
  uint64_t in_use = 0;               // entries skipped because a daemon holds them
};

// Marks `files` as used now (their access time; their modification time is
// left alone), so that other daemons' trims keep them longest.
void mark_used(const std::vector<std::string>& files);

// Removes whole entries of the cache directory `dir`, least recently used
// first (the latest access or modification time of its files), until the
// rest take at most `max_bytes`. An entry is a token store (`<key>.idx`,
// `<key>.bin`, `<key>.lock`, `<key>.use`), a saved shard index (`index/*.tfx`), a
// decompressed spool (`spool/*.jsonl`) or an object fetched from a store
// (`objects/*`). Never removed: the entries holding
// one of `keep`, temporaries being written (`*.tmp.*`), a token store that a
// daemon is building (it holds `.lock`) or serving (it holds `.use`), and
// files it does not know.
TrimReport trim_cache(const std::string& dir, uint64_t max_bytes, const std::vector<std::string>& keep);

}  // namespace tokfeed
