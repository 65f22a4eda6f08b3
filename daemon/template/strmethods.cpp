// Python's str methods as templates call them: CPython's signatures
// (argument counts, keywords, types), its index rules for start/end, and
// its results, on code points.
#include <array>
#include <algorithm>
#include <cstring>
#include <span>

#include "template/interp.hpp"
#include "template/name_index.hpp"
#include "template/pystr.hpp"

namespace tokfeed::tmpl {

namespace {

struct Sig {
  std::string_view name;
  uint8_t min, max;
  std::string_view kw[2];  // parameters that may be passed by keyword
};

constexpr Sig kSigs[] = {
    {"strip", 0, 1, {}},
    {"lstrip", 0, 1, {}},
    {"rstrip", 0, 1, {}},
    {"split", 0, 2, {"sep", "maxsplit"}},
    {"rsplit", 0, 2, {"sep", "maxsplit"}},
    {"splitlines", 0, 1, {"keepends"}},
    {"startswith", 1, 3, {}},
    {"endswith", 1, 3, {}},
    {"upper", 0, 0, {}},
    {"lower", 0, 0, {}},
    {"title", 0, 0, {}},
    {"capitalize", 0, 0, {}},
    {"casefold", 0, 0, {}},
    {"swapcase", 0, 0, {}},
    {"replace", 2, 3, {}},
    {"find", 1, 3, {}},
    {"rfind", 1, 3, {}},
    {"index", 1, 3, {}},
    {"rindex", 1, 3, {}},
    {"count", 1, 3, {}},
    {"join", 1, 1, {}},
    {"isdigit", 0, 0, {}},
    {"isalpha", 0, 0, {}},
    {"isalnum", 0, 0, {}},
    {"isspace", 0, 0, {}},
    {"isupper", 0, 0, {}},
    {"islower", 0, 0, {}},
    {"istitle", 0, 0, {}},
    {"isnumeric", 0, 0, {}},
    {"isdecimal", 0, 0, {}},
    {"isidentifier", 0, 0, {}},
    {"isascii", 0, 0, {}},
    {"isprintable", 0, 0, {}},
    {"partition", 1, 1, {}},
    {"rpartition", 1, 1, {}},
    {"removeprefix", 1, 1, {}},
    {"removesuffix", 1, 1, {}},
    {"zfill", 1, 1, {}},
    {"center", 1, 2, {}},
    {"ljust", 1, 2, {}},
    {"rjust", 1, 2, {}},
    {"expandtabs", 0, 1, {"tabsize"}},
};
// The methods' names: kSigs', then those of format and format_map (which
// take any arguments). A method is known by its place here.
constexpr std::size_t kSigCount = std::size(kSigs);
constexpr auto kNames = [] {
  std::array<std::string_view, kSigCount + 2> n{};
  for (std::size_t k = 0; k < kSigCount; ++k) n[k] = kSigs[k].name;
  n[kSigCount] = "format";
  n[kSigCount + 1] = "format_map";
  return n;
}();
constexpr NameIndex kMethods(kNames);
constexpr int method_id(std::string_view name) {
  for (std::size_t k = 0; k < kNames.size(); ++k)
    if (kNames[k] == name) return static_cast<int>(k);
  throw "not a str method";  // at compile time: a misspelt name does not compile
}
constexpr int kStrip = method_id("strip"), kLstrip = method_id("lstrip"), kRstrip = method_id("rstrip"),
              kSplit = method_id("split"), kRsplit = method_id("rsplit"), kFormat = method_id("format"),
              kFormatMap = method_id("format_map");

// The arguments bound to a method's parameters (null: not passed).
using Bound = std::array<const Value*, 3>;

// CPython's errors for arguments that do not fit `sig`, in its order.
[[gnu::noinline]] Bound bind_slow(const Sig& sig, const Args& a) {
  const std::string n(sig.name);
  if (a.pos.size() > sig.max)
    throw Error(n + "() takes at most " + std::to_string(sig.max) + " argument" + (sig.max == 1 ? "" : "s") + " (" +
                std::to_string(a.pos.size()) + " given)");
  Bound out{};
  for (std::size_t k = 0; k < a.pos.size(); ++k) out[k] = &a.pos[k];
  for (const auto& [k, v] : a.kw) {
    std::size_t at = 0;
    while (at < 2 && sig.kw[at] != k) ++at;
    if (at == 2 || sig.kw[at].empty())
      throw Error(sig.kw[0].empty() ? n + "() takes no keyword arguments"
                                    : "'" + k + "' is an invalid keyword argument for " + n + "()");
    if (out[at])
      throw Error("argument for " + n + "() given by name ('" + k + "') and position (" + std::to_string(at + 1) + ")");
    out[at] = &v;
  }
  for (std::size_t k = 0; k < sig.min; ++k)
    if (!out[k]) throw Error(n + "() takes at least " + std::to_string(sig.min) + " argument (0 given)");
  return out;
}

Bound bind(int m, const Args& a) {
  const Sig& sig = kSigs[m];
  // Positional arguments only, as many as the method takes: bound as they are.
  if (a.kw.empty() && a.pos.size() >= sig.min && a.pos.size() <= sig.max) [[likely]] {
    Bound out{};
    for (std::size_t k = 0; k < a.pos.size(); ++k) out[k] = &a.pos[k];
    return out;
  }
  return bind_slow(sig, a);
}

bool int_like(const Value& v) { return v.kind == Kind::kInt || v.kind == Kind::kBool; }

// An integer argument (Python's __index__: int or bool).
int64_t index_arg(const Value& v) {
  if (!int_like(v)) throw Error("'" + std::string(type_name(v)) + "' object cannot be interpreted as an integer");
  return v.kind == Kind::kBool ? v.b : v.i;
}

const std::string& str_arg(const Value& v, std::string_view method) {
  if (!v.is_str()) throw Error(std::string(method) + "() argument must be str, not " + std::string(type_name(v)));
  return *v.s;
}

// An optional str argument, None or absent: nullopt. A view of the argument's
// text, which outlives the call.
std::optional<std::string_view> opt_str(const Value* v, std::string_view method) {
  if (!v || v->is_none()) return std::nullopt;
  if (!v->is_str()) throw Error(std::string(method) + " arg must be None or str");
  return std::string_view(*v->s);
}

Value str_list(std::vector<std::string> parts) {
  std::vector<Value> out;
  out.reserve(parts.size());
  for (auto& p : parts) out.push_back(Value::str(std::move(p)));
  return Value::new_list(std::move(out));
}

// Byte offset of each code point, and one past the end.
std::vector<std::size_t> cp_offsets(std::string_view s) {
  std::vector<std::size_t> off;
  off.reserve(s.size() + 1);
  for (std::size_t i = 0; i < s.size();) {
    off.push_back(i);
    uint32_t cp;
    i += utf8_decode(s, i, cp);
  }
  off.push_back(s.size());
  return off;
}

// CPython's ADJUST_INDICES for optional start/end (None or absent: the ends).
void adjust(const Value* st, const Value* en, int64_t len, int64_t& start, int64_t& end) {
  start = st && !st->is_none() ? index_arg(*st) : 0;
  end = en && !en->is_none() ? index_arg(*en) : len;
  if (end > len) end = len;
  else if (end < 0) end = std::max<int64_t>(end + len, 0);
  if (start < 0) start = std::max<int64_t>(start + len, 0);
}

// find/rfind/index/rindex/count(sub[, start[, end]]).
Value search(const std::string& s, std::string_view name, const Bound& p) {
  const std::string& sub = str_arg(*p[0], name);
  std::vector<std::size_t> off = cp_offsets(s);
  int64_t len = static_cast<int64_t>(off.size()) - 1, start, end;
  adjust(p[1], p[2], len, start, end);
  int64_t sublen = static_cast<int64_t>(py_len(sub));
  bool count = name == "count", rev = name[0] == 'r', must = name == "index" || name == "rindex";
  if (end - start < sublen) {
    if (must) throw Error("substring not found");
    return Value::integer(count ? 0 : -1);
  }
  if (sublen == 0) return Value::integer(count ? end - start + 1 : rev ? end : start);
  std::string_view hay = std::string_view(s).substr(
      off[static_cast<std::size_t>(start)], off[static_cast<std::size_t>(end)] - off[static_cast<std::size_t>(start)]);
  if (count) {
    int64_t n = 0;
    for (std::size_t at = hay.find(sub); at != std::string_view::npos; at = hay.find(sub, at + sub.size())) ++n;
    return Value::integer(n);
  }
  std::size_t at = rev ? hay.rfind(sub) : hay.find(sub);
  if (at == std::string_view::npos) {
    if (must) throw Error("substring not found");
    return Value::integer(-1);
  }
  return Value::integer(start + static_cast<int64_t>(py_len(hay.substr(0, at))));
}

// startswith/endswith(prefix or tuple of prefixes[, start[, end]]).
Value tailmatch(const std::string& s, std::string_view name, const Bound& p) {
  const Value& x = *p[0];
  const bool tuple = x.is_list() && x.tuple;
  const std::span<const Value> subs = tuple ? std::span<const Value>(x.list->items) : std::span<const Value>(&x, 1);
  // Without start and end, bytes are compared: strings are valid UTF-8, so
  // a prefix or suffix that matches byte for byte starts at a character and
  // matches character for character.
  auto absent = [&](std::size_t i) { return i >= p.size() || !p[i] || p[i]->is_none(); };
  if (absent(1) && absent(2)) {
    const std::string_view all(s);
    const bool starts = name == "startswith";
    for (const Value& v : subs) {
      if (!v.is_str())
        throw Error(std::string(name) + " first arg must be str or a tuple of str, not " + std::string(type_name(v)));
      if (starts ? all.starts_with(*v.s) : all.ends_with(*v.s)) return Value::boolean(true);
    }
    return Value::boolean(false);
  }
  std::vector<std::size_t> off = cp_offsets(s);
  int64_t len = static_cast<int64_t>(off.size()) - 1, start, end;
  adjust(p[1], p[2], len, start, end);
  for (const Value& v : subs) {
    if (!v.is_str())
      throw Error(std::string(name) + " first arg must be str or a tuple of str, not " + std::string(type_name(v)));
    int64_t slen = static_cast<int64_t>(py_len(*v.s));
    if (end - slen < start) continue;
    if (slen == 0) return Value::boolean(true);
    std::size_t b = off[static_cast<std::size_t>(name == "startswith" ? start : end - slen)];
    if (std::string_view(s).substr(b, v.s->size()) == *v.s) return Value::boolean(true);
  }
  return Value::boolean(false);
}

std::string repeat(std::string_view fill, int64_t n) {
  std::string r;
  for (int64_t k = 0; k < n; ++k) r += fill;
  return r;
}

// Markup's str methods (markupsafe): the same text, Markup again, where
// the method gives a str (or a list or tuple of them); `replace`'s new
// text, a fill char, `join`'s items and `format`'s str arguments escaped.
Value markup_method(const Value& obj, std::string_view name, Args& a) {
  static constexpr std::string_view kMarked[] = {
      "capitalize", "title",    "lower",        "upper",        "replace",   "ljust",      "rjust",
      "lstrip",     "rstrip",   "center",       "strip",        "translate", "expandtabs", "swapcase",
      "zfill",      "casefold", "removeprefix", "removesuffix", "partition", "rpartition", "format",
      "join",       "split",    "rsplit",       "splitlines"};
  if (std::find(std::begin(kMarked), std::end(kMarked), name) == std::end(kMarked)) return str_method(*obj.s, name, a);
  auto escape_at = [&](std::size_t k) {
    if (k < a.pos.size() && a.pos[k].is_str()) a.pos[k] = markup_escape(a.pos[k]);
  };
  if (name == "replace" || name == "ljust" || name == "rjust" || name == "center") {
    escape_at(1);  // the new text, the fill char
  } else if (name == "format") {
    for (Value& x : a.pos)
      if (x.is_str()) x = markup_escape(x);
    for (auto& [k, x] : a.kw)
      if (x.is_str()) x = markup_escape(x);
  } else if (name == "join" && !a.pos.empty()) {
    std::vector<Value> items = iterate(a.pos[0]);
    for (Value& x : items) x = markup_escape(x);
    a.pos[0] = Value::new_list(std::move(items));
  }
  Value r = str_method(*obj.s, name, a);
  if (r.is_str()) {
    r.markup = true;
  } else if (r.is_list()) {
    for (Value& x : r.list->items) x.markup = x.is_str();
  }
  return r;
}

// The method `m` (named `name`) of `s`.
Value run_method(const std::string& s, int m, std::string_view name, Args& a) {
  if (m == kFormat || m == kFormatMap) return Value::str(str_format(s, a, m == kFormatMap));
  const Bound p = bind(m, a);
  if (m == kStrip || m == kLstrip || m == kRstrip)
    return Value::str(std::string(py_strip(s, opt_str(p[0], name), m != kRstrip, m != kLstrip)));
  if (m == kSplit || m == kRsplit) {
    auto sep = opt_str(p[0], name);
    if (sep && sep->empty()) throw Error("empty separator");
    return str_list(py_split(s, sep, p[1] ? index_arg(*p[1]) : -1, m == kRsplit));
  }
  if (name == "splitlines") return str_list(py_splitlines(s, p[0] && index_arg(*p[0]) != 0));
  if (name == "startswith" || name == "endswith") return tailmatch(s, name, p);
  if (name == "upper") return Value::str(py_upper(s));
  if (name == "lower") return Value::str(py_lower(s));
  if (name == "casefold") return Value::str(py_casefold(s));
  if (name == "title") return Value::str(py_title(s));
  if (name == "capitalize") return Value::str(py_capitalize(s));
  if (name == "swapcase") return Value::str(py_swapcase(s));
  if (name == "replace") {
    const std::string& from = str_arg(*p[0], name);
    const std::string& to = str_arg(*p[1], name);
    return Value::str(py_replace(s, from, to, p[2] ? index_arg(*p[2]) : -1));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count")
    return search(s, name, p);
  if (name == "join") {
    std::string out;
    std::size_t k = 0;
    for (const Value& v : iterate(*p[0])) {
      if (!v.is_str())
        throw Error("sequence item " + std::to_string(k) + ": expected str instance, " + std::string(type_name(v)) +
                    " found");
      if (k++) out += s;
      out += *v.s;
    }
    return Value::str(std::move(out));
  }
  if (name == "isdigit") return Value::boolean(py_isdigit(s));
  if (name == "isnumeric") return Value::boolean(py_isnumeric(s));
  if (name == "isdecimal") return Value::boolean(py_isdecimal(s));
  if (name == "isidentifier") return Value::boolean(py_isidentifier(s));
  if (name == "isascii") return Value::boolean(std::all_of(s.begin(), s.end(), [](char c) { return (c & 0x80) == 0; }));
  if (name == "isprintable") return Value::boolean(py_isprintable(s));
  if (name == "isalpha") return Value::boolean(py_isalpha(s));
  if (name == "isalnum") return Value::boolean(py_isalnum(s));
  if (name == "isspace") return Value::boolean(py_isspace_str(s));
  if (name == "isupper") return Value::boolean(py_isupper(s));
  if (name == "islower") return Value::boolean(py_islower(s));
  if (name == "istitle") return Value::boolean(py_istitle(s));
  if (name == "partition" || name == "rpartition") {
    const std::string& sep = str_arg(*p[0], name);
    if (sep.empty()) throw Error("empty separator");
    std::size_t at = name == "partition" ? s.find(sep) : s.rfind(sep);
    std::vector<Value> r;
    if (at == std::string::npos) {
      if (name == "partition") r = {Value::str(s), Value::str(""), Value::str("")};
      else r = {Value::str(""), Value::str(""), Value::str(s)};
    } else {
      r = {Value::str(s.substr(0, at)), Value::str(sep), Value::str(s.substr(at + sep.size()))};
    }
    return Value::new_list(std::move(r), true);
  }
  if (name == "removeprefix" || name == "removesuffix") {
    const std::string& x = str_arg(*p[0], name);
    if (name == "removeprefix" && s.compare(0, x.size(), x) == 0) return Value::str(s.substr(x.size()));
    if (name == "removesuffix" && !x.empty() && s.size() >= x.size() &&
        s.compare(s.size() - x.size(), x.size(), x) == 0)
      return Value::str(s.substr(0, s.size() - x.size()));
    return Value::str(s);
  }
  if (name == "zfill" || name == "center" || name == "ljust" || name == "rjust") {
    int64_t width = index_arg(*p[0]);
    std::string fill = " ";
    if (p.size() > 1 && p[1]) {
      if (!p[1]->is_str() || py_len(*p[1]->s) != 1)
        throw Error("The fill character must be exactly one character long");
      fill = *p[1]->s;
    }
    int64_t len = static_cast<int64_t>(py_len(s));
    if (width <= len) return Value::str(s);
    int64_t pad = width - len;
    if (pad > (64 << 20)) throw Error("the padded string would pass the output limit");
    if (name == "zfill") {
      if (!s.empty() && (s[0] == '-' || s[0] == '+'))
        return Value::str(s.substr(0, 1) + repeat("0", pad) + s.substr(1));
      return Value::str(repeat("0", pad) + s);
    }
    if (name == "ljust") return Value::str(s + repeat(fill, pad));
    if (name == "rjust") return Value::str(repeat(fill, pad) + s);
    int64_t left = pad / 2 + (pad & width & 1);  // CPython's centering
    return Value::str(repeat(fill, left) + s + repeat(fill, pad - left));
  }
  // expandtabs: a tab pads to the next multiple of tabsize (dropped when tabsize <= 0).
  int64_t tab = p[0] ? index_arg(*p[0]) : 8;
  std::string r;
  int64_t col = 0;
  for (uint32_t cp : code_points(s)) {
    if (cp == '\t') {
      if (tab > 0) {
        int64_t n = tab - col % tab;
        if (static_cast<int64_t>(r.size()) + n > (64 << 20))
          throw Error("the expanded string would pass the output limit");
        r.append(static_cast<std::size_t>(n), ' ');
        col += n;
      }
    } else {
      utf8_append(cp, r);
      col = cp == '\n' || cp == '\r' ? 0 : col + 1;
    }
  }
  return Value::str(std::move(r));
}

}  // namespace

Value str_method(const Value& obj, std::string_view name, Args& a) {
  if (obj.markup) return markup_method(obj, name, a);
  const int m = kMethods.find(name);
  if (m < 0) return str_method(*obj.s, name, a);  // not a method: its error
  // strip, lstrip, rstrip that strip nothing: the same str, not a copy.
  if (m == kStrip || m == kLstrip || m == kRstrip) {
    const std::string& s = *obj.s;
    const Bound p = bind(m, a);
    std::string_view r = py_strip(s, opt_str(p[0], name), m != kRstrip, m != kLstrip);
    return r.size() == s.size() ? obj : Value::str(std::string(r));
  }
  // split, rsplit by a separator the str does not hold: [the same str].
  if (m == kSplit || m == kRsplit) {
    const Bound p = bind(m, a);
    const std::string& s = *obj.s;
    if (p[0] && p[0]->is_str() && !p[0]->s->empty() && s.find(*p[0]->s) == std::string::npos) {
      if (p[1]) index_arg(*p[1]);
      return Value::new_list(std::vector<Value>{obj});
    }
  }
  return run_method(*obj.s, m, name, a);
}

Value str_method(const std::string& s, std::string_view name, Args& a) {
  const int m = kMethods.find(name);
  if (m < 0) throw Error("'str' object has no attribute '" + std::string(name) + "'");
  return run_method(s, m, name, a);
}

}  // namespace tokfeed::tmpl
