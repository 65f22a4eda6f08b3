#include "tokenizer/hf/char_cuts.hpp"

namespace tokfeed::text::hf {

namespace {

// The length of the 2- or 3-byte char at t[j] (a lead byte and the
// continuation bytes it announces), else 0.
size_t char_at(std::string_view t, size_t j) {
  const auto b = static_cast<unsigned char>(t[j]);
  const size_t len = b >= 0xC2 && b <= 0xDF ? 2 : b >= 0xE0 && b <= 0xEF ? 3 : 0;
  if (len == 0 || j + len > t.size()) return 0;
  for (size_t k = 1; k < len; ++k)
    if ((static_cast<unsigned char>(t[j + k]) & 0xC0) != 0x80) return 0;
  if (b == 0xE0 && static_cast<unsigned char>(t[j + 1]) < 0xA0) return 0;  // overlong (char_cuts.hpp)
  return len;
}

uint32_t code_point(std::string_view t, size_t j, size_t len) {
  const auto at = [&](size_t k) { return uint32_t(static_cast<unsigned char>(t[j + k])); };
  return len == 2 ? (at(0) & 0x1F) << 6 | (at(1) & 0x3F) : (at(0) & 0x0F) << 12 | (at(1) & 0x3F) << 6 | (at(2) & 0x3F);
}

// The key of the char (char_cuts.hpp): its bytes, the first lowest.
uint32_t char_key(std::string_view t, size_t j, size_t len) {
  uint32_t k = 0;
  for (size_t b = 0; b < len; ++b) k |= uint32_t(static_cast<unsigned char>(t[j + b])) << (8 * b);
  return k;
}

bool is_cont(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

}  // namespace

void CharCuts::build(const std::vector<std::string>& raw, const std::function<bool(int32_t)>& reachable) {
  std::vector<uint64_t> pairs;  // key(c1) << 24 | key(c2)
  for (size_t id = 0; id < raw.size(); ++id) {
    const std::string& s = raw[id];
    if ((s.size() == 2 || s.size() == 3) && char_at(s, 0) == s.size() && reachable(int32_t(id)))
      chars_[code_point(s, 0, s.size())] = int32_t(id);
    const std::string_view t = s;
    const size_t n = t.size();
    if (n < 2) continue;
    const auto u = [&](size_t j) { return uint32_t(static_cast<unsigned char>(t[j])); };
    // (b): it starts with the last one or two bytes of a char (its run of
    // continuation bytes) and goes on.
    const size_t run = is_cont(t[0]) ? (is_cont(t[1]) ? 2 : 1) : 0;
    // What follows the piece must be a lead byte there, and what comes before
    // a head piece a continuation byte (the end of c1): others never match.
    if (run == 1 && u(1) >= 0xC0) {
      tail1_[u(0) & 0x3F] |= uint64_t(1) << (u(1) - 0xC0);
      fragments_[kTail | 1u << 16 | u(0)].push_back(s);
      // The byte after the lead, where it is a continuation byte (c2's
      // second byte is one). A fragment that ends at or inside c2 also ends
      // with the first byte or two of a char: the check of (c) finds it.
      if (n > 2 && is_cont(t[2])) set(tail1x_, tail1x_bit(u(0), u(1), u(2)));
    } else if (run == 2 && n > 2 && u(2) >= 0xC0) {
      tail2_[(u(0) & 0x3F) << 6 | (u(1) & 0x3F)] |= uint64_t(1) << (u(2) - 0xC0);
      fragments_[kTail | 2u << 16 | u(0) << 8 | u(1)].push_back(s);
    }
    // (c): it ends with the first one or two bytes of a char.
    if (u(n - 1) >= 0xC2 && u(n - 1) <= 0xEF && is_cont(t[n - 2])) {
      head1_[u(n - 1) - 0xC0] |= uint64_t(1) << (u(n - 2) & 0x3F);
      fragments_[kHead | 1u << 16 | u(n - 1)].push_back(s);
    }
    if (n > 2 && u(n - 2) >= 0xE0 && u(n - 2) <= 0xEF && is_cont(t[n - 1]) && is_cont(t[n - 3])) {
      head2_[(u(n - 2) & 0x0F) << 6 | (u(n - 1) & 0x3F)] |= uint64_t(1) << (u(n - 3) & 0x3F);
      fragments_[kHead | 2u << 16 | u(n - 2) << 8 | u(n - 1)].push_back(s);
    }
    // (a): two whole chars one after the other, wherever they start.
    for (size_t j = 0; j + 4 <= n; ++j) {
      const size_t l1 = char_at(t, j);
      if (l1 == 0) continue;
      const size_t l2 = char_at(t, j + l1);
      if (l2 != 0) pairs.push_back(uint64_t(char_key(t, j, l1)) << 24 | char_key(t, j + l1, l2));
    }
  }
  for (uint32_t k = 0; k < 4096; ++k) {
    tail3_[k] = tail1_[k & 0x3F] | tail2_[k];
    tail3_lead3_[k] = uint16_t(tail3_[k] >> 32);
  }
  for (uint32_t k = 0; k < 1024; ++k) head3_[k] = head1_[0x20 | k >> 6] | head2_[k];
  size_t bits = 64;
  pair_shift_ = 58;
  while (bits < pairs.size() * 16) bits <<= 1, --pair_shift_;
  pairs_.assign(bits / 64, 0);
  for (uint64_t p : pairs) set(pairs_, pair_bit(uint32_t(p >> 24), uint32_t(p & 0xFFFFFF)));
}

bool CharCuts::covers(uint32_t key, std::string_view word, size_t i, size_t piece) const {
  const auto it = fragments_.find(key);
  if (it == fragments_.end()) return false;
  for (const std::string& t : it->second) {
    // A tail fragment starts `piece` bytes before i; a head fragment ends
    // `piece` bytes after it.
    const size_t from = key & kTail ? i - piece : i + piece >= t.size() ? i + piece - t.size() : SIZE_MAX;
    if (from == SIZE_MAX || from + t.size() > word.size()) continue;
    if (word.compare(from, t.size(), t) == 0) return true;
  }
  return false;
}

}  // namespace tokfeed::text::hf
