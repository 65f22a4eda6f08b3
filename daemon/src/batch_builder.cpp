#include "batch_builder.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "tokfeed/shm/slot.hpp"

namespace tokfeed {

text::RecordRules record_rules(const JobConfig& cfg) {
  text::RecordRules r;
  r.format = cfg.dataset.format;
  r.require_alternation = text::template_requires_alternation(cfg.tokenizer.tmpl);
  r.placeholders = cfg.dataset.placeholders;
  return r;
}

BatchBuilder::BatchBuilder(const JobConfig& cfg, const Dataset& data, const text::Tokenizer& tok,
                           Schedule& schedule, const std::unordered_set<uint64_t>& poisoned)
    : cfg_(cfg), data_(data), tok_(tok), schedule_(schedule), poisoned_(poisoned), rules_(record_rules(cfg)) {
  render_.tmpl = cfg.tokenizer.tmpl;
  render_.default_system = cfg.tokenizer.default_system;
  render_.last_assistant_only = cfg.batch.last_assistant_only;
  samples_.resize(cfg.batch.size);
}

uint64_t BatchBuilder::slot_bytes(const JobConfig& cfg) {
  return shm::slot_bytes_for(4, cfg.batch.size, cfg.batch.max_length, cfg.batch.dtype, 0, 0);
}

namespace {

template <class T>
void fill_rows(shm::SlotWriter& w, const char* name, shm::Dtype dtype, uint32_t rows, uint32_t len,
               const std::vector<const text::EncodedSample*>& kept, int which, int32_t pad_id) {
  T* out = static_cast<T*>(w.add(name, dtype, 2, rows, len));
  for (uint32_t r = 0; r < rows; ++r) {
    const text::EncodedSample& s = *kept[r];
    T* row = out + uint64_t{r} * len;
    uint32_t n = static_cast<uint32_t>(s.ids.size());
    switch (which) {
      case 0:
        std::copy(s.ids.begin(), s.ids.end(), row);
        std::fill(row + n, row + len, static_cast<T>(pad_id));
        break;
      case 1:
        std::fill(row, row + n, T{1});
        std::fill(row + n, row + len, T{0});
        break;
      case 2:
        std::copy(s.labels.begin(), s.labels.end(), row);
        std::fill(row + n, row + len, static_cast<T>(text::kIgnoreIndex));
        break;
      default:
        for (uint32_t k = 0; k < n; ++k) row[k] = static_cast<T>(k);
        std::fill(row + n, row + len, T{0});
    }
  }
}

}  // namespace

BuildStats BatchBuilder::build(uint64_t i, char* slot, uint64_t slot_bytes, uint64_t seq, uint64_t session,
                               const std::function<void(uint64_t)>& on_record) {
  BuildStats st;
  schedule_.batch_records(i, records_);
  std::vector<const text::EncodedSample*>& kept = kept_;
  kept.clear();
  for (std::size_t k = 0; k < records_.size(); ++k) {
    uint64_t rec = records_[k];
    if (poisoned_.count(rec)) continue;
    on_record(rec);
    text::EncodedSample& s = samples_[k];
    std::string reason = text::parse_record(data_.record(rec), rules_, conv_);
    if (!reason.empty()) {
      // The index validated every record before fork, so this is a file that
      // changed under us. Leave the sample out rather than guess.
      spdlog::error("{}:{}: record no longer parses ({}); the file changed after indexing", data_.path(),
                    data_.line(rec), reason);
      ++st.dropped;
      continue;
    }
    text::render(conv_, render_, rendered_);
    text::encode_sample(tok_, rendered_, cfg_.batch.max_length, cfg_.batch.truncation, s, tokens_);
    if (s.dropped) {
      ++st.dropped;
      continue;
    }
    st.truncated += s.truncated;
    st.all_masked += s.all_masked;
    kept.push_back(&s);
  }

  uint32_t rows = static_cast<uint32_t>(kept.size());
  uint32_t len = 0;
  if (cfg_.batch.padding == Padding::kMaxLength) len = cfg_.batch.max_length;
  else
    for (const auto* s : kept) len = std::max(len, static_cast<uint32_t>(s->ids.size()));
  for (const auto* s : kept) st.real_tokens += s->ids.size();

  shm::SlotWriter w(slot, slot_bytes);
  int32_t pad = tok_.pad_id();
  static const char* kNames[4] = {"input_ids", "attention_mask", "labels", "position_ids"};
  for (int t = 0; t < 4; ++t) {
    if (cfg_.batch.dtype == shm::Dtype::kInt64) fill_rows<int64_t>(w, kNames[t], cfg_.batch.dtype, rows, len, kept, t, pad);
    else fill_rows<int32_t>(w, kNames[t], cfg_.batch.dtype, rows, len, kept, t, pad);
  }
  uint64_t b = schedule_.batches_per_epoch();
  w.finish(seq, session, i, static_cast<uint32_t>(i / b), static_cast<uint32_t>(i % b), rows, len,
           st.real_tokens);
  st.rows = rows;
  st.seq_len = len;
  st.samples = rows;
  st.tokens = uint64_t{rows} * len;
  return st;
}

}  // namespace tokfeed
