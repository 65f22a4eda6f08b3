// The one pseudo-random generator of the daemon's plans (epoch orders,
// dataset draws): splitmix64, so every order is a pure function of the seed.
#pragma once

#include <cstdint>

namespace tokfeed {

// Advances `state` and returns the next 64-bit value.
inline uint64_t splitmix64(uint64_t& state) noexcept {
  state += 0x9E3779B97F4A7C15ULL;
  uint64_t z = state;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

}  // namespace tokfeed
