// Single-thread tokenizer throughput: our HF tokenizer.json backend and the
// SentencePiece library, over corpora of one text per line (JSON strings).
//
//   bench_tokenizer --hf tokenizer.json --warm warm.jsonl english.jsonl ...   (unseen text)
//   bench_tokenizer --hf tokenizer.json --seconds 2 english.jsonl ...         (hot: warmed on itself)
//
// Prints one line per (corpus, backend): "RESULT <corpus> <backend> <MB/s> <tokens>".
// Each text is encoded on its own, as the daemon does, ids only as the peers
// give them (--offsets: with each token's byte range, as the daemon's labels
// need), and each corpus gets a
// freshly loaded tokenizer. With --warm, the tokenizer first encodes every
// text of WARM (filling caches such as the word cache, which persists across
// texts as HF's does) and then one pass over the corpus is timed: the text
// timed was never seen. Without --warm, the corpus itself is the warm-up and
// the best of the passes over it (at least 3, and --seconds in all) is
// reported: every word is then in the cache, an upper bound. Time is the
// process's CPU time, which other jobs on a shared machine do not inflate.
// --dump-ids FILE writes the ids of the timed pass, one JSON array per text
// (corpus after corpus), for run.sh to check against HF.
#include <sentencepiece_processor.h>
#include <simdjson.h>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "cpu_seconds.hpp"
#include "tokenizer/hf_tokenizer.hpp"
#include "tokenizer/tokenizer.hpp"

namespace {

std::vector<std::string> read_corpus(const std::string& path) {
  simdjson::padded_string json = simdjson::padded_string::load(path).value();
  simdjson::dom::parser parser;
  std::vector<std::string> texts;
  for (simdjson::dom::element e : parser.parse_many(json)) texts.emplace_back(std::string_view(e.get_string()));
  return texts;
}

using Encode = std::function<void(const std::string&, std::vector<int32_t>&)>;

struct Measured {
  double mbps = 0;
  size_t tokens = 0;
};

// MB/s of the corpus: one pass after warming on `warm` (unseen), or the best
// of the passes after a pass over the corpus itself (hot, when warm is null).
Measured measure(const std::vector<std::string>& texts, const std::vector<std::string>* warm, double seconds,
                 const Encode& encode, FILE* dump) {
  std::vector<int32_t> ids;
  size_t bytes = 0;
  for (const auto& t : texts) bytes += t.size();
  for (const auto& t : warm ? *warm : texts) ids.clear(), encode(t, ids);
  Measured m;
  double spent = 0;
  for (int pass = 0; warm ? pass < 1 : (pass < 3 || spent < seconds); ++pass) {
    size_t n = 0;
    const double t0 = cpu_seconds();
    for (const auto& t : texts) {
      ids.clear();
      encode(t, ids);
      n += ids.size();
    }
    const double s = cpu_seconds() - t0;
    spent += s;
    m.mbps = std::max(m.mbps, double(bytes) / 1e6 / s);
    m.tokens = n;
  }
  if (dump) {
    for (const auto& t : texts) {
      ids.clear();
      encode(t, ids);
      std::fputc('[', dump);
      for (size_t i = 0; i < ids.size(); ++i) std::fprintf(dump, i ? ",%d" : "%d", ids[i]);
      std::fputs("]\n", dump);
    }
  }
  return m;
}

// Ids only (Tokenizer::encode_ids), or with offsets, kept but for the ids.
Encode ids_of(const tokfeed::text::Tokenizer& tok, bool offsets) {
  if (!offsets) return [&tok](const std::string& t, std::vector<int32_t>& ids) { tok.encode_ids(t, ids); };
  return [&tok, out = std::vector<tokfeed::text::Token>()](const std::string& t, std::vector<int32_t>& ids) mutable {
    out.clear();
    tok.encode(t, out);
    for (const auto& x : out) ids.push_back(x.id);
  };
}

void usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--hf tokenizer.json] [--sp tokenizer.model] [--warm WARM.jsonl] [--seconds S]\n"
               "          [--dump-ids FILE] [--offsets] corpus.jsonl...\n"
               "  --hf FILE        tokfeed's own encoder on a tokenizer.json\n"
               "  --sp FILE        libsentencepiece on a .model, and tokfeed's sentencepiece tokenizer on it\n"
               "  --warm FILE      warm each fresh tokenizer on FILE's texts, then time one pass over\n"
               "                   each corpus (unseen text); without it, warm on the corpus and\n"
               "                   report the best pass (hot cache)\n"
               "  --seconds S      hot mode: time at least S seconds, 3 passes at least (default 2)\n"
               "  --dump-ids FILE  write the timed corpus's ids, one JSON array per line (tokfeed's:\n"
               "                   --hf's, else --sp's own encoder's)\n"
               "  --offsets        tokfeed's encoders give each token's byte range too (Tokenizer::encode)\n",
               argv0);
}

}  // namespace

int main(int argc, char** argv) {
  std::string hf_path, sp_path, warm_path, dump_path;
  double seconds = 2.0;
  bool offsets = false;
  std::vector<std::string> corpora;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      usage(argv[0]);
      return 0;
    }
    if (a == "--hf" && i + 1 < argc) hf_path = argv[++i];
    else if (a == "--sp" && i + 1 < argc) sp_path = argv[++i];
    else if (a == "--warm" && i + 1 < argc) warm_path = argv[++i];
    else if (a == "--seconds" && i + 1 < argc) seconds = std::stod(argv[++i]);
    else if (a == "--dump-ids" && i + 1 < argc) dump_path = argv[++i];
    else if (a == "--offsets") offsets = true;
    else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      usage(argv[0]);
      return 2;
    } else corpora.push_back(a);
  }
  if (corpora.empty() || (hf_path.empty() && sp_path.empty())) {
    usage(argv[0]);
    return 2;
  }
  std::vector<std::string> warm;
  if (!warm_path.empty()) warm = read_corpus(warm_path);
  FILE* dump = nullptr;
  if (!dump_path.empty() && (dump = std::fopen(dump_path.c_str(), "w")) == nullptr) {
    std::fprintf(stderr, "cannot write %s\n", dump_path.c_str());
    return 1;
  }
  const std::vector<std::string>* warm_texts = warm_path.empty() ? nullptr : &warm;
  for (const auto& path : corpora) {
    const std::string name = std::filesystem::path(path).stem().string();
    const auto texts = read_corpus(path);
    if (!hf_path.empty()) {
      auto hf = tokfeed::text::load_hf_tokenizer(hf_path);  // fresh caches for every corpus
      if (&path == &corpora.front()) std::fprintf(stderr, "tokfeed-hf engine: %s\n", hf->engine().c_str());
      Measured m = measure(texts, warm_texts, seconds, ids_of(*hf, offsets), dump);
      std::printf("RESULT %s tokfeed-hf %.2f %zu\n", name.c_str(), m.mbps, m.tokens);
    }
    if (!sp_path.empty()) {
      sentencepiece::SentencePieceProcessor sp;
      if (!sp.Load(sp_path).ok()) {
        std::fprintf(stderr, "cannot load %s\n", sp_path.c_str());
        return 1;
      }
      Measured m = measure(
          texts, warm_texts, seconds, [&](const std::string& t, std::vector<int32_t>& ids) { sp.Encode(t, &ids); },
          nullptr);
      std::printf("RESULT %s sentencepiece %.2f %zu\n", name.c_str(), m.mbps, m.tokens);
      // tokfeed's sentencepiece tokenizer: its own BPE encoder where the model allows.
      auto tok = tokfeed::text::load_tokenizer("sentencepiece", sp_path);
      if (&path == &corpora.front()) std::fprintf(stderr, "tokfeed-sp engine: %s\n", tok->engine().c_str());
      m = measure(texts, warm_texts, seconds, ids_of(*tok, offsets), hf_path.empty() ? dump : nullptr);
      std::printf("RESULT %s tokfeed-sp %.2f %zu\n", name.c_str(), m.mbps, m.tokens);
    }
    std::fflush(stdout);
  }
  if (dump) std::fclose(dump);
  return 0;
}
