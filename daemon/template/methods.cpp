// Python methods of str, dict and list that templates call. Methods that
// mutate a list or dict are refused, as transformers' immutable sandbox does.
#include <algorithm>
#include <cstdint>

#include "template/interp.hpp"
#include "template/name_index.hpp"
#include "template/pystr.hpp"
#include "template/skeleton_ops.hpp"

namespace tokfeed::tmpl {

namespace {

constexpr std::string_view kStrNames[] = {
    "strip",        "lstrip",    "rstrip",      "split",        "rsplit",       "splitlines", "startswith", "endswith",
    "upper",        "lower",     "title",       "capitalize",   "replace",      "find",       "rfind",      "index",
    "rindex",       "count",     "join",        "isdigit",      "isalpha",      "isalnum",    "isspace",    "isupper",
    "islower",      "partition", "rpartition",  "removeprefix", "removesuffix", "casefold",   "format",     "zfill",
    "isnumeric",    "isdecimal", "swapcase",    "center",       "ljust",        "rjust",      "expandtabs", "istitle",
    "isidentifier", "isascii",   "isprintable", "format_map"};
constexpr std::string_view kDictNames[] = {"get", "items", "keys", "values", "copy"};
constexpr std::string_view kDictUnsafeNames[] = {"pop", "update", "setdefault", "clear", "popitem"};
constexpr std::string_view kDictAllNames[] = {"get", "items",  "keys",       "values", "copy",
                                              "pop", "update", "setdefault", "clear",  "popitem"};
constexpr std::string_view kListNames[] = {"index", "count", "copy"};
constexpr std::string_view kListUnsafeNames[] = {"append", "extend",  "insert", "pop",
                                                 "remove", "reverse", "sort",   "clear"};
constexpr NameIndex kStrMethods(kStrNames);
constexpr NameIndex kDictMethods(kDictNames);
constexpr NameIndex kDictUnsafe(kDictUnsafeNames);
constexpr NameIndex kDictAll(kDictAllNames);
constexpr NameIndex kListMethods(kListNames);
constexpr NameIndex kListUnsafe(kListUnsafeNames);

template <class Set>
bool in_set(const Set& set, std::string_view name) {
  return set.contains(name);
}

const Value& arg(Args& a, std::size_t i, std::string_view kw = {}) {
  static const Value missing;
  if (i < a.pos.size()) return a.pos[i];
  for (auto& [k, v] : a.kw)
    if (!kw.empty() && k == kw) return v;
  return missing;
}

// CPython's argument count check of a builtin method (no keywords taken).
void arity(std::string_view type, std::string_view name, const Args& a, std::size_t min, std::size_t max) {
  if (a.kw.empty() && a.pos.size() >= min && a.pos.size() <= max) [[likely]]
    return;
  std::string n = std::string(type) + "." + std::string(name) + "()";
  if (!a.kw.empty()) throw Error(n + " takes no keyword arguments");
  throw Error(n + " takes " + (min == max ? "exactly " + std::to_string(min) : "at most " + std::to_string(max)) +
              " argument" + (max == 1 ? "" : "s") + " (" + std::to_string(a.pos.size()) + " given)");
}

Value dict_method(const Value& d, std::string_view name, Args& a) {
  arity("dict", name, a, name == "get" ? 1 : 0, name == "get" ? 2 : 0);
  if (name == "get") {
    const Value& k = arg(a, 0);
    // A str key is stored as its text (but one that starts with the key
    // marker): looked up as it is, not copied into a key.
    const Value* v = k.is_str() && !k.s->starts_with('\x01') ? d.dict->find(*k.s) : d.dict->find(key_of(k));
    if (v) return *v;
    return a.pos.size() > 1 ? a.pos[1] : Value::none();
  }
  if (name == "items") {
    std::vector<Value> out;
    for (const auto& [k, v] : d.dict->items()) out.push_back(Value::new_list({d.dict->key(k), v}, true));
    Value r = Value::new_list(std::move(out));
    r.view = 3;
    return r;
  }
  if (name == "keys" || name == "values") {
    std::vector<Value> out;
    for (const auto& [k, v] : d.dict->items()) out.push_back(name == "keys" ? d.dict->key(k) : v);
    Value r = Value::new_list(std::move(out));
    r.view = name == "keys" ? 1 : 2;
    return r;
  }
  Value c = Value::new_dict();  // copy
  c.dict->items() = d.dict->items();
  c.dict->key_objs() = d.dict->key_objs();
  return c;
}

Value list_method(const Value& l, std::string_view name, Args& a) {
  arity(type_name(l), name, a, name == "copy" ? 0 : 1, name == "index" && !l.is_range() ? 3 : name == "copy" ? 0 : 1);
  if (name == "copy") return Value::new_list(l.list->items, l.tuple);
  const Value& x = arg(a, 0);
  int64_t n = 0;
  // index(x, start, end): Python's slice bounds on the list.
  auto bound = [&](std::size_t i, int64_t dflt) {
    if (i >= a.pos.size()) return dflt;
    const Value& v = a.pos[i];
    if (v.kind != Kind::kInt && v.kind != Kind::kBool)
      throw Error("slice indices must be integers or have an __index__ method");
    int64_t b = v.kind == Kind::kBool ? v.b : v.i, len = static_cast<int64_t>(l.list->items.size());
    if (b < 0) b = std::max<int64_t>(b + len, 0);
    return std::min(b, len);
  };
  std::size_t from = static_cast<std::size_t>(bound(1, 0));
  std::size_t to = static_cast<std::size_t>(bound(2, static_cast<int64_t>(l.list->items.size())));
  for (std::size_t k = name == "index" ? from : 0; k < (name == "index" ? to : l.list->items.size()); ++k) {
    if (!equal(l.list->items[k], x)) continue;
    if (name == "index") return Value::integer(static_cast<int64_t>(k));
    ++n;
  }
  if (name == "index") throw Error("value is not in list");
  return Value::integer(n);
}

[[noreturn]] void unsafe(const Value& obj, std::string_view name) {
  throw Error("access to attribute '" + std::string(name) + "' of '" + std::string(type_name(obj)) +
              "' object is unsafe");
}

}  // namespace

bool has_method(const Value& obj, std::string_view name) {
  switch (obj.kind) {
    case Kind::kStr: return in_set(kStrMethods, name);
    case Kind::kDict: return !obj.ns && in_set(kDictAll, name);
    case Kind::kList:
      if (obj.tuple || obj.is_range()) return (obj.is_seq() || obj.is_range()) && (name == "index" || name == "count");
      return obj.is_seq() && (in_set(kListMethods, name) || in_set(kListUnsafe, name));
    default: return false;
  }
}

bool unsafe_method(const Value& obj, std::string_view name) {
  if (obj.is_dict()) return !obj.ns && in_set(kDictUnsafe, name);
  return obj.is_list() && !obj.tuple && obj.is_seq() && in_set(kListUnsafe, name);
}

Value method_attr(const Value& obj, std::string_view name) {
  return unsafe_method(obj, name) ? Value::undefined(std::string(name)) : bound_method(obj, name);
}

uint8_t method_kinds(std::string_view name) {
  return static_cast<uint8_t>((in_set(kStrMethods, name) ? kMethodStr : 0) |
                              (in_set(kDictAll, name) ? kMethodDict : 0) |
                              (in_set(kListMethods, name) || in_set(kListUnsafe, name) ? kMethodList : 0));
}

Value call_method(Interp&, const Value& obj, std::string_view name, Args& a, bool& found) {
  found = true;
  switch (obj.kind) {
    case Kind::kStr:
      if (in_set(kStrMethods, name)) {
        if (skeleton::tl_watch) [[unlikely]] {
          Value r;
          if (skeleton::ask_method(obj, name, a, r)) return r;
        }
        return str_method(obj, name, a);
      }
      break;
    case Kind::kDict:
      if (obj.ns) break;
      if (in_set(kDictMethods, name)) return dict_method(obj, name, a);
      if (in_set(kDictUnsafe, name)) unsafe(obj, name);
      break;
    case Kind::kList:
      if (!(obj.is_seq() || obj.is_range()) || ((obj.tuple || obj.is_range()) && !has_method(obj, name))) break;
      if (in_set(kListMethods, name)) return list_method(obj, name, a);
      if (in_set(kListUnsafe, name)) unsafe(obj, name);
      break;
    default: break;
  }
  found = false;
  return Value();
}

Value bound_method(const Value& obj, std::string_view name) {
  std::string n(name);
  return Value::func(std::string(type_name(obj)) + "." + n, [obj, n](Interp& in, Args& a) -> Value {
    bool found = true;
    return call_method(in, obj, n, a, found);
  });
}

}  // namespace tokfeed::tmpl
