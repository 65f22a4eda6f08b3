// Where the time of a word the cache misses goes: the linear BPE alone
// (LinearBpe::encode, no word cache, no split), over the words
// missed_words.py writes, in three conditions:
//   cold:    half of the words, each once and met for the first time, with
//            32 random lines of a 64 MiB buffer read before it (as the hits
//            of the words between two misses do);
//   trained: the other half, each word 8 times in a row, 64 random lines
//            read before each time: the tables cold, the branch predictor
//            trained on the word;
//   hot:     the same, with nothing read between: tables and branches hot.
// Prints CPU ns per word (the process's CPU time; pin it with taskset).
// With `short`, words up to LinearBpe::kShortMax bytes take the short merge
// loop (LinearBpe::encode_short), as the tokenizer's own path does; without,
// every word takes the search.
//
//   bench_miss_path tokenizer.json words.bin [short]
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "cpu_seconds.hpp"
#include "tokenizer/hf/bpe.hpp"
#include "tokenizer/hf/hf_model.hpp"

using namespace tokfeed::text::hf;

int main(int argc, char** argv) {
  if (argc != 3 && argc != 4) {
    std::fprintf(stderr, "usage: bench_miss_path tokenizer.json words.bin (from missed_words.py) [short]\n");
    return 2;
  }
  HfParts parts = load_hf_parts(argv[1]);
  const LinearBpe* lin = parts.model->linear();
  if (lin == nullptr) {
    std::fprintf(stderr, "%s: %s\n", argv[1], parts.model->merge_algorithm().c_str());
    return 1;
  }
  std::ifstream f(argv[2], std::ios::binary);
  std::vector<std::string> words;
  for (uint32_t n; f.read(reinterpret_cast<char*>(&n), 4);) {
    std::string w(n, '\0');
    f.read(w.data(), n);
    if (n > 0) words.push_back(std::move(w));
  }
  if (words.empty()) {
    std::fprintf(stderr, "%s: no words\n", argv[2]);
    return 1;
  }
  std::vector<char> lines(size_t(64) << 20, 1);
  uint64_t sink = 0, k = 0;
  const auto read_lines = [&](size_t count) {
    for (size_t i = 0; i < count; ++i) sink += uint8_t(lines[(k++ * 2654435761u) % (lines.size() / 64) * 64]);
  };
  const bool short_loop = argc == 4 && std::string(argv[3]) == "short";
  const auto encode = [&](const std::string& w) {
    if (short_loop && w.size() <= LinearBpe::kShortMax)
      lin->encode_short(w, [&](int32_t id, uint32_t) { sink += uint32_t(id); });
    else lin->encode(w, [&](int32_t id, uint32_t) { sink += uint32_t(id); });
  };
  // Every other word for the first condition, so that it meets each word
  // for the first time (as the unseen method does: the pair memo holds only
  // other words' pairs); the others for the rest.
  std::vector<std::string> first, second;
  for (size_t i = 0; i < words.size(); ++i) (i % 2 ? second : first).push_back(words[i]);
  // CPU ns per word of `reps` encodes of each word of `set`, `between` lines
  // read before each, less the same loop without the encodes.
  const auto pass = [&](const std::vector<std::string>& set, int reps, size_t between) {
    double t[2];
    for (int with = 1; with >= 0; --with) {
      const double t0 = cpu_seconds();
      for (const std::string& w : set) {
        for (int r = 0; r < reps; ++r) {
          read_lines(between);
          if (with) encode(w);
        }
      }
      t[with] = cpu_seconds() - t0;
    }
    return (t[1] - t[0]) / (double(set.size()) * reps) * 1e9;
  };
  std::printf("words %zu\n", words.size());
  std::printf("cold    %.1f ns/word\n", pass(first, 1, 32));
  std::printf("trained %.1f ns/word\n", pass(second, 8, 64));
  std::printf("hot     %.1f ns/word\n", pass(second, 8, 0));
  return sink == 42 ? 3 : 0;  // keeps the work
}
