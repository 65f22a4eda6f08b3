// What the filters share (filters.cpp, filters_num.cpp): their arguments
// and jinja2's conventions for them.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "template/value.hpp"

namespace tokfeed::tmpl {

struct Interp;

// Argument `i` by position or keyword `kw`; Undefined when absent.
inline const Value& arg(Args& a, std::size_t i, std::string_view kw) {
  static const Value missing;
  if (i < a.pos.size()) return a.pos[i];
  for (auto& [k, v] : a.kw)
    if (k == kw) return v;
  return missing;
}
inline bool given(const Value& v) { return !v.is_undefined(); }
inline bool int_like(const Value& v) { return v.kind == Kind::kInt || v.kind == Kind::kBool; }
inline int64_t as_int(const Value& v) { return v.kind == Kind::kBool ? v.b : v.i; }
inline double as_double(const Value& v) {
  return v.kind == Kind::kFloat ? v.f : v.kind == Kind::kBool ? v.b : static_cast<double>(v.i);
}
inline std::string soft_str(const Value& v) { return to_str(v); }
// What jinja's generator-returning filters give: an iterator.
inline Value iterator(std::vector<Value> items) {
  Value v = Value::new_list(std::move(items));
  v.gen = true;
  return v;
}

// What jinja2 does with an undefined value where a filter computes with it
// (int(), float(), `+`): the undefined error.
inline void no_undefined(const Value& v) {
  if (v.is_undefined()) throw Error("'" + (v.s ? *v.s : std::string("value")) + "' is undefined");
}

// jinja2's int: int(value), else int(float(value)), else the default.
// Attribute lookup as environment.getattr, with dotted paths ("a.b",
// "items.0"), as jinja2's attribute arguments take them.
// jinja2's _prepare_attribute_parts: a str splits at '.', digit parts
// reading as ints; None is no part; anything else is one part.
std::vector<Value> attribute_parts(const Value& attr);
// jinja2's make_attrgetter: getitem by each part; `dflt`, where given, in
// place of an undefined at every step.
Value attr_path(const Value& obj, const Value& attr, const Value* dflt = nullptr);
// The same by the parts attribute_parts() gave (a filter's attribute, split
// once for all its items).
Value attr_path(const Value& obj, const std::vector<Value>& parts, const Value* dflt = nullptr);

// Filters defined in filters_num.cpp.
Value f_int(Interp&, Value& v, Args& a);
Value f_float(Interp&, Value& v, Args& a);
Value f_abs(Interp&, Value& v, Args& a);
Value f_round(Interp&, Value& v, Args& a);
Value f_sum(Interp&, Value& v, Args& a);
Value f_truncate(Interp&, Value& v, Args& a);
Value f_batch(Interp&, Value& v, Args& a);
Value f_slice(Interp&, Value& v, Args& a);
// Filters defined in filters_text.cpp.
Value f_groupby(Interp&, Value& v, Args& a);
Value f_filesizeformat(Interp&, Value& v, Args& a);
Value f_xmlattr(Interp&, Value& v, Args& a);
Value f_urlencode(Interp&, Value& v, Args& a);
Value f_striptags(Interp&, Value& v, Args& a);
// Filters defined in filters_pretty.cpp.
Value f_wordwrap(Interp&, Value& v, Args& a);
Value f_pprint(Interp&, Value& v, Args& a);
Value f_random(Interp&, Value& v, Args& a);
Value f_urlize(Interp&, Value& v, Args& a);

}  // namespace tokfeed::tmpl
