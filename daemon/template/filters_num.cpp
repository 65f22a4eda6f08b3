// jinja2's numeric filters (int, float, abs, round, sum) and the sequence
// and text ones that cut (truncate, batch, slice), as jinja2 3.1 defines them.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "template/filter_util.hpp"
#include "template/interp.hpp"
#include "template/pystr.hpp"

namespace tokfeed::tmpl {

// jinja2's int: int(value), or int(value, base) for a str, else
// int(float(value)), else the default.
Value f_int(Interp&, Value& v, Args& a) {
  no_undefined(v);
  const Value& d = arg(a, 0, "default");
  const Value& b = arg(a, 1, "base");
  const int64_t base = !given(b) ? 10 : int_like(b) ? as_int(b) : -1;  // -1: a TypeError, as an invalid base
  Value dflt = given(d) ? d : Value::integer(0);
  // jinja2's filter: int(value), else int(float(value)), else the default.
  // int(nan) is a ValueError (the default), int(inf) an OverflowError,
  // which the first try lets through (a float) and the second catches (a
  // string).
  auto from_float = [&](double f) {
    if (!std::isfinite(f)) return dflt;
    if (std::fabs(f) >= 9.2e18) throw Error("int() of " + to_str(Value::real(f)) + " is past 64 bits");
    return Value::integer(static_cast<int64_t>(f));
  };
  if (int_like(v)) return Value::integer(as_int(v));
  if (v.kind == Kind::kFloat) {
    if (std::isinf(v.f)) throw Error("cannot convert float infinity to integer");
    return from_float(v.f);
  }
  if (v.is_str()) {
    int64_t n = 0;
    NumParse r = py_parse_int(*v.s, n, base);
    if (r == NumParse::kOk) return Value::integer(n);
    if (r == NumParse::kTooBig) throw Error("int() of '" + *v.s + "' is past 64 bits");
    double f = 0;
    if (py_parse_float(*v.s, f)) return from_float(f);
  }
  return dflt;
}
Value f_float(Interp&, Value& v, Args& a) {
  no_undefined(v);
  const Value& d = arg(a, 0, "default");
  Value dflt = given(d) ? d : Value::real(0.0);
  if (v.is_number()) return Value::real(as_double(v));
  double f = 0;
  if (v.is_str() && py_parse_float(*v.s, f)) return Value::real(f);
  return dflt;
}
Value f_abs(Interp&, Value& v, Args&) {
  if (v.kind == Kind::kFloat) return Value::real(std::fabs(v.f));
  if (int_like(v)) {
    if (v.kind == Kind::kInt && v.i == INT64_MIN) throw Error("integer overflow");  // 2^63
    return Value::integer(v.kind == Kind::kBool ? v.b : std::llabs(v.i));
  }
  throw Error("bad operand type for abs(): '" + std::string(type_name(v)) + "'");
}
// jinja2's round: Python's round(value, precision) (an int stays an int;
// a float is rounded half to even on its exact decimal value), or
// math.ceil/floor(value * 10**precision) / 10**precision.
Value f_round(Interp&, Value& v, Args& a) {
  const Value& p = arg(a, 0, "precision");
  const Value& m = arg(a, 1, "method");
  std::string method = given(m) ? soft_str(m) : "common";
  if (method != "common" && method != "ceil" && method != "floor") throw Error("method must be common, ceil or floor");
  if (!v.is_number()) throw Error("type " + std::string(type_name(v)) + " doesn't define __round__ method");
  if (given(p) && !int_like(p))
    throw Error("'" + std::string(type_name(p)) + "' object cannot be interpreted as an integer");
  int64_t prec = given(p) ? as_int(p) : 0;
  double x = as_double(v), scale = std::pow(10.0, static_cast<double>(prec));
  if (method != "common") {
    // An int times 10**p (p >= 0) is exact in Python, and so is its floor:
    // the quotient is the int itself, correctly rounded to a float.
    if (int_like(v) && prec >= 0) return Value::real(static_cast<double>(as_int(v)));
    // math.ceil/floor give an int (no -0.0), which `/` turns into a float.
    double r = method == "ceil" ? std::ceil(x * scale) : std::floor(x * scale);
    if (!std::isfinite(r))
      throw Error(std::isnan(r) ? "cannot convert float NaN to integer" : "cannot convert float infinity to integer");
    return Value::real((r == 0 ? 0.0 : r) / scale);
  }
  if (int_like(v)) {
    int64_t n = as_int(v);
    if (prec >= 0) return Value::integer(n);
    // 10**19 is past 64 bits: n rounds to 0 or to +-10**19 (an overflow;
    // 5 * 10**18 is a tie, to the even 0).
    constexpr int64_t kHalf19 = 5000000000000000000;
    if (prec < -19 || (prec == -19 && n >= -kHalf19 && n <= kHalf19)) return Value::integer(0);
    if (prec == -19) throw Error("integer overflow");
    int64_t unit = 1;
    for (int64_t k = 0; k < -prec; ++k) unit *= 10;
    int64_t q = n / unit, r = n % unit;
    if (r < 0) r += unit, --q;  // floor division
    if (2 * r > unit || (2 * r == unit && (q & 1))) ++q;
    int64_t out = 0;
    if (__builtin_mul_overflow(q, unit, &out)) throw Error("integer overflow");  // 2^63 rounded up
    return Value::integer(out);
  }
  if (!std::isfinite(x)) return Value::real(x);
  if (prec >= 0) {
    if (prec > 330) return Value::real(x);
    char buf[512];
    std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(prec), x);  // exact, half to even
    return Value::real(std::strtod(buf, nullptr));
  }
  return Value::real(prec < -330 ? 0.0 * x
                                 : std::nearbyint(x / std::pow(10.0, static_cast<double>(-prec))) *
                                       std::pow(10.0, static_cast<double>(-prec)));
}
// Python's sum(iterable, start): `+` from the start value (0), no strings.
Value f_sum(Interp&, Value& v, Args& a) {
  const Value& attr = arg(a, 0, "attribute");
  const Value& start = arg(a, 1, "start");
  Value total = given(start) ? start : Value::integer(0);
  if (total.is_str()) throw Error("sum() can't sum strings [use ''.join(seq) instead]");
  const std::vector<Value> parts = given(attr) ? attribute_parts(attr) : std::vector<Value>();
  for (const Value& x : iterate(v)) total = binary_op("+", total, given(attr) ? attr_path(x, parts) : x);
  return total;
}

// jinja2's truncate: length + leeway (5) characters fit; else cut to
// length - len(end), at the last space unless killwords, and end appended.
Value f_truncate(Interp&, Value& v, Args& a) {
  const Value& l = arg(a, 0, "length");
  const Value& e = arg(a, 2, "end");
  const Value& lw = arg(a, 3, "leeway");
  int64_t length = given(l) ? as_int(l) : 255, leeway = given(lw) && !lw.is_none() ? as_int(lw) : 5;
  std::string end = given(e) ? soft_str(e) : "...";
  int64_t end_len = static_cast<int64_t>(py_len(end));
  if ((given(l) && !int_like(l)) || length < end_len) throw Error("expected length >= " + std::to_string(end_len));
  if (leeway < 0) throw Error("expected leeway >= 0, got " + std::to_string(leeway));
  if (tmpl::length(v) <= length + leeway) return v;  // the value itself, whatever it is (len() only)
  if (!v.is_str())
    throw Error("can only concatenate " + std::string(type_name(v)) + " (not \"str\") to " + std::string(type_name(v)));
  std::vector<uint32_t> cps = code_points(*v.s);
  std::string head;
  for (int64_t k = 0; k < length - end_len; ++k) utf8_append(cps[static_cast<std::size_t>(k)], head);
  if (!truthy(arg(a, 1, "killwords"))) {
    std::size_t sp = head.rfind(' ');
    if (sp != std::string::npos) head.resize(sp);
  }
  if (!v.markup) return Value::str(head + end);
  // Markup cut is Markup, and `+` escapes a plain str end (markupsafe).
  if (given(e) && e.is_str() && e.markup) return markup(head + end);
  html_escape(end, head);
  return markup(std::move(head));
}

// jinja2's batch: lists of `linecount` items, the last filled with
// fill_with when given.
Value f_batch(Interp&, Value& v, Args& a) {
  const Value& n = arg(a, 0, "linecount");
  const Value& fill = arg(a, 1, "fill_with");
  if (!int_like(n)) throw Error("batch needs an integer linecount");
  int64_t count = as_int(n);
  std::vector<Value> out, cur;
  for (const Value& x : iterate(v)) {
    if (static_cast<int64_t>(cur.size()) == count) out.push_back(Value::new_list(std::move(cur))), cur.clear();
    cur.push_back(x);
  }
  if (!cur.empty()) {
    if (given(fill) && !fill.is_none())
      while (static_cast<int64_t>(cur.size()) < count) cur.push_back(fill);
    out.push_back(Value::new_list(std::move(cur)));
  }
  return iterator(std::move(out));
}

// jinja2's slice: `slices` columns, the first len % slices one longer, the
// others given fill_with when set.
Value f_slice(Interp&, Value& v, Args& a) {
  const Value& n = arg(a, 0, "slices");
  const Value& fill = arg(a, 1, "fill_with");
  if (!int_like(n)) throw Error("slice needs an integer count");
  int64_t slices = as_int(n);
  std::vector<Value> seq = iterate(v), out;
  int64_t len = static_cast<int64_t>(seq.size());
  if (slices == 0) throw Error("integer division or modulo by zero");
  int64_t per = len / slices, extra = len % slices, offset = 0;
  if (extra < 0) extra += slices, --per;  // Python's floor division
  for (int64_t k = 0; k < slices; ++k) {
    int64_t start = offset + k * per;
    if (k < extra) ++offset;
    int64_t end = offset + (k + 1) * per;
    std::vector<Value> col;
    for (int64_t i = std::clamp<int64_t>(start, 0, len); i < std::clamp<int64_t>(end, 0, len); ++i)
      col.push_back(seq[static_cast<std::size_t>(i)]);
    if (given(fill) && !fill.is_none() && k >= extra) col.push_back(fill);
    out.push_back(Value::new_list(std::move(col)));
  }
  return iterator(std::move(out));
}

}  // namespace tokfeed::tmpl
