#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/hf/general_split.hpp"

#include <pcre2.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <type_traits>
#include <utility>
#include <unordered_map>

#include "tokenizer/hf/split_automaton.hpp"
#include "tokenizer/hf/split_pattern.hpp"
#include "tokenizer/hf/unicode.hpp"

namespace tokfeed::text::hf {

// The rest of a sequence to match after the one at hand (a group's
// alternative continues with what follows the group).
struct GeneralSplit::Cont {
  const SplitItem* it;
  const SplitItem* end;
  const Cont* next;
};

GeneralSplit::~GeneralSplit() = default;

namespace {

using Item = SplitItem;
using Seq = SplitSeq;
constexpr size_t kFail = SIZE_MAX;
constexpr size_t kMaxStates = 1024;  // the automaton's, at most 5 MiB of steps

// Whether a sequence can match the empty string, and the atoms it can begin with.
bool nullable(const Seq& seq, uint64_t& first);

bool nullable(const Item& it, uint64_t& first) {
  switch (it.kind) {
    case Item::kAtom: first |= it.bit; return it.min == 0;
    case Item::kGroup: {
      bool any = it.min == 0;
      for (const Seq& a : it.alts) any |= nullable(a, first);
      return any;
    }
    default: return true;  // assertions take no char
  }
}

bool nullable(const Seq& seq, uint64_t& first) {
  for (const Item& it : seq)
    if (!nullable(it, first)) return false;
  return true;
}

// Every code point once, in order, as UTF-8 (surrogates left out).
const std::string& all_code_points() {
  static const std::string all = [] {
    std::string s;
    s.reserve(0x110000 * 4);
    for (char32_t cp = 0; cp < 0x110000; ++cp)
      if (cp < 0xD800 || cp > 0xDFFF) append_utf8(s, cp);
    return s;
  }();
  return all;
}

constexpr uint32_t kCompileOptions = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_MULTILINE;

// The code points an atom matches, as PCRE2 says: the runs of atom+
// over every code point. Kept per process (loads of the same tokenizer, the
// atoms many patterns share).
const std::vector<char32_t>& atom_members(const SplitAtom& key, bool& ok) {
  static std::mutex mu;
  static std::map<SplitAtom, std::vector<char32_t>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto found = cache.find(key);
  if (found != cache.end()) return found->second;
  std::vector<char32_t> members;
  const std::string pattern = (key.caseless ? "(?i)" : "") + key.text + "+";  // one atom, repeated
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), kCompileOptions, &err,
                                   &err_offset, nullptr);
  static const std::vector<char32_t> none;
  if (code == nullptr) {
    ok = false;
    return none;
  }
  const bool jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
  const std::string& all = all_code_points();
  const auto* s = reinterpret_cast<PCRE2_SPTR>(all.data());
  size_t start = 0;
  while (start < all.size()) {
    const int rc = jit ? pcre2_jit_match(code, s, all.size(), start, 0, md, nullptr)
                       : pcre2_match(code, s, all.size(), start, 0, md, nullptr);
    if (rc < 0) {
      if (rc != PCRE2_ERROR_NOMATCH) ok = false;
      break;
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    if (ov[1] <= ov[0]) {  // an atom matches one char
      ok = false;
      break;
    }
    for (size_t i = ov[0]; i < ov[1];) {
      const DecodedChar d = decode_utf8(all, i);
      members.push_back(d.cp);
      i += d.len;
    }
    start = ov[1];
  }
  pcre2_match_data_free(md);
  pcre2_code_free(code);
  if (!ok) return none;
  return cache.emplace(key, std::move(members)).first->second;
}

// The code points whose UTF-8 form starts with byte `b`: the first and
// how many (over-long forms among them for 0xE0 and 0xF0; none for a
// continuation or invalid byte).
std::pair<char32_t, char32_t> led_by(int b) {
  if (b < 0x80) return {char32_t(b), 1};
  if (b >= 0xC2 && b <= 0xDF) return {char32_t(b & 0x1F) << 6, 1 << 6};
  if (b >= 0xE0 && b <= 0xEF) return {char32_t(b & 0x0F) << 12, 1 << 12};
  if (b >= 0xF0 && b <= 0xF4) return {char32_t(b & 0x07) << 18, 1 << 18};
  return {0, 0};
}

}  // namespace

std::unique_ptr<GeneralSplit> GeneralSplit::compile(std::string_view pattern, std::string& why, Method method) {
  uint32_t newline = 0;
  pcre2_config(PCRE2_CONFIG_NEWLINE, &newline);
  SplitPattern parsed;
  if (!parse_split_pattern(pattern, parsed, why)) return nullptr;
  std::unique_ptr<GeneralSplit> g(new GeneralSplit());
  g->branches_ = std::move(parsed.branches);
  if (g->branches_.size() > 64) {
    why = "more than 64 branches";
    return nullptr;
  }
  if (newline != PCRE2_NEWLINE_LF &&
      (pattern.find('^') != std::string_view::npos || pattern.find('$') != std::string_view::npos)) {
    why = "anchors with a newline convention other than LF";
    return nullptr;
  }
  std::vector<uint64_t> firsts;
  for (const Seq& b : g->branches_) {
    uint64_t first = 0;
    if (nullable(b, first)) {
      why = "the pattern can match the empty string";
      return nullptr;
    }
    firsts.push_back(first);
  }
  // Atoms of every code point, then the distinct sets of them.
  const std::vector<SplitAtom>& atoms = parsed.atoms;
  std::vector<uint64_t> cp_bits(0x110000, 0);
  for (size_t k = 0; k < atoms.size(); ++k) {
    bool ok = true;
    const auto& members = atom_members(atoms[k], ok);
    if (!ok) {
      why = "PCRE2 does not take atom '" + atoms[k].text + "' alone";
      return nullptr;
    }
    for (char32_t cp : members) cp_bits[cp] |= uint64_t(1) << k;
  }
  std::unordered_map<uint64_t, uint8_t> ids;
  g->bits_.push_back(0);  // id 0: no char (the end, invalid UTF-8, a surrogate)
  std::vector<uint8_t> full(0x110000, 0);
  for (char32_t cp = 0; cp < 0x110000; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    auto [it, added] = ids.emplace(cp_bits[cp], uint8_t(g->bits_.size()));
    if (added) {
      if (g->bits_.size() == 256) {
        why = "more than 255 distinct sets of atoms";
        return nullptr;
      }
      g->bits_.push_back(cp_bits[cp]);
    }
    full[cp] = it->second;
  }
  g->table_ = CodePointTable(full);
  for (int c = 0; c < 128; ++c) {
    g->ascii_id_[c] = full[size_t(c)];
    g->ascii_bits_[c] = cp_bits[size_t(c)];
  }
  g->starts_.assign(g->bits_.size(), 0);
  for (size_t id = 0; id < g->bits_.size(); ++id)
    for (size_t b = 0; b < firsts.size(); ++b)
      if (g->bits_[id] & firsts[b]) g->starts_[id] |= uint64_t(1) << b;
  g->ascii_starts_none_ = true;
  for (int c = 0; c < 128; ++c) {
    g->ascii_starts_[c] = g->starts_[g->ascii_id_[c]];
    if (g->ascii_starts_[c] != 0) g->ascii_starts_none_ = false;
  }
  // The bytes no match starts at: the ASCII chars no branch starts with,
  // bytes no valid char starts with, and lead bytes of chars none of which
  // starts a branch (a lead byte followed by no valid char is invalid UTF-8:
  // no match starts there either).
  for (int b = 0; b < 256; ++b) {
    const auto [from, count] = led_by(b);
    bool none = true;
    for (char32_t cp = from; cp < from + count && cp < 0x110000 && none; ++cp) none = g->starts_[full[cp]] == 0;
    g->starts_none_[b] = none;
  }
  // The ranges of ASCII bytes a match may start at, where they are few and
  // three ranges at most.
  std::vector<std::pair<int, int>> ranges;
  for (int b = 0; b < 0x80; ++b) {
    if (g->starts_none_[b]) continue;
    if (!ranges.empty() && ranges.back().second == b - 1) ranges.back().second = b;
    else ranges.emplace_back(b, b);
  }
  size_t ascii_starts = 0;
  for (int b = 0; b < 0x80; ++b) ascii_starts += !g->starts_none_[b];
  if (ranges.size() <= 3 && ascii_starts <= 16) {
    ranges.emplace_back(0xC0, 0xFF);  // lead bytes; no match starts at 0x80-0xBF
    for (size_t r = 0; r < ranges.size(); ++r) {
      std::memset(g->skip_lo_[r], ranges[r].first, 16);
      std::memset(g->skip_span_[r], ranges[r].second - ranges[r].first, 16);
    }
    g->skip_ranges_ = int(ranges.size());
  }
  g->atoms_ = atoms.size();
  if (method == Method::kAny) {
    SplitProgram program;
    if (lower_split_pattern(g->branches_, program, g->backtracking_why_))
      g->automaton_ = SplitAutomaton::build(program, g->bits_, g->ascii_id_, kMaxStates, g->backtracking_why_);
  } else {
    g->backtracking_why_ = "asked for";
  }
  return g;
}

std::string GeneralSplit::summary() const {
  std::string s = std::to_string(branches_.size()) + " branches, " + std::to_string(atoms_) + " atoms, ";
  if (!automaton_) return s + "backtracking (" + backtracking_why_ + ")";
  s += "automaton of " + std::to_string(automaton_->states()) + " states";
  if (const SplitAutomaton::Pairs* p = automaton_->pairs())
    s += ", ASCII " + std::string(p->width == 3 ? "three bytes" : "a pair of bytes") + " a step (" +
         std::to_string(p->ascii_classes) + " classes)";
  return s;
}

// ASCII and the two- and three-byte chars (the Latin, Greek, Cyrillic, CJK
// and kana of most text) here, inlined into the loops; the rest out of line.
[[gnu::always_inline]] inline uint8_t GeneralSplit::id_at(const unsigned char* s, size_t i, size_t n,
                                                          uint32_t& len) const {
  if (i < n) {
    const unsigned char b0 = s[i];
    if (b0 < 0x80) {
      len = 1;
      return ascii_id_[b0];
    }
    const size_t left = n - i;
    if ((b0 & 0xF0) == 0xE0 && left >= 3) {
      const uint32_t c1 = s[i + 1] ^ 0x80u, c2 = s[i + 2] ^ 0x80u;  // a continuation byte's 6 bits, else >= 0x40
      const char32_t cp = char32_t(b0 & 0x0F) << 12 | c1 << 6 | c2;
      if ((c1 | c2) < 0x40 && cp >= 0x800) {  // surrogates have id 0
        len = 3;
        return table_.get(cp);
      }
    } else if ((b0 & 0xE0) == 0xC0 && b0 >= 0xC2 && left >= 2) {
      const uint32_t c1 = s[i + 1] ^ 0x80u;
      if (c1 < 0x40) {
        len = 2;
        return table_.get(char32_t(b0 & 0x1F) << 6 | c1);
      }
    }
  }
  return id_at_rare(s, i, n, len);
}

uint8_t GeneralSplit::id_at_rare(const unsigned char* s, size_t i, size_t n, uint32_t& len) const {
  len = 1;
  if (i >= n) {
    len = 0;
    return 0;
  }
  const unsigned char b0 = s[i];
  const size_t left = n - i;
  auto cont = [&](size_t k) { return k < left && (s[i + k] & 0xC0) == 0x80; };
  if (b0 >= 0xF0 && b0 <= 0xF4 && cont(1) && cont(2) && cont(3)) {
    const char32_t cp = char32_t(b0 & 0x07) << 18 | char32_t(s[i + 1] & 0x3F) << 12 | char32_t(s[i + 2] & 0x3F) << 6 |
                        (s[i + 3] & 0x3F);
    if (cp >= 0x10000 && cp <= 0x10FFFF) {
      len = 4;
      return table_.get(cp);
    }
  }
  return 0;  // invalid UTF-8: a byte at a time
}

size_t GeneralSplit::match(const Item* it, const Item* end, const Cont* k, const unsigned char* s, size_t n,
                           size_t pos) const {
  for (;;) {
    if (it == end) {
      if (k == nullptr) return pos;
      it = k->it;
      end = k->end;
      k = k->next;
      continue;
    }
    switch (it->kind) {
      case Item::kAtom: {
        const uint64_t bit = it->bit;
        size_t p = pos;
        uint32_t count = 0;
        while (count < it->max && p < n) {
          if (s[p] < 0x80) {
            if (!(ascii_bits_[s[p]] & bit)) break;
            ++p;
          } else {
            uint32_t len;
            if (!(bits_[id_at(s, p, n, len)] & bit)) break;
            p += len;
          }
          ++count;
        }
        if (count < it->min) return kFail;
        if (it + 1 == end && k == nullptr) return p;
        if (count == it->min) {
          pos = p;
          ++it;
          continue;
        }
        // Greedy: the longest run first, then one char less at a time (the
        // run's chars are well-formed UTF-8).
        for (;;) {
          const size_t r = match(it + 1, end, k, s, n, p);
          if (r != kFail) return r;
          if (count == it->min) return kFail;
          do --p;
          while ((s[p] & 0xC0) == 0x80);
          --count;
        }
      }
      case Item::kGroup: {
        const Cont rest{it + 1, end, k};
        for (const Seq& a : it->alts) {
          const size_t r = match(a.data(), a.data() + a.size(), &rest, s, n, pos);
          if (r != kFail) return r;
        }
        if (it->min != 0) return kFail;
        ++it;
        continue;
      }
      case Item::kAhead:
      case Item::kNotAhead: {
        if (it->bit != 0) {
          if (((bits_at(s, pos, n) & it->bit) != 0) != (it->kind == Item::kAhead)) return kFail;
          ++it;
          continue;
        }
        bool found = false;
        for (const Seq& a : it->alts)
          if (match(a.data(), a.data() + a.size(), nullptr, s, n, pos) != kFail) {
            found = true;
            break;
          }
        if (found != (it->kind == Item::kAhead)) return kFail;
        ++it;
        continue;
      }
      case Item::kLineStart:
        if (pos != 0 && !(s[pos - 1] == '\n' && pos != n)) return kFail;
        ++it;
        continue;
      case Item::kLineEnd:
        if (pos != n && s[pos] != '\n') return kFail;
        ++it;
        continue;
    }
  }
}

inline uint64_t GeneralSplit::bits_at(const unsigned char* s, size_t p, size_t n) const {
  if (p < n && s[p] < 0x80) return ascii_bits_[s[p]];
  uint32_t len;
  return bits_[id_at(s, p, n, len)];
}

template <class Emit>
void GeneralSplit::scan(std::string_view subject, Emit&& emit) const {
  const auto* s = reinterpret_cast<const unsigned char*>(subject.data());
  const size_t n = subject.size();
  size_t i = 0;
  while (i < n) {
    i = skip_to_start(s, n, i);
    if (i >= n) break;
    uint32_t len = 1;
    const uint64_t starts = s[i] < 0x80 ? ascii_starts_[s[i]] : starts_[id_at(s, i, n, len)];
    size_t e = kFail;
    for (uint64_t c = starts; c != 0; c &= c - 1) {
      const Seq& b = branches_[size_t(__builtin_ctzll(c))];
      e = match(b.data(), b.data() + b.size(), nullptr, s, n, i);
      if (e != kFail) break;
    }
    if (e == kFail) {
      i += len;
      continue;
    }
    emit(i, e, false);
    i = e;
  }
}

#if defined(__SSE2__)
namespace {

// Which of the 16 bytes of `v` lie in one of the first `n` byte ranges
// [lo, lo + span] (each row 16 copies of its byte): one bit a byte.
inline uint32_t in_ranges(__m128i v, const uint8_t (*lo)[16], const uint8_t (*span)[16], int n) {
  const __m128i zero = _mm_setzero_si128();
  __m128i may = zero;
  for (int r = 0; r < n; ++r) {  // v - lo <= span, unsigned
    const __m128i l = _mm_load_si128(reinterpret_cast<const __m128i*>(lo[r]));
    const __m128i w = _mm_load_si128(reinterpret_cast<const __m128i*>(span[r]));
    may = _mm_or_si128(may, _mm_cmpeq_epi8(_mm_subs_epu8(_mm_sub_epi8(v, l), w), zero));
  }
  return static_cast<uint32_t>(_mm_movemask_epi8(may));
}

}  // namespace
#endif

// 16 bytes at a time: the bytes in the ranges of skip_lo_ and skip_span_
// are looked up in starts_none_ (lead bytes: then their char in starts_),
// the rest passed over.
template <int kRanges>
size_t GeneralSplit::skip_16(const unsigned char* s, size_t n, size_t i) const {
#if defined(__SSE2__)
  while (n - i >= 16) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    for (uint32_t mask = in_ranges(v, skip_lo_, skip_span_, kRanges); mask != 0; mask &= mask - 1) {
      const size_t at = i + size_t(__builtin_ctz(mask));
      if (starts_none_[s[at]]) continue;
      uint32_t len;
      if (s[at] < 0x80 || starts_[id_at(s, at, n, len)] != 0) return at;  // else a char no branch starts with
    }
    i += 16;
  }
#else
  (void)s, (void)n;
#endif
  return i;
}

// Past the chars no branch starts with: 16 bytes at a time where few ASCII
// bytes start one, else ASCII ones from a table, 8 at a time where no ASCII
// char starts one.
[[gnu::always_inline]] inline size_t GeneralSplit::skip_to_start(const unsigned char* s, size_t n, size_t i) const {
  if (skip_ranges_ != 0) {
    // The next start is mostly near (the next Han char after a comma): a few
    // bytes one at a time first.
    const size_t near = std::min(n, i + 8);
    while (i < near && starts_none_[s[i]]) ++i;
    if (i < near) return i;
  }
  switch (skip_ranges_) {
    case 1: i = skip_16<1>(s, n, i); break;
    case 2: i = skip_16<2>(s, n, i); break;
    case 3: i = skip_16<3>(s, n, i); break;
    case 4: i = skip_16<4>(s, n, i); break;
    default: break;
  }
  if (ascii_starts_none_) {
    uint64_t v;
    while (i + 8 <= n && (std::memcpy(&v, s + i, 8), (v & 0x8080808080808080ull) == 0)) i += 8;
  }
  while (i < n && starts_none_[s[i]]) ++i;
  return i;
}

// The automaton from each char a match may start at. Every path is stepped
// on each char in turn: ASCII bytes by their row of the step table, the other
// chars decoded to their class id. A step flagged kRestart ends a match at
// the char just stepped and starts the next one there: the sink takes it with
// no branch (`sink.restart(pos, flag)`), and the byte loop goes on. When no
// path is left, the last match recorded is the match (the steps from the
// match's begin taken again to find it, where it does not end right there),
// and the search goes on at its end.
//
// A sink: kPairs, whether to take ASCII two or three bytes a step where the
// automaton has pairs; start(i), a search from i; restart(pos, flag), a match that ends at
// pos where flag is not 0 (the next begins there); restarts(pos, flags), the
// restarts of a step of two or three bytes from pos; begin(i), where the match
// under way began (i: the search's start, if no restart since); match(end),
// the match under way ends at end; none(), no match from begin(i).
template <class Sink>
void GeneralSplit::scan_automaton(const unsigned char* s, size_t n, Sink& sink) const {
  using A = SplitAutomaton;
  const A::Step* steps = automaton_->steps();
  const A::Pairs* pairs = Sink::kPairs ? automaton_->pairs() : nullptr;
  const uint32_t* pair_next = pairs ? pairs->next.data() : nullptr;
  const uint8_t* pair_flags = pairs ? pairs->flags.data() : nullptr;
  size_t i = 0;
  for (;;) {
    i = skip_to_start(s, n, i);
    if (i >= n) return;
    sink.start(i);
    size_t pos = i;
    size_t row = A::kStartRow;  // kGoFlags kept: they index the row as it is
    for (;;) {
      if (pairs != nullptr && s[pos] < 0x80 && n - pos >= size_t(pairs->width)) {
        // Two or three ASCII bytes a step, until a step of one of them stops
        // (they are then taken again below, a byte at a time). Not tried on a
        // char past ASCII, which stops it (the run of Han chars of a Chinese word).
        auto tuples = [&](auto width) {
          constexpr size_t w = decltype(width)::value;
          size_t prow = (row / A::kRow) << pairs->shift;
          constexpr uint32_t kNone = 0x100;
          uint32_t last = kNone;  // the flags of the last step
          auto tuple = [&]() {
            size_t at = prow + pairs->first[s[pos]] + pairs->second[s[pos + 1]];
            if constexpr (w == 3) at += pairs->third[s[pos + 2]];
            const uint32_t f = pair_flags[at];
            if (f & A::kPairStop) return false;
            sink.restarts(pos, f);
            prow = pair_next[at];
            pos += w;
            last = f;
            return true;
          };
          for (;;) {
            if (n - pos >= 4 * w) {  // four steps with no bound check between them
              if (tuple() && tuple() && tuple() && tuple()) continue;
              break;
            }
            while (n - pos >= w && tuple()) {
            }
            break;
          }
          // The row, with kMatchBefore where the last step had it.
          if (last != kNone) row = (prow >> pairs->shift) * A::kRow | (last & A::kPairMatchLast ? A::kMatchBefore : 0);
        };
        if (pairs->width == 3) tuples(std::integral_constant<size_t, 3>());
        else tuples(std::integral_constant<size_t, 2>());
      }
      A::Step step = 0;
      // One ASCII byte: false where it stops the loop.
      auto ascii = [&]() {
        step = steps[row + 4 * size_t(s[pos])];
        if (step & A::kStop) return false;
        sink.restart(pos, step & A::kRestart);
        row = step;
        ++pos;
        return true;
      };
      for (;;) {
        if (n - pos >= 4) {  // four bytes with no bound check between them
          if (ascii() && ascii() && ascii() && ascii()) continue;
          break;
        }
        if (pos >= n || !ascii()) break;
      }
      uint32_t len = 0;
      if (pos >= n) {
        step = steps[(row & ~size_t(A::kFlags)) + A::kClasses];  // id 0: the end
      } else if (step & A::kDecode) {
        // Chars past ASCII, one after the other (a Han run), here.
        bool stopped = false;
        do {
          step = steps[(row & ~size_t(A::kFlags)) + A::kClasses + id_at(s, pos, n, len)];
          if (step & A::kStop) {
            stopped = true;
            break;
          }
          sink.restart(pos, step & A::kRestart);
          row = step;
          pos += len;
        } while (pos < n && s[pos] >= 0x80);
        if (!stopped) continue;
      } else {
        len = 1;
      }
      // No path left: the match ends before this char; else before the
      // char before it, where the step on that one recorded a match (the
      // last space of a run before a word, `\s+(?!\S)`), and that char is
      // not the match's first; else where the last match recorded on the way
      // from its begin ends (none where one byte was stepped: a lone digit
      // DeepSeek-V3's first split cut out).
      const size_t begin = sink.begin(i);
      size_t end = kFail;
      if (step & A::kMatchBefore) {
        end = pos;
      } else if (row & A::kMatchBefore) {
        size_t q = pos - 1;
        while (q > begin && (s[q] & 0xC0) == 0x80) --q;  // back to the char's lead byte
        if (q > begin) end = q;
      } else if (pos > begin + 1) {
        end = last_match_end(s, n, begin, pos);
      }
      if (end != kFail) {
        sink.match(end);
        i = end;
      } else {
        sink.none();
        if (pos == begin) {  // no path takes the first char (len: its length)
          i = begin + (len != 0 ? len : 1);
        } else if (s[begin] < 0x80) {
          i = begin + 1;
        } else {
          id_at(s, begin, n, len);
          i = begin + len;
        }
      }
      break;
    }
  }
}

// The end of the last match recorded stepping from the start state at
// begin up to pos (every step on the way goes on), or kFail.
size_t GeneralSplit::last_match_end(const unsigned char* s, size_t n, size_t begin, size_t pos) const {
  using A = SplitAutomaton;
  const A::Step* steps = automaton_->steps();
  size_t end = kFail, row = A::kStartRow;
  for (size_t q = begin; q < pos;) {
    uint32_t len = 1;
    const A::Step step = s[q] < 0x80 ? steps[row + 4 * size_t(s[q])]
                                     : steps[(row & ~size_t(A::kFlags)) + A::kClasses + id_at(s, q, n, len)];
    if (step & A::kMatchBefore) end = q;
    row = step;
    q += len;
  }
  return end;
}

namespace {

// scan_automaton's sink for find_all: the matches as pairs.
struct MatchSink {
  // Not a pair of bytes a step: the splits before the last (DeepSeek-V3's
  // digits and CJK runs) have short matches, which the pairs' set-up costs
  // more than it saves.
  static constexpr bool kPairs = false;
  std::vector<std::pair<uint32_t, uint32_t>>& out;
  size_t b = 0;  // the match under way began here
  void start(size_t i) { b = i; }
  void restart(size_t pos, uint32_t flag) {
    if (flag != 0) {
      out.emplace_back(uint32_t(b), uint32_t(pos));
      b = pos;
    }
  }
  void restarts(size_t pos, uint32_t flags) {
    for (uint32_t k = 0; k < 3; ++k) restart(pos + k, flags >> k & SplitAutomaton::kPairRestart1);
  }
  size_t begin(size_t) const { return b; }
  void match(size_t end) { out.emplace_back(uint32_t(b), uint32_t(end)); }
  void none() {}
};

// For each set of restarts in a step of three bytes (bit k: at the step's
// byte k), their offsets from the step's first byte, in order.
alignas(16) constexpr uint32_t kRestartOffsets[8][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}, {1, 0, 0, 0}, {0, 1, 0, 0},
                                                        {2, 0, 0, 0}, {0, 2, 0, 0}, {1, 2, 0, 0}, {0, 1, 2, 0}};

// scan_automaton's sink for split_ends: the ends of the pieces, written in
// place, from the subject's start (the caller adds the base). The end of the
// stretch before a search's start is written when the search begins and
// taken back if no match starts there; a restart's end is written on every
// byte and kept where the flag says.
struct EndsSink {
  static constexpr bool kPairs = true;
  uint32_t* w;
  const uint32_t* const first;  // where this subject's ends begin
  uint32_t* before = nullptr;   // w before the search
  uint32_t* after = nullptr;    // w after the stretch's end: ends past it are matches
  void start(size_t i) {
    before = w;
    const uint32_t prev = w != first ? w[-1] : 0;
    *w = uint32_t(i);
    w += prev < i;
    after = w;
  }
  [[gnu::always_inline]] void restart(size_t pos, uint32_t flag) {
    *w = uint32_t(pos);
    // flag: kRestart or 0, which is how many bytes to move by, halved.
    static_assert(2 * SplitAutomaton::kRestart == sizeof(uint32_t));
    w = reinterpret_cast<uint32_t*>(reinterpret_cast<char*>(w) + 2 * flag);
  }
  // The restarts of a step of two or three bytes from pos (`flags`, a pair
  // step's): their ends written at once, the list moved by how many they are.
  [[gnu::always_inline]] void restarts(size_t pos, uint32_t flags) {
    using A = SplitAutomaton;
    static_assert(A::kPairRestart1 == 16 && A::kPairRestarts == 0x70);  // the flags index the rows of 16 bytes
    // The row of kRestartOffsets, 16 bytes each.
    const char* offsets = reinterpret_cast<const char*>(kRestartOffsets) + (flags & A::kPairRestarts);
#if defined(__SSE2__)
    const __m128i at =
        _mm_add_epi32(_mm_set1_epi32(int32_t(pos)), _mm_load_si128(reinterpret_cast<const __m128i*>(offsets)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(w), at);
#else
    for (uint32_t k = 0; k < 4; ++k) w[k] = uint32_t(pos) + reinterpret_cast<const uint32_t*>(offsets)[k];
#endif
    w += flags & A::kPairCount;
  }
  size_t begin(size_t i) const { return w != after ? w[-1] : i; }
  void match(size_t end) { *w++ = uint32_t(end); }
  void none() {
    if (w == after) w = before;
  }
};

}  // namespace

void GeneralSplit::find_all(std::string_view subject, std::vector<std::pair<uint32_t, uint32_t>>& out) const {
  if (automaton_) {
    MatchSink sink{out};
    scan_automaton(reinterpret_cast<const unsigned char*>(subject.data()), subject.size(), sink);
    return;
  }
  scan(subject, [&](size_t b, size_t e, bool) { out.emplace_back(uint32_t(b), uint32_t(e)); });
}

void GeneralSplit::split_ends(std::string_view subject, uint32_t base, EndList& ends) const {
  // A piece takes a byte at least: room for one end per byte, and three more
  // for the restarts' ends written past the list's end (four at a time).
  uint32_t* w = ends.room(subject.size() + 4);
  if (automaton_) {
    uint32_t* const first = w;
    EndsSink sink{w, first};
    scan_automaton(reinterpret_cast<const unsigned char*>(subject.data()), subject.size(), sink);
    w = sink.w;
    if ((w != first ? w[-1] : 0) < subject.size()) *w++ = uint32_t(subject.size());
    if (base != 0)
      for (uint32_t* e = first; e != w; ++e) *e += base;
    ends.end_at(w);
    return;
  }
  uint32_t prev = 0;
  scan(subject, [&](size_t b, size_t e, bool after_last) {
    if (!after_last && prev < b) *w++ = base + uint32_t(b);
    *w++ = base + uint32_t(e);
    prev = uint32_t(e);
  });
  if (prev < subject.size()) *w++ = base + uint32_t(subject.size());
  ends.end_at(w);
}

uint32_t GeneralSplit::run_max() const {
  if (atoms_ != 1 || branches_.size() != 1 || branches_[0].size() != 1) return 0;
  const SplitItem& it = branches_[0][0];
  return it.kind == SplitItem::kAtom && it.min == 1 ? it.max : 0;
}

std::vector<bool> GeneralSplit::kept_whole_within(const std::vector<bool>& in) const {
  std::vector<bool> kept(in.size(), false);
  if (!automaton_) return kept;
  std::vector<size_t> count(bits_.size(), 0);
  for (char32_t cp = 0; cp < in.size(); ++cp)
    if (in[cp]) ++count[table_.get(cp)];
  std::vector<size_t> order;
  for (size_t id = 0; id < count.size(); ++id)
    if (count[id] != 0) order.push_back(id);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return count[a] > count[b]; });
  std::vector<bool> ids(bits_.size(), false);
  for (size_t id : order) {
    ids[id] = true;
    if (!matches_none_within_ids(ids) && !one_match_within_ids(ids)) ids[id] = false;
  }
  for (char32_t cp = 0; cp < in.size(); ++cp) kept[cp] = in[cp] && ids[table_.get(cp)];
  return kept;
}

bool GeneralSplit::matches_none_within_ids(std::vector<bool> cls) const {
  using A = SplitAutomaton;
  cls[0] = true;  // the end of the text
  // Every state the start state reaches on such chars: none may record a
  // match on one of them or on the end.
  const A::Step* steps = automaton_->steps();
  std::vector<bool> seen(automaton_->states(), false);
  std::vector<size_t> todo = {A::kStartRow};
  seen[1] = true;
  while (!todo.empty()) {
    const size_t row = todo.back();
    todo.pop_back();
    for (size_t c = 0; c < cls.size(); ++c) {
      if (!cls[c]) continue;
      const A::Step step = steps[row + A::kClasses + c];
      if (step & A::kMatchBefore) return false;
      if (step & A::kStop) continue;
      const size_t next = step & ~size_t(A::kFlags);
      if (!seen[next / A::kRow]) {
        seen[next / A::kRow] = true;
        todo.push_back(next);
      }
    }
  }
  return true;
}

bool GeneralSplit::one_match_within_ids(const std::vector<bool>& cls) const {
  using A = SplitAutomaton;
  // From the start state, no step on such a char may stop or restart (a
  // match recorded before it is replaced by a later one), and every state
  // such chars reach must end a match at the end of the text: the scan goes
  // through the text with no stop, and the match it records last, the one
  // PCRE2 finds, ends at the end.
  const A::Step* steps = automaton_->steps();
  std::vector<bool> reached(automaton_->states(), false);
  std::vector<size_t> todo = {A::kStartRow};
  while (!todo.empty()) {
    const size_t row = todo.back();
    todo.pop_back();
    for (size_t c = 1; c < cls.size(); ++c) {
      if (!cls[c]) continue;
      const A::Step step = steps[row + A::kClasses + c];
      if (step & (A::kRestart | A::kStop)) return false;
      const size_t next = step & ~size_t(A::kFlags);
      if (reached[next / A::kRow]) continue;
      if (!(steps[next + A::kClasses + 0] & A::kMatchBefore)) return false;
      reached[next / A::kRow] = true;
      todo.push_back(next);
    }
  }
  return true;
}

std::unique_ptr<RunSplits> RunSplits::build(const std::vector<const GeneralSplit*>& levels, const GeneralSplit& last) {
  if (levels.empty() || levels.size() > kLevel - 1) return nullptr;
  std::unique_ptr<RunSplits> r(new RunSplits());
  for (const GeneralSplit* g : levels) {
    const uint32_t m = g->run_max();
    if (m == 0) return nullptr;
    r->max_.push_back(m);
  }
  std::vector<uint8_t> full(0x110000, 0);
  for (char32_t cp = 0; cp < 0x110000; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;  // no valid char
    for (size_t l = 0; l < levels.size(); ++l) {
      if (!levels[l]->in_run(cp)) continue;
      if (full[cp] != 0) return nullptr;  // two atoms share it
      full[cp] = uint8_t(l + 1);
    }
  }
  // Within each atom, the chars whose runs the last split leaves whole;
  // the others are marked kSplitAgain.
  for (size_t l = 0; l < levels.size(); ++l) {
    std::vector<bool> in(0x110000, false);
    for (char32_t cp = 0; cp < 0x110000; ++cp) in[cp] = full[cp] == l + 1;
    const std::vector<bool> kept = last.kept_whole_within(in);
    r->whole_.push_back(kept == in);
    for (char32_t cp = 0; cp < 0x110000; ++cp)
      if (in[cp] && !kept[cp]) full[cp] |= kSplitAgain;
  }
  r->table_ = CodePointTable(full);
  for (int b = 0; b < 0x80; ++b) r->ascii_[b] = full[size_t(b)];
  // The bytes a char of an atom may start with: such ASCII chars, and lead
  // bytes of such chars.
  for (int b = 0; b < 256; ++b) {
    const auto [from, count] = led_by(b);
    for (char32_t cp = from; cp < from + count && cp < 0x110000 && !r->maybe_[b]; ++cp) r->maybe_[b] = full[cp] != 0;
  }
  std::vector<std::pair<int, int>> ranges;
  for (int b = 0; b < 0x80; ++b) {
    if (!r->maybe_[b]) continue;
    if (!ranges.empty() && ranges.back().second == b - 1) ranges.back().second = b;
    else ranges.emplace_back(b, b);
  }
  if (ranges.size() > 3) return nullptr;
  ranges.emplace_back(0xC0, 0xFF);  // lead bytes
  for (size_t k = 0; k < ranges.size(); ++k) {
    std::memset(r->lo_[k], ranges[k].first, 16);
    std::memset(r->span_[k], ranges[k].second - ranges[k].first, 16);
  }
  r->ranges_ = int(ranges.size());
  return r;
}

size_t RunSplits::skip(const unsigned char* s, size_t n, size_t i) const {
#if defined(__SSE2__)
  while (n - i >= 16) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    for (uint32_t mask = in_ranges(v, lo_, span_, ranges_); mask != 0; mask &= mask - 1) {
      const size_t at = i + size_t(__builtin_ctz(mask));
      if (maybe_[s[at]]) return at;
    }
    i += 16;
  }
#endif
  while (i < n && !maybe_[s[i]]) ++i;
  return i;
}

uint8_t RunSplits::level_at_rare(const unsigned char* s, size_t i, size_t n, uint32_t& len) const {
  const unsigned char b0 = s[i];
  len = 1;
  if (b0 < 0x80) return ascii_[b0];
  const size_t left = n - i;
  auto cont = [&](size_t k) { return k < left && (s[i + k] & 0xC0) == 0x80; };
  char32_t cp = 0;
  uint32_t l = 0;
  if (b0 >= 0xC2 && b0 <= 0xDF && cont(1)) {
    cp = char32_t(b0 & 0x1F) << 6 | (s[i + 1] & 0x3F), l = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF && cont(1) && cont(2)) {
    cp = char32_t(b0 & 0x0F) << 12 | char32_t(s[i + 1] & 0x3F) << 6 | (s[i + 2] & 0x3F), l = 3;
    if (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;  // overlong, a surrogate: invalid
  } else if (b0 >= 0xF0 && b0 <= 0xF4 && cont(1) && cont(2) && cont(3)) {
    cp = char32_t(b0 & 0x07) << 18 | char32_t(s[i + 1] & 0x3F) << 12 | char32_t(s[i + 2] & 0x3F) << 6 |
         (s[i + 3] & 0x3F),
    l = 4;
    if (cp < 0x10000 || cp > 0x10FFFF) return 0;
  } else {
    return 0;  // invalid UTF-8: a byte at a time, in no atom
  }
  len = l;
  return table_.get(cp);
}

void EndList::grow(size_t need) {
  const size_t capacity = std::max({need, 2 * capacity_, size_t(256)});
  std::unique_ptr<uint32_t[]> data(new uint32_t[capacity]);
  if (size_ != 0) std::memcpy(data.get(), data_.get(), size_ * sizeof(uint32_t));
  data_ = std::move(data);
  capacity_ = capacity;
}

}  // namespace tokfeed::text::hf
