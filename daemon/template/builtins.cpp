// Python semantics the evaluator and filters share (item and attribute
// access, `in`, iteration, len), transformers' tojson, and the
// globals: range, namespace, dict, raise_exception, strftime_now.
#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <memory>

#include "template/budget.hpp"
#include "template/interp.hpp"
#include "template/pystr.hpp"
#include "template/resume.hpp"
#include "template/skeleton_ops.hpp"

namespace tokfeed::tmpl {

namespace {

[[noreturn]] void undefined_error(const Value& v) {
  throw Error("'" + (v.s ? *v.s : std::string("value")) + "' is undefined");
}

bool int_like(const Value& v) { return v.kind == Kind::kInt || v.kind == Kind::kBool; }
int64_t as_int(const Value& v) { return v.kind == Kind::kBool ? v.b : v.i; }

// jinja2's Macro attributes: a call block's caller is a macro named None.
Value macro_attr(const Stmt& m, std::string_view name) {
  if (name == "name") return m.kind == SK::kMacro ? Value::str(m.text) : Value::none();
  if (name == "arguments") {
    std::vector<Value> params;
    for (const std::string& p : m.targets) params.push_back(Value::str(p));
    return Value::new_list(std::move(params), true);
  }
  if (name == "catch_kwargs") return Value::boolean(m.uses_kwargs);
  if (name == "catch_varargs") return Value::boolean(m.uses_varargs);
  if (name == "caller") return Value::boolean(m.uses_caller);
  if (name == "explicit_caller")
    return Value::boolean(std::find(m.targets.begin(), m.targets.end(), "caller") != m.targets.end());
  return Value::undefined(std::string(name));
}

// The str of one code point: a latin-1 one made once for the process, as
// CPython keeps one object per latin-1 character (outside any render's
// budget, never freed), else a new one.
Value char_str(uint32_t cp) {
  static const std::array<Value, 256>& latin1 = *[] {
    OutsideBudget outside;
    auto* a = new std::array<Value, 256>;
    for (uint32_t c = 0; c < a->size(); ++c) {
      std::string t;
      utf8_append(c, t);
      (*a)[c] = Value::str(std::move(t));
    }
    return a;
  }();
  if (cp < latin1.size()) return latin1[cp];
  std::string c;
  utf8_append(cp, c);
  return Value::str(std::move(c));
}

// obj.name; a miss is undefined with `hint` (the key's own str, where
// obj[key] falls back to it) or else the name as its hint.
Value attr_of(const Value& obj, std::string_view name, const StrRef* hint) {
  auto miss = [&] { return hint ? Value::undefined(*hint) : Value::undefined(std::string(name)); };
  switch (obj.kind) {
    case Kind::kUndefined: undefined_error(obj);
    case Kind::kDict:
      if (!obj.ns && has_method(obj, name)) return method_attr(obj, name);
      if (const Value* v = obj.dict->find(name)) return *v;
      return miss();
    case Kind::kStr:
    case Kind::kList:
      if (has_method(obj, name)) return method_attr(obj, name);
      if (obj.is_range()) {
        int k = name == "start" ? 0 : name == "stop" ? 1 : name == "step" ? 2 : -1;
        if (k >= 0) return Value::integer(obj.list->range[k]);
      }
      if (obj.tuple && obj.list->group && (name == "grouper" || name == "list"))
        return obj.list->items[name == "grouper" ? 0 : 1];
      return miss();
    case Kind::kInt:
    case Kind::kBool:  // Python's int (and bool) data attributes
      if (name == "real" || name == "numerator") return Value::integer(as_int(obj));
      if (name == "imag") return Value::integer(0);
      if (name == "denominator") return Value::integer(1);
      return miss();
    case Kind::kFloat:
      if (name == "real") return obj;
      if (name == "imag") return Value::real(0.0);
      return miss();
    case Kind::kFunc:
      if (obj.fn->def) return macro_attr(*static_cast<const Stmt*>(obj.fn->def), name);
      return miss();
    default: return miss();
  }
}

}  // namespace

Value get_attr(const Value& obj, std::string_view name) { return attr_of(obj, name, nullptr); }

Value get_item(const Value& obj, const Value& key) {
  switch (obj.kind) {
    case Kind::kUndefined: undefined_error(obj);
    case Kind::kDict:
      if (key.is_str()) {
        if (const Value* v = obj.dict->find(key.s->starts_with('\x01') ? key_of(key) : *key.s)) return *v;
        if (has_method(obj, *key.s)) return method_attr(obj, *key.s);
        return Value::undefined(key.s);
      }
      if (!key.is_undefined() && !key.is_dict() && !obj.ns && (!key.is_list() || hashable(key))) {
        if (const Value* v = obj.dict->find(key_of(key))) return *v;
      }
      return Value::undefined();
    case Kind::kList:
      if (obj.gen || (obj.view && !obj.is_range())) return Value::undefined();
      if (int_like(key)) {
        int64_t i = as_int(key), n = static_cast<int64_t>(obj.list->items.size());
        if (i < 0) i += n;
        if (i < 0 || i >= n) return Value::undefined("list index");
        return obj.list->items[static_cast<std::size_t>(i)];
      }
      if (key.is_str()) return attr_of(obj, *key.s, &key.s);
      return Value::undefined();
    case Kind::kStr:
      if (int_like(key)) {
        const std::string& s = *obj.s;
        int64_t i = as_int(key), n = static_cast<int64_t>(py_len(s));
        if (i < 0) i += n;
        if (i < 0 || i >= n) return Value::undefined("string index");
        const uint32_t cp = n == static_cast<int64_t>(s.size())
                                ? static_cast<unsigned char>(s[static_cast<std::size_t>(i)])
                                : code_points(s)[static_cast<std::size_t>(i)];
        if (!obj.markup) return char_str(cp);
        std::string r;
        utf8_append(cp, r);
        return markup(std::move(r));  // Markup.__getitem__
      }
      if (key.is_str()) return attr_of(obj, *key.s, &key.s);
      return Value::undefined();
    default: return Value::undefined();
  }
}

void require_hashable(const Value& v) {
  if (v.is_list() && v.tuple) {
    for (const Value& x : v.list->items) require_hashable(x);
  } else if ((v.is_list() && !v.gen && !v.is_range()) || (v.is_dict() && !v.ns)) {
    throw Error("unhashable type: '" + std::string(type_name(v)) + "'");
  }
}

bool contains(const Value& c, const Value& item) {
  switch (c.kind) {
    case Kind::kUndefined: return false;
    case Kind::kStr:
      if (!item.is_str())
        throw Error("'in <string>' requires string as left operand, not " + std::string(type_name(item)));
      if (skeleton::tl_watch) [[unlikely]] {
        bool r;
        if (skeleton::ask_in(c, item, r)) return r;
      }
      return c.s->find(*item.s) != std::string::npos;
    case Kind::kList:
      for (std::size_t k = 0; k < c.list->items.size(); ++k) {
        if (!equal(c.list->items[k], item)) continue;
        if (c.gen)
          c.list->items.erase(c.list->items.begin(), c.list->items.begin() + static_cast<std::ptrdiff_t>(k) + 1);
        return true;
      }
      if (c.gen) c.list->items.clear();
      return false;
    case Kind::kDict:
      if (c.ns) break;
      if (item.is_str()) return c.dict->find(item.s->starts_with('\x01') ? key_of(item) : *item.s) != nullptr;
      if (item.is_number() || item.is_none()) return c.dict->find(key_of(item)) != nullptr;
      require_hashable(item);
      if (item.is_list() && item.tuple && item.is_seq()) return c.dict->find(key_of(item)) != nullptr;
      return false;
    default: break;
  }
  throw Error("argument of type '" + std::string(type_name(c)) + "' is not iterable");
}

std::vector<Value> iterate(const Value& v) {  // NOLINT: consumes iterators through the shared list
  switch (v.kind) {
    case Kind::kUndefined: return {};
    case Kind::kStr: {
      std::vector<Value> out;
      const std::string& text = *v.s;
      out.reserve(text.size());
      for (uint32_t cp : code_points(text)) out.push_back(char_str(cp));
      return out;
    }
    case Kind::kList:
      if (v.gen) return std::move(v.list->items);  // an iterator is used up
      return v.list->items;
    case Kind::kDict: {
      if (v.ns) break;
      std::vector<Value> out;
      for (const auto& [k, x] : v.dict->items()) out.push_back(v.dict->key(k));
      return out;
    }
    default: break;
  }
  throw Error("'" + std::string(type_name(v)) + "' object is not iterable");
}

int64_t length(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined: return 0;
    case Kind::kStr: return static_cast<int64_t>(py_len(*v.s));
    case Kind::kList:
      if (v.gen) break;
      return static_cast<int64_t>(v.list->items.size());
    case Kind::kDict:
      if (!v.ns) return static_cast<int64_t>(v.dict->items().size());
      break;
    default: break;
  }
  throw Error("object of type '" + std::string(type_name(v)) + "' has no len()");
}

namespace {

// What one json.dumps call writes with.
struct DumpOptions {
  const std::string* indent;
  bool ascii, sort;
  std::string item_sep, key_sep;
  std::string pad;  // with an indent: "\n" and the indent repeated, cut to a level's
};

void dump(const Value& v, DumpOptions& o, int level, std::string& out) {
  if (level > kMaxNesting) throw Error("maximum recursion depth exceeded while encoding a JSON object");
  auto newline = [&](int lvl) {
    const std::size_t n = 1 + static_cast<std::size_t>(lvl) * o.indent->size();
    while (o.pad.size() < n) o.pad += *o.indent;
    out.append(o.pad, 0, n);
  };
  switch (v.kind) {
    case Kind::kNone: out += "null"; return;
    case Kind::kBool: out += v.b ? "true" : "false"; return;
    case Kind::kInt: {
      char b[24];
      out.append(b, static_cast<std::size_t>(std::to_chars(b, b + sizeof b, v.i).ptr - b));
      return;
    }
    case Kind::kFloat:
      if (std::isnan(v.f)) out += "NaN";
      else if (std::isinf(v.f)) out += v.f < 0 ? "-Infinity" : "Infinity";
      else append_float(v.f, out);
      return;
    case Kind::kStr: json_quote(*v.s, out, o.ascii); return;
    case Kind::kList: {
      if (v.gen || v.view) break;
      const auto& items = v.list->items;
      if (items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (std::size_t k = 0; k < items.size(); ++k) {
        if (k) out += o.item_sep;
        if (o.indent) newline(level + 1);
        dump(items[k], o, level + 1, out);
      }
      if (o.indent) newline(level);
      out += ']';
      return;
    }
    case Kind::kDict: {
      if (v.ns) break;
      const auto& kvs = v.dict->items();
      if (kvs.empty()) {
        out += "{}";
        return;
      }
      // Sorted: the items by key as Python's sorted() compares them (numbers
      // by value; a TypeError where two keys do not compare, a str and a
      // number, None).
      std::vector<std::pair<Value, const std::pair<std::string, Value>*>> order;
      if (o.sort) {
        for (const auto& kv : kvs) order.emplace_back(v.dict->key(kv.first), &kv);
        static const std::string kLess = "<";
        std::stable_sort(order.begin(), order.end(),
                         [](const auto& a, const auto& b) { return compare_op(kLess, a.first, b.first); });
      }
      std::string key_buf;
      out += '{';
      for (std::size_t k = 0; k < kvs.size(); ++k) {
        const auto& kv = o.sort ? *order[k].second : kvs[k];
        if (k) out += o.item_sep;
        if (o.indent) newline(level + 1);
        json_quote(key_json(*v.dict, kv.first, key_buf), out, o.ascii);
        out += o.key_sep;
        dump(kv.second, o, level + 1, out);
      }
      if (o.indent) newline(level);
      out += '}';
      return;
    }
    default: break;
  }
  throw Error("Object of type " + std::string(type_name(v)) + " is not JSON serializable");
}

}  // namespace

std::string tojson(const Value& v, bool ascii, const std::string* indent, bool sort_keys, const std::string* item_sep,
                   const std::string* key_sep) {
  DumpOptions o{indent, ascii, sort_keys, item_sep ? *item_sep : (indent ? "," : ", "), key_sep ? *key_sep : ": ",
                "\n"};
  std::string out;
  dump(v, o, 0, out);
  return out;
}

namespace {}  // namespace

Value make_range(int64_t start, int64_t stop, int64_t step, Interp* in) {
  std::vector<Value> out;
  for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) {
    if (out.size() >= 100000) throw Error("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    out.push_back(Value::integer(k));
    if (in && (out.size() & 63) == 0) in->step(in->pos);  // building a long range costs steps too
    if (k > 0 ? step > INT64_MAX - k : step < INT64_MIN - k) break;
  }
  Value r = Value::new_list(std::move(out));
  r.view = kRangeView;
  r.list->range[0] = start, r.list->range[1] = stop, r.list->range[2] = step;
  return r;
}

namespace {

Value fn_range(Interp& in, Args& a) {
  if (a.pos.empty() || a.pos.size() > 3) throw Error("range expected 1 to 3 arguments");
  for (const Value& v : a.pos)
    if (!int_like(v)) throw Error("'" + std::string(type_name(v)) + "' object cannot be interpreted as an integer");
  int64_t start = 0, stop, step = 1;
  if (a.pos.size() == 1) stop = as_int(a.pos[0]);
  else start = as_int(a.pos[0]), stop = as_int(a.pos[1]);
  if (a.pos.size() == 3) step = as_int(a.pos[2]);
  if (step == 0) throw Error("range() arg 3 must not be zero");
  return make_range(start, stop, step, &in);
}

Value fn_namespace(Interp&, Args& a) {
  Value ns = Value::new_dict();
  ns.ns = true;
  ns.dict->items().reserve(a.kw.size());  // namespace(a=..., b=...): its attributes in one allocation
  for (const Value& p : a.pos) {
    if (!p.is_dict()) throw Error("namespace() takes a mapping");
    for (const auto& [k, v] : p.dict->items()) ns.dict->set_from(*p.dict, k, v);
  }
  for (auto& [k, v] : a.kw) {
    if (!k.empty() && k[0] == '_')
      throw Error("Chat templates cannot store underscore-prefixed attributes on a namespace");
    ns.dict->set(k, v);
  }
  return ns;
}

Value fn_dict(Interp&, Args& a) {
  Value d = Value::new_dict();
  for (const Value& p : a.pos) {
    if (p.is_dict()) {
      for (const auto& [k, v] : p.dict->items()) d.dict->set_from(*p.dict, k, v);
    } else {
      for (const Value& kv : iterate(p)) {
        std::vector<Value> pair = iterate(kv);
        if (pair.size() != 2) throw Error("dictionary update sequence element has wrong length; 2 is required");
        d.dict->set_key(pair[0], pair[1]);
      }
    }
  }
  for (auto& [k, v] : a.kw) d.dict->set(k, v);
  return d;
}

Value fn_raise(Interp&, Args& a) { throw Error(a.pos.empty() ? std::string() : to_str(a.pos[0])); }

Value fn_strftime(Interp& in, Args& a) {
  if (a.pos.empty() || !a.pos[0].is_str()) throw Error("strftime_now() takes a format string");
  // The last text made on this thread, for its format and instant: a
  // render's instant is fixed, and templates ask for one date per message.
  struct Last {
    std::string format;
    std::tm now{};
    char text[512];
    std::size_t n = 0;
    bool made = false;
  };
  static thread_local Last last;
  const std::string& format = *a.pos[0].s;
  if (!last.made || last.format != format || std::memcmp(&last.now, &in.now, sizeof in.now) != 0) {
    OutsideBudget outside;  // the cache is the thread's, not the render's
    last.n = std::strftime(last.text, sizeof last.text, format.c_str(), &in.now);
    last.format = format;
    last.now = in.now;
    last.made = true;
  }
  return Value::str(std::string(last.text, last.n));
}

// A cycler or joiner changed state: what a resume point cannot restore
// (resume.hpp), so every prefix not yet passed is rendered in full.
void spoil_resume(Interp& in) {
  if (in.track && in.track->watching) in.track->spoil_now(static_cast<int64_t>(in.track->n));
}

// jinja2's cycler(*items): an object (a namespace the template cannot
// assign to) with `items`, `pos`, `current`, `next()` and `reset()`. Its
// methods hold it: the render empties it at its end (Interp::namespaces).
Value fn_cycler(Interp& in, Args& a) {
  if (!a.kw.empty()) throw Error("Cycler.__init__() got an unexpected keyword argument '" + a.kw[0].first + "'");
  if (a.pos.empty()) throw Error("at least one item has to be provided");
  Value c = Value::new_dict();
  c.ns = true;
  c.view = kCyclerView;
  Ref<DictObj> self = c.dict;
  self->set("items", Value::new_list(a.pos, true));
  self->set("pos", Value::integer(0));
  self->set("current", a.pos[0]);
  auto move_to = [](DictObj& d, int64_t pos) {
    const Value& items = *d.find("items");
    d.set("pos", Value::integer(pos));
    d.set("current", items.list->items[static_cast<std::size_t>(pos)]);
  };
  self->set("next", Value::func("next", [self, move_to](Interp& in2, Args& args) -> Value {
              if (!args.pos.empty() || !args.kw.empty()) throw Error("Cycler.next() takes 1 positional argument");
              spoil_resume(in2);
              Value rv = *self->find("current");
              int64_t n = static_cast<int64_t>(self->find("items")->list->items.size());
              move_to(*self, (self->find("pos")->i + 1) % n);
              return rv;
            }));
  self->set("reset", Value::func("reset", [self, move_to](Interp& in2, Args& args) -> Value {
              if (!args.pos.empty() || !args.kw.empty()) throw Error("Cycler.reset() takes 1 positional argument");
              spoil_resume(in2);
              move_to(*self, 0);
              return Value::none();
            }));
  in.namespaces.push_back(self);
  return c;
}

// jinja2's joiner(sep=", "): a function giving "" the first time, then sep.
Value fn_joiner(Interp&, Args& a) {
  Value sep = Value::str(", ");
  if (a.pos.size() + a.kw.size() > 1) throw Error("Joiner.__init__() takes from 1 to 2 positional arguments");
  if (!a.pos.empty()) sep = a.pos[0];
  for (auto& [k, v] : a.kw) {
    if (k != "sep") throw Error("Joiner.__init__() got an unexpected keyword argument '" + k + "'");
    sep = v;
  }
  auto used = std::make_shared<bool>(false);
  return Value::func("joiner", [sep, used](Interp& in, Args& args) -> Value {
    if (!args.pos.empty() || !args.kw.empty()) throw Error("Joiner.__call__() takes 1 positional argument");
    spoil_resume(in);
    if (*used) return sep;
    *used = true;
    return Value::str("");
  });
}

}  // namespace

Value global_function(std::string_view name) {
  // One guarded static for all: most names asked for are none of them (a
  // template's `tools is defined` reaches here), and the first byte tells.
  struct Globals {
    Value range = Value::func("range", fn_range), ns = Value::func("namespace", fn_namespace),
          dict = Value::func("dict", fn_dict), raise = Value::func("raise_exception", fn_raise),
          strf = Value::func("strftime_now", fn_strftime), cycler = Value::func("cycler", fn_cycler),
          joiner = Value::func("joiner", fn_joiner);
    // Defined, as jinja2's; random text, which a render cannot reproduce.
    Value lipsum = Value::func("generate_lorem_ipsum", [](Interp&, Args&) -> Value {
      throw Error("lipsum() gives random text, which the engine does not render");
    });
  };
  if (name.empty()) return Value::undefined();
  switch (name[0]) {
    case 'r':
    case 'n':
    case 'd':
    case 's':
    case 'c':
    case 'j':
    case 'l': break;
    default: return Value::undefined();
  }
  // Made once for the process, outside any render's budget (the render
  // that happens to come first is charged nothing), never freed.
  static const Globals& g = *[] {
    OutsideBudget outside;
    return new Globals;
  }();
  if (name == "range") return g.range;
  if (name == "namespace") return g.ns;
  if (name == "dict") return g.dict;
  if (name == "raise_exception") return g.raise;
  if (name == "strftime_now") return g.strf;
  if (name == "cycler") return g.cycler;
  if (name == "joiner") return g.joiner;
  if (name == "lipsum") return g.lipsum;
  return Value::undefined();
}

}  // namespace tokfeed::tmpl
