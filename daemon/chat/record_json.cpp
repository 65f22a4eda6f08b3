// A record's JSON read straight into template values (record_json.hpp).
//
// simdjson's DOM parse indexes the whole text (stage 1), writes a tape and
// copies every string into its own buffer (stage 2); tmpl::from_json then
// walks the tape and copies each string again. Here one pass over the text
// builds the values: a string's plain bytes are found 32 at a time, copied
// to a scratch buffer with its escapes decoded, and from there into the
// value. The grammar taken is strict JSON, as simdjson's;
// what simdjson would refuse, and the few forms whose value it is not
// worth matching here, return false before the record's values are used.
#include "chat/record_json.hpp"

#include <simdjson.h>

#include <array>
#include <charconv>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "chat/json_lex.hpp"
#include "chat/record_tools.hpp"

namespace tokfeed::text::detail {
namespace {

using tmpl::Kind;
using tmpl::Value;

// Deeper values go to simdjson (which allows 1024 levels), keeping the
// recursion short.
constexpr int kMaxDepth = 64;

// What each byte after a backslash stands for: the byte itself; 1 for
// \u (four hex digits follow); 0 where JSON has no such escape.
constexpr auto kEscapes = [] {
  std::array<char, 256> t{};
  t['"'] = '"', t['\\'] = '\\', t['/'] = '/', t['b'] = '\b', t['f'] = '\f', t['n'] = '\n', t['r'] = '\r';
  t['t'] = '\t', t['u'] = 1;
  return t;
}();

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The four hex digits at `p` (end - p >= 4 checked by the caller), or -1.
int32_t hex4(const char* p) {
  int32_t v = 0;
  for (int i = 0; i < 4; ++i) {
    const int d = hex_digit(p[i]);
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

char* put_utf8(uint32_t cp, char* d) {
  if (cp < 0x80) {
    *d++ = static_cast<char>(cp);
  } else if (cp < 0x800) {
    *d++ = static_cast<char>(0xC0 | (cp >> 6));
    *d++ = static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    *d++ = static_cast<char>(0xE0 | (cp >> 12));
    *d++ = static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *d++ = static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    *d++ = static_cast<char>(0xF0 | (cp >> 18));
    *d++ = static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    *d++ = static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *d++ = static_cast<char>(0x80 | (cp & 0x3F));
  }
  return d;
}

// The \u escape at `p`, or a surrogate pair \uXXXX\uXXXX, as UTF-8 at `d`,
// both advanced. A lone surrogate is left to simdjson (and the Python-json
// parser after it, which names it).
bool unicode(const char*& p, const char* end, char*& d) {
  if (end - p < 6) return false;
  const int32_t cp = hex4(p + 2);
  if (cp < 0 || (cp >= 0xDC00 && cp <= 0xDFFF)) return false;
  if (cp < 0xD800 || cp > 0xDBFF) {
    d = put_utf8(static_cast<uint32_t>(cp), d);
    p += 6;
    return true;
  }
  if (end - p < 12 || p[6] != '\\' || p[7] != 'u') return false;
  const int32_t low = hex4(p + 8);
  if (low < 0xDC00 || low > 0xDFFF) return false;
  d = put_utf8(0x10000 + ((static_cast<uint32_t>(cp) - 0xD800) << 10) + (static_cast<uint32_t>(low) - 0xDC00), d);
  p += 12;
  return true;
}

// A string's text after its opening quote at `p`, decoded to `d`: `end`
// is the end of the decoded bytes, `p` left past the closing quote; null
// where JSON refuses the string (a control character, a bad escape, no
// closing quote) or it is left to simdjson. `d` has room for the string's
// raw bytes plus 32. `high` is set where the string may hold bytes over
// 0x7F (the caller checks them as UTF-8).
//
// The plain bytes are copied 32 at a time up to the first quote,
// backslash or control character; an escape is decoded in place and the
// copy goes on after it.
struct Decoded {
  char* end;
  bool high;
};

Decoded decode_scalar(const char*& p, const char* end, char* d) {
  unsigned char high = 0;
  for (;;) {
    while (p < end && *p != '"' && *p != '\\' && static_cast<unsigned char>(*p) >= 0x20) {
      high |= static_cast<unsigned char>(*p);
      *d++ = *p++;
    }
    if (p == end) return {nullptr, false};
    if (*p == '"') {
      ++p;
      return {d, high >= 0x80};
    }
    if (*p != '\\' || end - p < 2) return {nullptr, false};
    const char e = kEscapes[static_cast<unsigned char>(p[1])];
    if (e == 0 || (e == 1 && !unicode(p, end, d))) return {nullptr, false};
    if (e != 1) {
      *d++ = e;
      p += 2;
    }
  }
}

#if defined(__x86_64__)
// How decode_blocks left a string: at its closing quote, refused, or with
// too few bytes left for a block.
enum class Step : uint8_t { kDone, kBad, kMore };

// Blocks are read from `p` while more than 64 bytes are left before
// `load_end`: an escape's second byte and the 32 bytes after it are then
// always there. `end` bounds the text (a \u escape's digits); the copy of
// the record's last bytes (decode_tail) is padded, its loads go past
// `end`. `p` and `d` are advanced. `high` gathers the blocks read whole,
// `last_high` the top bits of the bytes up to the closing quote of a block
// that has no escape before it (so that a string followed by bytes over
// 0x7F is mostly not checked as UTF-8 for them).
//
// A block's stops are found once. Its simple escapes are decoded in place,
// the bytes after each moved up behind it by one 32-byte load and store
// (past the block too: the next block's store lays those again), so an
// escape costs no new search of its block, and whether a stop is an
// escape is one bit of the block's backslashes, not a load. The
// pointers and the gathered bits are locals whose address is never taken
// (registers, not the stack) until the loop ends; the masks are 64-bit,
// their bit indexes addresses without a widening.
__attribute__((target("avx2,bmi,bmi2"), always_inline)) inline Step decode_blocks(const char*& p_ref, const char* end,
                                                                                  const char* load_end, char*& d_ref,
                                                                                  __m256i& high, uint32_t& last_high) {
  const __m256i backslash = _mm256_set1_epi8('\\');
  const __m256i flip = _mm256_set1_epi8(0x02);
  const __m256i quote_flipped = _mm256_set1_epi8(0x20);
  const char* p = p_ref;
  char* d = d_ref;
  __m256i seen = _mm256_setzero_si256();
  Step step = Step::kMore;
  if (load_end - p <= 64) goto out;
  // (The last block's start, compared with p: one compare a block.)
  for (const char* const last = load_end - 65; p <= last;) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d), x);
    // A quote or a control character: x ^ 2 <= 0x20 (unsigned), where
    // min(x ^ 2, 0x20) == x ^ 2 (0x22 becomes 0x20, 0x00-0x1F stay among
    // themselves, nothing else falls that low).
    const __m256i y = _mm256_xor_si256(x, flip);
    const __m256i is_backslash = _mm256_cmpeq_epi8(x, backslash);
    const __m256i stop = _mm256_or_si256(_mm256_cmpeq_epi8(_mm256_min_epu8(y, quote_flipped), y), is_backslash);
    if (_mm256_testz_si256(stop, stop)) {
      seen = _mm256_or_si256(seen, x);
      p += 32;
      d += 32;
      continue;
    }
    uint64_t mask = static_cast<uint32_t>(_mm256_movemask_epi8(stop));
    uint64_t k = _tzcnt_u64(mask);
    const uint64_t backslashes = static_cast<uint32_t>(_mm256_movemask_epi8(is_backslash));
    if ((backslashes >> k) & 1) {
      seen = _mm256_or_si256(seen, x);
      // The byte at p + j goes to d + j: one less after each escape.
      for (;;) {
        const char e = kEscapes[static_cast<unsigned char>(p[k + 1])];
        if (e <= 1) {  // \u, or no escape: a new block after it
          const char* q = p + k;
          char* o = d + k;
          if (e == 0 || !unicode(q, end, o)) {
            step = Step::kBad;
            goto out;
          }
          p = q;
          d = o;
          break;
        }
        d[k] = e;
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + k + 1),
                            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + k + 2)));
        --d;
        // The escape and its second byte (a quote or backslash stops too).
        mask &= ~uint64_t{3} << k;
        if (mask == 0) {
          p += 32;
          d += 32;
          if (k == 31) {  // an escape at the block's last byte took the next block's first
            ++p;
            ++d;
          }
          break;
        }
        k = _tzcnt_u64(mask);
        if (((backslashes >> k) & 1) == 0) goto stop;
      }
      continue;
    }
    last_high = static_cast<uint32_t>(_mm256_movemask_epi8(x)) & _blsmsk_u32(static_cast<uint32_t>(mask));
  stop:
    p += k;
    d += k;
    if (*p != '"') {  // a control character
      step = Step::kBad;
      break;
    }
    ++p;
    step = Step::kDone;
    break;
  }
out:
  p_ref = p;
  d_ref = d;
  high = _mm256_or_si256(high, seen);
  return step;
}

// The string's last bytes, 64 or fewer left in the record, from a copy
// padded with zeros: a control character, where the string stops as at
// the text's end, refused alike. `top` gathers the top bits of the bytes
// read (a 32-bit mask: no 32-byte vector passed through the stack).
__attribute__((target("avx2,bmi,bmi2"), noinline)) Step decode_tail(const char*& p, const char* end, char*& d,
                                                                    uint32_t& top) {
  alignas(32) char tail[160] = {};  // five stores, no call
  const auto n = static_cast<std::size_t>(end - p);
  std::memcpy(tail, p, n);
  const char* q = tail;
  __m256i high = _mm256_setzero_si256();
  uint32_t last_high = 0;
  const Step s = decode_blocks(q, tail + n, tail + sizeof tail, d, high, last_high);
  top |= static_cast<uint32_t>(_mm256_movemask_epi8(high)) | last_high;
  p += q - tail;
  return s;
}

__attribute__((target("avx2,bmi,bmi2"))) Decoded decode_avx2(const char*& p, const char* end, char* d) {
  __m256i high = _mm256_setzero_si256();
  uint32_t last_high = 0;
  Step s = decode_blocks(p, end, end, d, high, last_high);
  uint32_t top = static_cast<uint32_t>(_mm256_movemask_epi8(high)) | last_high;
  if (s == Step::kMore) s = decode_tail(p, end, d, top);
  if (s != Step::kDone) return {nullptr, false};
  return {d, top != 0};
}

const bool kAvx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2");

inline Decoded decode(const char*& p, const char* end, char* d) {
  return kAvx2 ? decode_avx2(p, end, d) : decode_scalar(p, end, d);
}
#else
inline Decoded decode(const char*& p, const char* end, char* d) { return decode_scalar(p, end, d); }
#endif

// simdjson's best kernels for this machine, found once (every one of them
// checks UTF-8 alike).
const simdjson::implementation& utf8() {
  static const simdjson::implementation* const best = simdjson::get_available_implementations().detect_best_supported();
  return *best;
}

}  // namespace

bool valid_utf8(const char* s, std::size_t n) noexcept { return utf8().validate_utf8(s, n); }

bool decode_string(const char*& p, const char* end, char* d, std::string_view& out) noexcept {
  const char* start = p;
  const Decoded r = decode(p, end, d);
  if (!r.end) return false;
  // Bytes over 0x7F are only valid inside a string: checked here, string
  // by string, as simdjson checks the whole record.
  if (r.high && !valid_utf8(start, static_cast<std::size_t>(p - 1 - start))) return false;
  out = {d, static_cast<std::size_t>(r.end - d)};
  return true;
}

namespace {

// Dicts a list of the last record held past this record's length (a
// shorter list of messages), kept for a longer list after it: refilled
// with their keys and strings where they are, instead of going to the
// recycler with each of their objects and coming back one by one. Bounded:
// at most kSpareDicts dicts, only their scalars and strings of at most
// kReusedBytes each, kSpareBytes of those and of their long keys in all; a
// nested list or dict, a bigger string or one held elsewhere is dropped
// first.
constexpr std::size_t kSpareDicts = 64;
constexpr std::size_t kSpareBytes = std::size_t{64} << 10;
constexpr std::size_t kShortKey = 15;  // held in the std::string itself

class SpareDicts {
 public:
  static SpareDicts& local() {
    static thread_local SpareDicts spare;
    return spare;
  }
  bool empty() const { return dicts_.empty(); }
  // `v`, an item a list no longer holds, kept where it is a dict no other
  // value holds.
  void keep(Value&& v) {
    if (dicts_.size() == kSpareDicts || v.kind != Kind::kDict || v.ns || v.view || !only_here(v) ||
        v.dict->items().size() > kInPlace)
      return;
    std::size_t bytes = 0;
    for (auto& [k, x] : v.dict->items()) {
      if (k.capacity() > kShortKey) bytes += k.capacity();
      if (x.kind == Kind::kStr && only_here(x)) {
        const std::size_t cap = x.s.unread().capacity();
        if (cap <= kReusedBytes && bytes_ + bytes + cap <= kSpareBytes) {
          bytes += cap;
          continue;
        }
      }
      if (x.kind >= Kind::kStr) x = Value();  // any kind that holds an object
    }
    if (bytes_ + bytes > kSpareBytes) return;  // long keys
    bytes_ += bytes;
    dicts_.push_back({std::move(v), bytes});
  }
  // The last dict kept, to refill.
  Value take() {
    auto& [v, bytes] = dicts_.back();
    bytes_ -= bytes;
    Value out = std::move(v);
    dicts_.pop_back();
    return out;
  }

 private:
  std::vector<std::pair<Value, std::size_t>> dicts_;
  std::size_t bytes_ = 0;  // the kept strings' buffers
};

class Reader : JsonLex {
 public:
  Reader(std::string_view text, char* scratch, bool cached_tools)
      : JsonLex(text, scratch), cached_tools_(cached_tools) {}

  bool record(Value& rec) {
    ws();
    if (p_ == end_ || *p_ != '{') return false;
    if (!object(rec, 1)) return false;
    ws();
    return p_ == end_;
  }

  // A value at the text's start, in a list or dict `depth` deep (the
  // record's top level is 1); `n` set to its text's length.
  bool nested(Value& v, int depth, std::size_t& n) {
    const char* start = p_;
    if (!value(v, depth)) return false;
    n = static_cast<std::size_t>(p_ - start);
    return true;
  }

  // The record's top level repeats a key, or holds more than kInPlace.
  bool top_repeats() const { return top_repeats_; }

 private:
  bool cached_tools_;
  bool top_repeats_ = false;

  // The value at p_ into `v`, refilling what `v` holds where nothing else
  // holds it.
  bool value(Value& v, int depth) {
    if (p_ == end_) return false;
    switch (*p_) {
      case '"': return string_value(v);
      case '{': return object(v, depth + 1);
      case '[': return array(v, depth + 1);
      case 't':
        if (!literal("true")) return false;
        v = Value::boolean(true);
        return true;
      case 'f':
        if (!literal("false")) return false;
        v = Value::boolean(false);
        return true;
      case 'n':
        if (!literal("null")) return false;
        v = Value::none();
        return true;
      default: return number(v);
    }
  }

  [[gnu::always_inline]] bool string_value(Value& v) {
    std::string_view s;
    if (!string(s)) return false;
    if (v.kind == Kind::kStr && only_here(v)) {
      std::string& t = v.s.unshared_text();
      // A role or a name as the last record's: nothing to copy.
      if (t.size() == s.size() && tmpl::bytes_equal(t.data(), s.data(), s.size())) return true;
      if (t.capacity() <= kReusedBytes) {
        t.clear();
        t.append(s.data(), s.size());
        return true;
      }
    }
    v = Value();  // freed first: the recycler has its object for the new one
    v = Value::recycled_str(s);
    return true;
  }

  bool array(Value& v, int depth) {
    if (depth > kMaxDepth) return false;
    ++p_;
    if (!(v.kind == Kind::kList && !v.tuple && !v.gen && !v.view && only_here(v) &&
          v.list->items.capacity() * sizeof(Value) <= kReusedBytes)) {
      v = Value();
      v = Value::recycled_list();
    }
    tmpl::ListObj& l = *v.list;
    l.group = false;
    auto& items = l.items;
    std::size_t n = 0;
    SpareDicts& spare = SpareDicts::local();
    ws();
    if (!eat(']')) {
      for (;;) {
        // (Messages: an object read without value()'s call.)
        const bool dict = p_ != end_ && *p_ == '{';
        if (n == items.size()) {
          if (dict && !spare.empty()) items.push_back(spare.take());
          else items.emplace_back();
        }
        if (!(dict ? object(items[n++], depth + 1) : value(items[n++], depth))) return false;
        if (separator(',')) continue;
        if (eat(']')) break;
        return false;
      }
    }
    for (std::size_t i = n; i < items.size(); ++i) spare.keep(std::move(items[i]));
    items.erase(items.begin() + static_cast<std::ptrdiff_t>(n), items.end());
    return true;
  }

  // A member's value: a string read here, without the calls of member()
  // and value().
  [[gnu::always_inline]] bool member_value(Value& x, bool tools, int depth) {
    if (!tools && p_ != end_ && *p_ == '"') return string_value(x);
    return member(x, tools, depth);
  }

  // A member's value; the record's top-level tools from the cache.
  bool member(Value& x, bool tools, int depth) {
    if (!tools || p_ == end_ || *p_ != '[') return value(x, depth);
    ToolsCache& cache = ToolsCache::local();
    std::size_t n = 0;
    if (const Value* kept = cache.read_match({p_, static_cast<std::size_t>(end_ - p_)}, n)) {
      x = *kept;
      p_ += n;
      return true;
    }
    const char* start = p_;
    x = Value();  // a list of its own, never a refilled one the cache would share
    if (!value(x, depth)) return false;
    cache.keep_read(x, {start, static_cast<std::size_t>(p_ - start)});
    return true;
  }

  // The object at p_ into `v`, as tmpl::from_json builds it: the last of
  // duplicate keys at the first one's place. Depth 1 is the record's top
  // level.
  bool object(Value& v, int depth) {
    if (depth > kMaxDepth) return false;
    ++p_;
    if (!(v.kind == Kind::kDict && !v.ns && !v.view && only_here(v) && v.dict->items().size() <= kInPlace &&
          v.dict->items().capacity() * sizeof(v.dict->items()[0]) <= kReusedBytes)) {
      v = Value();
      v = Value::recycled_dict();
    }
    tmpl::DictObj& d = *v.dict;
    d.reindex();
    auto& items = d.items();
    std::size_t n = 0;  // items[:n] are the object's
    bool big = false;   // past kInPlace keys: DictObj::set keeps the index
    const bool top = depth == 1 && cached_tools_;
    const bool record = depth == 1;
    ws();
    if (!eat('}')) {
      for (;;) {
        if (p_ == end_ || *p_ != '"') return false;
        std::string_view key;
        if (!string(key) || key.starts_with('\x01')) return false;
        if (!separator(':')) return false;
        const bool tools = top && key == "tools";
        if (!big && n == kInPlace) {
          items.erase(items.begin() + static_cast<std::ptrdiff_t>(n), items.end());
          big = true;
          top_repeats_ |= record;
        }
        if (big) {
          const std::string k(key);  // the scratch buffer holds the value's strings next
          Value x;
          if (!member(x, tools, depth)) return false;
          d.set(k, std::move(x));
        } else {
          std::size_t at = 0;
          while (at < n && !tmpl::DictObj::same_key(items[at].first, key)) ++at;
          if (at < n) {
            top_repeats_ |= record;
            Value x;
            if (!member(x, tools, depth)) return false;
            items[at].second = std::move(x);
          } else {
            if (n == items.size()) items.emplace_back();
            auto& [k, x] = items[n++];
            if (!tmpl::DictObj::same_key(k, key)) k.assign(key);
            if (tools) x = Value();
            if (!member_value(x, tools, depth)) return false;
          }
        }
        if (separator(',')) continue;
        if (eat('}')) break;
        return false;
      }
    }
    if (!big) items.erase(items.begin() + static_cast<std::ptrdiff_t>(n), items.end());
    return true;
  }
};

}  // namespace

bool read_record(std::string_view json, bool cached_tools, Value&& prev, Value& out, bool* top_repeats) {
  if (json.size() > kMaxRecord) return false;
  static thread_local std::string scratch;
  if (scratch.size() < json.size() + kSlack) scratch.resize(json.size() + kSlack);
  out = std::move(prev);
  Reader reader(json, scratch.data(), cached_tools);
  const bool ok = reader.record(out);
  if (top_repeats) *top_repeats = reader.top_repeats();
  return ok;
}

bool read_value(std::string_view text, int depth, Value& out, std::size_t& n) {
  if (text.size() > kMaxRecord) return false;
  static thread_local std::string scratch;
  if (scratch.size() < text.size() + kSlack) scratch.resize(text.size() + kSlack);
  out = Value();
  Reader reader(text, scratch.data(), false);
  return reader.nested(out, depth, n);
}

}  // namespace tokfeed::text::detail
