// The dataset index's first try on each record (record_fields.hpp): one pass
// of simdjson's On Demand API over the record where it lies. It validates
// every value as the full parser would, but reads strings in place instead
// of copying and unescaping them: their escapes are checked, and a string is
// empty exactly when its raw text is. Whatever it cannot show valid (a bad
// record, or a case it leaves alone) goes to the full parser, whose verdict
// stands; the fuzz target `records` checks that every record the scan
// accepts, the full parser accepts too.
#include <simdjson.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "records/record_fields.hpp"

namespace tokfeed::text::detail {
namespace {

namespace od = simdjson::ondemand;

// Deeper values go to the full parser (which allows 1024 levels), keeping
// the scan's recursion short.
constexpr int kMaxDepth = 64;

bool is_json_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

std::string_view trim_right(std::string_view s) {
  while (!s.empty() && is_json_ws(s.back())) s.remove_suffix(1);
  return s;
}

int hex4(std::string_view s, std::size_t at) {
  if (at + 4 > s.size()) return -1;
  int v = 0;
  for (std::size_t i = at; i < at + 4; ++i) {
    char c = s[i];
    int d = c >= '0' && c <= '9'   ? c - '0'
            : c >= 'a' && c <= 'f' ? c - 'a' + 10
            : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                   : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

// The escape at s[at] (a backslash), if JSON allows it: \" \\ \/ \b \f \n
// \r \t, or \uXXXX naming a code point (a high surrogate followed by \u and a
// low one). `next` gets the index after it.
bool escape_at(std::string_view s, std::size_t at, std::size_t& next) {
  if (at + 1 >= s.size()) return false;
  switch (s[at + 1]) {
    case '"':
    case '\\':
    case '/':
    case 'b':
    case 'f':
    case 'n':
    case 'r':
    case 't': next = at + 2; return true;
    case 'u': {
      int cp = hex4(s, at + 2);
      if (cp < 0 || (cp >= 0xDC00 && cp <= 0xDFFF)) return false;
      if (cp < 0xD800 || cp > 0xDBFF) {
        next = at + 6;
        return true;
      }
      if (at + 8 > s.size() || s[at + 6] != '\\' || s[at + 7] != 'u') return false;
      int low = hex4(s, at + 8);
      next = at + 12;
      return low >= 0xDC00 && low <= 0xDFFF;
    }
    default: return false;
  }
}

// Every escape in the record's text is one JSON allows, one at a time.
// Outside strings a backslash is an error the walk finds; here it is only
// checked like any other.
bool escapes_ok_scalar(std::string_view s) {
  for (std::size_t i = 0, next = 0; (i = s.find('\\', next)) != std::string_view::npos;)
    if (!escape_at(s, i, next)) return false;
  return true;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TOKFEED_SCAN_AVX2 1

// Bit i: byte i of the 64 in (a, b) has a bit of `mask` set.
__attribute__((target("avx2"))) uint64_t class_bits(__m256i a, __m256i b, char mask) {
  const __m256i m = _mm256_set1_epi8(mask), zero = _mm256_setzero_si256();
  uint32_t lo = ~static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_and_si256(a, m), zero)));
  uint32_t hi = ~static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_and_si256(b, m), zero)));
  return lo | static_cast<uint64_t>(hi) << 32;
}

// Bit i: byte i of the 64 in (a, b) is c.
__attribute__((target("avx2"))) uint64_t byte_bits(__m256i a, __m256i b, char c) {
  const __m256i v = _mm256_set1_epi8(c);
  return static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_cmpeq_epi8(a, v))) |
         static_cast<uint64_t>(static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_cmpeq_epi8(b, v)))) << 32;
}

// Each byte of x in [lo, hi], as signed bytes (no ASCII range wraps).
__attribute__((target("avx2"))) __m256i in_range(__m256i x, char lo, char hi) {
  return _mm256_and_si256(_mm256_cmpgt_epi8(x, _mm256_set1_epi8(static_cast<char>(lo - 1))),
                          _mm256_cmpgt_epi8(_mm256_set1_epi8(static_cast<char>(hi + 1)), x));
}

__attribute__((target("avx2"))) uint32_t hex_digit_bits32(__m256i x, bool high) {
  __m256i lower = _mm256_or_si256(x, _mm256_set1_epi8(0x20));
  __m256i digit = _mm256_or_si256(in_range(x, high ? '8' : '0', '9'), in_range(lower, 'a', 'f'));
  return static_cast<uint32_t>(_mm256_movemask_epi8(digit));
}

// Bit i: byte i of the 64 in (a, b) is a hex digit; with `high`, one of 8-f
// (a surrogate's second digit after d).
__attribute__((target("avx2"))) uint64_t hex_digit_bits(__m256i a, __m256i b, bool high) {
  return hex_digit_bits32(a, high) | static_cast<uint64_t>(hex_digit_bits32(b, high)) << 32;
}

// Each byte's escape class by its two nibbles: bit 0 to 3 for the letters
// that may follow a backslash alone (" / \ b f n r t), grouped by high nibble,
// bit 4 for u.
__attribute__((target("avx2"))) __m256i escape_class(__m256i v) {
  const __m256i by_low = _mm256_setr_epi8(0, 0, 1 | 4 | 8, 0, 8, 16, 4, 0, 0, 0, 0, 0, 2, 0, 4, 1,  //
                                          0, 0, 1 | 4 | 8, 0, 8, 16, 4, 0, 0, 0, 0, 0, 2, 0, 4, 1);
  const __m256i by_high = _mm256_setr_epi8(0, 0, 1, 0, 0, 2, 4, 8 | 16, 0, 0, 0, 0, 0, 0, 0, 0,  //
                                           0, 0, 1, 0, 0, 2, 4, 8 | 16, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m256i nibble = _mm256_set1_epi8(0x0F);
  __m256i low = _mm256_shuffle_epi8(by_low, _mm256_and_si256(v, nibble));
  __m256i high = _mm256_shuffle_epi8(by_high, _mm256_and_si256(_mm256_srli_epi16(v, 4), nibble));
  return _mm256_and_si256(low, high);
}

// 64 bytes at a time, without a branch per escape. The bytes escaped by a
// backslash are found with the odd-run carry trick of simdjson's first stage
// (Langdale and Lemire, "Parsing Gigabytes of JSON per Second", 3.1.1): a
// backslash escapes the next byte when it ends an odd-length run. Every
// escaped byte must be one of the classes; only \u escapes are then read one
// at a time. Reads up to 63 bytes past the end (the caller's padding).
__attribute__((target("avx2,bmi"))) bool escapes_ok_avx2(std::string_view s) {
  const char* p = s.data();
  const std::size_t n = s.size();
  const uint64_t even = 0x5555555555555555ULL;
  uint64_t carry = 0;    // the next block's first byte is escaped
  std::size_t next = 0;  // the first byte after the last \u escape read
  for (std::size_t i = 0; i < n; i += 64) {
    __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i));
    __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 32));
    uint64_t live = n - i >= 64 ? ~0ULL : (1ULL << (n - i)) - 1;
    uint64_t bs = byte_bits(a, b, '\\') & live;
    if (bs == 0 && carry == 0) continue;
    // Escaped bytes: the byte after each backslash that ends an odd run.
    bs &= ~carry;  // an escaped backslash starts no run
    uint64_t follows = (bs << 1) | carry;
    uint64_t odd_starts = bs & ~even & ~follows;
    uint64_t sums;
    carry = __builtin_add_overflow(odd_starts, bs, &sums) ? 1 : 0;
    uint64_t escaped = (even ^ (sums << 1)) & follows;
    if (escaped & ~live) return false;  // a backslash ends the text
    __m256i ca = escape_class(a), cb = escape_class(b);
    uint64_t simple = class_bits(ca, cb, 0x0F), u = class_bits(ca, cb, 0x10);
    if (escaped & ~(simple | u)) return false;
    uint64_t ue = escaped & u;
    if (ue == 0) continue;
    // \u escapes: four hex digits, checked here for those whose digits lie
    // in this block and that name no surrogate (first digit d, second 8-f);
    // the others one at a time.
    const uint64_t inside = ue & ((1ULL << 60) - 1);
    const uint64_t hex = (hex_digit_bits(a, b, false) & live), high = hex_digit_bits(a, b, true);
    const uint64_t d = byte_bits(a, b, 'd') | byte_bits(a, b, 'D');
    const uint64_t need = (inside << 1) | (inside << 2) | (inside << 3) | (inside << 4);
    const uint64_t surrogates = ((inside << 1) & d & (high >> 1)) >> 1;
    for (uint64_t m = (need & ~hex) ? ue : (ue & ~inside) | surrogates; m; m &= m - 1) {
      std::size_t at = i + static_cast<std::size_t>(__builtin_ctzll(m)) - 1;  // the backslash
      if (at >= next && !escape_at(s, at, next)) return false;
    }
  }
  return carry == 0;
}
#endif

bool escapes_ok(std::string_view s) {
#ifdef TOKFEED_SCAN_AVX2
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi");
  if (avx2) return escapes_ok_avx2(s);
#endif
  return escapes_ok_scalar(s);
}

// The text between a string token's quotes. Its escapes were checked with
// the whole record's, and its bytes (valid UTF-8, no raw control characters)
// by simdjson's first stage.
bool string_body(std::string_view token, std::string_view& body) {
  token = trim_right(token);
  if (token.size() < 2 || token.front() != '"' || token.back() != '"') return false;
  body = token.substr(1, token.size() - 2);
  return true;
}

// A plain JSON number: an integer of at most 18 digits, or a decimal
// fraction without exponent (finite as a double by construction). Others
// (exponents, big integers) are left to the full parser.
bool plain_number(std::string_view t) {
  t = trim_right(t);
  std::size_t i = 0;
  if (i < t.size() && t[i] == '-') ++i;
  std::size_t int_begin = i;
  while (i < t.size() && t[i] >= '0' && t[i] <= '9') ++i;
  std::size_t int_digits = i - int_begin;
  if (int_digits == 0 || (int_digits > 1 && t[int_begin] == '0')) return false;
  if (i == t.size()) return int_digits <= 18;
  if (t[i] != '.' || int_digits > 300) return false;
  std::size_t frac_begin = ++i;
  while (i < t.size() && t[i] >= '0' && t[i] <= '9') ++i;
  return i > frac_begin && i == t.size();
}

// A value as the scan saw it.
struct Seen {
  enum Type : uint8_t { kAbsent, kNull, kString, kArray, kOther } type = kAbsent;
  std::string_view str;           // kString: between the quotes, escapes not undone
  uint32_t first = 0, count = 0;  // kArray (top level): its elements in Scan::items_
  bool present() const { return type != kAbsent && type != kNull; }
};

// An element of a top-level array: for an object, its first member of each
// turn key; for an array, its size and first two elements.
struct Item {
  enum Shape : uint8_t { kObject, kArray, kOther } shape = kOther;
  Seen role, content, from, value;  // kObject
  uint32_t size = 0;                // kArray
  Seen at[2];
};

class Scan {
 public:
  bool accepts(std::string_view json, const RecordRules& rules);

 private:
  // Validates `v` whole; `out` (when set) gets its type and string text, and
  // with `items` a top-level array's elements go to items_.
  bool value(od::value v, Seen* out, int depth, bool items = false);
  bool item(od::value v, Item& out);
  bool turns_from(const Seen& list, bool sharegpt);
  void resolve(const RecordRules& rules);

  od::parser parser_;
  std::vector<Item> items_;
  Seen key_[kKeys];           // first member of each key's name
  std::vector<Seen> column_;  // first member of each column's source name
  Seen field_[kKeys];         // after the renames
  Turns turns_;
};

bool Scan::value(od::value v, Seen* out, int depth, bool items) {
  if (depth > kMaxDepth) return false;
  od::json_type t;
  if (v.type().get(t)) return false;
  switch (t) {
    // Each scalar is read (consumed), never skipped: On Demand skips an
    // unread value by counting brackets only, and would pass over a stray
    // ':' or '}' after it.
    case od::json_type::string: {
      std::string_view body;
      od::raw_json_string raw;
      if (!string_body(v.raw_json_token(), body) || v.get_raw_json_string().get(raw)) return false;
      if (out) out->type = Seen::kString, out->str = body;
      return true;
    }
    case od::json_type::number: {
      if (out) out->type = Seen::kOther;
      od::number n;
      return plain_number(v.raw_json_token()) && !v.get_number().get(n);
    }
    case od::json_type::boolean: {
      std::string_view tok = trim_right(v.raw_json_token());
      if (out) out->type = Seen::kOther;
      bool b;
      return (tok == "true" || tok == "false") && !v.get_bool().get(b);
    }
    case od::json_type::null: {
      if (out) out->type = Seen::kNull;
      bool null = false;
      return trim_right(v.raw_json_token()) == "null" && !v.is_null().get(null) && null;
    }
    case od::json_type::object: {
      if (out) out->type = Seen::kOther;
      od::object obj;
      if (v.get_object().get(obj)) return false;
      for (auto f : obj) {
        std::string_view key;
        od::value x;
        if (f.unescaped_key().get(key) || f.value().get(x) || !value(x, nullptr, depth + 1)) return false;
      }
      return true;
    }
    case od::json_type::array: {
      od::array arr;
      if (v.get_array().get(arr)) return false;
      uint32_t first = static_cast<uint32_t>(items_.size()), count = 0;
      for (auto e : arr) {
        od::value x;
        if (e.get(x)) return false;
        if (items) {
          items_.emplace_back();
          if (!item(x, items_.back())) return false;
        } else if (!value(x, nullptr, depth + 1)) {
          return false;
        }
        ++count;
      }
      if (out) *out = {items ? Seen::kArray : Seen::kOther, {}, first, count};
      return true;
    }
  }
  return false;
}

bool Scan::item(od::value v, Item& out) {
  od::json_type t;
  if (v.type().get(t)) return false;
  if (t == od::json_type::object) {
    out.shape = Item::kObject;
    od::object obj;
    if (v.get_object().get(obj)) return false;
    for (auto f : obj) {
      std::string_view key;
      od::value x;
      if (f.unescaped_key().get(key) || f.value().get(x)) return false;
      Seen* slot = is(key, "role")      ? &out.role
                   : is(key, "content") ? &out.content
                   : is(key, "from")    ? &out.from
                   : is(key, "value")   ? &out.value
                                        : nullptr;
      if (slot && slot->type != Seen::kAbsent) slot = nullptr;  // the first of each name counts
      if (!value(x, slot, 3)) return false;
    }
    return true;
  }
  if (t == od::json_type::array) {
    out.shape = Item::kArray;
    od::array arr;
    if (v.get_array().get(arr)) return false;
    for (auto e : arr) {
      od::value x;
      if (e.get(x) || !value(x, out.size < 2 ? &out.at[out.size] : nullptr, 3)) return false;
      ++out.size;
    }
    return true;
  }
  return value(v, nullptr, 2);
}

// The fields under the `columns` renames.
void Scan::resolve(const RecordRules& rules) {
  for (std::size_t k = 0; k < kKeys; ++k) {
    std::size_t j = rename_source(rules.columns, k, [&](std::size_t c) { return column_[c].present(); });
    field_[k] = j == kNoField ? Seen{} : j != kOwnField ? column_[j] : key_[k].present() ? key_[k] : Seen{};
  }
}

bool Scan::turns_from(const Seen& list, bool sharegpt) {
  if (list.type != Seen::kArray) return false;
  for (uint32_t i = list.first; i < list.first + list.count; ++i) {
    const Item& it = items_[i];
    const Seen& role = sharegpt ? it.from : it.role;
    const Seen& content = sharegpt ? it.value : it.content;
    Role r;
    if (it.shape != Item::kObject || role.type != Seen::kString || content.type != Seen::kString ||
        !role_of(role.str, sharegpt, r))
      return false;
    turns_.push_back({r, content.str, {}});
  }
  return true;
}

bool Scan::accepts(std::string_view json, const RecordRules& rules) {
  items_.clear();
  turns_.clear();
  for (Seen& s : key_) s = {};
  column_.assign(rules.columns.size(), Seen{});

  if (!escapes_ok(json)) return false;
  od::document doc;
  od::object obj;
  if (parser_.iterate(json.data(), json.size(), json.size() + kParsePadding).get(doc) || doc.get_object().get(obj))
    return false;
  for (auto f : obj) {
    std::string_view key;
    od::value v;
    if (f.unescaped_key().get(key) || f.value().get(v)) return false;
    std::size_t k = key_of(key);
    Seen* first = k < kKeys && key_[k].type == Seen::kAbsent ? &key_[k] : nullptr;
    bool column_source = false;  // the first member named by some column
    for (std::size_t j = 0; j < rules.columns.size(); ++j)
      column_source |= column_[j].type == Seen::kAbsent && rules.columns[j].first == key;
    Seen s;
    const bool wanted = first || column_source;
    if (!value(v, wanted ? &s : nullptr, 1, /*items=*/wanted)) return false;
    if (first) *first = s;
    for (std::size_t j = 0; column_source && j < rules.columns.size(); ++j)
      if (column_[j].type == Seen::kAbsent && rules.columns[j].first == key) column_[j] = s;
  }
  // Nothing may follow the object.
  if (doc.current_location().error() != simdjson::OUT_OF_BOUNDS) return false;
  resolve(rules);

  auto has = [&](Key k) { return field_[idx(k)].present(); };
  auto text = [&](Key k) -> const Seen* {
    const Seen& s = field_[idx(k)];
    return s.type == Seen::kString ? &s : nullptr;
  };
  Format f = rules.format;
  if (f == Format::kAuto) {
    f = has(Key::kMessages)                           ? Format::kMessages
        : has(Key::kConversations)                    ? Format::kShareGpt
        : has(Key::kInstruction) && has(Key::kOutput) ? Format::kAlpaca
        : has(Key::kQuery) && has(Key::kResponse)     ? Format::kQueryResponse
                                                      : Format::kAuto;
  }
  switch (f) {
    case Format::kMessages:
    case Format::kShareGpt: {
      const bool sharegpt = f == Format::kShareGpt;
      if (!turns_from(field_[idx(sharegpt ? Key::kConversations : Key::kMessages)], sharegpt)) return false;
      break;
    }
    case Format::kAlpaca:
    case Format::kQueryResponse: {
      if (has(Key::kSystem)) {
        if (!text(Key::kSystem)) return false;
        turns_.push_back({Role::kSystem, text(Key::kSystem)->str, {}});
      }
      if (f == Format::kAlpaca) {
        const Seen *ins = text(Key::kInstruction), *out = text(Key::kOutput), *in = text(Key::kInput);
        if (!ins || !out || (has(Key::kInput) && !in)) return false;
        turns_.push_back({Role::kUser, ins->str, in ? in->str : std::string_view()});
        turns_.push_back({Role::kAssistant, out->str, {}});
        break;
      }
      if (has(Key::kHistory)) {
        const Seen& h = field_[idx(Key::kHistory)];
        if (h.type != Seen::kArray) return false;
        for (uint32_t i = h.first; i < h.first + h.count; ++i) {
          const Item& it = items_[i];
          if (it.shape != Item::kArray || it.size != 2 || it.at[0].type != Seen::kString ||
              it.at[1].type != Seen::kString)
            return false;
          turns_.push_back({Role::kUser, it.at[0].str, {}});
          turns_.push_back({Role::kAssistant, it.at[1].str, {}});
        }
      }
      const Seen *q = text(Key::kQuery), *r = text(Key::kResponse);
      if (!q || !r) return false;
      turns_.push_back({Role::kUser, q->str, {}});
      turns_.push_back({Role::kAssistant, r->str, {}});
      break;
    }
    case Format::kPromptCompletion:
    case Format::kText:  // plain text: the full parser reads it
    case Format::kAuto: return false;
  }
  if (!rules.placeholders.empty()) {
    // A placeholder could empty a turn; a turn that cannot hold one (no "{{",
    // no escape that might spell it) reads the same after substitution.
    for (const TurnView& t : turns_)
      for (std::string_view s : {t.text, t.suffix})
        if (s.find("{{") != std::string_view::npos || s.find('\\') != std::string_view::npos) return false;
  }
  return check_turns(turns_, rules.require_alternation, [](const TurnView& t) { return t.empty(); }).empty();
}

}  // namespace

bool scan_accepts(std::string_view json, const RecordRules& rules) {
  static thread_local Scan scan;
  return scan.accepts(json, rules);
}

}  // namespace tokfeed::text::detail
