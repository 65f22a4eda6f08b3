#include "tokenizer/hf/fast_split.hpp"

#include <utf8proc.h>

#include <cstring>
#include <string>

#include "tokenizer/hf/regex.hpp"
#include "tokenizer/hf/regex_unicode.hpp"
#include "tokenizer/hf/unicode.hpp"

namespace tokfeed::text::hf {

namespace split_detail {

ClassTable::ClassTable() {
  std::vector<uint8_t> full(0x110000, kOther);
  for (char32_t cp = 0xD800; cp <= 0xDFFF; ++cp) full[cp] = kInvalid;
  // Every code point once, in order, as UTF-8; PCRE2 tells which belong to
  // each class (exactly the classes Regex uses for the split patterns).
  // Those that no class holds in either engine's tables (unassigned, private
  // use) are left out where that is known (regex_unicode.hpp): about 70% of
  // all code points.
  const bool assigned_only = utf8proc_covers_pcre2();
  std::string all;
  all.reserve(0x110000 * 4);
  for (char32_t cp = 0; cp < 0x110000; ++cp) {
    if (full[cp] == kInvalid) continue;
    if (assigned_only) {
      const utf8proc_category_t c = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
      if (c == UTF8PROC_CATEGORY_CN || c == UTF8PROC_CATEGORY_CO) continue;
    }
    append_utf8(all, cp);
  }
  std::vector<std::pair<uint32_t, uint32_t>> runs;
  const std::pair<const char*, Class> classes[] = {{"\\s+", kSpace}, {"\\p{N}+", kNumber}, {"\\p{L}+", kLetter}};
  for (const auto& [pattern, cls] : classes) {
    runs.clear();
    Regex(pattern, "character classes", RegexEngine::kPcre2).find_all(all, runs);
    for (auto [b, e] : runs)
      for (size_t i = b; i < e;) {
        DecodedChar d = decode_utf8(all, i);
        full[d.cp] = cls;
        i += d.len;
      }
  }
  table_ = CodePointTable(full);
  for (int c = 0; c < 128; ++c) ascii_[c] = full[size_t(c)];
  for (char32_t first = 0; first < 0x10000; first += 64) {
    bool all = first >= 0x800;
    for (char32_t cp = first; cp < first + 64 && all; ++cp) all = full[cp] == kLetter;
    if (all) letter3_[first >> 12] |= uint64_t(1) << (first >> 6 & 0x3F);
  }
}

const ClassTable& class_table() {
  static const ClassTable table;
  return table;
}

CharInfo multibyte_char_at(const ClassTable& t, const unsigned char* s, size_t i, size_t n) {
  const unsigned char b0 = s[i];
  const size_t left = n - i;
  auto cont = [&](size_t k) { return k < left && (s[i + k] & 0xC0) == 0x80; };
  if ((b0 & 0xF0) == 0xE0) {  // three bytes first: CJK text is mostly these
    if (cont(1) && cont(2)) {
      char32_t cp = (b0 & 0x0F) << 12 | (s[i + 1] & 0x3F) << 6 | (s[i + 2] & 0x3F);
      if (cp >= 0x800) return {t.get(cp), 3};  // surrogates are kInvalid in the table
    }
  } else if (b0 >= 0xC2 && b0 <= 0xDF) {
    if (cont(1)) return {t.get(char32_t((b0 & 0x1F) << 6 | (s[i + 1] & 0x3F))), 2};
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    if (cont(1) && cont(2) && cont(3)) {
      char32_t cp = (b0 & 0x07) << 18 | (s[i + 1] & 0x3F) << 12 | (s[i + 2] & 0x3F) << 6 | (s[i + 3] & 0x3F);
      if (cp >= 0x10000 && cp <= 0x10FFFF) return {t.get(cp), 4};
    }
  }
  return {kInvalid, 1};
}

size_t contraction(const unsigned char* s, size_t i, size_t n) {
  // Caseless as in PCRE2 and Oniguruma: 's' also matches U+017F (long s).
  if (i + 1 >= n) return 0;
  const unsigned char a = s[i + 1] | 0x20;
  auto second = [&](unsigned char want) { return i + 2 < n && (s[i + 2] | 0x20) == want ? i + 3 : 0; };
  switch (a) {
    case 's':
    case 't':
    case 'm':
    case 'd': return s[i + 1] == a || s[i + 1] == (a & ~0x20) ? i + 2 : 0;
    case 'r': return s[i + 1] == 'r' || s[i + 1] == 'R' ? second('e') : 0;
    case 'v': return s[i + 1] == 'v' || s[i + 1] == 'V' ? second('e') : 0;
    case 'l': return s[i + 1] == 'l' || s[i + 1] == 'L' ? second('l') : 0;
    default: break;
  }
  if (s[i + 1] == 0xC5 && i + 2 < n && s[i + 2] == 0xBF) return i + 3;  // U+017F
  return 0;
}

size_t spaces_end(const ClassTable& t, const unsigned char* s, size_t i, size_t n) {
  // A run of spaces W: 5. \s*[\r\n]+ takes W up to its last newline; else
  // 6. \s+(?!\S) takes W when nothing but the end (or a byte no class
  // matches) follows, else W but its last char; else 7. \s+.
  size_t w = i, last_start = i, last_newline = SIZE_MAX, count = 0;
  while (w < n) {
    CharInfo d = char_at(t, s, w, n);
    if (d.cls != kSpace) break;
    if (is_newline(s[w])) last_newline = w;
    last_start = w;
    w += d.len;
    ++count;
  }
  if (last_newline != SIZE_MAX) return last_newline + 1;
  if (w == n || char_at(t, s, w, n).cls == kInvalid || count == 1) return w;
  return last_start;
}

Step scalar_step(const ClassTable& t, const unsigned char* s, size_t i, size_t n, int max_digits) {
  const CharInfo c = char_at(t, s, i, n);
  if (c.cls == kInvalid) return {i + c.len, false};
  if (c.cls == kLetter) return {letters_end(t, s, i + c.len, n), true};  // 2. with an empty prefix
  if (c.cls == kNumber) {
    // 3. \p{N} or \p{N}{1,3}
    size_t e = i + c.len;
    for (int k = 1; k < max_digits && e < n; ++k) {
      const CharInfo d = char_at(t, s, e, n);
      if (d.cls != kNumber) break;
      e += d.len;
    }
    return {e, true};
  }
  if (s[i] == '\'') {
    // 1. (?i:'s|'t|'re|'ve|'m|'ll|'d)
    if (const size_t e = contraction(s, i, n)) return {e, true};
  }
  // c is a space or another char (punctuation, symbol, mark, control).
  const size_t j = i + c.len;
  const CharInfo next = j < n ? char_at(t, s, j, n) : CharInfo{kInvalid, 0};
  if (next.cls == kLetter && !is_newline(s[i]))
    return {letters_end(t, s, j + next.len, n), true};  // 2. with the prefix
  if (c.cls == kOther || (s[i] == ' ' && next.cls == kOther)) {
    // 4.  ?[^\s\p{L}\p{N}]+[\r\n]*
    size_t e = run_end(t, s, c.cls == kOther ? j : j + next.len, n, kOther);
    while (e < n && is_newline(s[e])) ++e;
    return {e, true};
  }
  return {spaces_end(t, s, i, n), true};
}

}  // namespace split_detail

namespace {

// The pattern with literal CR and LF written as \r and \n (tokenizer.json
// files use both spellings).
std::string canonical(std::string_view p) {
  std::string out;
  for (char c : p) {
    if (c == '\r') out += "\\r";
    else if (c == '\n') out += "\\n";
    else out.push_back(c);
  }
  return out;
}

}  // namespace

namespace {

using namespace split_detail;

// The match starts in the 64 bytes from i (fewer at the text's end), taken
// all at once from the window's class masks with bit operations, where i is
// a match start and the bytes are ASCII. What the regex gives for ASCII
// text, from a match start on (the regex looks at nothing before it):
//   - a run of letters starts a match unless a prefix starts it: an `other`
//     char (ASCII, not a letter, digit or space) that starts a run of them,
//     or a space but CR and LF, right before the letters;
//   - a run of `other` chars starts one, but after a ' ' (which starts it,
//     " ?[^\s\p{L}\p{N}]+"); CR and LF right after the run are in it;
//   - each digit starts one (Qwen), or every third of a run (Llama-3);
//   - a run of spaces (less the newlines an `other` run took) starts one;
//     so does the char after its last newline, if the run goes on, and
//     (\s+(?!\S)) its last char, where two or more spaces without a newline
//     end it and a char follows;
//   - an apostrophe that starts a match and a contraction after it make the
//     char after the contraction start one.
// Bits below the returned `certain` are all the starts there are; a start
// at or past it may depend on bytes past the window, or past a byte above
// ASCII (where `high` is set), which the per-char path takes.
struct Window {
  uint64_t starts;
  size_t certain;
  bool at_end;  // the window reaches the text's end: every start is certain
  bool high;    // a byte past ASCII ends the window
};

[[gnu::always_inline]] inline Window window_starts(const unsigned char* s, size_t i, size_t n, int max_digits) {
  const ByteMasks m = classify(s + i, n - i);
  const size_t len = n - i < 64 ? n - i : 64;
  const size_t e = m.high ? size_t(__builtin_ctzll(m.high)) : len;
  const uint64_t valid = e == 64 ? ~uint64_t(0) : (uint64_t(1) << e) - 1;
  const uint64_t L = m.letter & valid, D = m.digit & valid, W = m.space & valid, NL = m.newline & valid;
  const uint64_t SP = m.blank & valid, O = valid & ~(L | D | W);
  // Starts of `other` runs (an apostrophe among them), prefixes of letter runs.
  const uint64_t orun = O & ~(O << 1) & ~(SP << 1);
  const uint64_t prefix = (orun | (W & ~NL)) & (L >> 1);
  uint64_t starts = 1 | orun | (L & ~(L << 1) & ~(prefix << 1));
  if (max_digits == 1) {
    starts |= D;
  } else {
    // Every third digit of a run from its first (max_digits is 3).
    const uint64_t three = D & (D << 1) & (D << 2);
    for (uint64_t g = D & ~(D << 1); g != 0; g = (g << 3) & three) starts |= g;
  }
  // Spaces: the newlines right after an `other` run are its own; the rest
  // (ws) in runs.
  const uint64_t after_other = NL & (O << 1);
  const uint64_t ws = W & ~(((NL + after_other) ^ NL) & NL);
  starts |= ws & ~(ws << 1);
  // The last char of a run of two or more, but a newline, where a char follows.
  starts |= ws & (ws << 1) & ~NL & ~(W >> 1) & (valid >> 1);
  // The char after a run's newlines, where no newline follows in the run.
  const uint64_t blanks = ws & ~NL;
  for (uint64_t c = blanks & ((ws & NL) << 1); c != 0; c &= c - 1) {
    const unsigned q = unsigned(__builtin_ctzll(c));
    const unsigned stop = q + unsigned(__builtin_ctzll(~(blanks >> q)));
    if (stop >= 64 || !(NL >> stop & 1)) starts |= uint64_t(1) << q;
  }
  const bool at_end = i + e == n;
  size_t certain = e;
  if (!at_end && (W >> (e - 1) & 1)) {
    // A run of spaces up to the window's end: where it ends decides.
    const uint64_t below = ~W & ((uint64_t(1) << (e - 1)) - 1);
    const size_t run = below ? size_t(64 - __builtin_clzll(below)) : 0;
    if (run < certain) certain = run;
  }
  // Contractions, (?i:'s|'t|'re|'ve|'m|'ll|'d), where an apostrophe starts
  // a match (they read the text, past the window if need be).
  for (uint64_t a = m.apostrophe & orun & (certain >= 64 ? ~uint64_t(0) : (uint64_t(1) << certain) - 1); a != 0;
       a &= a - 1) {
    const size_t q = size_t(__builtin_ctzll(a));
    if (const size_t end = contraction(s, i + q, n); end != 0 && end - i < 64) starts |= uint64_t(1) << (end - i);
  }
  return {starts, certain, at_end, e < len};
}

// Whether the 32 bytes from i (those left, near the end) are ASCII: then
// the window path is worth its masks again.
inline bool ascii_ahead(const unsigned char* s, size_t i, size_t n) {
#if defined(__SSE2__)
  if (i + 32 <= n) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
    return _mm_movemask_epi8(_mm_or_si128(a, b)) == 0;
  }
#endif
  for (size_t k = i; k < n && k < i + 32; ++k)
    if (s[k] >= 0x80) return false;
  return true;
}

}  // namespace

size_t FastSplit::word_ends(std::string_view subject, size_t& pos, uint32_t (&ends)[kWordBatch]) const {
  const auto* s = reinterpret_cast<const unsigned char*>(subject.data());
  const size_t n = subject.size();
  size_t k = 0, i = pos;
  // A window gives up to 65 words; the per-char path one match and a gap.
  while (i < n && k + 2 <= kWordBatch) {
    bool per_char = s[i] >= 0x80;
    if (!per_char) {
      if (k + 65 > kWordBatch) break;
      const Window w = window_starts(s, i, n, max_digits_);
      const uint64_t certain = w.certain >= 64 ? ~uint64_t(0) : (uint64_t(1) << w.certain) - 1;
      uint64_t bits = w.starts & certain & ~uint64_t(1);
      size_t last = 0;
      for (; bits != 0; bits &= bits - 1) {
        last = size_t(__builtin_ctzll(bits));
        ends[k++] = uint32_t(i + last);
      }
      if (w.at_end) {
        ends[k++] = uint32_t(n);
        i = n;
        break;
      }
      per_char = last == 0 || w.high;
      i += last;
      if (!per_char) continue;
    }
    // Chars past ASCII, a run longer than the window: match by match, up to
    // where 32 ASCII bytes follow. Bytes between matches (invalid UTF-8) are
    // a word of their own.
    size_t prev = i;
    i = scan(
        subject, i, [&](size_t b, size_t e) __attribute__((always_inline)) {
          ends[k] = uint32_t(b);
          k += prev < b;
          ends[k++] = uint32_t(e);
          prev = e;
          return k + 2 > kWordBatch || (e < n && s[e] < 0x80 && ascii_ahead(s, e, n));
        });
    if (prev < i) ends[k++] = uint32_t(i);  // invalid bytes up to the end
  }
  pos = i;
  return k;
}

std::unique_ptr<FastSplit> FastSplit::for_pattern(std::string_view pattern) {
  static const std::string kHead = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|";
  static const std::string kTail = "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  const std::string p = canonical(pattern);
  int max_digits = p == kHead + "\\p{N}" + kTail ? 1 : p == kHead + "\\p{N}{1,3}" + kTail ? 3 : 0;
  if (max_digits == 0) return nullptr;
  split_detail::class_table();  // built now, at load time, before workers fork
  return std::unique_ptr<FastSplit>(new FastSplit(max_digits));
}

}  // namespace tokfeed::text::hf
