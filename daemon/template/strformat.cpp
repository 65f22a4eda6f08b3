// Python's format(value, spec) and str.format / str.format_map as jinja2's
// sandbox runs them: CPython's format mini-language (formatter_unicode.c)
// for int, bool, float and str, and string.Formatter's field parsing,
// numbering and nested specs (Lib/string.py, MarkupIterator).
#include <algorithm>
#include <cmath>

#include "template/interp.hpp"
#include "template/pystr.hpp"

namespace tokfeed::tmpl {

namespace {

// A field wider than this is refused: it could not fit the render's output
// cap (RenderLimits::max_output) anyway.
constexpr int64_t kMaxField = 64 << 20;

struct FSpec {
  uint32_t fill = ' ';
  uint32_t align = 0;
  uint32_t sign = 0;
  bool z = false, alt = false;
  int64_t width = -1, prec = -1;
  char group = 0;      // ',' or '_'
  int group_size = 0;  // 3, or 4 for '_' in b o x X
  uint32_t type = 0;
};

bool is_align(uint32_t c) { return c == '<' || c == '>' || c == '=' || c == '^'; }

// The decimal value of a code point (any script's decimal digit), or -1.
int decimal_value(uint32_t cp) {
  if (cp >= '0' && cp <= '9') return static_cast<int>(cp - '0');
  if (cp < 0x80) return -1;
  std::string s;
  utf8_append(cp, s);
  int64_t v = 0;
  if (!py_isdecimal(s) || py_parse_int(s, v) != NumParse::kOk) return -1;
  return static_cast<int>(v);
}

std::string type_char(uint32_t t) {
  std::string s;
  utf8_append(t, s);
  return s;
}

// CPython's parse_internal_render_format_spec.
FSpec parse_spec(std::string_view spec, uint32_t default_type, uint32_t default_align, std::string_view tname) {
  std::vector<uint32_t> c = code_points(spec);
  std::size_t p = 0, n = c.size();
  FSpec f;
  f.align = default_align;
  f.type = default_type;
  bool fill_given = false, align_given = false;
  if (n >= 2 && is_align(c[1])) {
    f.fill = c[0], f.align = c[1], p = 2;
    fill_given = align_given = true;
  } else if (n >= 1 && is_align(c[0])) {
    f.align = c[0], p = 1;
    align_given = true;
  }
  if (p < n && (c[p] == '+' || c[p] == '-' || c[p] == ' ')) f.sign = c[p++];
  if (p < n && c[p] == 'z') f.z = true, ++p;
  if (p < n && c[p] == '#') f.alt = true, ++p;
  if (!fill_given && p < n && c[p] == '0') {
    f.fill = '0';
    if (!align_given && default_align == '>') f.align = '=';
    ++p;
  }
  auto number = [&](int64_t& out) {
    std::size_t start = p;
    int64_t v = 0;
    for (int d; p < n && (d = decimal_value(c[p])) >= 0; ++p) {
      v = v * 10 + d;
      if (v > kMaxField) throw Error("Too many decimal digits in format string");
    }
    if (p > start) out = v;
    return p > start;
  };
  number(f.width);
  if (p < n && c[p] == ',') f.group = ',', ++p;
  if (p < n && c[p] == '_') {
    if (f.group) throw Error("Cannot specify both ',' and '_'.");
    f.group = '_', ++p;
  }
  if (p < n && c[p] == ',' && f.group == '_') throw Error("Cannot specify both ',' and '_'.");
  if (p < n && c[p] == '.') {
    ++p;
    if (!number(f.prec)) throw Error("Format specifier missing precision");
  }
  if (n - p > 1)
    throw Error("Invalid format specifier '" + std::string(spec) + "' for object of type '" + std::string(tname) + "'");
  if (n - p == 1) f.type = c[p];
  if (f.group) {
    f.group_size = 3;
    switch (f.type) {
      case 'd':
      case 'e':
      case 'f':
      case 'g':
      case 'E':
      case 'G':
      case '%':
      case 'F':
      case 0: break;
      case 'b':
      case 'o':
      case 'x':
      case 'X':
        if (f.group == '_') {
          f.group_size = 4;
          break;
        }
        [[fallthrough]];
      default: throw Error(std::string("Cannot specify '") + f.group + "' with '" + type_char(f.type) + "'.");
    }
  }
  return f;
}

void append_fill(std::string& out, uint32_t fill, int64_t n) {
  if (fill < 0x80) {
    out.append(static_cast<std::size_t>(std::max<int64_t>(n, 0)), static_cast<char>(fill));
    return;
  }
  std::string one;
  utf8_append(fill, one);
  for (int64_t k = 0; k < n; ++k) out += one;
}

// The digits with their separators, padded with zeros to `min_width`
// (CPython's _PyUnicode_InsertThousandsGrouping).
std::string group_digits(std::string_view digits, int64_t min_width, char sep, int size) {
  std::string rev;
  int64_t remaining = static_cast<int64_t>(digits.size());
  std::size_t pos = digits.size();
  bool use_sep = false, broken = false;
  auto fill = [&](int64_t l) {
    int64_t zeros = std::max<int64_t>(0, l - remaining), chars = std::max<int64_t>(0, std::min(remaining, l));
    if (use_sep) rev += sep;
    for (int64_t k = 0; k < chars; ++k) rev += digits[--pos];
    rev.append(static_cast<std::size_t>(zeros), '0');
    remaining -= chars;
  };
  if (size > 0) {
    while (true) {
      int64_t l = std::min<int64_t>(size, std::max({remaining, min_width, int64_t{1}}));
      fill(l);
      use_sep = true;
      min_width -= l;
      if (remaining <= 0 && min_width <= 0) {
        broken = true;
        break;
      }
      min_width -= 1;
    }
  }
  if (!broken) fill(std::max({remaining, min_width, int64_t{1}}));
  std::reverse(rev.begin(), rev.end());
  return rev;
}

// CPython's calc_number_widths and fill_number: | lpad sign prefix spad
// digits decimal remainder rpad |. `digits` is ASCII but for 'c'.
std::string layout_number(const FSpec& f, bool neg, std::string_view prefix, std::string_view digits, bool decimal,
                          std::string_view remainder) {
  std::string sign;
  if (f.sign == '+') sign = neg ? "-" : "+";
  else if (f.sign == ' ') sign = neg ? "-" : " ";
  else if (neg) sign = "-";
  int64_t ndigits = static_cast<int64_t>(py_len(digits));
  int64_t non_digit = static_cast<int64_t>(sign.size() + prefix.size() + (decimal ? 1 : 0) + py_len(remainder));
  int64_t min_width = f.fill == '0' && f.align == '=' ? f.width - non_digit : 0;
  std::string grouped;
  if (ndigits == 0) {
  } else if (f.type == 'c') {
    grouped.assign(static_cast<std::size_t>(std::max<int64_t>(0, min_width - 1)), '0');
    grouped += digits;
  } else {
    grouped = group_digits(digits, min_width, f.group, f.group ? f.group_size : 0);
  }
  int64_t pad = f.width - (non_digit + static_cast<int64_t>(py_len(grouped)));
  int64_t lpad = 0, spad = 0, rpad = 0;
  if (pad > 0) {
    if (f.align == '<') rpad = pad;
    else if (f.align == '^') lpad = pad / 2, rpad = pad - lpad;
    else if (f.align == '=') spad = pad;
    else lpad = pad;
  }
  std::string out;
  append_fill(out, f.fill, lpad);
  out += sign;
  out += prefix;
  append_fill(out, f.fill, spad);
  out += grouped;
  if (decimal) out += '.';
  out += remainder;
  append_fill(out, f.fill, rpad);
  return out;
}

std::string format_str(std::string_view s, const FSpec& f) {
  if (f.sign)
    throw Error(f.sign == ' ' ? "Space not allowed in string format specifier"
                              : "Sign not allowed in string format specifier");
  if (f.z) throw Error("Negative zero coercion (z) not allowed in format specifier");
  if (f.alt) throw Error("Alternate form (#) not allowed in string format specifier");
  if (f.align == '=') throw Error("'=' alignment not allowed in string format specifier");
  int64_t len = static_cast<int64_t>(py_len(s));
  std::string body(s);
  if (f.prec >= 0 && len > f.prec) {
    std::vector<uint32_t> cps = code_points(s);
    body.clear();
    for (int64_t k = 0; k < f.prec; ++k) utf8_append(cps[static_cast<std::size_t>(k)], body);
    len = f.prec;
  }
  int64_t total = std::max(f.width, len), lpad = 0;
  if (f.align == '>') lpad = total - len;
  else if (f.align == '^') lpad = (total - len) / 2;
  std::string out;
  append_fill(out, f.fill, lpad);
  out += body;
  append_fill(out, f.fill, total - len - lpad);
  return out;
}

// The digits of a finite |d| as PyOS_double_to_string writes them for
// `type` (e E f F g G, 'r' repr, 0 the no-type float format: 'r' without a
// precision, else 'g' with a digit after the point and the exponent from p-1).
std::string float_body(double d, uint32_t type, int64_t prec, bool alt) {
  if (type == 0 && prec < 0) {  // repr
    std::string r;
    append_float(d, r);
    if (alt && r.find('.') == std::string::npos) {
      std::size_t e = r.find('e');
      r.insert(e == std::string::npos ? r.size() : e, ".");
    }
    return r;
  }
  if (prec > kMaxField) throw Error("precision too big");
  int p = static_cast<int>(prec < 0 ? 6 : prec);
  if (type != 0) return float_digits(d, static_cast<char>(type), p, alt);
  if (p == 0) p = 1;
  std::string e = float_digits(d, 'e', p - 1, true);
  int exp = std::atoi(e.c_str() + e.find('e') + 1);
  std::string r;
  bool use_exp = exp + 1 <= -4 || exp + 1 > p - 1;
  r = use_exp ? float_digits(d, 'e', p - 1, alt) : float_digits(d, 'f', p - 1 - exp, true);
  if (alt) return r;
  std::size_t e_at = r.find('e'), end = e_at == std::string::npos ? r.size() : e_at;
  std::size_t dot = r.find('.');
  if (dot == std::string::npos || dot > end) return r;
  std::size_t cut = end;
  while (cut > dot + 1 && r[cut - 1] == '0') --cut;
  if (cut == dot + 1) cut = use_exp ? dot : dot + 2;  // 1e+20, 1.0
  return r.substr(0, cut) + r.substr(end);
}

std::string format_float(double d, FSpec f) {
  uint32_t type = f.type == 'n' ? 'g' : f.type;
  bool pct = type == '%';
  if (pct) type = 'f', d *= 100;
  bool neg = std::signbit(d) && !std::isnan(d);
  std::string body;
  if (std::isnan(d) || std::isinf(d)) {
    body = std::isnan(d) ? "nan" : "inf";
    if (type == 'E' || type == 'F' || type == 'G') body = py_upper(body);
  } else {
    body = float_body(std::fabs(d), type, f.prec, f.alt);
  }
  if (neg && f.z && std::isfinite(d) && body.find_first_of("123456789") >= body.find_first_of("eE")) {
    neg = false;
  }
  if (pct) body += '%';
  std::size_t ndig = 0;
  while (ndig < body.size() && body[ndig] >= '0' && body[ndig] <= '9') ++ndig;
  bool decimal = ndig < body.size() && body[ndig] == '.';
  return layout_number(f, neg, "", std::string_view(body).substr(0, ndig), decimal,
                       std::string_view(body).substr(ndig + (decimal ? 1 : 0)));
}

std::string format_int(int64_t n, const FSpec& f, std::string_view tname) {
  if (f.prec >= 0) throw Error("Precision not allowed in integer format specifier");
  if (f.z) throw Error("Negative zero coercion (z) not allowed in integer format specifier");
  if (f.type == 'c') {
    if (f.sign) throw Error("Sign not allowed with integer format specifier 'c'");
    if (f.alt) throw Error("Alternate form (#) not allowed with integer format specifier 'c'");
    if (n < 0 || n > 0x10ffff) throw Error("%c arg not in range(0x110000)");
    std::string ch;
    utf8_append(static_cast<uint32_t>(n), ch);
    return layout_number(f, false, "", ch, false, "");
  }
  int base = 10;
  std::string prefix;
  switch (f.type) {
    case 'b': base = 2, prefix = "0b"; break;
    case 'o': base = 8, prefix = "0o"; break;
    case 'x': base = 16, prefix = "0x"; break;
    case 'X': base = 16, prefix = "0X"; break;
    case 'd':
    case 'n': break;
    default:
      throw Error("Unknown format code '" + type_char(f.type) + "' for object of type '" + std::string(tname) + "'");
  }
  bool neg = n < 0;
  uint64_t u = neg ? 0 - static_cast<uint64_t>(n) : static_cast<uint64_t>(n);
  const char* digits = f.type == 'X' ? "0123456789ABCDEF" : "0123456789abcdef";
  std::string body;
  do {
    body += digits[u % static_cast<uint64_t>(base)];
    u /= static_cast<uint64_t>(base);
  } while (u);
  std::reverse(body.begin(), body.end());
  return layout_number(f, neg, f.alt ? prefix : "", body, false, "");
}

// Python's str.isdigit() of a field name (any Unicode digit).
bool all_digits(std::string_view s) { return !s.empty() && py_isdigit(s); }

// A field name's first part as string.Formatter reads it: an index where
// every code point is a decimal digit, else a key.
bool as_index(std::string_view s, int64_t& idx) {
  if (s.empty()) return false;
  int64_t v = 0;
  for (uint32_t cp : code_points(s)) {
    int d = decimal_value(cp);
    if (d < 0) return false;
    v = v * 10 + d;
    if (v > (int64_t{1} << 53)) throw Error("Too many decimal digits in format string");
  }
  idx = v;
  return true;
}

struct Formatter {
  const Args& a;
  const Value* map;  // format_map's mapping, or null
  int64_t auto_idx = 0;
  bool manual = false;  // string.Formatter's auto_arg_index = False

  const Value& value_of(std::string_view key) {
    int64_t idx;
    if (as_index(key, idx)) {
      if (map || idx >= static_cast<int64_t>(a.pos.size())) throw Error("IndexError: tuple index out of range");
      return a.pos[static_cast<std::size_t>(idx)];
    }
    if (map) {
      if (!map->is_dict() || map->ns) throw Error("'" + std::string(type_name(*map)) + "' object is not subscriptable");
      if (const Value* v = map->dict->find(key)) return *v;
    } else {
      for (auto& [k, x] : a.kw)
        if (k == key) return x;
    }
    throw Error("KeyError: '" + std::string(key) + "'");
  }

  // string.Formatter.get_field: the first part, then .attr and [item] as
  // the sandbox's getattr and getitem read them.
  Value field(std::string_view name) {
    std::size_t i = name.find_first_of(".[");
    if (i == std::string_view::npos) i = name.size();
    Value obj = value_of(name.substr(0, i));
    while (i < name.size()) {
      char c = name[i++];
      std::size_t start = i;
      if (c == '.') {
        while (i < name.size() && name[i] != '.' && name[i] != '[') ++i;
        if (i == start) throw Error("Empty attribute in format string");
        obj = get_attr(obj, name.substr(start, i - start));
      } else if (c == '[') {
        while (i < name.size() && name[i] != ']') ++i;
        if (i >= name.size()) throw Error("Missing ']' in format string");
        std::string_view key = name.substr(start, i - start);
        ++i;
        if (key.empty()) throw Error("Empty attribute in format string");
        int64_t idx;
        obj = as_index(key, idx) ? get_item(obj, Value::integer(idx)) : get_item(obj, Value::str(std::string(key)));
      } else {
        throw Error("Only '.' or '[' may follow ']' in format field specifier");
      }
    }
    return obj;
  }

  std::string run(std::string_view f, int depth) {
    if (depth < 0) throw Error("Max string recursion exceeded");
    std::string out;
    std::size_t i = 0, n = f.size();
    while (i < n) {
      std::size_t start = i;
      char c = 0;
      bool markup = false;
      while (i < n) {
        c = f[i++];
        if (c == '{' || c == '}') {
          markup = true;
          break;
        }
      }
      bool at_end = i >= n;
      std::size_t len = i - start;
      if (markup && c == '}' && (at_end || f[i] != '}')) throw Error("Single '}' encountered in format string");
      if (markup && c == '{' && at_end) throw Error("Single '{' encountered in format string");
      if (markup) {
        if (f[i] == c) ++i, markup = false;
        else --len;
      }
      out.append(f.substr(start, len));
      if (!markup) continue;
      // The field: name, then !conversion, then :spec up to the matching '}'.
      std::size_t name_start = i;
      c = 0;
      while (i < n) {
        c = f[i++];
        if (c == '{') throw Error("unexpected '{' in field name");
        if (c == '[') {
          while (i < n && f[i] != ']') ++i;
          continue;
        }
        if (c == '}' || c == ':' || c == '!') break;
      }
      std::string_view name = f.substr(name_start, i - 1 - name_start);
      char conv = 0;
      std::string_view spec;
      if (c == '!' || c == ':') {
        bool spec_follows = true;
        if (c == '!') {
          if (i >= n) throw Error("end of string while looking for conversion specifier");
          conv = f[i++];
          if (i < n) {
            c = f[i++];
            if (c == '}') spec_follows = false;
            else if (c != ':') throw Error("expected ':' after conversion specifier");
          }
        }
        if (spec_follows) {
          std::size_t spec_start = i;
          int count = 1;
          while (i < n && count) {
            c = f[i++];
            count += c == '{' ? 1 : c == '}' ? -1 : 0;
          }
          if (count) throw Error("unmatched '{' in format spec");
          spec = f.substr(spec_start, i - 1 - spec_start);
        }
      } else if (c != '}') {
        throw Error("expected '}' before end of string");
      }
      std::string auto_name;
      if (name.empty()) {
        if (manual) throw Error("cannot switch from manual field specification to automatic field numbering");
        auto_name = std::to_string(auto_idx++);
        name = auto_name;
      } else if (all_digits(name)) {
        if (auto_idx) throw Error("cannot switch from manual field specification to automatic field numbering");
        manual = true;
      }
      Value obj = field(name);
      if (conv) {
        std::string s;
        if (conv == 'r') append_repr(obj, s);
        else if (conv == 's') append_str(obj, s);
        else if (conv == 'a') s = ascii_repr(obj);
        else throw Error("Unknown conversion specifier " + std::string(1, conv));
        obj = Value::str(std::move(s));
      }
      std::string expanded = run(spec, depth - 1);
      out += format_value(obj, expanded);
    }
    return out;
  }
};

}  // namespace

namespace {

// The presentation types that format any number as a float.
bool float_type(char t) { return t == 'e' || t == 'E' || t == 'f' || t == 'F' || t == 'g' || t == 'G' || t == '%'; }

}  // namespace

std::string format_value(const Value& v, std::string_view spec) {
  std::string_view tname = type_name(v);
  if (spec.empty()) {
    std::string s;
    append_str(v, s);
    return s;
  }
  switch (v.kind) {
    case Kind::kStr: {
      FSpec f = parse_spec(spec, 's', '<', tname);
      if (f.type != 's')
        throw Error("Unknown format code '" + type_char(f.type) + "' for object of type '" + std::string(tname) + "'");
      return format_str(*v.s, f);
    }
    case Kind::kInt:
    case Kind::kBool: {
      FSpec f = parse_spec(spec, 'd', '>', tname);
      int64_t n = v.kind == Kind::kBool ? v.b : v.i;
      return float_type(f.type) ? format_float(static_cast<double>(n), f) : format_int(n, f, tname);
    }
    case Kind::kFloat: {
      FSpec f = parse_spec(spec, 0, '>', tname);
      if (f.type == 0 || f.type == 'n' || float_type(f.type)) return format_float(v.f, f);
      throw Error("Unknown format code '" + type_char(f.type) + "' for object of type '" + std::string(tname) + "'");
    }
    default: throw Error("unsupported format string passed to " + std::string(tname) + ".__format__");
  }
}

std::string str_format(const std::string& s, const Args& args, bool map) {
  if (map && (args.pos.size() != 1 || !args.kw.empty()))
    throw Error("format_map() takes exactly one argument " + std::to_string(args.pos.size() + 1) + " given");
  Formatter fm{args, map ? &args.pos[0] : nullptr};
  return fm.run(s, 2);
}

}  // namespace tokfeed::tmpl
