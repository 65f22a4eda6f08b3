#include "pipeline/batch_builder.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include "tokfeed/shm/slot.hpp"

namespace tokfeed {

namespace {

constexpr std::size_t kAheadSamples = 4096;  // samples find_ahead() keeps at most

}  // namespace

BatchBuilder::BatchBuilder(const JobConfig& cfg, const Dataset& data, const text::Tokenizer& tok,
                           const TokenStore* store, const SampleFacts* facts, Schedule& schedule,
                           const std::unordered_set<uint64_t>& poisoned, const BuildFacts* building,
                           std::vector<int> part_fds)
    : cfg_(cfg),
      tok_(tok),
      store_(store),
      facts_(facts),
      building_(building),
      part_fds_(std::move(part_fds)),
      excluded_(excluded_flags(cfg.batch)),
      schedule_(schedule),
      poisoned_(poisoned),
      encoder_(cfg, data, tok) {}

uint64_t BatchBuilder::slot_bytes(const JobConfig& cfg) {
  const uint32_t rows = cfg.batch.rows();
  uint64_t bytes;
  if (!is_packed(cfg.batch.padding)) {
    bytes = shm::slot_bytes_for(4, rows, cfg.batch.max_length, cfg.batch.dtype, 0, 0);
  } else {
    // Packed: four [rows, capacity] tensors at most; cu_seqlens and
    // cu_seq_lens_q (int32) hold at most one segment per token, so both fit
    // in two 8-byte-per-element bounds, with room for max_seqlen,
    // max_length_q and the alignment gaps.
    uint64_t cap = cfg.batch.capacity();
    bytes = shm::slot_bytes_for(4, rows, cap, cfg.batch.dtype, 2, uint64_t{rows} * cap + 64);
  }
  // Whole pages: a client that maps the slots copy-on-write (CPU tensors a
  // trainer may write into) drops a released slot's private pages without
  // touching a neighbour's.
  return (bytes + 4095) / 4096 * 4096;
}

namespace {

// The four [rows, L] tensors. A row is samples [row_start[r], row_start[r+1])
// of `kept`, one after the other (one sample per row in padded modes).
template <class T>
void fill_rows(shm::SlotWriter& w, const char* name, shm::Dtype dtype, uint32_t len,
               const std::vector<const text::EncodedSample*>& kept, const std::vector<uint32_t>& row_start, int which,
               int32_t pad_id, bool packed) {
  const uint32_t rows = static_cast<uint32_t>(row_start.size() - 1);
  T* out = static_cast<T*>(w.add(name, dtype, 2, rows, len));
  for (uint32_t r = 0; r < rows; ++r) {
    T* row = out + uint64_t{r} * len;
    T* at = row;
    for (uint32_t k = row_start[r]; k < row_start[r + 1]; ++k) {
      const text::EncodedSample& s = *kept[k];
      const uint32_t n = static_cast<uint32_t>(s.ids.size());
      switch (which) {
        case 0: std::copy(s.ids.begin(), s.ids.end(), at); break;
        case 1: std::fill(at, at + n, T{1}); break;
        case 2:
          std::copy(s.labels.begin(), s.labels.end(), at);
          // No sample learns to predict its first token from the one before.
          if (packed && n) at[0] = static_cast<T>(text::kIgnoreIndex);
          break;
        default:
          for (uint32_t t = 0; t < n; ++t) at[t] = static_cast<T>(t);
      }
      at += n;
    }
    T fill = which == 0 ? static_cast<T>(pad_id) : which == 2 ? static_cast<T>(text::kIgnoreIndex) : T{0};
    std::fill(at, row + len, fill);
  }
}

}  // namespace

// transformers' varlen kwargs (DataCollatorWithFlattening's names): offsets
// into input_ids.view(-1), padding kept, so they index the [rows * L] tokens
// a model flattens. Each sample is a segment, and so is each row's padding
// run, which then attends only to itself.
void BatchBuilder::add_hf_varlen(shm::SlotWriter& w, uint32_t rows, uint32_t len) {
  uint64_t segments = kept_.size();
  for (uint32_t r = 0; r < rows; ++r) {
    uint64_t n = 0;
    for (uint32_t k = kept_row_start_[r]; k < kept_row_start_[r + 1]; ++k) n += kept_[k]->ids.size();
    segments += n < len;
  }
  auto* cu = static_cast<int32_t*>(w.add("cu_seq_lens_q", shm::Dtype::kInt32, 1, int64_t(segments + 1), 0));
  int32_t longest = 0;
  std::size_t at = 0;
  cu[at] = 0;
  for (uint32_t r = 0; r < rows; ++r) {
    const int32_t row_end = static_cast<int32_t>(uint64_t{r + 1} * len);
    for (uint32_t k = kept_row_start_[r]; k < kept_row_start_[r + 1]; ++k) {
      const int32_t l = static_cast<int32_t>(kept_[k]->ids.size());
      cu[at + 1] = cu[at] + l;
      longest = std::max(longest, l);
      ++at;
    }
    if (cu[at] < row_end) {
      longest = std::max(longest, row_end - cu[at]);
      cu[at + 1] = row_end;
      ++at;
    }
  }
  auto* mx = static_cast<int32_t*>(w.add("max_length_q", shm::Dtype::kInt32, 1, 1, 0));
  mx[0] = longest;
}

// Built, not yet published: a ready record's tokens are in its builder's
// part file. False (encode it instead) when there is none to read.
bool BatchBuilder::read_part(uint64_t rec, text::EncodedSample& s) {
  if (!building_ || part_fds_.empty() || !building_->built(rec)) return false;
  const uint32_t n = building_->length(rec);
  tokens_.resize(n);
  const std::size_t want = std::size_t{n} * 4;
  const ssize_t got =
      ::pread(part_fds_[building_->part(rec)], tokens_.data(), want, static_cast<off_t>(building_->offset(rec)));
  if (got != static_cast<ssize_t>(want)) return false;
  decode_sample(tokens_.data(), n, building_->flags(rec), s);
  return true;
}

const text::EncodedSample* BatchBuilder::sample(uint64_t rec, std::size_t k, BuildStats& st,
                                                const std::function<void(uint64_t)>& on_record) {
  if (poisoned_.count(rec)) return nullptr;
  // The plan took these out already (4.1); only a plan without facts meets
  // one here.
  if (facts_ && (facts_->flags(rec) & excluded_)) return nullptr;
  text::EncodedSample& s = samples_[k];
  if (store_) {
    store_->get(rec, s);
  } else if (auto it = ahead_.find(rec); it != ahead_.end()) {
    std::swap(s, it->second);
    ahead_.erase(it);
  } else if (!read_part(rec, s)) {
    on_record(rec);
    if (!encoder_.encode(rec, s)) {
      ++st.dropped;
      return nullptr;
    }
  }
  if (s.dropped) {
    ++st.dropped;
    return nullptr;
  }
  st.truncated += s.truncated;
  st.all_masked += s.all_masked;
  // Without facts (the cache off and keep_untrained) the sample stays: its
  // batch keeps its size.
  return &s;
}

bool BatchBuilder::find_ahead(uint64_t i, uint32_t helper, uint32_t helpers,
                              const std::function<void(uint64_t)>& on_record) {
  if (!building_) return false;
  schedule_.wanted(i, helper, helpers, wanted_);
  for (uint32_t rec : wanted_) {
    // A record that crashed workers is left to the builders' verdict.
    if (building_->ready(rec) || poisoned_.count(rec) || !building_->claim(rec, found_file_)) continue;
    if (ahead_.size() >= kAheadSamples) ahead_.clear();
    on_record(rec);
    text::EncodedSample& s = ahead_[rec];
    // As a builder finds them (CacheBuild::builder_main).
    if (!encoder_.encode(rec, s)) {
      ahead_.erase(rec);
      building_->publish_found(rec, 0, cache_flags::kBad, 0, BuildFacts::kNoTokens);
      return true;
    }
    // The tokens in the store's format, for the builder that copies them.
    uint64_t at = BuildFacts::kNoTokens;
    if (found_fd_ >= 0) {
      tokens_.clear();
      append_sample(s, tokens_);
      const std::size_t bytes = tokens_.size() * 4;
      if (::pwrite(found_fd_, tokens_.data(), bytes, static_cast<off_t>(found_end_)) == static_cast<ssize_t>(bytes)) {
        at = found_end_;
        found_end_ += bytes;
      }
    }
    building_->publish_found(rec, static_cast<uint32_t>(s.ids.size()), sample_flags(s), found_file_, at);
    return true;
  }
  return false;
}

void BatchBuilder::hand_off_to(int fd, uint32_t file) {
  struct stat st;
  found_file_ = file;
  // A restarted worker writes after what the one before it wrote.
  if (fd < 0 || ::fstat(fd, &st) != 0) return;
  found_fd_ = fd;
  found_end_ = static_cast<uint64_t>(st.st_size);
}

BuildStats BatchBuilder::build(uint64_t i, char* slot, uint64_t slot_bytes, uint64_t seq, uint64_t session,
                               const std::function<void(uint64_t)>& on_record) {
  BuildStats st;
  const bool packed = is_packed(cfg_.batch.padding);
  schedule_.batch_rows(i, rows_);
  // Sized before any pointer into it is taken.
  if (samples_.size() < rows_.samples.size()) samples_.resize(rows_.samples.size());
  kept_.clear();
  kept_row_start_.assign(1, 0);
  for (uint32_t r = 0; r < rows_.rows(); ++r) {
    for (uint32_t k = rows_.row_start[r]; k < rows_.row_start[r + 1]; ++k)
      if (const text::EncodedSample* s = sample(rows_.samples[k], k, st, on_record)) kept_.push_back(s);
    // A padded row whose one sample is left out is no row at all; a packed
    // row never holds an excluded sample.
    if (kept_.size() > kept_row_start_.back()) kept_row_start_.push_back(static_cast<uint32_t>(kept_.size()));
  }

  const uint32_t rows = static_cast<uint32_t>(kept_row_start_.size() - 1);
  uint32_t len = 0, longest_row = 0, longest_sample = 0;
  for (uint32_t r = 0; r < rows; ++r) {
    uint32_t n = 0;
    for (uint32_t k = kept_row_start_[r]; k < kept_row_start_[r + 1]; ++k) {
      uint32_t l = static_cast<uint32_t>(kept_[k]->ids.size());
      n += l;
      longest_sample = std::max(longest_sample, l);
    }
    longest_row = std::max(longest_row, n);
    st.real_tokens += n;
  }
  switch (cfg_.batch.padding) {
    case Padding::kLongest: len = longest_row; break;
    case Padding::kMaxLength:
    case Padding::kPacked: len = cfg_.batch.max_length; break;
    case Padding::kPaddingFree: len = longest_row; break;
  }

  shm::SlotWriter w(slot, slot_bytes);
  const int32_t pad = tok_.pad_id();
  const shm::Dtype dt = cfg_.batch.dtype;
  static const char* kNames[4] = {"input_ids", "attention_mask", "labels", "position_ids"};
  for (int t = 0; t < 4; ++t) {
    // padding_free rows have no padding to mask (HF DataCollatorWithFlattening).
    if (t == 1 && cfg_.batch.padding == Padding::kPaddingFree) continue;
    if (dt == shm::Dtype::kInt64) fill_rows<int64_t>(w, kNames[t], dt, len, kept_, kept_row_start_, t, pad, packed);
    else fill_rows<int32_t>(w, kNames[t], dt, len, kept_, kept_row_start_, t, pad, packed);
  }
  if (packed) {
    auto* cu = static_cast<int32_t*>(w.add("cu_seqlens", shm::Dtype::kInt32, 1, int64_t(kept_.size() + 1), 0));
    cu[0] = 0;
    for (std::size_t k = 0; k < kept_.size(); ++k) cu[k + 1] = cu[k] + static_cast<int32_t>(kept_[k]->ids.size());
    auto* mx = static_cast<int32_t*>(w.add("max_seqlen", shm::Dtype::kInt32, 1, 1, 0));
    mx[0] = static_cast<int32_t>(longest_sample);
    add_hf_varlen(w, rows, len);
  }
  uint64_t epoch, step;
  schedule_.locate(i, epoch, step);
  w.finish(seq, session, i, static_cast<uint32_t>(epoch), static_cast<uint32_t>(step), rows, len, st.real_tokens);
  st.rows = rows;
  st.seq_len = len;
  st.samples = kept_.size();
  st.tokens = uint64_t{rows} * len;
  return st;
}

}  // namespace tokfeed
