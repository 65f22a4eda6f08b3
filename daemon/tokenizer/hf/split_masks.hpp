// The split's byte classes, 64 bytes at a time, as bit masks (bit k: the
// k-th byte of the window). FastSplit::for_each reads the class of an ASCII
// byte and the end of a run of ASCII letters, digits, spaces or punctuation
// from them with a shift and a count of trailing zeros, with no branch per
// byte; where a byte past ASCII (bit set in `high`) decides, it takes the
// exact per-char path.
//
// ASCII classes, as the split patterns' \p{L}, \p{N} and \s (Oniguruma's
// \s: \t-\r, U+0085 and \p{Z}) see them: letters A-Z a-z, digits 0-9,
// spaces \t \n \v \f \r and ' '; every other ASCII byte is `other` (neither
// \s, \p{L} nor \p{N}). ClassTable agrees with this on every ASCII byte
// (tests/unit/test_fast_split.cpp checks it).
//
// x86-64 computes the masks with SSE2 (part of the architecture, no
// dispatch); other targets loop over the bytes (classify_bytes), which is
// also the reference the SSE2 version is tested against.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace tokfeed::text::hf::split_detail {

struct ByteMasks {
  uint64_t letter = 0, digit = 0, space = 0, newline = 0, high = 0;
  uint64_t other = 0;  // ASCII, none of the above
  // What may stand before a letter run in one match ([^\r\n\p{L}\p{N}]):
  // ASCII but letters, digits and newlines. (An apostrophe may start a
  // contraction instead: the caller looks.)
  uint64_t prefix = 0;
  uint64_t apostrophe = 0;
  uint64_t blank = 0;  // ' ', the one space that may stand before punctuation in a match
  // Where alternative 2 ([^\r\n\p{L}\p{N}]?\p{L}+) starts a match as far as
  // the window tells: a letter, or a prefix but an apostrophe (which may
  // start a contraction) before a letter. Bit 63 looks no further than the
  // window: a prefix there is not in it.
  uint64_t word = 0;
};

// Clears the bits from `valid` on and derives the masks that depend on others.
inline void finish(ByteMasks& m, uint64_t valid) {
  m.letter &= valid, m.digit &= valid, m.space &= valid, m.newline &= valid, m.high &= valid;
  m.apostrophe &= valid, m.blank &= valid;
  m.other = valid & ~(m.letter | m.digit | m.space | m.high);
  m.prefix = valid & ~(m.letter | m.digit | m.newline | m.high);
  m.word = m.letter | (m.prefix & ~m.apostrophe & m.letter >> 1);
}

// Masks of p[0, len), len <= 64, a byte at a time.
inline ByteMasks classify_bytes(const unsigned char* p, size_t len) {
  ByteMasks m;
  for (size_t k = 0; k < len; ++k) {
    const unsigned char c = p[k];
    const uint64_t bit = uint64_t(1) << k;
    if (c >= 0x80) m.high |= bit;
    else if (unsigned((c | 0x20) - 'a') < 26) m.letter |= bit;
    else if (unsigned(c - '0') < 10) m.digit |= bit;
    else if (c == ' ' || unsigned(c - '\t') < 5) m.space |= bit;
    if (c == '\n' || c == '\r') m.newline |= bit;
    if (c == '\'') m.apostrophe |= bit;
    if (c == ' ') m.blank |= bit;
  }
  finish(m, len == 64 ? ~uint64_t(0) : (uint64_t(1) << len) - 1);
  return m;
}

#if defined(__SSE2__)
// Masks of the 64 bytes at p, 16 at a time.
[[gnu::always_inline]] inline ByteMasks classify64_sse2(const unsigned char* p) {
  // Unsigned ranges as signed compares: x in [lo, lo + k) iff
  // x + (0x80 - lo) < -128 + k as signed bytes (the sum wraps modulo 256).
  auto in_range = [](__m128i x, int lo, int k) {
    return _mm_cmplt_epi8(_mm_add_epi8(x, _mm_set1_epi8(char(0x80 - lo))), _mm_set1_epi8(char(-128 + k)));
  };
  ByteMasks m;
  for (int q = 0; q < 4; ++q) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * q));
    const __m128i letter = in_range(_mm_or_si128(v, _mm_set1_epi8(0x20)), 'a', 26);
    const __m128i digit = in_range(v, '0', 10);
    const __m128i blank = _mm_cmpeq_epi8(v, _mm_set1_epi8(' '));
    const __m128i space = _mm_or_si128(in_range(v, '\t', 5), blank);
    const __m128i newline =
        _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('\n')), _mm_cmpeq_epi8(v, _mm_set1_epi8('\r')));
    const int shift = 16 * q;
    m.letter |= uint64_t(uint32_t(_mm_movemask_epi8(letter))) << shift;
    m.digit |= uint64_t(uint32_t(_mm_movemask_epi8(digit))) << shift;
    m.space |= uint64_t(uint32_t(_mm_movemask_epi8(space))) << shift;
    m.newline |= uint64_t(uint32_t(_mm_movemask_epi8(newline))) << shift;
    m.high |= uint64_t(uint32_t(_mm_movemask_epi8(v))) << shift;
    m.blank |= uint64_t(uint32_t(_mm_movemask_epi8(blank))) << shift;
    m.apostrophe |= uint64_t(uint32_t(_mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8('\''))))) << shift;
  }
  finish(m, ~uint64_t(0));
  return m;
}
#endif

// Masks of p[0, len), len < 64: the end of a text.
[[gnu::noinline]] inline ByteMasks classify_tail(const unsigned char* p, size_t len) {
#if defined(__SSE2__)
  alignas(16) unsigned char tail[64] = {};
  std::memcpy(tail, p, len);
  ByteMasks m = classify64_sse2(tail);
  finish(m, (uint64_t(1) << len) - 1);
  return m;
#else
  return classify_bytes(p, len);
#endif
}

// Masks of p[0, len): the 64 bytes at p, or fewer at the end of a text.
[[gnu::always_inline]] inline ByteMasks classify(const unsigned char* p, size_t len) {
  if (len < 64) return classify_tail(p, len);
#if defined(__SSE2__)
  return classify64_sse2(p);
#else
  return classify_bytes(p, 64);
#endif
}

}  // namespace tokfeed::text::hf::split_detail
