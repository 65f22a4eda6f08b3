// Valid record -> tokens and labels (docs/data_model.md sections 1-3): the
// one path both the token cache builder and the uncached batch builder take.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "dataset/dataset.hpp"
#include "chat/chat_jinja.hpp"
#include "chat/chat_template.hpp"
#include "records/records.hpp"
#include "chat/sample.hpp"
#include "tokenizer/tokenizer.hpp"

namespace tokfeed {

class SampleEncoder {
 public:
  SampleEncoder(const JobConfig& cfg, const Dataset& data, const text::Tokenizer& tok);

  // Encodes valid record `rec` into `out`. Returns false when the record is
  // refused now though the index validated it before fork: the file changed
  // under us, the render ran out of the worker's memory, or it is a Parquet
  // or Arrow row that Dataset::verdict() finds bad (logged; the caller leaves
  // the sample out).
  bool encode(uint64_t rec, text::EncodedSample& out);
  // Renders record `rec` with its trained spans; returns the bad-record
  // reason, or an empty string (tokfeedd --check-config shows one).
  std::string render(uint64_t rec, text::Rendered& out);

 private:
  // A plain-text record's text (docs/data_model.md 1.3).
  std::string render_plain(const text::PlainRecord& p, text::Rendered& out) const;

  const JobConfig& cfg_;
  const Dataset& data_;
  const text::Tokenizer& tok_;
  std::vector<text::RecordRules> rules_;  // per dataset
  text::RenderOptions render_;
  // Reused across samples, so the steady state allocates nothing.
  text::Conversation conv_;
  text::PlainFound plain_;
  std::optional<std::string> eos_;  // the tokenizer's end-of-sequence text
  tmpl::Value messages_, tools_;    // a model's template
  text::Rendered rendered_;
  std::vector<text::Token> tokens_;
  std::vector<text::Token> check_;  // bounded encoding's second part
  static constexpr uint64_t kLoggedBadRows = 20;
  uint64_t bad_rows_ = 0;
};

}  // namespace tokfeed
