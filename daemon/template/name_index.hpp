// A fixed set of names (a type's methods) looked up by hashing: the
// position of a name in the array the set was made from, in a probe or two,
// where a scan would compare it with every name in turn.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tokfeed::tmpl {

template <std::size_t N>
class NameIndex {
 public:
  // `names`: distinct and non-empty, at most 127; the array must outlive the index.
  constexpr explicit NameIndex(const std::string_view (&names)[N]) : NameIndex(&names[0], N) {}
  constexpr explicit NameIndex(const std::array<std::string_view, N>& names) : NameIndex(names.data(), N) {}

  // The position of `name`, or -1 when the set does not hold it.
  int find(std::string_view name) const noexcept {
    if (name.empty() || !(first_[static_cast<unsigned char>(name[0]) & 31] >> (name.size() & 63) & 1)) return -1;
    for (std::size_t h = hash(name);; h = (h + 1) & (kSlots - 1)) {
      const int k = slots_[h];
      if (k < 0 || names_[k] == name) return k;
    }
  }
  bool contains(std::string_view name) const noexcept { return find(name) >= 0; }

 private:
  constexpr NameIndex(const std::string_view* names, std::size_t) : names_(names) {
    static_assert(N < 128);
    slots_.fill(-1);
    for (std::size_t k = 0; k < N; ++k) {
      std::size_t h = hash(names[k]);
      while (slots_[h] >= 0) h = (h + 1) & (kSlots - 1);
      slots_[h] = static_cast<int8_t>(k);
      first_[static_cast<unsigned char>(names[k][0]) & 31] |= uint64_t{1} << (names[k].size() & 63);
    }
  }
  // At most a quarter of the slots taken: a miss mostly ends at its first.
  static constexpr std::size_t kSlots = [] {
    std::size_t n = 16;
    while (n < 4 * N) n *= 2;
    return n;
  }();
  static constexpr std::size_t hash(std::string_view s) noexcept {
    const auto at = [&](std::size_t i) { return static_cast<std::size_t>(static_cast<unsigned char>(s[i])); };
    return (s.size() * 131 + at(0) * 31 + at(s.size() / 2) * 7 + at(s.size() - 1)) & (kSlots - 1);
  }
  const std::string_view* names_;
  std::array<int8_t, kSlots> slots_{};
  // By first byte (its low five bits), the lengths of the names that begin
  // so: most lookups (a message's `role`, `content` asked of a dict's
  // methods) are of names no set holds, which this rules out at once.
  uint64_t first_[32] = {};
};

}  // namespace tokfeed::tmpl
