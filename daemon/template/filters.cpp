// Jinja's filters and tests, as jinja2 3.1 defines them, with transformers'
// tojson.
#include <algorithm>
#include <cmath>

#include "template/interp.hpp"
#include "template/parser.hpp"
#include "template/pystr.hpp"

namespace tokfeed::tmpl {

namespace {

// Argument `i` by position or keyword `kw`; Undefined when absent.
const Value& arg(Args& a, std::size_t i, std::string_view kw) {
  static const Value missing;
  if (i < a.pos.size()) return a.pos[i];
  for (auto& [k, v] : a.kw)
    if (k == kw) return v;
  return missing;
}
bool given(const Value& v) { return !v.is_undefined(); }
bool int_like(const Value& v) { return v.kind == Kind::kInt || v.kind == Kind::kBool; }
double as_double(const Value& v) {
  return v.kind == Kind::kFloat ? v.f : v.kind == Kind::kBool ? v.b : static_cast<double>(v.i);
}
std::string soft_str(const Value& v) { return to_str(v); }
// What jinja's generator-returning filters give: an iterator.
Value iterator(std::vector<Value> items) {
  Value v = Value::new_list(std::move(items));
  v.gen = true;
  return v;
}

// Attribute lookup as environment.getattr, with dotted paths ("a.b").
Value attr_path(const Value& obj, const std::string& path) {
  Value cur = obj;
  std::size_t b = 0;
  for (;;) {
    std::size_t e = path.find('.', b);
    std::string part = path.substr(b, e == std::string::npos ? std::string::npos : e - b);
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    cur = digits ? get_item(cur, Value::integer(std::stoll(part))) : get_item(cur, Value::str(part));
    if (e == std::string::npos) return cur;
    b = e + 1;
  }
}

// Case folding for sort/unique/dictsort when not case_sensitive.
Value fold(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_str()) return Value::str(py_lower(*v.s));
  return v;
}

Value f_default(Interp&, Value& v, Args& a) {
  const Value& d = arg(a, 0, "default_value");
  bool boolean = truthy(arg(a, 1, "boolean"));
  if (v.is_undefined() || (boolean && !truthy(v))) return given(d) ? d : Value::str("");
  return v;
}
Value f_length(Interp&, Value& v, Args&) { return Value::integer(length(v)); }
Value f_string(Interp&, Value& v, Args&) { return Value::str(soft_str(v)); }
Value f_safe(Interp&, Value& v, Args&) { return v; }
Value f_trim(Interp&, Value& v, Args& a) {
  const Value& c = arg(a, 0, "chars");
  std::optional<std::string> chars;
  if (c.is_str()) chars = *c.s;
  return Value::str(std::string(py_strip(soft_str(v), chars, true, true)));
}
Value f_upper(Interp&, Value& v, Args&) { return Value::str(py_upper(soft_str(v))); }
Value f_lower(Interp&, Value& v, Args&) { return Value::str(py_lower(soft_str(v))); }
Value f_capitalize(Interp&, Value& v, Args&) { return Value::str(py_capitalize(soft_str(v))); }
Value f_title(Interp&, Value& v, Args&) {
  // jinja's title: words start after whitespace, '-', '(', '{', '[' or '<'.
  std::string s = soft_str(v), out;
  bool start = true;
  for (uint32_t cp : code_points(s)) {
    bool sep = py_isspace(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
    std::string c;
    utf8_append(cp, c);
    out += sep ? c : start ? py_upper(c) : py_lower(c);
    start = sep;
  }
  return Value::str(std::move(out));
}
Value f_replace(Interp&, Value& v, Args& a) {
  const Value& c = arg(a, 2, "count");
  return Value::str(py_replace(soft_str(v), soft_str(arg(a, 0, "old")), soft_str(arg(a, 1, "new")),
                               given(c) && !c.is_none() ? (int_like(c) ? c.i : -1) : -1));
}
Value f_join(Interp&, Value& v, Args& a) {
  const Value& d = arg(a, 0, "d");
  const Value& attr = arg(a, 1, "attribute");
  std::string sep = given(d) ? soft_str(d) : "", out;
  bool first = true;
  for (const Value& x : iterate(v)) {
    if (!first) out += sep;
    first = false;
    append_str(given(attr) ? attr_path(x, soft_str(attr)) : x, out);
  }
  return Value::str(std::move(out));
}
Value f_list(Interp&, Value& v, Args&) { return Value::new_list(iterate(v)); }
Value f_first(Interp&, Value& v, Args&) {
  std::vector<Value> items = iterate(v);
  return items.empty() ? Value::undefined("first item") : items.front();
}
Value f_last(Interp&, Value& v, Args&) {
  std::vector<Value> items = iterate(v);
  return items.empty() ? Value::undefined("last item") : items.back();
}
Value f_reverse(Interp&, Value& v, Args&) {
  if (v.is_str()) {
    std::vector<uint32_t> cps = code_points(*v.s);
    std::string r;
    for (auto it = cps.rbegin(); it != cps.rend(); ++it) utf8_append(*it, r);
    return Value::str(std::move(r));
  }
  std::vector<Value> items = iterate(v);
  std::reverse(items.begin(), items.end());
  return iterator(std::move(items));
}
Value f_items(Interp&, Value& v, Args&) {
  if (v.is_undefined()) return Value::new_list();
  if (!v.is_dict() || v.ns) throw Error("Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [k, x] : v.dict->items) out.push_back(Value::new_list({key_value(k), x}, true));
  return iterator(std::move(out));
}
Value f_dictsort(Interp&, Value& v, Args& a) {
  bool cs = truthy(arg(a, 0, "case_sensitive"));
  const Value& by = arg(a, 1, "by");
  bool by_value = by.is_str() && *by.s == "value";
  bool rev = truthy(arg(a, 2, "reverse"));
  if (!v.is_dict()) throw Error("dictsort needs a mapping");
  std::vector<Value> out;
  for (const auto& [k, x] : v.dict->items) out.push_back(Value::new_list({key_value(k), x}, true));
  std::stable_sort(out.begin(), out.end(), [&](const Value& p, const Value& q) {
    std::size_t i = by_value ? 1 : 0;
    Value x = fold(p.list->items[i], cs), y = fold(q.list->items[i], cs);
    return rev ? less(y, x) : less(x, y);
  });
  return Value::new_list(std::move(out));
}
Value f_tojson(Interp&, Value& v, Args& a) {
  bool ascii = truthy(arg(a, 0, "ensure_ascii"));
  const Value& ind = arg(a, 1, "indent");
  const Value& seps = arg(a, 2, "separators");
  bool sort = truthy(arg(a, 3, "sort_keys"));
  std::string indent, item, key;
  const std::string* ip = nullptr;
  if (int_like(ind)) ip = &(indent = std::string(static_cast<std::size_t>(std::max<int64_t>(0, ind.i)), ' '));
  else if (ind.is_str()) ip = &(indent = *ind.s);
  const std::string *is = nullptr, *ks = nullptr;
  if (seps.is_list()) {
    if (seps.list->items.size() != 2) throw Error("separators must be a pair");
    item = soft_str(seps.list->items[0]);
    key = soft_str(seps.list->items[1]);
    is = &item;
    ks = &key;
  }
  return Value::str(tojson(v, ascii, ip, sort, is, ks));
}
Value f_int(Interp&, Value& v, Args& a) {
  const Value& d = arg(a, 0, "default");
  Value dflt = given(d) ? d : Value::integer(0);
  if (int_like(v)) return Value::integer(v.kind == Kind::kBool ? v.b : v.i);
  if (v.kind == Kind::kFloat) return std::isfinite(v.f) ? Value::integer(static_cast<int64_t>(v.f)) : dflt;
  if (v.is_str()) {
    std::string s(py_strip(*v.s, std::nullopt, true, true));
    s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
    char* end = nullptr;
    long long n = std::strtoll(s.c_str(), &end, 10);
    if (!s.empty() && end && *end == '\0') return Value::integer(n);
    double f = std::strtod(s.c_str(), &end);
    if (!s.empty() && end && *end == '\0' && std::isfinite(f)) return Value::integer(static_cast<int64_t>(f));
  }
  return dflt;
}
Value f_float(Interp&, Value& v, Args& a) {
  const Value& d = arg(a, 0, "default");
  Value dflt = given(d) ? d : Value::real(0.0);
  if (v.is_number()) return Value::real(as_double(v));
  if (v.is_str()) {
    std::string s(py_strip(*v.s, std::nullopt, true, true));
    char* end = nullptr;
    double f = std::strtod(s.c_str(), &end);
    if (!s.empty() && end && *end == '\0') return Value::real(f);
  }
  return dflt;
}
Value f_abs(Interp&, Value& v, Args&) {
  if (v.kind == Kind::kFloat) return Value::real(std::fabs(v.f));
  if (int_like(v)) return Value::integer(std::llabs(v.kind == Kind::kBool ? v.b : v.i));
  throw Error("bad operand type for abs(): '" + std::string(type_name(v)) + "'");
}
Value f_round(Interp&, Value& v, Args& a) {
  if (!v.is_number()) throw Error("round needs a number");
  const Value& p = arg(a, 0, "precision");
  const Value& m = arg(a, 1, "method");
  int64_t prec = int_like(p) ? p.i : 0;
  std::string method = m.is_str() ? *m.s : "common";
  double x = as_double(v), scale = std::pow(10.0, static_cast<double>(prec));
  if (method == "common" && int_like(v)) return Value::integer(v.kind == Kind::kBool ? v.b : v.i);
  double r = method == "ceil"    ? std::ceil(x * scale) / scale
             : method == "floor" ? std::floor(x * scale) / scale
                                 : std::nearbyint(x * scale) / scale;  // Python's round: half to even
  return Value::real(r);
}
Value f_escape(Interp&, Value& v, Args&) {
  std::string out;
  for (char c : soft_str(v)) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return Value::str(std::move(out));
}
Value f_indent(Interp&, Value& v, Args& a) {
  const Value& w = arg(a, 0, "width");
  std::string ind = w.is_str() ? *w.s : std::string(static_cast<std::size_t>(int_like(w) ? w.i : 4), ' ');
  bool first = truthy(arg(a, 1, "first")), blank = truthy(arg(a, 2, "blank"));
  std::string s = soft_str(v) + "\n";
  std::vector<std::string> lines = py_splitlines(s, false);
  std::string rv;
  if (blank) {
    for (std::size_t k = 0; k < lines.size(); ++k) rv += (k ? "\n" + ind : "") + lines[k];
  } else if (!lines.empty()) {
    rv = lines[0];
    for (std::size_t k = 1; k < lines.size(); ++k) rv += "\n" + (lines[k].empty() ? "" : ind) + lines[k];
  }
  if (first) rv = ind + rv;
  return Value::str(std::move(rv));
}
Value f_format(Interp&, Value& v, Args& a) {
  if (!a.kw.empty()) {
    Value d = Value::new_dict();
    for (auto& [k, x] : a.kw) d.dict->set(k, x);
    return Value::str(percent_format(soft_str(v), d));
  }
  return Value::str(percent_format(soft_str(v), Value::new_list(a.pos, true)));
}
Value f_wordcount(Interp&, Value& v, Args&) {
  return Value::integer(static_cast<int64_t>(py_split(soft_str(v), std::nullopt, -1, false).size()));
}
Value f_center(Interp&, Value& v, Args& a) {
  std::string s = soft_str(v);
  const Value& w = arg(a, 0, "width");
  int64_t width = int_like(w) ? w.i : 80, len = static_cast<int64_t>(py_len(s));
  if (width <= len) return Value::str(s);
  std::size_t pad = static_cast<std::size_t>(width - len), left = pad / 2 + (pad & static_cast<std::size_t>(width) & 1);
  return Value::str(std::string(left, ' ') + s + std::string(pad - left, ' '));
}
Value f_attr(Interp&, Value& v, Args& a) { return get_attr(v, soft_str(arg(a, 0, "name"))); }

// select/reject/selectattr/rejectattr share this.
Value select_impl(Interp& in, Value& v, Args& a, bool by_attr, bool keep) {
  std::size_t k = 0;
  std::string attr;
  if (by_attr) attr = soft_str(arg(a, k++, "attribute"));
  TestFn test = nullptr;
  Args targs;
  if (k < a.pos.size()) {
    std::string name = soft_str(a.pos[k++]);
    test = find_test(name);
    if (!test) throw Error("no test named '" + name + "'");
    targs.pos.assign(a.pos.begin() + static_cast<std::ptrdiff_t>(k), a.pos.end());
  }
  std::vector<Value> out;
  for (const Value& x : iterate(v)) {
    Value subject = by_attr ? attr_path(x, attr) : x;
    Args ta = targs;
    bool ok = test ? test(in, subject, ta) : truthy(subject);
    if (ok == keep) out.push_back(x);
  }
  return iterator(std::move(out));
}
Value f_select(Interp& in, Value& v, Args& a) { return select_impl(in, v, a, false, true); }
Value f_reject(Interp& in, Value& v, Args& a) { return select_impl(in, v, a, false, false); }
Value f_selectattr(Interp& in, Value& v, Args& a) { return select_impl(in, v, a, true, true); }
Value f_rejectattr(Interp& in, Value& v, Args& a) { return select_impl(in, v, a, true, false); }

Value f_map(Interp& in, Value& v, Args& a) {
  std::vector<Value> out;
  const Value& attr = arg(a, 99, "attribute");
  if (a.pos.empty() && given(attr)) {
    const Value& d = arg(a, 99, "default");
    for (const Value& x : iterate(v)) {
      Value r = attr_path(x, soft_str(attr));
      out.push_back(r.is_undefined() && given(d) ? d : r);
    }
    return iterator(std::move(out));
  }
  if (a.pos.empty()) throw Error("map requires a filter argument");
  std::string name = soft_str(a.pos[0]);
  FilterFn f = find_filter(name);
  if (!f) throw Error("no filter named '" + name + "'");
  Args fa;
  fa.pos.assign(a.pos.begin() + 1, a.pos.end());
  fa.kw = a.kw;
  for (Value x : iterate(v)) {
    Args copy = fa;
    out.push_back(f(in, x, copy));
  }
  return iterator(std::move(out));
}

std::vector<Value> keyed(const std::vector<Value>& items, const Value& attr, bool cs) {
  std::vector<Value> keys;
  for (const Value& x : items) keys.push_back(fold(given(attr) ? attr_path(x, soft_str(attr)) : x, cs));
  return keys;
}
Value f_sort(Interp&, Value& v, Args& a) {
  bool rev = truthy(arg(a, 0, "reverse")), cs = truthy(arg(a, 1, "case_sensitive"));
  std::vector<Value> items = iterate(v), keys = keyed(items, arg(a, 2, "attribute"), cs);
  std::vector<std::size_t> order(items.size());
  for (std::size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t x, std::size_t y) { return rev ? less(keys[y], keys[x]) : less(keys[x], keys[y]); });
  std::vector<Value> out;
  for (std::size_t k : order) out.push_back(items[k]);
  return Value::new_list(std::move(out));
}
Value f_unique(Interp&, Value& v, Args& a) {
  std::vector<Value> items = iterate(v),
                     keys = keyed(items, arg(a, 1, "attribute"), truthy(arg(a, 0, "case_sensitive")));
  std::vector<Value> out, seen;
  for (std::size_t k = 0; k < items.size(); ++k) {
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equal(s, keys[k]); })) continue;
    seen.push_back(keys[k]);
    out.push_back(items[k]);
  }
  return iterator(std::move(out));
}
Value minmax(Value& v, Args& a, bool max) {
  std::vector<Value> items = iterate(v),
                     keys = keyed(items, arg(a, 1, "attribute"), truthy(arg(a, 0, "case_sensitive")));
  if (items.empty()) return Value::undefined("min/max of an empty sequence");
  std::size_t best = 0;
  for (std::size_t k = 1; k < items.size(); ++k)
    if (max ? less(keys[best], keys[k]) : less(keys[k], keys[best])) best = k;
  return items[best];
}
Value f_min(Interp&, Value& v, Args& a) { return minmax(v, a, false); }
Value f_max(Interp&, Value& v, Args& a) { return minmax(v, a, true); }
Value f_sum(Interp&, Value& v, Args& a) {
  const Value& attr = arg(a, 0, "attribute");
  const Value& start = arg(a, 1, "start");
  Value total = given(start) ? start : Value::integer(0);
  for (const Value& x : iterate(v)) {
    Value y = given(attr) ? attr_path(x, soft_str(attr)) : x;
    if (!total.is_number() || !y.is_number()) throw Error("unsupported operand type(s) for +");
    if (int_like(total) && int_like(y))
      total = Value::integer((total.kind == Kind::kBool ? total.b : total.i) + (y.kind == Kind::kBool ? y.b : y.i));
    else total = Value::real(as_double(total) + as_double(y));
  }
  return total;
}

struct NamedFilter {
  std::string_view name;
  FilterFn fn;
};
constexpr NamedFilter kFilters[] = {
    {"default", f_default},
    {"d", f_default},
    {"length", f_length},
    {"count", f_length},
    {"string", f_string},
    {"safe", f_safe},
    {"trim", f_trim},
    {"upper", f_upper},
    {"lower", f_lower},
    {"capitalize", f_capitalize},
    {"title", f_title},
    {"replace", f_replace},
    {"join", f_join},
    {"list", f_list},
    {"first", f_first},
    {"last", f_last},
    {"reverse", f_reverse},
    {"items", f_items},
    {"dictsort", f_dictsort},
    {"tojson", f_tojson},
    {"int", f_int},
    {"float", f_float},
    {"abs", f_abs},
    {"round", f_round},
    {"escape", f_escape},
    {"e", f_escape},
    {"forceescape", f_escape},
    {"indent", f_indent},
    {"format", f_format},
    {"wordcount", f_wordcount},
    {"center", f_center},
    {"attr", f_attr},
    {"select", f_select},
    {"reject", f_reject},
    {"selectattr", f_selectattr},
    {"rejectattr", f_rejectattr},
    {"map", f_map},
    {"sort", f_sort},
    {"unique", f_unique},
    {"min", f_min},
    {"max", f_max},
    {"sum", f_sum},
};

}  // namespace

FilterFn find_filter(std::string_view name) {
  for (const auto& f : kFilters)
    if (f.name == name) return f.fn;
  return nullptr;
}

}  // namespace tokfeed::tmpl
