// Rendering vs tokenizing, per sample: for each chat template folder given,
// every conversation of CONVERSATIONS.jsonl is mapped to messages, rendered
// and labelled (render_labeled: the full render plus the prefix renders the
// label rule needs), then its text is tokenized, as a worker does. Prints
// the mean time of each per sample and their ratio, measured side by side.
//
// usage: bench_template TOKENIZER.json CONVERSATIONS.jsonl TEMPLATE_DIR... [--rounds N] [--dump FILE]
//                       [--direct] [--warm] [--values]
//
// Each template meets a tokenizer loaded for it, as a job of its own
// would: its word cache starts empty (--warm: one tokenizer for all, whose
// cache the templates before have filled).
//
// --dump FILE writes what the first round gave per template and record (the
// refusal's reason, or the text, the trained byte spans and the token ids),
// so that two builds' outputs can be compared with cmp. --direct renders
// every record (render_labeled serves records from an earlier one of their
// shape where it can: docs/chat_templates.md, "One render per shape").
// --values maps every record to messages before its shape is looked up
// (a record of a shape seen before is otherwise read from its text alone:
// "Shapes read from the text").
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "chat/chat_jinja.hpp"
#include "tokenizer/tokenizer.hpp"

using namespace tokfeed;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr,
                 "usage: bench_template TOKENIZER.json CONVERSATIONS.jsonl TEMPLATE_DIR... [--rounds N] [--dump FILE] "
                 "[--direct] [--warm] [--values]\n");
    return 2;
  }
  int rounds = 3;
  std::vector<std::string> dirs;
  std::FILE* dump = nullptr;
  bool warm = false, from_text = true;
  for (int i = 3; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--direct") {
      text::set_render_shapes(false);
    } else if (a == "--warm") {
      warm = true;
    } else if (a == "--values") {
      from_text = false;
    } else if (a == "--rounds" && i + 1 < argc) {
      rounds = std::atoi(argv[++i]);
    } else if (a == "--dump" && i + 1 < argc) {
      dump = std::fopen(argv[++i], "wb");
      if (!dump) {
        std::fprintf(stderr, "bench_template: cannot write %s\n", argv[i]);
        return 2;
      }
    } else {
      dirs.push_back(a);
    }
  }
  auto tok = text::load_tokenizer("hf", argv[1]);
  std::vector<std::string> records;
  std::ifstream f(argv[2]);
  for (std::string line; std::getline(f, line);)
    if (!line.empty()) records.push_back(line);
  std::printf("%-40s %8s %12s %12s %8s\n", "template", "samples", "render_us", "tokenize_us", "ratio");
  for (const std::string& dir : dirs) {
    if (!warm && &dir != &dirs.front()) tok = text::load_tokenizer("hf", argv[1]);
    text::ChatSource src;
    src.path = dir;
    src.instant = "2024-07-26";
    src.kwargs_json = R"({"date_string": "26 Jul 2024"})";
    auto spec = text::load_chat_template(src);
    text::RecordRules rules;
    tmpl::Value msgs, tools;
    text::Rendered r;
    std::vector<text::Token> toks;
    double render_s = 0, tok_s = 0;
    std::size_t n = 0;
    for (int round = 0; round < rounds; ++round) {
      for (const std::string& rec : records) {
        auto t0 = Clock::now();
        // As render_chat_record does: a record of a shape seen before
        // read from its text alone, any other mapped to messages first.
        std::string why;
        if (!from_text || !text::serve_record_shape(*spec, rec, rules.format, text::Loss::kAllAssistant, r)) {
          why = text::record_to_chat(rec, rules, false, msgs, tools);
          if (why.empty()) why = text::render_labeled(*spec, msgs, tools, text::Loss::kAllAssistant, r);
        }
        auto t1 = Clock::now();
        if (dump && round == 0 && !why.empty()) std::fprintf(dump, "%s refused: %s\n", dir.c_str(), why.c_str());
        if (!why.empty()) continue;  // a refused record: no tokenizing
        toks.clear();
        tok->encode(r.text, toks);
        auto t2 = Clock::now();
        if (dump && round == 0) {
          std::fprintf(dump, "%s %zu bytes:\n", dir.c_str(), r.text.size());
          std::fwrite(r.text.data(), 1, r.text.size(), dump);
          std::fprintf(dump, "\ntrained:");
          for (const text::Span& sp : r.trained) std::fprintf(dump, " %u-%u", sp.begin, sp.end);
          std::fprintf(dump, "\ntokens:");
          for (text::Token t : toks) std::fprintf(dump, " %d", t.id);
          std::fprintf(dump, "\n");
        }
        render_s += std::chrono::duration<double>(t1 - t0).count();
        tok_s += std::chrono::duration<double>(t2 - t1).count();
        ++n;
      }
    }
    std::string name = dir.substr(dir.find_last_of('/') + 1);
    if (n == 0) {
      std::printf("%-40s %8s\n", name.c_str(), "0");
      continue;
    }
    std::printf("%-40s %8zu %12.1f %12.1f %8.3f\n", name.c_str(), n / rounds, 1e6 * render_s / n, 1e6 * tok_s / n,
                render_s / tok_s);
    const text::ShapeStats st = text::render_shape_stats(*spec);
    std::fprintf(stderr,
                 "%s: %llu records asked for, %llu served from their shape (%llu read from their text alone), %llu "
                 "skeletons rendered\n",
                 name.c_str(), static_cast<unsigned long long>(st.records), static_cast<unsigned long long>(st.served),
                 static_cast<unsigned long long>(st.from_text), static_cast<unsigned long long>(st.learnt));
  }
  if (dump) std::fclose(dump);
  return 0;
}
