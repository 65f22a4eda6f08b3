// XXH3-128 over a sequence of fields: the one hash behind the token cache
// key and a shard index's file name.
#pragma once

#include <xxhash.h>

#include <cstdint>
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace tokfeed {

class Hash128 {
 public:
  Hash128() { XXH3_128bits_reset(state_); }
  ~Hash128() { XXH3_freeState(state_); }
  Hash128(const Hash128&) = delete;
  Hash128& operator=(const Hash128&) = delete;

  void add(const void* p, std::size_t n) { XXH3_128bits_update(state_, p, n); }
  // Length-prefixed, so that field boundaries are part of the hash.
  void field(std::string_view s) {
    uint64_t n = s.size();
    add(&n, sizeof n);
    add(s.data(), s.size());
  }
  XXH128_hash_t digest() const { return XXH3_128bits_digest(state_); }
  std::string hex() const {
    XXH128_hash_t h = digest();
    return fmt::format("{:016x}{:016x}", h.high64, h.low64);
  }

 private:
  XXH3_state_t* state_ = XXH3_createState();
};

}  // namespace tokfeed
