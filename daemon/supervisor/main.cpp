// tokfeedd: the tokfeed daemon. Runs in the foreground, as systemd wants.
// `tokfeedd render|tokenize` run a job's text pipeline offline (tools/dev.hpp).
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <vector>

#include "pipeline/batch_builder.hpp"
#include "config/cache_dir.hpp"
#include "config/config.hpp"
#include "dataset/dataset.hpp"
#include "dataset/object_store.hpp"
#include "pipeline/schedule.hpp"
#include "supervisor/supervisor.hpp"
#include "tokenizer/tokenizer.hpp"
#include "encode/sample_encoder.hpp"
#include "cache/record_check.hpp"
#include "cache/token_cache.hpp"
#include "tokfeed/shm/segment.hpp"
#include "dev.hpp"

namespace {

// Each record's token count and flags, found by tokenizing every record once:
// what --check-config needs to count batches when samples may be left out
// (docs/data_model.md 4.1) and no token cache is built.
class FoundFacts final : public tokfeed::SampleFacts {
 public:
  FoundFacts(const tokfeed::JobConfig& cfg, const tokfeed::Dataset& data, const tokfeed::text::Tokenizer& tok)
      : lengths_(data.size()), flags_(data.size()) {
    tokfeed::SampleEncoder enc(cfg, data, tok);
    tokfeed::text::EncodedSample s;
    for (uint64_t r = 0; r < data.size(); ++r) {
      if (!enc.encode(r, s)) {
        flags_[r] = tokfeed::cache_flags::kBad;
        continue;
      }
      lengths_[r] = static_cast<uint32_t>(s.ids.size());
      flags_[r] = tokfeed::sample_flags(s);
    }
  }
  uint64_t size() const override { return lengths_.size(); }
  uint32_t length(uint64_t i) const override { return lengths_[i]; }
  uint8_t flags(uint64_t i) const override { return flags_[i]; }

 private:
  std::vector<uint32_t> lengths_;
  std::vector<uint8_t> flags_;
};

int check_config(const std::string& path) {
  using namespace tokfeed;
  JobConfig cfg = load_config(path);
  std::printf("# resolved settings of %s\n%s", path.c_str(), describe(cfg).c_str());
  if (std::string why = prepare_cache_dir(cfg.cache); !why.empty()) {
    std::fprintf(stderr, "error: %s\n", why.c_str());
    return 1;
  }
  auto tok = text::load_tokenizer(cfg.tokenizer.type, cfg.tokenizer.path);
  std::printf("\n# tokenizer: %s, %zu pieces, pad id %d\n", std::string(tok->kind()).c_str(), tok->vocab_size(),
              tok->pad_id());
  Dataset data(cfg, nullptr, /*check_rows=*/true);
  check_records(cfg, data);
  for (std::size_t i = 0; i < data.datasets().size(); ++i) {
    const DatasetInfo& d = data.datasets()[i];
    const bool eval = i >= cfg.train_datasets;
    std::printf("# %s: %s: %llu shard(s), %llu records, %llu valid, %llu bad, %llu samples per %s",
                eval ? "eval dataset" : "dataset", d.name.c_str(), static_cast<unsigned long long>(d.shards),
                static_cast<unsigned long long>(d.records), static_cast<unsigned long long>(d.valid),
                static_cast<unsigned long long>(d.bad), static_cast<unsigned long long>(d.samples),
                eval ? "pass" : "epoch");
    if (d.held_out) std::printf(", %llu held out for evaluation", static_cast<unsigned long long>(d.held_out));
    std::printf("\n");
  }
  uint64_t indexed = 0, shards = 0;
  for (const DatasetInfo& d : data.datasets()) indexed += d.indexed, shards += d.shards;
  std::printf(
      "# dataset index: %llu records, %llu bytes in %.3f s (%llu of %llu shards indexed, the others from "
      "the index cache)\n",
      static_cast<unsigned long long>(data.records_total()), static_cast<unsigned long long>(data.file_bytes()),
      data.index_seconds(), static_cast<unsigned long long>(indexed), static_cast<unsigned long long>(shards));
  std::printf("# chat template: %s\n",
              cfg.tokenizer.chat ? cfg.tokenizer.chat->source.c_str()
                                 : ("built-in '" + std::string(text::template_name(cfg.tokenizer.tmpl)) + "'").c_str());
  if (cfg.tokenizer.chat) {
    // Unknown filters and tests fail only when a render reaches them (as in
    // jinja2): say where they are now.
    for (const std::string& w : cfg.tokenizer.chat->tmpl.warnings())
      std::printf("# warning: chat template %s: %s\n", cfg.tokenizer.chat->name.c_str(), w.c_str());
  }
  if (data.size() > 0) {
    // One record as the template renders it, trained text between [[ and ]].
    SampleEncoder enc(cfg, data, *tok);
    text::Rendered r;
    std::string why = enc.render(0, r);
    std::string shown;
    std::size_t at = 0;
    for (const text::Span& sp : why.empty() ? text::trained_text(*tok, r) : std::vector<text::Span>{}) {
      shown += r.text.substr(at, sp.begin - at) + "[[" + r.text.substr(sp.begin, sp.end - sp.begin) + "]]";
      at = sp.end;
    }
    shown += r.text.substr(std::min(at, r.text.size()));
    std::printf("# first record (%s), rendered, trained text in [[ ]]:\n%s\n# end of record\n", data.where(0).c_str(),
                why.empty() ? shown.c_str() : ("refused: " + why).c_str());
  }
  for (std::size_t i = 0; i < data.bad().size() && i < 20; ++i)
    std::printf("#   %s:%u: %s\n", data.bad()[i].file.c_str(), data.bad()[i].line, data.bad()[i].reason.c_str());
  if (data.bad().size() > 20) std::printf("#   ... %zu more\n", data.bad().size() - 20);
  std::unique_ptr<TokenStore> store;
  if (cfg.cache.enabled) {
    std::string why;
    CacheKey key = cache_key(cfg, data);
    store = TokenStore::open(cfg.cache.dir, key, data.size(), why);
    std::printf("# token cache: %s (%s)\n", store_path(cfg.cache.dir, key, "idx").c_str(),
                store ? "built" : ("to build: " + why).c_str());
  }
  std::printf("# train split: %llu samples per epoch\n", static_cast<unsigned long long>(data.mixture().per_epoch()));
  if (cfg.eval.enabled())
    std::printf("# eval split: %llu samples per pass, batch_size %u, in a fixed order, each sample once per pass\n",
                static_cast<unsigned long long>(data.eval_mixture().per_epoch()), cfg.eval.batch_size);
  else std::printf("# eval split: none (set [eval] split_ratio or [[eval.datasets]])\n");
  if (is_packed(cfg.batch.padding) && !store) {
    std::printf("# batches per epoch: known once the token cache is built (packing needs token counts)\n");
  } else {
    // Samples left out take no row (4.1): without a built cache, find which
    // by tokenizing every record here.
    std::unique_ptr<FoundFacts> found;
    const SampleFacts* facts = store.get();
    if (!store && (cfg.batch.leaves_samples_out() || data.jsonl_checked_when_read())) {
      auto t0 = std::chrono::steady_clock::now();
      found = std::make_unique<FoundFacts>(cfg, data, *tok);
      facts = found.get();
      uint64_t dropped = 0, untrained = 0;
      for (uint64_t i = 0; i < found->size(); ++i) {
        dropped += (found->flags(i) & cache_flags::kDropped) != 0;
        untrained += (found->flags(i) & (cache_flags::kExcluded | cache_flags::kAllMasked)) == cache_flags::kAllMasked;
      }
      std::printf(
          "# sample facts: %llu records tokenized in %.2f s; %llu longer than max_length (truncation = \"%s\"), "
          "%llu with no trained token (%s)\n",
          static_cast<unsigned long long>(found->size()),
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
          static_cast<unsigned long long>(dropped), std::string(truncation_name(cfg.batch.truncation)).c_str(),
          static_cast<unsigned long long>(untrained), cfg.batch.keep_untrained ? "kept" : "left out");
    }
    const JobConfig eval_cfg = cfg.eval.enabled() ? eval_job(cfg) : cfg;
    std::vector<uint64_t> pass;
    for (uint32_t r : cfg.ranks.serve) {
      Schedule s(cfg, data.mixture(), r, {}, facts);
      std::printf("# rank %u: %llu batches in epoch 0, %llu in all %llu epochs", r,
                  static_cast<unsigned long long>(s.epoch_batches().empty() ? 0 : s.epoch_batches()[0]),
                  static_cast<unsigned long long>(s.total_batches()), static_cast<unsigned long long>(s.epochs()));
      if (cfg.eval.enabled()) {
        Schedule e(eval_cfg, data.eval_mixture(), r, {}, facts);
        pass.push_back(e.epoch_batches()[0]);
        std::printf("; %llu batches per evaluation pass", static_cast<unsigned long long>(pass.back()));
      }
      std::printf("\n");
    }
    // Section 7: a rank whose share of the last step is empty has one batch
    // fewer; a loop that gathers every step on every rank would wait.
    if (!pass.empty() && *std::min_element(pass.begin(), pass.end()) != *std::max_element(pass.begin(), pass.end()))
      std::printf(
          "# warning: evaluation passes end unevenly (%llu or %llu batches per rank): a loop that gathers every "
          "step on every rank (HF Trainer's evaluate under DDP) waits for the longer ranks; choose [eval] "
          "batch_size so that the last step has a row for every rank\n",
          static_cast<unsigned long long>(*std::min_element(pass.begin(), pass.end())),
          static_cast<unsigned long long>(*std::max_element(pass.begin(), pass.end())));
  }
  ShmPlan plan = plan_shm(cfg);
  uint64_t need = plan.total();
  uint64_t free = shm::free_bytes(cfg.server.shm_dir);
  std::printf("# shared memory: %llu bytes needed (slot %llu bytes), %llu bytes free in %s\n",
              static_cast<unsigned long long>(need), static_cast<unsigned long long>(plan.slot_bytes),
              static_cast<unsigned long long>(free), cfg.server.shm_dir.c_str());
  if (need > free) {
    std::fprintf(stderr, "error: %s needs %llu bytes of shared memory but only %llu are free\n",
                 cfg.server.shm_dir.c_str(), static_cast<unsigned long long>(need),
                 static_cast<unsigned long long>(free));
    return 1;
  }
  std::printf("# ok\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // The object fetcher (dataset/object_store.hpp): this program started again
  // by the supervisor, so that S3 lives only in a process that never forks.
  if (argc > 1 && std::string_view(argv[1]) == "--object-fetcher") return tokfeed::object_fetcher_main(argc, argv);
  CLI::App app{"tokfeedd: tokenizes and batches SFT data into shared-memory rings for trainers"};
  std::string config, check, level = "info";
  app.add_option("--config", config, "job config (TOML) to serve");
  app.add_option("--check-config", check, "validate a job config, print what it resolves to, and exit");
  app.add_option("--log-level", level, "trace | debug | info | warn | error")->capture_default_str();
  app.require_subcommand(0, 1);

  std::string tok_path, tok_type = "hf";
  bool decode = false;
  auto* tk = app.add_subcommand("tokenize", "read one JSON string per line, print its ids as a JSON array");
  tk->add_option("--tokenizer", tok_path, "tokenizer.json or .model")->required();
  tk->add_option("--type", tok_type, "hf | sentencepiece")->capture_default_str();
  tk->add_flag("--decode", decode, "read JSON arrays of ids and print the decoded strings");
  std::string job;
  uint64_t limit = 0;
  auto* rd = app.add_subcommand("render", "print each valid record as the job's template renders it, as JSON strings");
  rd->add_option("--config,-c", job, "the job's TOML config")->required();
  rd->add_option("--limit,-n", limit, "only the first N valid records");
  CLI11_PARSE(app, argc, argv);
  if (tk->parsed()) return tokfeed::dev::tokenize(tok_path, tok_type, decode);
  if (rd->parsed()) return tokfeed::dev::render(job, limit ? std::optional<uint64_t>(limit) : std::nullopt);

  auto logger = spdlog::stderr_color_mt("tokfeedd");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("%Y-%m-%d %H:%M:%S.%e %^%l%$ [%P] %v");
  spdlog::set_level(spdlog::level::from_str(level));

  try {
    if (!check.empty()) return check_config(check);
    if (config.empty()) {
      std::fprintf(stderr, "error: --config or --check-config is required\n%s", app.help().c_str());
      return 2;
    }
    tokfeed::JobConfig cfg = tokfeed::load_config(config);
    if (std::string why = tokfeed::prepare_cache_dir(cfg.cache); !why.empty()) {
      std::fprintf(stderr, "error: %s\n", why.c_str());
      return 1;
    }
    tokfeed::Supervisor sup(std::move(cfg));
    return sup.run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
