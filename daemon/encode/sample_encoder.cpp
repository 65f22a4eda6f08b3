#include "encode/sample_encoder.hpp"

#include <spdlog/spdlog.h>

#include "encode/bounded_encode.hpp"

namespace tokfeed {

SampleEncoder::SampleEncoder(const JobConfig& cfg, const Dataset& data, const text::Tokenizer& tok)
    : cfg_(cfg), data_(data), tok_(tok) {
  for (std::size_t d = 0; d < cfg.datasets.size(); ++d) rules_.push_back(record_rules(cfg, d));
  render_.tmpl = cfg.tokenizer.tmpl;
  render_.default_system = cfg.tokenizer.default_system;
  render_.loss = cfg.batch.loss;
}

std::string SampleEncoder::render(uint64_t rec, text::Rendered& out) {
  const text::RecordRules& rules = rules_[data_.dataset_of(rec)];
  if (rules.chat) {
    tmpl::RecordScope budget(rules.chat->limits);  // every render of the record's label rule shares it
    std::string reason = text::record_to_chat(data_.record(rec), rules, false, messages_, tools_);
    if (!reason.empty()) return reason;
    return text::render_labeled(*rules.chat, messages_, tools_, rules.loss, out);
  }
  if (text::tool_record(data_.record(rec), rules, false, messages_, tools_))
    return text::render_labeled(*rules.tool_chat, messages_, tools_, rules.loss, out);
  std::string reason = text::parse_record(data_.record(rec), rules, conv_);
  if (reason.empty()) text::render(conv_, render_, out);
  return reason;
}

bool SampleEncoder::encode(uint64_t rec, text::EncodedSample& out) {
  // A record checked as it is read (a Parquet or Arrow row, or a JSONL line
  // under check_rows = "when_read"): a bad one is left out.
  auto bad_record = [&](const std::string& why) {
    if (++bad_rows_ <= kLoggedBadRows)
      spdlog::warn("{}: bad record: {}; left out{}", data_.where(rec), why,
                   bad_rows_ == kLoggedBadRows ? " (further bad records found by this process are not logged)" : "");
    return false;
  };
  if (std::string bad = data_.verdict(rec); !bad.empty()) return bad_record(bad);
  std::string reason = render(rec, rendered_);
  if (!reason.empty() && !data_.checked_at_start(rec)) return bad_record(reason);
  if (!reason.empty()) {
    // The index accepted it: the file changed since, or the worker's render
    // passed what the supervisor's did not ([workers] max_memory).
    spdlog::error("{}: record refused while encoding ({}); it is left out", data_.where(rec), reason);
    return false;
  }
  // A long sample is tokenized only as far as its kept tokens reach.
  if (!encode_bounded(tok_, rendered_, cfg_.batch.max_length, cfg_.batch.truncation, out, tokens_, check_))
    text::encode_sample(tok_, rendered_, cfg_.batch.max_length, cfg_.batch.truncation, out, tokens_);
  return true;
}

}  // namespace tokfeed
