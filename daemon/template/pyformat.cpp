// Python's printf-style `str % args`, as CPython's unicode_format does it:
// flags, `*` widths, precision, widths and truncation in code points, every
// conversion (d i u o x X e E f F g G c r a s %), mapping keys, and the
// argument checks (a mapping right operand need not be used).
#include <cmath>
#include <cstdio>

#include "template/interp.hpp"
#include "template/pystr.hpp"

namespace tokfeed::tmpl {

namespace {

// A field wider than this is refused: the output could not fit the render's
// output cap (RenderLimits::max_output) anyway.
constexpr int64_t kMaxField = 64 << 20;

struct Spec {
  bool left = false, plus = false, space = false, alt = false, zero = false;
  int64_t width = -1, prec = -1;
};

bool int_like(const Value& v) { return v.kind == Kind::kInt || v.kind == Kind::kBool; }
int64_t as_int(const Value& v) { return v.kind == Kind::kBool ? v.b : v.i; }

// Pads `body` (sign and prefix first when zero-padding) to the width.
void pad(const Spec& sp, std::string_view sign, std::string_view body, std::string& out, bool numeric) {
  int64_t len = static_cast<int64_t>(py_len(sign) + py_len(body));
  std::size_t fill = sp.width > len ? static_cast<std::size_t>(sp.width - len) : 0;
  if (sp.left) {
    out.append(sign).append(body).append(fill, ' ');
  } else if (sp.zero && numeric) {
    out.append(sign).append(fill, '0').append(body);
  } else {
    out.append(fill, ' ').append(sign).append(body);
  }
}

// %d %i %u %o %x %X of an integer: its sign and its digits.
void format_digits(const Spec& sp, char conv, bool neg, std::string body, std::string& out) {
  int base = conv == 'o' ? 8 : (conv == 'x' || conv == 'X') ? 16 : 10;
  if (sp.prec > static_cast<int64_t>(body.size())) body.insert(0, static_cast<std::size_t>(sp.prec) - body.size(), '0');
  std::string sign = neg ? "-" : sp.plus ? "+" : sp.space ? " " : "";
  if (sp.alt && base != 10) sign += conv == 'o' ? "0o" : conv == 'x' ? "0x" : "0X";
  pad(sp, sign, body, out, true);
}

void format_int(const Spec& sp, char conv, int64_t n, std::string& out) {
  bool neg = n < 0;
  uint64_t u = neg ? 0 - static_cast<uint64_t>(n) : static_cast<uint64_t>(n);
  uint64_t base = conv == 'o' ? 8 : (conv == 'x' || conv == 'X') ? 16 : 10;
  const char* digits = conv == 'X' ? "0123456789ABCDEF" : "0123456789abcdef";
  std::string body;
  do {
    body.insert(body.begin(), digits[u % base]);
    u /= base;
  } while (u);
  format_digits(sp, conv, neg, std::move(body), out);
}

// %e %E %f %F %g %G of a float, as C's printf (which CPython's matches for
// these), with Python's inf/nan spelling.
void format_float(const Spec& sp, char conv, double d, std::string& out) {
  std::string sign = std::signbit(d) && !std::isnan(d) ? "-" : sp.plus ? "+" : sp.space ? " " : "";
  std::string body;
  if (std::isinf(d) || std::isnan(d)) {
    body = std::isinf(d) ? "inf" : "nan";
    if (conv >= 'A' && conv <= 'Z') body = py_upper(body);
    Spec s = sp;
    s.zero = false;
    pad(s, sign, body, out, true);
    return;
  }
  body = float_digits(std::fabs(d), conv, sp.prec < 0 ? 6 : static_cast<int>(sp.prec), sp.alt);
  pad(sp, sign, body, out, true);
}

std::string at_index(std::size_t i) { return " at index " + std::to_string(i); }

}  // namespace

std::string float_digits(double d, char conv, int prec, bool alt) {
  std::string fmt = alt ? "%#.*" : "%.*";
  fmt += conv;
  std::string body;
  int n = std::snprintf(nullptr, 0, fmt.c_str(), prec, d);
  body.resize(static_cast<std::size_t>(n) + 1);
  std::snprintf(body.data(), body.size(), fmt.c_str(), prec, d);
  body.resize(static_cast<std::size_t>(n));
  return body;
}

std::string ascii_repr(const Value& v) {
  std::string r, out;
  append_repr(v, r);
  for (uint32_t cp : code_points(r)) {
    char b[16];
    if (cp < 0x80) out += static_cast<char>(cp);
    else {
      if (cp < 0x100) std::snprintf(b, sizeof b, "\\x%02x", cp);
      else if (cp < 0x10000) std::snprintf(b, sizeof b, "\\u%04x", cp);
      else std::snprintf(b, sizeof b, "\\U%08x", cp);
      out += b;
    }
  }
  return out;
}

std::string percent_format(const std::string& f, const Value& args, bool escape) {
  // CPython: a tuple gives the arguments; a mapping (anything subscriptable
  // but a tuple or a str) may be indexed by %(key)s and need not be used up.
  bool tuple = args.is_list() && args.tuple && !args.gen;
  bool mapping = !tuple && (args.is_seq() || args.is_range() || (args.is_dict() && !args.ns) || args.is_undefined());
  const std::vector<Value>* items = tuple ? &args.list->items : nullptr;
  std::size_t next = 0;
  bool single_used = false;
  auto next_arg = [&]() -> const Value& {
    if (tuple) {
      if (next >= items->size()) throw Error("not enough arguments for format string");
      return (*items)[next++];
    }
    if (single_used) throw Error("not enough arguments for format string");
    single_used = true;
    return args;
  };
  std::string out;
  for (std::size_t i = 0; i < f.size(); ++i) {
    if (f[i] != '%') {
      std::size_t e = f.find('%', i);
      if (e == std::string::npos) e = f.size();
      out.append(f, i, e - i);
      i = e - 1;
      continue;
    }
    if (++i >= f.size()) throw Error("incomplete format");
    if (f[i] == '%') {  // only "%%" is a literal '%': after a key, flag or width, '%' takes an argument and fails
      out += '%';
      continue;
    }
    const Value* keyed = nullptr;
    Value keyed_value;
    if (f[i] == '(') {
      if (!mapping || args.is_undefined()) throw Error("format requires a mapping");
      int depth = 1;
      std::size_t k = i + 1;
      for (; k < f.size() && depth; ++k) depth += f[k] == '(' ? 1 : f[k] == ')' ? -1 : 0;
      if (depth) throw Error("incomplete format key");
      std::string key = f.substr(i + 1, k - i - 2);
      if (!args.is_dict()) throw Error("list indices must be integers or slices, not str");
      const Value* v = args.dict->find(key);
      if (!v) throw Error("KeyError: '" + key + "'");
      keyed_value = *v;
      keyed = &keyed_value;
      i = k;
    }
    Spec sp;
    for (; i < f.size(); ++i) {
      char c = f[i];
      if (c == '-') sp.left = true;
      else if (c == '+') sp.plus = true;
      else if (c == ' ') sp.space = true;
      else if (c == '#') sp.alt = true;
      else if (c == '0') sp.zero = true;
      else break;
    }
    auto number = [&](const char* what) -> int64_t {
      if (i < f.size() && f[i] == '*') {
        ++i;
        const Value& v = next_arg();
        if (!int_like(v)) throw Error("* wants int");
        return as_int(v);
      }
      int64_t n = -1;
      while (i < f.size() && f[i] >= '0' && f[i] <= '9') {
        n = (n < 0 ? 0 : n) * 10 + (f[i++] - '0');
        if (n > kMaxField) throw Error(std::string(what) + " too big");
      }
      return n;
    };
    sp.width = number("width");
    if (sp.width < -1) sp.left = true, sp.width = -sp.width;
    if (i < f.size() && f[i] == '.') {
      ++i;
      sp.prec = number("precision");
      if (sp.prec < 0) sp.prec = 0;
    }
    if (sp.width > kMaxField || sp.prec > kMaxField) throw Error("width too big");
    while (i < f.size() && (f[i] == 'h' || f[i] == 'l' || f[i] == 'L')) ++i;
    if (i >= f.size()) throw Error("incomplete format");
    char conv = f[i];
    const Value& v = keyed ? *keyed : next_arg();
    switch (conv) {
      case 's':
      case 'r':
      case 'a': {
        std::string s;
        if (conv == 's') append_str(v, s);
        else if (conv == 'r') append_repr(v, s);
        else s = ascii_repr(v);
        if (escape && !(conv == 's' && v.is_str() && v.markup)) {
          std::string e;
          html_escape(s, e);
          s = std::move(e);
        }
        if (sp.prec >= 0 && static_cast<int64_t>(py_len(s)) > sp.prec) {
          std::vector<uint32_t> cps = code_points(s);
          s.clear();
          for (int64_t k = 0; k < sp.prec; ++k) utf8_append(cps[static_cast<std::size_t>(k)], s);
        }
        pad(sp, "", s, out, false);
        break;
      }
      case 'd':
      case 'i':
      case 'u':
      case 'o':
      case 'x':
      case 'X': {
        bool decimal = conv == 'd' || conv == 'i' || conv == 'u';
        if (v.kind == Kind::kFloat) {
          if (!decimal) throw Error(std::string("%") + conv + " format: an integer is required, not float");
          if (std::isnan(v.f)) throw Error("cannot convert float NaN to integer");
          if (std::isinf(v.f)) throw Error("cannot convert float infinity to integer");
          if (std::fabs(v.f) < 9.2e18) {
            format_int(sp, conv, static_cast<int64_t>(v.f), out);
          } else {  // a float this large is an integer; its digits are exact
            char b[400];
            std::snprintf(b, sizeof b, "%.0f", std::fabs(v.f));
            format_digits(sp, conv, v.f < 0, b, out);
          }
        } else if (int_like(v)) {
          format_int(sp, conv, as_int(v), out);
        } else {
          throw Error(std::string("%") + conv + " format: " + (decimal ? "a real number" : "an integer") +
                      " is required, not " + std::string(type_name(v)));
        }
        break;
      }
      case 'e':
      case 'E':
      case 'f':
      case 'F':
      case 'g':
      case 'G':
        if (!v.is_number()) throw Error("must be real number, not " + std::string(type_name(v)));
        format_float(sp, conv, v.kind == Kind::kFloat ? v.f : static_cast<double>(as_int(v)), out);
        break;
      case 'c': {
        std::string c;
        if (int_like(v)) {
          int64_t n = as_int(v);
          if (n < 0 || n > 0x10ffff) throw Error("%c arg not in range(0x110000)");
          utf8_append(static_cast<uint32_t>(n), c);
        } else if (v.is_str() && py_len(*v.s) == 1) {
          c = *v.s;
        } else {
          throw Error(std::string("%c requires int or char") + (v.kind == Kind::kFloat ? ", not float" : ""));
        }
        pad(sp, "", c, out, false);
        break;
      }
      default: {
        char b[64];
        std::snprintf(b, sizeof b, "unsupported format character '%c' (0x%x)", conv,
                      static_cast<unsigned>(static_cast<unsigned char>(conv)));
        throw Error(b + at_index(py_len(std::string_view(f).substr(0, i))));
      }
    }
  }
  if (!mapping && (tuple ? next < items->size() : !single_used))
    throw Error("not all arguments converted during string formatting");
  return out;
}

}  // namespace tokfeed::tmpl
