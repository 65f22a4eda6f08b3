#include "records/pystrip.hpp"

#include <cstdint>

namespace tokfeed::text {

namespace {

bool is_py_space(uint32_t cp) {
  if (cp >= 0x09 && cp <= 0x0d) return true;
  if (cp >= 0x1c && cp <= 0x20) return true;
  switch (cp) {
    case 0x85:
    case 0xa0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202f:
    case 0x205f:
    case 0x3000: return true;
    default: return cp >= 0x2000 && cp <= 0x200a;
  }
}

// Decodes the code point starting at s[i]; returns its length, or 0 if invalid.
std::size_t decode_at(std::string_view s, std::size_t i, uint32_t& cp) {
  auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = b(i);
  std::size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  cp = n == 1 ? c : n == 2 ? (c & 0x1f) : n == 3 ? (c & 0x0f) : (c & 0x07);
  for (std::size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3f);
  }
  return n;
}

}  // namespace

std::string_view py_strip(std::string_view s) noexcept {
  std::size_t begin = 0;
  while (begin < s.size()) {
    uint32_t cp;
    std::size_t n = decode_at(s, begin, cp);
    if (n == 0 || !is_py_space(cp)) break;
    begin += n;
  }
  std::size_t end = s.size();
  while (end > begin) {
    // Step back to the start of the previous code point.
    std::size_t start = end - 1;
    while (start > begin && (static_cast<unsigned char>(s[start]) & 0xc0) == 0x80 && end - start < 4) --start;
    uint32_t cp;
    std::size_t n = decode_at(s, start, cp);
    if (n != end - start || !is_py_space(cp)) break;
    end = start;
  }
  return s.substr(begin, end - begin);
}

}  // namespace tokfeed::text
