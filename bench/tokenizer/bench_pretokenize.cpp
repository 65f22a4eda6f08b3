// The pre-tokenization stage alone: the hand-written split of the Qwen or
// Llama-3 pattern, match by match as Regex gives them (FastSplit::for_each,
// `split`) or as the fused tokenizer takes its words (FastSplit::word_ends,
// `words`: ASCII 64 bytes at a time), or the NFC quick check, over corpora of
// one text per line (JSON strings), one pass, single thread.
//
//   bench_pretokenize split|words qwen3|llama3 corpus.jsonl...
//   bench_pretokenize nfc corpus.jsonl...
//
// Prints "RESULT <stage> <MB/s> <matches, words or texts passed> <checksum>"
// (words and matches differ only where invalid UTF-8 stands between matches). The
// work is in run_stage(), so instruction counts of the stage alone come from
//   valgrind --tool=callgrind --toggle-collect='*run_stage*' bench_pretokenize ...
// (docs/benchmarks.md, Tokenizer).
#include <simdjson.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cpu_seconds.hpp"
#include "tokenizer/hf/fast_split.hpp"
#include "tokenizer/hf/nfc_check.hpp"
#include "tokenizer/hf/unicode.hpp"

namespace {

using tokfeed::text::hf::FastSplit;

const char* const kHead = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|";
const char* const kTail = "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

struct Count {
  size_t items = 0;
  uint64_t checksum = 0;
};

[[gnu::noinline]] Count run_stage(const FastSplit* split, bool words, const std::vector<std::string>& texts) {
  Count c;
  uint32_t ends[FastSplit::kWordBatch];
  for (const auto& t : texts) {
    if (split && words) {
      size_t b = 0;
      for (size_t pos = 0; pos < t.size();) {
        const size_t k = split->word_ends(t, pos, ends);
        for (size_t j = 0; j < k; b = ends[j++]) c.checksum = c.checksum * 31 + b * 7 + ends[j];
        c.items += k;
      }
    } else if (split) {
      split->for_each(t, [&](size_t b, size_t e) {
        ++c.items;
        c.checksum = c.checksum * 31 + b * 7 + e;
      });
    } else {
      c.items += tokfeed::text::hf::nfc_quick_check(t);
    }
  }
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string stage = argc > 1 ? argv[1] : "";
  const bool words = stage == "words", split = stage == "split" || words;
  const int first = split ? 3 : 2;
  if ((!split && stage != "nfc") || argc <= first) {
    std::fprintf(stderr, "usage: %s split|words qwen3|llama3 corpus.jsonl...\n       %s nfc corpus.jsonl...\n", argv[0],
                 argv[0]);
    return 2;
  }
  std::unique_ptr<FastSplit> matcher;
  if (split) {
    const std::string digits = std::string(argv[2]) == "llama3" ? "\\p{N}{1,3}" : "\\p{N}";
    matcher = FastSplit::for_pattern(kHead + digits + kTail);
  }
  tokfeed::text::hf::nfc_prepare();
  std::vector<std::string> texts;
  size_t bytes = 0;
  for (int a = first; a < argc; ++a) {
    simdjson::padded_string json = simdjson::padded_string::load(argv[a]).value();
    simdjson::dom::parser parser;
    for (simdjson::dom::element e : parser.parse_many(json)) {
      texts.emplace_back(std::string_view(e.get_string()));
      bytes += texts.back().size();
    }
  }
  const double t0 = cpu_seconds();
  const Count c = run_stage(matcher.get(), words, texts);
  const double s = cpu_seconds() - t0;
  std::printf("RESULT %s %.1f %zu %llu\n", stage.c_str(), double(bytes) / 1e6 / s, c.items,
              static_cast<unsigned long long>(c.checksum));
}
