// Python methods of str, dict and list that templates call. Methods that
// mutate a list or dict are refused, as transformers' immutable sandbox does.
#include <algorithm>

#include "template/interp.hpp"
#include "template/pystr.hpp"

namespace tokfeed::tmpl {

namespace {

constexpr std::string_view kStrMethods[] = {
    "strip",     "lstrip",    "rstrip",     "split",        "rsplit",       "splitlines", "startswith", "endswith",
    "upper",     "lower",     "title",      "capitalize",   "replace",      "find",       "rfind",      "index",
    "rindex",    "count",     "join",       "isdigit",      "isalpha",      "isalnum",    "isspace",    "isupper",
    "islower",   "partition", "rpartition", "removeprefix", "removesuffix", "casefold",   "format",     "zfill",
    "isnumeric", "isdecimal", "swapcase",   "center",       "ljust",        "rjust",      "expandtabs", "istitle"};
constexpr std::string_view kDictMethods[] = {"get", "items", "keys", "values", "copy"};
constexpr std::string_view kDictUnsafe[] = {"pop", "update", "setdefault", "clear", "popitem"};
constexpr std::string_view kListMethods[] = {"index", "count", "copy"};
constexpr std::string_view kListUnsafe[] = {"append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear"};

template <std::size_t N>
bool in_set(const std::string_view (&set)[N], std::string_view name) {
  return std::find(std::begin(set), std::end(set), name) != std::end(set);
}

const Value& arg(Args& a, std::size_t i, std::string_view kw = {}) {
  static const Value missing;
  if (i < a.pos.size()) return a.pos[i];
  for (auto& [k, v] : a.kw)
    if (!kw.empty() && k == kw) return v;
  return missing;
}

Value dict_method(const Value& d, std::string_view name, Args& a) {
  if (name == "get") {
    const Value& k = arg(a, 0);
    if (const Value* v = d.dict->find(key_of(k))) return *v;
    return a.pos.size() > 1 ? a.pos[1] : Value::none();
  }
  if (name == "items") {
    std::vector<Value> out;
    for (const auto& [k, v] : d.dict->items) out.push_back(Value::new_list({key_value(k), v}, true));
    Value r = Value::new_list(std::move(out));
    r.view = 3;
    return r;
  }
  if (name == "keys" || name == "values") {
    std::vector<Value> out;
    for (const auto& [k, v] : d.dict->items) out.push_back(name == "keys" ? key_value(k) : v);
    Value r = Value::new_list(std::move(out));
    r.view = name == "keys" ? 1 : 2;
    return r;
  }
  Value c = Value::new_dict();  // copy
  c.dict->items = d.dict->items;
  return c;
}

Value list_method(const Value& l, std::string_view name, Args& a) {
  if (name == "copy") return Value::new_list(l.list->items, l.tuple);
  const Value& x = arg(a, 0);
  int64_t n = 0;
  for (std::size_t k = 0; k < l.list->items.size(); ++k) {
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
    case Kind::kDict: return !obj.ns && (in_set(kDictMethods, name) || in_set(kDictUnsafe, name));
    case Kind::kList: return obj.is_seq() && (in_set(kListMethods, name) || in_set(kListUnsafe, name));
    default: return false;
  }
}

Value call_method(Interp&, const Value& obj, std::string_view name, Args& a, bool& found) {
  found = true;
  switch (obj.kind) {
    case Kind::kStr:
      if (in_set(kStrMethods, name)) return str_method(*obj.s, name, a);
      break;
    case Kind::kDict:
      if (obj.ns) break;
      if (in_set(kDictMethods, name)) return dict_method(obj, name, a);
      if (in_set(kDictUnsafe, name)) unsafe(obj, name);
      break;
    case Kind::kList:
      if (!obj.is_seq()) break;
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
