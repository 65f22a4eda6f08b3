// Single-thread tokenizer throughput: our HF tokenizer.json backend and the
// SentencePiece library, over corpora of one text per line (JSON strings).
//
//   bench_tokenizer --hf tokenizer.json --sp tokenizer.model --seconds 2 english.jsonl chinese.jsonl ...
//
// Prints one line per (corpus, backend): "RESULT <corpus> <backend> <MB/s> <tokens>".
// Each text is encoded on its own, as the daemon does. The first pass warms
// caches (our word cache, like HF's, persists across texts); the best of the
// timed passes is reported.
#include <sentencepiece_processor.h>
#include <simdjson.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "tokenizer/hf_tokenizer.hpp"

namespace {

std::vector<std::string> read_corpus(const std::string& path) {
  simdjson::padded_string json = simdjson::padded_string::load(path).value();
  simdjson::dom::parser parser;
  std::vector<std::string> texts;
  for (simdjson::dom::element e : parser.parse_many(json)) texts.emplace_back(std::string_view(e.get_string()));
  return texts;
}

// Best MB/s over passes lasting `seconds` in total (at least 3 passes).
double measure(const std::vector<std::string>& texts, double seconds,
               const std::function<size_t(const std::string&)>& encode, size_t* tokens) {
  size_t bytes = 0;
  for (const auto& t : texts) bytes += t.size();
  for (const auto& t : texts) encode(t);  // warm-up
  double best = 0, spent = 0;
  for (int pass = 0; pass < 3 || spent < seconds; ++pass) {
    size_t n = 0;
    auto t0 = std::chrono::steady_clock::now();
    for (const auto& t : texts) n += encode(t);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    spent += s;
    best = std::max(best, double(bytes) / 1e6 / s);
    *tokens = n;
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  std::string hf_path, sp_path;
  double seconds = 2.0;
  std::vector<std::string> corpora;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--hf" && i + 1 < argc) hf_path = argv[++i];
    else if (a == "--sp" && i + 1 < argc) sp_path = argv[++i];
    else if (a == "--seconds" && i + 1 < argc) seconds = std::stod(argv[++i]);
    else corpora.push_back(a);
  }
  if (corpora.empty() || (hf_path.empty() && sp_path.empty())) {
    std::fprintf(stderr, "usage: %s [--hf tokenizer.json] [--sp tokenizer.model] [--seconds S] corpus.jsonl...\n",
                 argv[0]);
    return 2;
  }
  std::unique_ptr<tokfeed::text::Tokenizer> hf;
  if (!hf_path.empty()) hf = tokfeed::text::load_hf_tokenizer(hf_path);
  sentencepiece::SentencePieceProcessor sp;
  if (!sp_path.empty() && !sp.Load(sp_path).ok()) {
    std::fprintf(stderr, "cannot load %s\n", sp_path.c_str());
    return 1;
  }
  std::vector<tokfeed::text::Token> out;
  std::vector<int> sp_ids;
  for (const auto& path : corpora) {
    const std::string name = std::filesystem::path(path).stem().string();
    const auto texts = read_corpus(path);
    size_t tokens = 0;
    if (hf) {
      double mbps = measure(
          texts, seconds,
          [&](const std::string& t) {
            out.clear();
            hf->encode(t, out);
            return out.size();
          },
          &tokens);
      std::printf("RESULT %s tokfeed-hf %.2f %zu\n", name.c_str(), mbps, tokens);
    }
    if (!sp_path.empty()) {
      double mbps = measure(
          texts, seconds,
          [&](const std::string& t) {
            sp_ids.clear();
            sp.Encode(t, &sp_ids);
            return sp_ids.size();
          },
          &tokens);
      std::printf("RESULT %s sentencepiece %.2f %zu\n", name.c_str(), mbps, tokens);
    }
    std::fflush(stdout);
  }
  return 0;
}
