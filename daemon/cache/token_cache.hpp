// The token cache (docs/data_model.md section 6): every valid record's tokens
// and labels, tokenized once, in a memory-mapped store shared by every worker
// and by later runs with the same key.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "dataset/dataset.hpp"
#include "chat/sample.hpp"

namespace tokfeed {

namespace cache_flags {
inline constexpr uint8_t kTruncated = 1;
inline constexpr uint8_t kDropped = 2;  // longer than max_length under truncation = "drop"
inline constexpr uint8_t kAllMasked = 4;
inline constexpr uint8_t kIsolated = 8;  // crashed a worker max_crashes times; left out
// Refused when encoded: a record checked when read (check_rows =
// "when_read") found bad, or a file changed after indexing.
inline constexpr uint8_t kBad = 16;
// A sample with any of these flags takes no place in any batch.
inline constexpr uint8_t kExcluded = kDropped | kIsolated | kBad;
}  // namespace cache_flags

// The flags that leave a sample out of this job's batches: too long under
// truncation = "drop", isolated, and, unless [batch] keep_untrained, no
// trained token (docs/data_model.md 4.1). Flags are facts about a sample;
// which of them exclude it is the job's rule, so the rule is not in the key.
inline uint8_t excluded_flags(const BatchConfig& b) {
  return cache_flags::kExcluded | (b.keep_untrained ? 0 : cache_flags::kAllMasked);
}

// What the plan knows of every valid record before any batch is built: its
// token count after truncation and its flags. The token store is one; a
// facts table (the cache off) is the other.
class SampleFacts {
 public:
  virtual ~SampleFacts() = default;
  virtual uint64_t size() const = 0;
  virtual uint32_t length(uint64_t i) const = 0;
  virtual uint8_t flags(uint64_t i) const = 0;
  // While a build publishes them (BuildFacts): whether record i's facts are
  // final, and whether every record's are. A complete table: always.
  virtual bool ready(uint64_t) const { return true; }
  virtual bool all_ready() const { return true; }
};

inline constexpr uint32_t kTrainedBit = 0x80000000u;  // in a stored token: its label is its id

struct CacheKey {
  uint64_t hi = 0, lo = 0;
  std::string hex() const;
};

// The hash of everything that changes a job's tokens.
CacheKey cache_key(const JobConfig& cfg, const Dataset& data);

// File names of a store in `dir`.
std::string store_path(const std::string& dir, const CacheKey& key, std::string_view ext);

// A complete store, mapped read-only.
class TokenStore final : public SampleFacts {
 public:
  // Opens the store for `key` in `dir`; nullptr when there is none, or when
  // it does not match (`why` says how), so it is built again.
  static std::unique_ptr<TokenStore> open(const std::string& dir, const CacheKey& key, uint64_t records,
                                          std::string& why);
  ~TokenStore() override;
  TokenStore(const TokenStore&) = delete;
  TokenStore& operator=(const TokenStore&) = delete;

  uint64_t size() const override { return records_; }
  uint64_t tokens() const { return tokens_; }
  uint32_t length(uint64_t i) const override { return static_cast<uint32_t>(offsets_[i + 1] - offsets_[i]); }
  uint8_t flags(uint64_t i) const override { return flags_[i]; }
  const uint32_t* data(uint64_t i) const { return bin_ + offsets_[i]; }
  const std::string& path() const { return idx_path_; }
  uint64_t file_bytes() const { return idx_bytes_ + bin_bytes_; }

  // The sample as the encoder would give it.
  void get(uint64_t i, text::EncodedSample& out) const;

  // Writes a complete store from per-record lengths and flags and the token
  // stream in `bin_tmp` (already written), then renames both into place.
  static void publish(const std::string& dir, const CacheKey& key, const uint32_t* lengths, const uint8_t* flags,
                      uint64_t records, const std::string& bin_tmp);

 private:
  TokenStore() = default;
  uint64_t records_ = 0, tokens_ = 0;
  const uint64_t* offsets_ = nullptr;
  const uint8_t* flags_ = nullptr;
  const uint32_t* bin_ = nullptr;
  void* idx_map_ = nullptr;
  void* bin_map_ = nullptr;
  uint64_t idx_bytes_ = 0, bin_bytes_ = 0;
  std::string idx_path_;
};

// Unpacks `n` stored tokens and a flags byte (the store's format) into a sample.
void decode_sample(const uint32_t* t, uint32_t n, uint8_t flags, text::EncodedSample& out);

// Packs a sample into the store's token format (the builder's side of get()).
void append_sample(const text::EncodedSample& s, std::vector<uint32_t>& out);
uint8_t sample_flags(const text::EncodedSample& s);

}  // namespace tokfeed
