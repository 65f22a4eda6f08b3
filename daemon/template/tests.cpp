// Jinja's tests (`x is defined`, `x is string`, ...), as jinja2 3.1 defines them.
#include "template/interp.hpp"
#include "template/parser.hpp"
#include "template/pystr.hpp"

namespace tokfeed::tmpl {

namespace {

const Value& arg0(Args& a) {
  static const Value missing;
  return a.pos.empty() ? (a.kw.empty() ? missing : a.kw[0].second) : a.pos[0];
}

bool t_defined(Interp&, const Value& v, Args&) { return !v.is_undefined(); }
bool t_undefined(Interp&, const Value& v, Args&) { return v.is_undefined(); }
bool t_none(Interp&, const Value& v, Args&) { return v.is_none(); }
bool t_boolean(Interp&, const Value& v, Args&) { return v.kind == Kind::kBool; }
bool t_true(Interp&, const Value& v, Args&) { return v.kind == Kind::kBool && v.b; }
bool t_false(Interp&, const Value& v, Args&) { return v.kind == Kind::kBool && !v.b; }
bool t_integer(Interp&, const Value& v, Args&) { return v.kind == Kind::kInt; }
bool t_float(Interp&, const Value& v, Args&) { return v.kind == Kind::kFloat; }
bool t_number(Interp&, const Value& v, Args&) { return v.is_number(); }
bool t_string(Interp&, const Value& v, Args&) { return v.is_str(); }
bool t_mapping(Interp&, const Value& v, Args&) { return v.is_dict() && !v.ns && !v.view; }
bool t_iterable(Interp&, const Value& v, Args&) {
  return v.is_undefined() || v.is_str() || v.is_list() || (v.is_dict() && !v.ns);
}
bool t_sequence(Interp&, const Value& v, Args&) {
  return v.is_undefined() || v.is_str() || v.is_seq() || v.is_range() || (v.is_dict() && !v.ns);
}
// jinja2's Undefined has __call__ (it raises), so it is callable.
bool t_callable(Interp&, const Value& v, Args&) { return v.kind == Kind::kFunc || v.is_undefined(); }
bool t_eq(Interp&, const Value& v, Args& a) { return equal(v, arg0(a)); }
bool t_ne(Interp&, const Value& v, Args& a) { return !equal(v, arg0(a)); }
bool t_lt(Interp&, const Value& v, Args& a) { return less(v, arg0(a)); }
bool t_gt(Interp&, const Value& v, Args& a) { return less(arg0(a), v); }
bool t_le(Interp&, const Value& v, Args& a) { return !less(arg0(a), v); }
bool t_ge(Interp&, const Value& v, Args& a) { return !less(v, arg0(a)); }
bool t_in(Interp&, const Value& v, Args& a) { return contains(arg0(a), v); }
bool t_sameas(Interp&, const Value& v, Args& a) {
  const Value& o = arg0(a);
  if (v.kind != o.kind) return false;
  // Object identity: a skeleton's objects are not the record's.
  skeleton::undecided();
  switch (v.kind) {
    case Kind::kNone:
    case Kind::kUndefined: return true;
    case Kind::kBool: return v.b == o.b;
    case Kind::kInt: return v.i == o.i && v.i >= -5 && v.i <= 256;  // CPython's small-int cache
    case Kind::kStr: return v.s == o.s;                             // the same string object (one variable read twice)
    case Kind::kList: return v.list == o.list;
    case Kind::kDict: return v.dict == o.dict;
    case Kind::kFunc: return v.fn == o.fn;
    default: return false;
  }
}
// jinja2's odd, even and divisibleby: `value % n == r` with Python's `%`
// (12.34 is not divisible by 3; a string formats).
bool mod_is(const Value& v, const Value& n, int64_t r) { return equal(binary_op("%", v, n), Value::integer(r)); }
bool t_odd(Interp&, const Value& v, Args&) { return mod_is(v, Value::integer(2), 1); }
bool t_even(Interp&, const Value& v, Args&) { return mod_is(v, Value::integer(2), 0); }
bool t_divisibleby(Interp&, const Value& v, Args& a) { return mod_is(v, arg0(a), 0); }
bool t_lower(Interp&, const Value& v, Args&) { return py_islower(to_str(v)); }
bool t_upper(Interp&, const Value& v, Args&) { return py_isupper(to_str(v)); }
// `name in environment.filters`: a list or dict is unhashable.
bool t_filter(Interp&, const Value& v, Args&) {
  require_hashable(v);
  return v.is_str() && find_filter(*v.s) != nullptr;
}
bool t_test(Interp&, const Value& v, Args&) {
  require_hashable(v);
  return v.is_str() && find_test(*v.s) != nullptr;
}
// jinja2: hasattr(value, "__html__"), which of the engine's values only
// Markup has.
bool t_escaped(Interp&, const Value& v, Args&) { return v.is_str() && v.markup; }

struct NamedTest {
  std::string_view name;
  TestFn fn;
};
constexpr NamedTest kTests[] = {
    {"defined", t_defined},
    {"undefined", t_undefined},
    {"none", t_none},
    {"boolean", t_boolean},
    {"true", t_true},
    {"false", t_false},
    {"integer", t_integer},
    {"float", t_float},
    {"number", t_number},
    {"string", t_string},
    {"mapping", t_mapping},
    {"iterable", t_iterable},
    {"sequence", t_sequence},
    {"callable", t_callable},
    {"eq", t_eq},
    {"equalto", t_eq},
    {"==", t_eq},
    {"ne", t_ne},
    {"!=", t_ne},
    {"lt", t_lt},
    {"lessthan", t_lt},
    {"<", t_lt},
    {"gt", t_gt},
    {"greaterthan", t_gt},
    {">", t_gt},
    {"le", t_le},
    {"<=", t_le},
    {"ge", t_ge},
    {">=", t_ge},
    {"in", t_in},
    {"sameas", t_sameas},
    {"odd", t_odd},
    {"even", t_even},
    {"divisibleby", t_divisibleby},
    {"lower", t_lower},
    {"upper", t_upper},
    {"filter", t_filter},
    {"test", t_test},
    {"escaped", t_escaped},
};

}  // namespace

TestFn find_test(std::string_view name) {
  for (const auto& t : kTests)
    if (t.name == name) return t.fn;
  return nullptr;
}

}  // namespace tokfeed::tmpl
