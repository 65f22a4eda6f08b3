#include "template/skeleton.hpp"

#include <algorithm>
#include <cstring>
#include <random>

namespace tokfeed::tmpl::skeleton {

TOKFEED_TLS Watch* tl_watch = nullptr;

namespace {

constexpr char kOpen[] = "\xEF\xBF\xBE";   // U+FFFE
constexpr char kClose[] = "\xEF\xBF\xBF";  // U+FFFF

// U+FFFE and this process's letters: every sentinel's first 11 bytes.
const std::string& head() {
  static const std::string h = [] {
    std::random_device rd;
    std::string s = kOpen;
    for (int k = 0; k < 8; ++k) s += static_cast<char>('a' + rd() % 26);
    return s;
  }();
  return h;
}

int hex_digit(char c) noexcept {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// The leaf of the sentinel at s[at:], or -1 where none starts there.
int64_t leaf_at(std::string_view s, std::size_t at) noexcept {
  if (at + kSentinelSize > s.size() || s[at] != kOpen[0]) return -1;
  const std::string& h = head();
  if (std::memcmp(s.data() + at, h.data(), h.size()) != 0) return -1;
  int64_t leaf = 0;
  for (std::size_t k = 0; k < 4; ++k) {
    const int d = hex_digit(s[at + h.size() + k]);
    if (d < 0) return -1;
    leaf = leaf * 16 + d;
  }
  return std::memcmp(s.data() + at + h.size() + 4, kClose, 3) == 0 ? leaf : -1;
}

// The first sentinel that starts in s[from:end) (its leaf in `leaf`), or
// npos. Its first byte is looked for (memchr), then the rest.
std::size_t first_in(std::string_view s, std::size_t from, std::size_t end, uint32_t& leaf) noexcept {
  while (from < end) {
    const void* p = std::memchr(s.data() + from, kOpen[0], end - from);
    if (!p) return std::string_view::npos;
    const std::size_t at = static_cast<std::size_t>(static_cast<const char*>(p) - s.data());
    if (const int64_t l = leaf_at(s, at); l >= 0) {
      leaf = static_cast<uint32_t>(l);
      return at;
    }
    from = at + 1;
  }
  return std::string_view::npos;
}

}  // namespace

std::string sentinel(uint32_t leaf) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s = head();
  for (int shift = 12; shift >= 0; shift -= 4) s += kHex[(leaf >> shift) & 0xF];
  s += kClose;
  return s;
}

std::size_t find(std::string_view s, std::size_t from, uint32_t& leaf) noexcept {
  return first_in(s, from, s.size(), leaf);
}

std::size_t covering(std::string_view s, std::size_t at) noexcept {
  const std::size_t first = at >= kSentinelSize - 1 ? at - (kSentinelSize - 1) : 0;
  uint32_t leaf;
  return first_in(s, first, std::min(at + 1, s.size()), leaf);
}

namespace {

void stop(Watch& w) noexcept {
  w.read = true;
  if (RenderBudget* b = current_budget(); b && b->steps) *b->steps = b->max_steps + 1;
}

}  // namespace

void saw_read(const std::string& s) noexcept {
  uint32_t leaf;
  if (tl_watch && find(s, 0, leaf) != std::string::npos) saw_hole(leaf);
}

void saw_hole(uint32_t hole) noexcept {
  Watch* w = tl_watch;
  if (!w) return;
  if (!w->read) w->leaf = hole;
  stop(*w);
}

void undecided() noexcept {
  if (tl_watch) stop(*tl_watch);
}

}  // namespace tokfeed::tmpl::skeleton
