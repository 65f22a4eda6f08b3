#include "sample_encoder.hpp"

#include <spdlog/spdlog.h>

namespace tokfeed {

text::RecordRules record_rules(const JobConfig& cfg) {
  text::RecordRules r;
  r.format = cfg.dataset.format;
  r.require_alternation = text::template_requires_alternation(cfg.tokenizer.tmpl);
  r.placeholders = cfg.dataset.placeholders;
  return r;
}

SampleEncoder::SampleEncoder(const JobConfig& cfg, const Dataset& data, const text::Tokenizer& tok)
    : cfg_(cfg), data_(data), tok_(tok), rules_(record_rules(cfg)) {
  render_.tmpl = cfg.tokenizer.tmpl;
  render_.default_system = cfg.tokenizer.default_system;
  render_.last_assistant_only = cfg.batch.last_assistant_only;
}

bool SampleEncoder::encode(uint64_t rec, text::EncodedSample& out) {
  std::string reason = text::parse_record(data_.record(rec), rules_, conv_);
  if (!reason.empty()) {
    spdlog::error("{}:{}: record no longer parses ({}); the file changed after indexing", data_.path(),
                  data_.line(rec), reason);
    return false;
  }
  text::render(conv_, render_, rendered_);
  text::encode_sample(tok_, rendered_, cfg_.batch.max_length, cfg_.batch.truncation, out, tokens_);
  return true;
}

}  // namespace tokfeed
