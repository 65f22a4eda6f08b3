// Expressions: Python's operators on template values.
#include <algorithm>
#include <cmath>
#include <optional>

#include "template/interp.hpp"
#include "template/parser.hpp"
#include "template/pystr.hpp"
#include "template/resume.hpp"
#include "template/skeleton_ops.hpp"

namespace tokfeed::tmpl {

Value Interp::lookup(Name name) {
  if (const Value* v = find_var(name)) return *v;
  Value g = global_function(name);
  if (!g.is_undefined()) return g;
  return Value::undefined(name.str());
}

void assign_scope(Scope& out, const Vars& vars) { out = vars; }

const Value& Interp::global_or_undefined(const Expr& e, Value& tmp) {
  tmp = global_function(e.name);
  if (!tmp.is_undefined()) return tmp;
  if (!e.lit.is_undefined()) return e.lit;  // `self` (parser.cpp)
  if (e.methods & kMethodsKnown) return e.undef;
  tmp = Value::undefined(e.name);
  return tmp;
}

void Interp::step_failed() const {
  if (steps > max_steps) throw Error(step_error());
  throw Error("the daemon is stopping");
}

namespace {

[[noreturn]] void type_error(const char* op, const Value& a, const Value& b) {
  throw Error(std::string("unsupported operand type(s) for ") + op + ": '" + std::string(type_name(a)) + "' and '" +
              std::string(type_name(b)) + "'");
}

void check_defined(const Value& v) {
  if (v.is_undefined()) throw Error("'" + (v.s ? *v.s : std::string("value")) + "' is undefined");
}

bool int_like(const Value& v) { return v.kind == Kind::kInt || v.kind == Kind::kBool; }
int64_t as_int(const Value& v) { return v.kind == Kind::kBool ? v.b : v.i; }
double as_double(const Value& v) { return v.kind == Kind::kFloat ? v.f : static_cast<double>(as_int(v)); }

Value repeat(const Value& seq, int64_t n) {
  if (n < 0) n = 0;
  if (seq.is_str()) {
    if (seq.s->size() * static_cast<uint64_t>(n) > (1u << 26)) throw Error("string repetition too large");
    std::string r;
    for (int64_t k = 0; k < n; ++k) r += *seq.s;
    return seq.markup ? markup(std::move(r)) : Value::str(std::move(r));
  }
  if (seq.list->items.size() * static_cast<uint64_t>(n) > (1u << 22)) throw Error("list repetition too large");
  std::vector<Value> r;
  for (int64_t k = 0; k < n; ++k) r.insert(r.end(), seq.list->items.begin(), seq.list->items.end());
  return Value::new_list(std::move(r), seq.tuple);
}

// Python's float `**`: errors where CPython raises them.
double float_pow(double x, double y) {
  if (x == 0 && y < 0) throw Error("0.0 cannot be raised to a negative power");
  if (x < 0 && std::isfinite(y) && y != std::floor(y))
    throw Error("a negative number to a fractional power is complex, which templates do not support");
  double r = std::pow(x, y);
  if (std::isinf(r) && std::isfinite(x) && std::isfinite(y)) throw Error("(34, 'Numerical result out of range')");
  return r;
}

// `op`: + - * / // % ** ~ (told apart by their first byte and length).
Value arith(const std::string& op, const Value& a, const Value& b) {
  const char c = op[0];
  const bool twice = op.size() == 2;                                             // ** or //
  if (a.kind == Kind::kInt && b.kind == Kind::kInt && (c == '+' || c == '-')) {  // the common case, as below
    int64_t r = 0;
    if (c == '+' ? __builtin_add_overflow(a.i, b.i, &r) : __builtin_sub_overflow(a.i, b.i, &r))
      throw Error("integer overflow");
    return Value::integer(r);
  }
  if (c == '~' && twice) {  // kMarkupJoin
    if ((a.is_str() && a.markup) || (b.is_str() && b.markup)) {
      std::string r = *markup_escape(a).s;
      r += *markup_escape(b).s;
      return markup(std::move(r));
    }
  }
  if (c == '~') {
    std::string r;
    append_through(a, r);
    append_through(b, r);
    return Value::str(std::move(r));
  }
  if (c == '+' && a.is_str() && b.is_str() && (a.markup || b.markup)) {  // Markup's +: the plain str escaped
    std::string r = *markup_escape(a).s;
    r += *markup_escape(b).s;
    return markup(std::move(r));
  }
  if (c == '%' && a.is_str()) {  // str.__mod__ takes any operand; Markup's escapes the fields
    std::string r = percent_format(*a.s, b, a.markup);
    return a.markup ? markup(std::move(r)) : Value::str(std::move(r));
  }
  check_defined(a);
  check_defined(b);
  const char* o = op.c_str();
  if (a.is_number() && b.is_number()) {
    if (int_like(a) && int_like(b) && !(c == '/' && !twice)) {
      int64_t x = as_int(a), y = as_int(b), r = 0;
      switch (c) {
        case '+':
          if (__builtin_add_overflow(x, y, &r)) throw Error("integer overflow");
          return Value::integer(r);
        case '-':
          if (__builtin_sub_overflow(x, y, &r)) throw Error("integer overflow");
          return Value::integer(r);
        case '*':
          if (twice) {
            if (y < 0) return Value::real(float_pow(static_cast<double>(x), static_cast<double>(y)));
            if (x == 0 || x == 1) return Value::integer(y == 0 ? 1 : x);
            if (x == -1) return Value::integer(y % 2 ? -1 : 1);
            r = 1;
            for (int64_t base = x, e = y; e; e >>= 1) {  // squaring; |x| >= 2 overflows within 63 steps
              if ((e & 1) && __builtin_mul_overflow(r, base, &r)) throw Error("integer overflow");
              if ((e >> 1) && __builtin_mul_overflow(base, base, &base)) throw Error("integer overflow");
            }
            return Value::integer(r);
          }
          if (__builtin_mul_overflow(x, y, &r)) throw Error("integer overflow");
          return Value::integer(r);
        case '/':
        case '%': {
          if (y == 0) throw Error(c == '%' ? "integer modulo by zero" : "integer division or modulo by zero");
          if (y == -1) {  // INT64_MIN / -1 traps in C++: its quotient is 2^63
            if (c == '%') return Value::integer(0);
            if (x == INT64_MIN) throw Error("integer overflow");
            return Value::integer(-x);
          }
          int64_t q = x / y, m = x % y;
          if (m != 0 && ((m < 0) != (y < 0))) --q, m += y;
          return Value::integer(c == '%' ? m : q);
        }
      }
    }
    double x = as_double(a), y = as_double(b);
    switch (c) {
      case '+': return Value::real(x + y);
      case '-': return Value::real(x - y);
      case '*': return Value::real(twice ? float_pow(x, y) : x * y);
      case '/':
      case '%': {
        if (y == 0) throw Error(c == '/' && !twice ? "float division by zero" : "float modulo");
        if (c == '/' && !twice) return Value::real(x / y);
        // CPython's float divmod: floor division from the exact remainder.
        double m = std::fmod(x, y), div = (x - m) / y;
        if (m != 0) {
          if ((y < 0) != (m < 0)) m += y, div -= 1.0;
        } else {
          m = std::copysign(0.0, y);
        }
        if (c == '%') return Value::real(m);
        double fl = 0;
        if (div != 0) {
          fl = std::floor(div);
          if (div - fl > 0.5) fl += 1.0;
        } else {
          fl = std::copysign(0.0, x / y);
        }
        return Value::real(fl);
      }
    }
  }
  if (c == '+') {
    if (a.is_str() && b.is_str()) return Value::str(a.s.through() + b.s.through());
    if (a.is_seq() && b.is_seq() && a.tuple == b.tuple) {
      std::vector<Value> r = a.list->items;
      r.insert(r.end(), b.list->items.begin(), b.list->items.end());
      return Value::new_list(std::move(r), a.tuple);
    }
  }
  if (c == '*' && !twice) {
    if ((a.is_str() || a.is_seq()) && int_like(b)) return repeat(a, as_int(b));
    if ((b.is_str() || b.is_seq()) && int_like(a)) return repeat(b, as_int(a));
  }
  type_error(o, a, b);
}

// `op`: == != in notin < > <= >= (told apart by their first byte and length).
bool compare(const std::string& op, const Value& a, const Value& b) {
  switch (op[0]) {
    case '=':
    case '!': {
      bool r;
      if (!(skeleton::tl_watch && skeleton::ask_equal(a, b, r))) r = equal(a, b);
      return op[0] == '=' ? r : !r;
    }
    case 'i': return contains(b, a);
    case 'n': return !contains(b, a);
    default: break;
  }
  check_defined(a);
  check_defined(b);
  if (op[0] == '<') return op.size() == 1 ? less(a, b) : !less(b, a);
  return op.size() == 1 ? less(b, a) : !less(a, b);  // > >=
}

// Python's slice.indices(n): the first index, the end and the step.
void slice_bounds(int64_t n, const Value& start, const Value& stop, const Value& step, int64_t& b, int64_t& e,
                  int64_t& st) {
  auto num = [](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.is_none() || v.is_undefined()) return std::nullopt;
    if (!int_like(v)) throw Error(std::string("slice ") + what + " must be an integer or None");
    return as_int(v);
  };
  st = num(step, "step").value_or(1);
  if (st == 0) throw Error("slice step cannot be zero");
  auto clamp = [&](std::optional<int64_t> x, int64_t dflt) {
    if (!x) return dflt;
    int64_t v = *x;
    if (v < 0) v += n;
    if (st > 0) return std::clamp<int64_t>(v, 0, n);
    return std::clamp<int64_t>(v, -1, n - 1);
  };
  b = clamp(num(start, "start"), st > 0 ? 0 : n - 1);
  e = clamp(num(stop, "stop"), st > 0 ? n : -1);
}

// How many indices Python's slice gives for the bounds of slice_bounds()
// (no overflow for any step).
std::size_t slice_count(int64_t b, int64_t e, int64_t st) {
  if (st > 0)
    return e > b ? static_cast<std::size_t>(static_cast<uint64_t>(e - b - 1) / static_cast<uint64_t>(st) + 1) : 0;
  return b > e ? static_cast<std::size_t>(static_cast<uint64_t>(b - e - 1) / (0 - static_cast<uint64_t>(st)) + 1) : 0;
}

// Python's slice indices for a sequence of `n` items.
std::vector<std::size_t> slice_indices(int64_t n, const Value& start, const Value& stop, const Value& step) {
  int64_t b, e, st;
  slice_bounds(n, start, stop, step, b, e, st);
  const std::size_t count = slice_count(b, e, st);
  std::vector<std::size_t> idx(count);
  for (std::size_t j = 0; j < count; ++j) idx[j] = static_cast<std::size_t>(b + static_cast<int64_t>(j) * st);
  return idx;
}

// A filter of a list or dict under a skeleton's render: where it reads the
// first sentinel, every sentinel in its subject is noted read along with
// it (it may read them all). A filter that reads none (`selectattr` of a
// path the shape holds) notes none.
Value filter_watched(Interp& in, FilterFn f, Value& subject, Args& args) {
  skeleton::Watch& w = *skeleton::tl_watch;
  const bool before = w.read;
  const std::size_t noted = w.reads.size();
  skeleton::saw_tree(subject);
  Value r = f(in, subject, args);
  if (before || !w.read) w.reads.resize(noted);
  return r;
}

}  // namespace

// obj[a:b:c] as Python slices (jinja2 compiles a slice to plain Python,
// not to its getitem): a str, list or tuple, else a TypeError.
Value slice(const Value& obj, const Value& a, const Value& b, const Value& c) {
  check_defined(obj);
  if (obj.is_dict() && !obj.ns) throw Error("unhashable type: 'slice'");
  if (!obj.is_str() && !obj.is_seq() && !obj.is_range())
    throw Error("'" + std::string(type_name(obj)) + "' object is not subscriptable");
  for (const Value* v : {&a, &b, &c})
    if (!v->is_none() && !int_like(*v))
      throw Error("slice indices must be integers or None or have an __index__ method");
  if (obj.is_str()) {
    // Code-point indices; ASCII text takes the byte path.
    const std::string& s = *obj.s;
    bool ascii = py_len(s) == s.size();
    if (ascii) {
      auto idx = slice_indices(static_cast<int64_t>(s.size()), a, b, c);
      std::string r;
      r.reserve(idx.size());
      for (std::size_t k : idx) r += s[k];
      return obj.markup ? markup(std::move(r)) : Value::str(std::move(r));
    }
    std::vector<uint32_t> cps = code_points(s);
    std::string r;
    for (std::size_t k : slice_indices(static_cast<int64_t>(cps.size()), a, b, c)) utf8_append(cps[k], r);
    return obj.markup ? markup(std::move(r)) : Value::str(std::move(r));
  }
  if (obj.is_range()) {  // range(start + b*step, start + e*step, step*st)
    int64_t lo, hi, st;
    slice_bounds(static_cast<int64_t>(obj.list->items.size()), a, b, c, lo, hi, st);
    const int64_t* r = obj.list->range;
    return make_range(r[0] + lo * r[2], r[0] + hi * r[2], r[2] * st, nullptr);
  }
  if (obj.is_seq()) {
    const auto& items = obj.list->items;
    int64_t lo, hi, st;
    slice_bounds(static_cast<int64_t>(items.size()), a, b, c, lo, hi, st);
    const std::size_t count = slice_count(lo, hi, st);
    std::vector<Value> r;
    r.reserve(count);
    for (std::size_t j = 0; j < count; ++j)
      r.push_back(items[static_cast<std::size_t>(lo + static_cast<int64_t>(j) * st)]);
    return Value::new_list(std::move(r), obj.tuple);
  }
  return Value::undefined();
}

namespace {

Value unary(bool neg, const Value& v) {
  check_defined(v);
  if (!v.is_number())
    throw Error("bad operand type for unary " + std::string(neg ? "-" : "+") + ": '" + std::string(type_name(v)) + "'");
  if (!neg) return v.kind == Kind::kBool ? Value::integer(v.b) : v;
  if (v.kind == Kind::kFloat) return Value::real(-v.f);
  if (as_int(v) == INT64_MIN) throw Error("integer overflow");
  return Value::integer(-as_int(v));
}

Value call_value(Interp& in, const Value& f, Args& args, const std::string& what) {
  if (f.kind == Kind::kFunc) return f.fn->call(in, args);
  if (f.is_dict() && !f.ns)  // a recursive loop's `loop`
    if (const Value* c = f.dict->find(kLoopCall)) return c->fn->call(in, args);
  if (f.is_undefined()) throw Error("'" + (f.s ? *f.s : what) + "' is undefined");
  throw Error("'" + std::string(type_name(f)) + "' object is not callable");
}

// An operand read as a whole (resume.hpp: a read the prefixes may see differently).
[[gnu::always_inline]] inline Value operand(Interp& in, const Expr& e) {
  Value v = eval(in, e);
  if (tracking(in)) in.track->operand(v);
  return v;
}

}  // namespace

void eval_args(Interp& in, const Expr& e, std::size_t first, Args& out) {
  const std::size_t plain = e.a.size() - (e.star ? 1 : 0);
  for (std::size_t k = first; k < plain; ++k) out.pos.push_back(operand(in, *e.a[k]));
  // Python evaluates f(a, k=v, *args, **kwargs) as a, args, v, kwargs. What
  // `*args` and `**kwargs` add is read as a whole, as a plain argument is.
  if (e.star) {
    const std::size_t from = out.pos.size();
    add_star_args(operand(in, *e.a.back()), out);
    if (tracking(in))
      for (std::size_t k = from; k < out.pos.size(); ++k) in.track->operand(out.pos[k]);
  }
  for (const auto& [name, x] : e.kw) {
    if (name != kStarStar) {
      out.kw.emplace_back(name, operand(in, *x));
      continue;
    }
    const std::size_t from = out.kw.size();
    add_star_kwargs(operand(in, *x), out);
    if (tracking(in))
      for (std::size_t k = from; k < out.kw.size(); ++k) in.track->operand(out.kw[k].second);
  }
}

namespace {

// Tests that read no more of a list than its type.
bool reads_type_only(const Expr& e) {
  static const TestFn kTypeTests[] = {find_test("defined"),  find_test("undefined"), find_test("none"),
                                      find_test("string"),   find_test("mapping"),   find_test("iterable"),
                                      find_test("sequence"), find_test("number")};
  return e.test && std::find(std::begin(kTypeTests), std::end(kTypeTests), e.test) != std::end(kTypeTests);
}

// A value tested for truth.
const Value& truth(Interp& in, const Value& v) {
  if (tracking(in)) in.track->truth(v);
  return v;
}

}  // namespace

Value binary_op(const std::string& op, const Value& a, const Value& b) { return arith(op, a, b); }
bool compare_op(const std::string& op, const Value& a, const Value& b) { return compare(op, a, b); }

namespace {

bool fold_all(Interp& in, const std::vector<ExprPtr>& es, std::size_t from, std::vector<Value>& out) {
  for (std::size_t k = from; k < es.size(); ++k) {
    Value v;
    if (!es[k] || !fold_const(in, *es[k], v)) return false;
    out.push_back(std::move(v));
  }
  return true;
}

}  // namespace

bool fold_const(Interp& in, const Expr& e, Value& out) {
  try {
    std::vector<Value> v;
    switch (e.kind) {
      case EK::kLiteral: out = e.lit; return true;
      case EK::kList:
      case EK::kTuple:
        if (!fold_all(in, e.a, 0, v)) return false;
        out = Value::new_list(std::move(v), e.kind == EK::kTuple);
        return true;
      case EK::kDict:
        if (!fold_all(in, e.a, 0, v)) return false;
        out = Value::new_dict();
        for (std::size_t k = 0; k + 1 < v.size(); k += 2) out.dict->set_key(v[k], v[k + 1]);
        return true;
      case EK::kAttr:
        if (!fold_all(in, e.a, 0, v)) return false;
        out = get_attr(v[0], e.name);
        return true;
      case EK::kItem:
        if (!fold_all(in, e.a, 0, v)) return false;
        out = get_item(v[0], v[1]);
        return true;
      case EK::kSlice: {  // through getitem: a TypeError gives an undefined value
        Value parts[4] = {Value(), Value::none(), Value::none(), Value::none()};
        for (int k = 0; k < 4; ++k)
          if (e.a[k] && !fold_const(in, *e.a[k], parts[k])) return false;
        if (parts[0].is_undefined()) return false;
        try {
          out = slice(parts[0], parts[1], parts[2], parts[3]);
        } catch (const Error& err) {
          if (std::string_view(err.what()).find("step cannot be zero") != std::string_view::npos) return false;
          out = Value::undefined();
        }
        return true;
      }
      case EK::kFilter:
      case EK::kTest: {
        // Filters that take jinja2's context (select, map, ...) are not folded.
        static const FilterFn kContextual[] = {find_filter("select"), find_filter("reject"), find_filter("selectattr"),
                                               find_filter("rejectattr"), find_filter("map")};
        if (e.kind == EK::kFilter &&
            (!e.filter || std::find(std::begin(kContextual), std::end(kContextual), e.filter) != std::end(kContextual)))
          return false;
        if (e.kind == EK::kTest && !e.test) return false;
        if (in.fold_volatile) return false;  // _FilterTestCommon.as_const: Impossible where volatile
        if (e.star || std::any_of(e.kw.begin(), e.kw.end(), [](const auto& k) { return k.first == kStarStar; }))
          return false;
        if (!fold_all(in, e.a, 0, v)) return false;
        Args args;
        args.pos.assign(v.begin() + 1, v.end());
        for (const auto& [name, x] : e.kw) {
          Value kv;
          if (!fold_const(in, *x, kv)) return false;
          args.kw.emplace_back(name, std::move(kv));
        }
        if (e.sig) check_call(*e.sig, e.name, args);
        if (e.kind == EK::kFilter) out = e.filter(in, v[0], args);
        else out = Value::boolean(e.test(in, v[0], args) != e.negate);
        return true;
      }
      case EK::kNot:
        if (!fold_all(in, e.a, 0, v)) return false;
        out = Value::boolean(!truthy(v[0]));
        return true;
      case EK::kNeg:
      case EK::kPos:
        if (!fold_all(in, e.a, 0, v)) return false;
        out = unary(e.kind == EK::kNeg, v[0]);
        return true;
      case EK::kBinary: {
        if (!fold_all(in, e.a, 0, v)) return false;
        static const std::string tilde("~");  // Concat.as_const joins plain strs, markup_join or not
        out = arith(e.name == kMarkupJoin ? tilde : e.name, v[0], v[1]);
        return true;
      }
      case EK::kCompare:
        if (!fold_all(in, e.a, 0, v)) return false;
        out = Value::boolean(true);
        for (std::size_t k = 0; k < e.ops.size(); ++k)
          if (!compare(e.ops[k], v[k], v[k + 1])) {
            out = Value::boolean(false);
            break;
          }
        return true;
      case EK::kAnd:
      case EK::kOr: {
        Value l;
        if (!fold_const(in, *e.a[0], l)) return false;
        if (truthy(l) == (e.kind == EK::kOr)) {
          out = l;
          return true;
        }
        return fold_const(in, *e.a[1], out);
      }
      case EK::kCond: {
        Value c;
        if (!fold_const(in, *e.a[1], c)) return false;
        if (truthy(c)) return fold_const(in, *e.a[0], out);
        return e.a[2] && fold_const(in, *e.a[2], out);
      }
      default: return false;  // names, calls
    }
  } catch (const Error&) {
    return false;  // jinja2 leaves it to the render, which fails the same way
  } catch (const std::bad_alloc&) {
    return false;  // past the load's budget (optimize()): the render's own budget refuses it
  }
}

Value eval(Interp& in, const Expr& e) {
  in.step(e.pos);
  switch (e.kind) {
    case EK::kLiteral: return e.lit;
    case EK::kName:
      if (e.prompt && (in.track || in.probe)) prompt_read(in);
      if (const Value* v = in.find_var(e.var)) return *v;
      {
        Value t;
        return in.global_or_undefined(e, t);
      }
    case EK::kList:
    case EK::kTuple: {
      std::vector<Value> items;
      items.reserve(e.a.size());
      for (const auto& x : e.a) items.push_back(operand(in, *x));
      return Value::new_list(std::move(items), e.kind == EK::kTuple);
    }
    case EK::kDict: {
      Value d = Value::new_dict();
      for (std::size_t k = 0; k + 1 < e.a.size(); k += 2) {
        Value key = operand(in, *e.a[k]);
        d.dict->set_key(key, operand(in, *e.a[k + 1]));
      }
      return d;
    }
    case EK::kAttr: {
      Value t;
      const Value& obj = eval_ref(in, *e.a[0], t);
      if (tracking(in)) in.track->attr(obj, e.name);
      in.pos = e.pos;
      if (obj.is_dict() && (e.methods & kMethodsKnown) && (obj.ns || !(e.methods & kMethodDict))) {
        const Value* v = obj.dict->find(e.name);
        return v ? *v : e.undef;
      }
      return get_attr(obj, e.name);
    }
    case EK::kItem: {
      Value t;
      const Value& obj = e.a[1]->pure ? eval_ref(in, *e.a[0], t) : (t = eval(in, *e.a[0]));
      Value key = operand(in, *e.a[1]);
      if (tracking(in)) in.track->item(obj, key);
      in.pos = e.pos;
      return get_item(obj, key);
    }
    case EK::kSlice: {
      Value obj = eval(in, *e.a[0]);
      Value parts[3] = {Value::none(), Value::none(), Value::none()};  // absent: None
      for (int k = 0; k < 3; ++k)
        if (e.a[1 + k]) parts[k] = operand(in, *e.a[1 + k]);
      in.pos = e.pos;
      Value out;
      if (!(skeleton::tl_watch && obj.is_str() && skeleton::ask_slice(obj, parts[0], parts[1], parts[2], out)))
        out = slice(obj, parts[0], parts[1], parts[2]);
      if (tracking(in)) in.track->slice(obj, parts[0], parts[1], parts[2], out);
      return out;
    }
    case EK::kCall: {
      const Expr& callee = *e.a[0];
      PooledArgs pooled(in);
      Args& args = pooled.args;
      if (callee.kind == EK::kAttr) {
        Value obj = eval(in, *callee.a[0]);
        if (tracking(in)) in.track->attr(obj, callee.name);
        eval_args(in, e, 1, args);
        in.pos = e.pos;
        if (obj.is_undefined()) check_defined(obj);
        if (!(obj.is_dict() && (obj.ns || obj.dict->find(callee.name)) && !has_method(obj, callee.name))) {
          bool found = true;
          Value r = call_method(in, obj, callee.name, args, found);
          if (found) return r;
        }
        return call_value(in, get_attr(obj, callee.name), args, callee.name);
      }
      Value f = eval(in, callee);
      eval_args(in, e, 1, args);
      in.pos = e.pos;
      return call_value(in, f, args, callee.kind == EK::kName ? callee.name : "object");
    }
    case EK::kFilter: {
      if (e.filter == &filter_length && e.a.size() == 1 && e.kw.empty()) {  // the subject borrowed, not copied
        Value t;
        const Value& subject = operand_ref(in, *e.a[0], t);
        in.pos = e.pos;
        if (skeleton::tl_watch) [[unlikely]] {
          Value r;
          if (skeleton::ask_filter(in, e.filter, subject, Args(), r)) return r;
        }
        return Value::integer(length(subject));
      }
      Value subject = operand(in, *e.a[0]);
      PooledArgs pooled(in);
      Args& args = pooled.args;
      eval_args(in, e, 1, args);
      in.pos = e.pos;
      if (!e.filter) throw Error("No filter named '" + e.name + "'.");
      if (e.sig) check_call(*e.sig, e.name, args);
      if (skeleton::tl_watch) [[unlikely]] {
        Value r;
        if (skeleton::ask_filter(in, e.filter, subject, args, r)) return r;
        if (subject.is_list() || subject.is_dict()) return filter_watched(in, e.filter, subject, args);
      }
      return e.filter(in, subject, args);
    }
    case EK::kTest: {
      // The subject is borrowed where no argument is evaluated after it.
      const bool borrow = e.a.size() == 1 && e.kw.empty();
      Value t;
      const Value* sp = &t;
      if (!reads_type_only(e)) {
        if (borrow) sp = &operand_ref(in, *e.a[0], t);
        else t = operand(in, *e.a[0]);
      } else if (e.a[0]->kind == EK::kName) {  // `add_generation_prompt is defined` reads no value
        in.step(e.a[0]->pos);
        const Value* v = borrow ? in.find_var(e.a[0]->var) : nullptr;
        if (v) sp = v;
        else t = e.a[0]->lit.is_undefined() ? in.lookup(e.a[0]->var) : e.a[0]->lit;
      } else {
        if (borrow) sp = &eval_ref(in, *e.a[0], t);
        else t = eval(in, *e.a[0]);
      }
      const Value& subject = *sp;
      PooledArgs pooled(in);
      Args& args = pooled.args;
      eval_args(in, e, 1, args);
      in.pos = e.pos;
      if (!e.test) throw Error("No test named '" + e.name + "'.");
      if (e.sig) check_call(*e.sig, e.name, args);
      return Value::boolean(e.test(in, subject, args) != e.negate);
    }
    case EK::kNeg:
    case EK::kPos: return unary(e.kind == EK::kNeg, operand(in, *e.a[0]));
    case EK::kNot: {
      Value t;
      return Value::boolean(!truthy(truth(in, eval_ref(in, *e.a[0], t))));
    }
    case EK::kAnd: {
      Value t;
      const Value& l = eval_ref(in, *e.a[0], t);
      if (!truthy(truth(in, l))) return l;
      return eval(in, *e.a[1]);
    }
    case EK::kOr: {
      Value t;
      const Value& l = eval_ref(in, *e.a[0], t);
      if (truthy(truth(in, l))) return l;
      return eval(in, *e.a[1]);
    }
    case EK::kBinary: {
      if (is_concat(e)) return concat_chain(in, e);
      Value l = operand(in, *e.a[0]);
      Value r = operand(in, *e.a[1]);
      in.pos = e.pos;
      return arith(e.name, l, r);
    }
    case EK::kCompare: {
      if (e.ops.size() == 1 && e.a[1]->pure) {  // one comparison: both operands borrowed
        Value t0, t1;
        if (tracking(in) && Consumer::wanted(*in.track, e)) {  // what the prefixes see differently (resume.hpp)
          Consumer c(in);
          const Value& l = c.operand_ref(*e.a[0], t0);
          const Value& r = c.operand_ref(*e.a[1], t1);
          in.pos = e.pos;
          const bool result = compare(e.ops[0], l, r);
          c.compared(e.ops[0], l, r, result);
          return Value::boolean(result);
        }
        const Value& l = operand_ref(in, *e.a[0], t0);
        const Value& r = operand_ref(in, *e.a[1], t1);
        in.pos = e.pos;
        return Value::boolean(compare(e.ops[0], l, r));
      }
      Value l = operand(in, *e.a[0]);
      for (std::size_t k = 0; k < e.ops.size(); ++k) {
        Value r = operand(in, *e.a[k + 1]);
        in.pos = e.pos;
        if (!compare(e.ops[k], l, r)) return Value::boolean(false);
        l = std::move(r);
      }
      return Value::boolean(true);
    }
    case EK::kCond: {
      Value t;
      if (truthy(truth(in, eval_ref(in, *e.a[1], t)))) return eval(in, *e.a[0]);
      return e.a[2] ? eval(in, *e.a[2]) : Value::undefined();
    }
  }
  return Value::undefined();
}

void add_star_args(const Value& v, Args& out) {
  for (Value& x : iterate(v)) out.pos.push_back(std::move(x));
}

void add_star_kwargs(const Value& v, Args& out) {
  if (!v.is_dict() || v.ns) throw Error("argument after ** must be a mapping, not " + std::string(type_name(v)));
  for (const auto& [k, x] : v.dict->items()) {
    if (!key_value(k).is_str()) throw Error("keywords must be strings");
    for (const auto& [name, y] : out.kw)
      if (name == k) throw Error("got multiple values for keyword argument '" + k + "'");
    out.kw.emplace_back(k, x);
  }
}

}  // namespace tokfeed::tmpl
