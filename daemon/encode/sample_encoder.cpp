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
  eos_ = tok.eos_token();
}

std::string SampleEncoder::render_plain(const text::PlainRecord& p, text::Rendered& out) const {
  try {
    tok_.sequence_specials();  // a post-processor tokfeed cannot read refuses every plain record
  } catch (const text::TokenizerError& e) {
    return e.what();
  }
  // As TRL adds it: the end-of-sequence text after the text or completion,
  // unless it ends with it.
  const bool add_eos = eos_ && !eos_->empty() && !p.text.ends_with(*eos_);
  out.text.clear();
  if (p.prompt) out.text = *p.prompt;
  out.text += p.text;
  if (add_eos) out.text += *eos_;
  out.trained.assign(1, {0, static_cast<uint32_t>(out.text.size())});
  out.plain = true;
  // loss = "all": the prompt trains too (TRL's completion_only_loss=False).
  if (p.prompt && cfg_.batch.loss != text::Loss::kAll) out.prompt = p.prompt;
  return {};
}

std::string SampleEncoder::render(uint64_t rec, text::Rendered& out) {
  const text::RecordRules& rules = rules_[data_.dataset_of(rec)];
  out.plain = false;
  out.prompt.reset();
  std::string reason;
  if (rules.chat) {
    // One parse tells a plain-text record from a conversation.
    tmpl::RecordScope budget(rules.chat->limits);  // every render of the record's label rule shares it
    reason = text::render_chat_record(data_.record(rec), rules, false, messages_, tools_, out, &plain_);
    return plain_.found && reason.empty() ? render_plain(plain_.record, out) : reason;
  }
  if (rules.tool_chat) {
    if (text::plain_record(data_.record(rec), rules, false, plain_.record, reason))
      return reason.empty() ? render_plain(plain_.record, out) : reason;
    if (text::tool_record(data_.record(rec), rules, false, messages_, tools_))
      return text::render_labeled(*rules.tool_chat, messages_, tools_, rules.loss, out);
  }
  // One parse tells a plain-text record from a conversation.
  reason = text::parse_record(data_.record(rec), rules, conv_, false, plain_);
  if (plain_.found) return reason.empty() ? render_plain(plain_.record, out) : reason;
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
