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

std::optional<std::string> opt_str(const Value& v, std::string_view method) {
  if (v.is_undefined() || v.is_none()) return std::nullopt;
  if (!v.is_str()) throw Error(std::string(method) + " arg must be None or str");
  return *v.s;
}

int64_t opt_int(const Value& v, int64_t dflt) {
  if (v.is_undefined() || v.is_none()) return dflt;
  if (v.kind == Kind::kInt) return v.i;
  if (v.kind == Kind::kBool) return v.b;
  throw Error("an integer is required");
}

Value str_list(std::vector<std::string> parts) {
  std::vector<Value> out;
  out.reserve(parts.size());
  for (auto& p : parts) out.push_back(Value::str(std::move(p)));
  return Value::new_list(std::move(out));
}

bool all_cps(const std::string& s, bool (*pred)(uint32_t)) {
  if (s.empty()) return false;
  for (uint32_t cp : code_points(s))
    if (!pred(cp)) return false;
  return true;
}

// "{} {0} {name}" with str() of each argument.
std::string str_format(const std::string& f, Args& a) {
  std::string out;
  std::size_t auto_idx = 0;
  for (std::size_t i = 0; i < f.size(); ++i) {
    char c = f[i];
    if (c == '{' && i + 1 < f.size() && f[i + 1] == '{') {
      out += '{';
      ++i;
    } else if (c == '}' && i + 1 < f.size() && f[i + 1] == '}') {
      out += '}';
      ++i;
    } else if (c == '{') {
      std::size_t e = f.find('}', i);
      if (e == std::string::npos) throw Error("Single '{' encountered in format string");
      std::string field = f.substr(i + 1, e - i - 1);
      if (field.find_first_of(":!.[") != std::string::npos) throw Error("unsupported format field '{" + field + "}'");
      const Value* v = nullptr;
      if (field.empty()) {
        if (auto_idx >= a.pos.size()) throw Error("Replacement index out of range for positional args tuple");
        v = &a.pos[auto_idx++];
      } else if (std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
        std::size_t k = std::stoul(field);
        if (k >= a.pos.size()) throw Error("Replacement index out of range for positional args tuple");
        v = &a.pos[k];
      } else {
        for (auto& [k, x] : a.kw)
          if (k == field) v = &x;
        if (!v) throw Error("KeyError: '" + field + "'");
      }
      append_str(*v, out);
      i = e;
    } else {
      out += c;
    }
  }
  return out;
}

Value str_method(const std::string& s, std::string_view name, Args& a) {
  auto S = [&](std::size_t i) { return opt_str(arg(a, i), name); };
  if (name == "strip" || name == "lstrip" || name == "rstrip")
    return Value::str(std::string(py_strip(s, S(0), name != "rstrip", name != "lstrip")));
  if (name == "split" || name == "rsplit") {
    auto sep = opt_str(arg(a, 0, "sep"), name);
    if (sep && sep->empty()) throw Error("empty separator");
    return str_list(py_split(s, sep, opt_int(arg(a, 1, "maxsplit"), -1), name == "rsplit"));
  }
  if (name == "splitlines") return str_list(py_splitlines(s, truthy(arg(a, 0, "keepends"))));
  if (name == "startswith" || name == "endswith") {
    const Value& p = arg(a, 0);
    std::vector<Value> prefixes = p.is_list() && p.tuple ? p.list->items : std::vector<Value>{p};
    for (const Value& x : prefixes) {
      if (!x.is_str()) throw Error(std::string(name) + " first arg must be str or a tuple of str");
      const std::string& t = *x.s;
      bool hit = name == "startswith" ? s.compare(0, t.size(), t) == 0
                                      : s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
      if (hit) return Value::boolean(true);
    }
    return Value::boolean(false);
  }
  if (name == "upper") return Value::str(py_upper(s));
  if (name == "lower" || name == "casefold") return Value::str(py_lower(s));
  if (name == "title") return Value::str(py_title(s));
  if (name == "capitalize") return Value::str(py_capitalize(s));
  if (name == "replace") {
    auto from = S(0), to = S(1);
    if (!from || !to) throw Error("replace() takes at least 2 arguments");
    return Value::str(py_replace(s, *from, *to, opt_int(arg(a, 2, "count"), -1)));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    auto sub = S(0);
    if (!sub) throw Error(std::string(name) + "() takes a string argument");
    if (name == "count") {
      if (sub->empty()) return Value::integer(static_cast<int64_t>(py_len(s) + 1));
      int64_t n = 0;
      for (std::size_t p = s.find(*sub); p != std::string::npos; p = s.find(*sub, p + sub->size())) ++n;
      return Value::integer(n);
    }
    std::size_t p = name[0] == 'r' ? s.rfind(*sub) : s.find(*sub);
    if (p == std::string::npos) {
      if (name == "index" || name == "rindex") throw Error("substring not found");
      return Value::integer(-1);
    }
    return Value::integer(static_cast<int64_t>(py_len(std::string_view(s).substr(0, p))));
  }
  if (name == "join") {
    std::string out;
    bool first = true;
    for (const Value& v : iterate(arg(a, 0))) {
      if (!v.is_str()) throw Error("sequence item: expected str instance, " + std::string(type_name(v)) + " found");
      if (!first) out += s;
      first = false;
      out += *v.s;
    }
    return Value::str(std::move(out));
  }
  if (name == "isdigit" || name == "isnumeric" || name == "isdecimal")
    return Value::boolean(all_cps(s, [](uint32_t c) { return c >= '0' && c <= '9'; }));
  if (name == "isalpha")
    return Value::boolean(all_cps(s, [](uint32_t c) { return (c | 32) >= 'a' && (c | 32) <= 'z'; }));
  if (name == "isalnum")
    return Value::boolean(
        all_cps(s, [](uint32_t c) { return ((c | 32) >= 'a' && (c | 32) <= 'z') || (c >= '0' && c <= '9'); }));
  if (name == "isspace") return Value::boolean(all_cps(s, [](uint32_t c) { return py_isspace(c); }));
  if (name == "isupper") return Value::boolean(py_upper(s) == s && py_lower(s) != s);
  if (name == "islower") return Value::boolean(py_lower(s) == s && py_upper(s) != s);
  if (name == "istitle") return Value::boolean(py_title(s) == s && py_lower(s) != s);
  if (name == "swapcase") {
    std::string r;
    for (uint32_t cp : code_points(s)) {
      std::string c;
      utf8_append(cp, c);
      std::string u = py_upper(c);
      r += u != c ? u : py_lower(c);
    }
    return Value::str(std::move(r));
  }
  if (name == "partition" || name == "rpartition") {
    auto sep = S(0);
    if (!sep || sep->empty()) throw Error("empty separator");
    std::size_t p = name == "partition" ? s.find(*sep) : s.rfind(*sep);
    std::vector<Value> r;
    if (p == std::string::npos) {
      if (name == "partition") r = {Value::str(s), Value::str(""), Value::str("")};
      else r = {Value::str(""), Value::str(""), Value::str(s)};
    } else {
      r = {Value::str(s.substr(0, p)), Value::str(*sep), Value::str(s.substr(p + sep->size()))};
    }
    return Value::new_list(std::move(r), true);
  }
  if (name == "removeprefix" || name == "removesuffix") {
    auto x = S(0);
    if (!x) throw Error(std::string(name) + "() argument must be str");
    if (name == "removeprefix" && s.compare(0, x->size(), *x) == 0) return Value::str(s.substr(x->size()));
    if (name == "removesuffix" && !x->empty() && s.size() >= x->size() &&
        s.compare(s.size() - x->size(), x->size(), *x) == 0)
      return Value::str(s.substr(0, s.size() - x->size()));
    return Value::str(s);
  }
  if (name == "format") return Value::str(str_format(s, a));
  if (name == "zfill" || name == "center" || name == "ljust" || name == "rjust") {
    int64_t width = opt_int(arg(a, 0), 0);
    int64_t len = static_cast<int64_t>(py_len(s));
    if (width <= len) return Value::str(s);
    std::size_t pad = static_cast<std::size_t>(width - len);
    std::string fill = name == "zfill" ? "0" : opt_str(arg(a, 1), name).value_or(" ");
    auto rep = [&](std::size_t n) {
      std::string r;
      for (std::size_t k = 0; k < n; ++k) r += fill;
      return r;
    };
    if (name == "zfill") {
      if (!s.empty() && (s[0] == '-' || s[0] == '+')) return Value::str(s.substr(0, 1) + rep(pad) + s.substr(1));
      return Value::str(rep(pad) + s);
    }
    if (name == "ljust") return Value::str(s + rep(pad));
    if (name == "rjust") return Value::str(rep(pad) + s);
    std::size_t left = pad / 2 + (pad & static_cast<std::size_t>(width) & 1);
    return Value::str(rep(left) + s + rep(pad - left));
  }
  if (name == "expandtabs") {
    std::string r;
    std::size_t col = 0, tab = static_cast<std::size_t>(opt_int(arg(a, 0), 8));
    for (uint32_t cp : code_points(s)) {
      if (cp == '\t') {
        std::size_t n = tab ? tab - col % tab : 0;
        r.append(n, ' ');
        col += n;
      } else {
        utf8_append(cp, r);
        col = cp == '\n' || cp == '\r' ? 0 : col + 1;
      }
    }
    return Value::str(std::move(r));
  }
  throw Error("'str' object has no attribute '" + std::string(name) + "'");
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
    return Value::new_list(std::move(out));
  }
  if (name == "keys" || name == "values") {
    std::vector<Value> out;
    for (const auto& [k, v] : d.dict->items) out.push_back(name == "keys" ? key_value(k) : v);
    return Value::new_list(std::move(out));
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
    case Kind::kList: return in_set(kListMethods, name) || in_set(kListUnsafe, name);
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
