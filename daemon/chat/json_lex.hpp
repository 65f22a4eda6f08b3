// The tokens of one record's JSON text (internal to daemon/chat), as the
// readers of records take them (record_json.cpp, and the shapes' reader in
// chat_shape_read.cpp): strict JSON, as simdjson's; what either is not
// sure to read exactly as simdjson would, it leaves to simdjson.
#pragma once

#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <string_view>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "template/value.hpp"

namespace tokfeed::text::detail {

// Whether s[:n] is UTF-8 (simdjson's best kernel for this machine).
bool valid_utf8(const char* s, std::size_t n) noexcept;
// The string whose text starts at `p` (past its opening quote), decoded
// to `d` as a view `out`, `p` left past its closing quote; false where
// JSON refuses it or it is left to simdjson. `d` has room for the string's
// raw bytes plus kSlack (record_json.cpp).
bool decode_string(const char*& p, const char* end, char* d, std::string_view& out) noexcept;

// Room a string is decoded into past its text's length (decode_string):
// its last 32-byte store.
constexpr std::size_t kSlack = 64;

inline bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }
inline bool is_digit(char c) { return c >= '0' && c <= '9'; }

class JsonLex {
 public:
  JsonLex(std::string_view text, char* scratch) : p_(text.data()), end_(text.data() + text.size()), scratch_(scratch) {}

 protected:
  const char* p_;
  const char* end_;
  char* scratch_;  // where the next string is decoded: room for it, plus kSlack

  void ws() {
    while (p_ < end_ && static_cast<unsigned char>(*p_) <= ' ' && is_ws(*p_)) ++p_;
  }
  bool eat(char c) {
    if (p_ == end_ || *p_ != c) return false;
    ++p_;
    return true;
  }
  // Whitespace, the byte `c`, whitespace: a key's colon or the comma
  // between items. Most records write it as "c " or "c" before what
  // follows, taken here without the loops.
  bool separator(char c) {
    if (end_ - p_ >= 3 && *p_ == c) {
      const int n = 1 + (p_[1] == ' ');
      if (static_cast<unsigned char>(p_[n]) > ' ') {
        p_ += n;
        return true;
      }
    }
    ws();
    if (!eat(c)) return false;
    ws();
    return true;
  }

  // The string at p_ (its opening quote), decoded, as a view of the
  // scratch buffer (valid until the next string is read).
  [[gnu::always_inline]] bool string(std::string_view& out) {
    const char* start = ++p_;
#if defined(__x86_64__)
    // A key or a role: its closing quote among the next 16 bytes, nothing
    // to decode before it. Read here (SSE2, as every x86-64 has) without a
    // call.
    if (end_ - p_ >= 16) {
      const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p_));
      const __m128i y = _mm_xor_si128(x, _mm_set1_epi8(0x02));  // as in decode_blocks
      const __m128i stop =
          _mm_or_si128(_mm_cmpeq_epi8(_mm_min_epu8(y, _mm_set1_epi8(0x20)), y), _mm_cmpeq_epi8(x, _mm_set1_epi8('\\')));
      const auto mask = static_cast<unsigned>(_mm_movemask_epi8(stop));
      if (mask != 0) {
        const auto k = static_cast<unsigned>(__builtin_ctz(mask));
        if (p_[k] == '"') {
          p_ += k + 1;
          // Over 0x7F, the bytes before the quote.
          if ((static_cast<unsigned>(_mm_movemask_epi8(x)) & (mask - 1)) != 0 && !valid_utf8(start, k)) return false;
          _mm_storeu_si128(reinterpret_cast<__m128i*>(scratch_), x);
          out = {scratch_, k};
          return true;
        }
      }
    }
#endif
    return decode_string(p_, end_, scratch_, out);
  }

  // A number in the forms simdjson gives exactly as from_chars does: an
  // integer of up to 18 digits, or a finite double. Others (-0, longer
  // integers, overflow, underflow) are left to simdjson.
  bool number(tmpl::Value& v) {
    const char* s = p_;
    const bool negative = *p_ == '-';
    if (negative) ++p_;
    if (p_ == end_ || !is_digit(*p_)) return false;
    if (*p_ == '0') {
      ++p_;
      if (p_ < end_ && is_digit(*p_)) return false;
    } else {
      while (p_ < end_ && is_digit(*p_)) ++p_;
    }
    const std::size_t digits = static_cast<std::size_t>(p_ - s) - negative;
    bool real = false;
    if (p_ < end_ && *p_ == '.') {
      real = true;
      ++p_;
      if (p_ == end_ || !is_digit(*p_)) return false;
      while (p_ < end_ && is_digit(*p_)) ++p_;
    }
    if (p_ < end_ && (*p_ == 'e' || *p_ == 'E')) {
      real = true;
      ++p_;
      if (p_ < end_ && (*p_ == '+' || *p_ == '-')) ++p_;
      if (p_ == end_ || !is_digit(*p_)) return false;
      while (p_ < end_ && is_digit(*p_)) ++p_;
    }
    if (!real) {
      if (digits > 18 || (negative && s[1] == '0')) return false;
      int64_t x = 0;
      for (const char* q = s + negative; q < p_; ++q) x = x * 10 + (*q - '0');
      v = tmpl::Value::integer(negative ? -x : x);
      return true;
    }
    double x;
    const auto [end, ec] = std::from_chars(s, p_, x);
    if (ec != std::errc() || end != p_ || !std::isfinite(x) || (x == 0 && !zero_digits(s, p_))) return false;
    v = tmpl::Value::real(x);
    return true;
  }

  // Whether the mantissa of the number text [s, e) is all zeros (a zero
  // that is no underflow).
  static bool zero_digits(const char* s, const char* e) {
    for (; s < e && *s != 'e' && *s != 'E'; ++s)
      if (*s >= '1' && *s <= '9') return false;
    return true;
  }

  bool literal(std::string_view w) {
    if (static_cast<std::size_t>(end_ - p_) < w.size() || std::memcmp(p_, w.data(), w.size()) != 0) return false;
    p_ += w.size();
    return true;
  }
};

}  // namespace tokfeed::text::detail
