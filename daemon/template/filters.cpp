// Jinja's filters and tests, as jinja2 3.1 defines them, with transformers'
// tojson.
#include <algorithm>
#include <cmath>

#include "template/filter_util.hpp"
#include "template/interp.hpp"
#include "template/parser.hpp"
#include "template/pystr.hpp"

namespace tokfeed::tmpl {

// Attribute lookup as environment.getattr, with dotted paths ("a.b").
// jinja2's _prepare_attribute_parts: a str splits at '.', digit parts
// reading as ints; None is no part; anything else is one part.
std::vector<Value> attribute_parts(const Value& attr) {
  std::vector<Value> parts;
  if (attr.is_none()) return parts;
  if (!attr.is_str()) {
    parts.push_back(attr);
    return parts;
  }
  const std::string& text = *attr.s;
  auto part = [&](std::string_view p) {
    int64_t n = 0;
    if (py_isdigit(p) && py_parse_int(p, n) == NumParse::kOk) parts.push_back(Value::integer(n));
    else if (p.size() == text.size() && !attr.markup) parts.push_back(attr);  // the name itself, not a copy
    else parts.push_back(Value::str(std::string(p)));
  };
  if (text.find('.') == std::string::npos) {  // the usual "role": one part
    part(text);
    return parts;
  }
  for (const std::string& p : py_split(text, ".", -1, false)) part(p);
  return parts;
}

Value attr_path(const Value& obj, const std::vector<Value>& parts, const Value* dflt) {
  Value cur = obj;
  for (const Value& p : parts) {
    cur = get_item(cur, p);
    if (dflt && cur.is_undefined()) cur = *dflt;  // jinja2 puts the default in at every step
  }
  return cur;
}

Value attr_path(const Value& obj, const Value& attr, const Value* dflt) {
  return attr_path(obj, attribute_parts(attr), dflt);
}

Value filter_length(Interp&, Value& v, Args&) { return Value::integer(length(v)); }

namespace {

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
// `r`, Markup where `v` is: jinja2's filters that call str methods on
// soft_str(v) keep Markup Markup.
Value like(const Value& v, Value r) {
  r.markup = v.is_str() && v.markup;
  return r;
}
Value f_string(Interp&, Value& v, Args&) { return v.is_str() ? v : Value::str(soft_str(v)); }
// Markup(value): str() of anything, marked (markupsafe).
Value f_safe(Interp&, Value& v, Args&) { return v.is_str() && v.markup ? v : markup(to_str(v)); }
Value f_trim(Interp&, Value& v, Args& a) {
  const Value& c = arg(a, 0, "chars");
  std::optional<std::string_view> chars;
  if (c.is_str()) chars = *c.s;
  else if (given(c) && !c.is_none()) throw Error("strip arg must be None or str");
  if (v.is_str()) {  // stripped in place: a str with nothing to strip is itself, not a copy
    std::string_view r = py_strip(*v.s, chars, true, true);
    return r.size() == v.s->size() ? v : like(v, Value::str(std::string(r)));
  }
  return Value::str(std::string(py_strip(soft_str(v), chars, true, true)));
}
Value f_upper(Interp&, Value& v, Args&) { return like(v, Value::str(py_upper(soft_str(v)))); }
Value f_lower(Interp&, Value& v, Args&) { return like(v, Value::str(py_lower(soft_str(v)))); }
Value f_capitalize(Interp&, Value& v, Args&) { return like(v, Value::str(py_capitalize(soft_str(v)))); }
Value f_title(Interp&, Value& v, Args&) {
  // jinja's title: the text split at runs of whitespace and '-', '(', '{',
  // '[', '<'; each piece's first character uppercased, the rest lowercased.
  std::string s = soft_str(v), out;
  auto sep = [](uint32_t cp) {
    return py_isspace(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
  };
  std::size_t i = 0;
  while (i < s.size()) {
    uint32_t cp;
    std::size_t n = utf8_decode(s, i, cp), b = i;
    bool is_sep = sep(cp);
    for (i += n; i < s.size(); i += n) {
      n = utf8_decode(s, i, cp);
      if (sep(cp) != is_sep) break;
    }
    std::size_t first = utf8_decode(s, b, cp);
    out += py_upper(std::string_view(s).substr(b, first));
    out += py_lower(std::string_view(s).substr(b + first, i - b - first));
  }
  return Value::str(std::move(out));
}
Value f_replace(Interp& in, Value& v, Args& a) {
  const Value& c = arg(a, 2, "count");
  if (given(c) && !c.is_none() && !int_like(c))
    throw Error("'" + std::string(type_name(c)) + "' object cannot be interpreted as an integer");
  const Value &old = arg(a, 0, "old"), &new_ = arg(a, 1, "new");
  const int64_t n = given(c) && !c.is_none() ? as_int(c) : -1;
  if (in.autoescape) {
    // Under autoescape: Markup old or new (new only where s is no Markup)
    // escapes s; Markup's replace escapes the plain strs it takes.
    auto is_markup = [](const Value& x) { return x.is_str() && x.markup; };
    if (is_markup(old) || (is_markup(new_) && !is_markup(v)) || is_markup(v))
      return markup(py_replace(*markup_escape(v).s, *markup_escape(old).s, *markup_escape(new_).s, n));
  }
  return Value::str(py_replace(soft_str(v), soft_str(old), soft_str(new_), n));
}
Value f_join(Interp& in, Value& v, Args& a) {
  const Value& d = arg(a, 0, "d");
  const Value& attr = arg(a, 1, "attribute");
  if (in.autoescape) {
    // Under autoescape: a Markup separator or item makes every part escaped
    // and the result Markup.
    std::vector<Value> items = iterate(v);
    if (given(attr)) {
      const std::vector<Value> parts = attribute_parts(attr);
      for (Value& x : items) x = attr_path(x, parts);
    }
    bool html = given(d) && d.is_str() && d.markup;
    for (const Value& x : items) html = html || (x.is_str() && x.markup);
    std::string sep = given(d) ? (html ? *markup_escape(d).s : soft_str(d)) : "", out;
    for (std::size_t k = 0; k < items.size(); ++k) {
      if (k) out += sep;
      if (html) out += *markup_escape(items[k]).s;
      else append_str(items[k], out);
    }
    return html ? markup(std::move(out)) : Value::str(std::move(out));
  }
  std::string sep = given(d) ? soft_str(d) : "", out;
  bool first = true;
  const std::vector<Value> parts = given(attr) ? attribute_parts(attr) : std::vector<Value>();
  for (const Value& x : iterate(v)) {
    if (!first) out += sep;
    first = false;
    append_str(given(attr) ? attr_path(x, parts) : x, out);
  }
  return Value::str(std::move(out));
}
Value f_list(Interp&, Value& v, Args&) { return Value::new_list(iterate(v)); }
Value f_first(Interp&, Value& v, Args&) {
  std::vector<Value> items = iterate(v);
  return items.empty() ? Value::undefined("first item") : items.front();
}
Value f_last(Interp&, Value& v, Args&) {
  if (v.gen) throw Error("'generator' object is not reversible");  // reversed(seq)
  std::vector<Value> items = iterate(v);
  return items.empty() ? Value::undefined("last item") : items.back();
}
Value f_reverse(Interp&, Value& v, Args&) {
  if (v.is_str()) {
    std::vector<uint32_t> cps = code_points(*v.s);
    std::string r;
    for (auto it = cps.rbegin(); it != cps.rend(); ++it) utf8_append(*it, r);
    return like(v, Value::str(std::move(r)));
  }
  // reversed(value): an iterator; an iterator (not reversible) becomes a list.
  bool was_gen = v.gen;
  std::vector<Value> items = iterate(v);
  std::reverse(items.begin(), items.end());
  return was_gen ? Value::new_list(std::move(items)) : iterator(std::move(items));
}
Value f_items(Interp&, Value& v, Args&) {
  if (v.is_undefined()) return Value::new_list();
  if (!v.is_dict() || v.ns) throw Error("Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [k, x] : v.dict->items()) out.push_back(Value::new_list({v.dict->key(k), x}, true));
  return iterator(std::move(out));
}
Value f_dictsort(Interp&, Value& v, Args& a) {
  bool cs = truthy(arg(a, 0, "case_sensitive"));
  const Value& by = arg(a, 1, "by");
  bool by_value = by.is_str() && *by.s == "value";
  if (given(by) && !by_value && !(by.is_str() && *by.s == "key"))
    throw Error("You can only sort by either \"key\" or \"value\"");
  bool rev = truthy(arg(a, 2, "reverse"));
  if (!v.is_dict() || v.ns) throw Error("dictsort needs a mapping");
  std::vector<Value> out;
  for (const auto& [k, x] : v.dict->items()) out.push_back(Value::new_list({v.dict->key(k), x}, true));
  std::stable_sort(out.begin(), out.end(), [&](const Value& p, const Value& q) {
    std::size_t i = by_value ? 1 : 0;
    Value x = fold(p.list->items[i], cs), y = fold(q.list->items[i], cs);
    return rev ? less(y, x) : less(x, y);
  });
  return Value::new_list(std::move(out));
}
constexpr std::size_t kMemoEntries = 256;
// A dump this long may have counted steps for its allocations (one per
// 4 KiB, the buffer doubling as it grows): Interp::big_dumps.
constexpr std::size_t kBigDump = 2000;

Value f_tojson(Interp& in, Value& v, Args& a) {
  // `| tojson` with no argument, the usual: each option its default, unlooked-for.
  static const Value kAbsent;
  const bool bare = a.pos.empty() && a.kw.empty();
  bool ascii = !bare && truthy(arg(a, 0, "ensure_ascii"));
  const Value& ind = bare ? kAbsent : arg(a, 1, "indent");
  const Value& seps = bare ? kAbsent : arg(a, 2, "separators");
  bool sort = !bare && truthy(arg(a, 3, "sort_keys"));
  std::string indent, item, key;
  const std::string* ip = nullptr;
  if (int_like(ind))
    ip = &(indent = std::string(static_cast<std::size_t>(std::clamp<int64_t>(as_int(ind), 0, 1 << 20)), ' '));
  else if (ind.is_str()) ip = &(indent = *ind.s);
  else if (given(ind) && !ind.is_none())
    throw Error("can't multiply sequence by non-int of type '" + std::string(type_name(ind)) + "'");
  const std::string *is = nullptr, *ks = nullptr;
  if (seps.is_list()) {
    if (seps.list->items.size() != 2) throw Error("separators must be a pair");
    item = soft_str(seps.list->items[0]);
    key = soft_str(seps.list->items[1]);
    is = &item;
    ks = &key;
  }
  // A list or dict that dumps is plain lists, dicts and scalars all the way
  // down, which no template changes: the record's memo keeps its text.
  // (A dict with a view is a loop's `loop`, rewritten in place.)
  MemoScope* memo = (v.is_seq() || (v.is_dict() && !v.ns && !v.view)) ? current_memo() : nullptr;
  std::string options;
  if (memo) {
    // The options as one key, each string after its length (no option:
    // three bytes, no allocation).
    auto sized = [&](const std::string& x) {
      const auto n = static_cast<uint32_t>(x.size());
      options.append(reinterpret_cast<const char*>(&n), sizeof n).append(x);
    };
    options += static_cast<char>(ascii * 2 + sort);
    options += ip ? 'i' : '-';
    if (ip) sized(*ip);
    options += is ? 's' : '-';
    if (is) sized(*is), options += *ks;
    for (auto& m : memo->entries)
      if (m.subject.s.raw() == v.s.raw() && m.options == options) {
        m.used = true;
        if (m.result.s->size() >= kBigDump) ++in.big_dumps;
        return m.result;
      }
  }
  Value out = Value::str(tojson(v, ascii, ip, sort, is, ks));
  if (memo) {
    // Whether or not it is kept: a later dump of it may be served.
    if (out.s->size() >= kBigDump) ++in.big_dumps;
    if (memo->entries.size() < kMemoEntries) memo->entries.push_back({v, std::move(options), out});
  }
  return out;
}

// markupsafe's escape: Markup as it is; anything else str() escaped, as Markup.
Value f_escape(Interp&, Value& v, Args&) { return markup_escape(v); }
Value f_forceescape(Interp&, Value& v, Args&) {
  std::string out;
  html_escape(to_str(v), out);
  return markup(std::move(out));
}
// jinja2's indent: `s += "\n"` first, so only a string may be indented.
Value f_indent(Interp&, Value& v, Args& a) {
  no_undefined(v);
  if (!v.is_str()) throw Error("can only indent a string, not '" + std::string(type_name(v)) + "'");
  const Value& w = arg(a, 0, "width");
  std::string ind;
  if (w.is_str()) ind = *w.s;
  else if (!given(w)) ind = "    ";
  else if (int_like(w)) ind.assign(static_cast<std::size_t>(std::clamp<int64_t>(as_int(w), 0, 1 << 20)), ' ');
  else throw Error("can't multiply sequence by non-int of type '" + std::string(type_name(w)) + "'");
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
  return like(v, Value::str(std::move(rv)));
}
Value f_format(Interp&, Value& v, Args& a) {
  if (!a.kw.empty() && !a.pos.empty()) throw Error("can't handle positional and keyword arguments at the same time");
  if (!a.kw.empty()) {
    Value d = Value::new_dict();
    for (auto& [k, x] : a.kw) d.dict->set(k, x);
    return binary_op("%", like(v, Value::str(soft_str(v))), d);
  }
  return binary_op("%", like(v, Value::str(soft_str(v))), Value::new_list(a.pos, true));
}
// jinja2's wordcount: the runs of \w (str.isalnum or '_') characters.
Value f_wordcount(Interp&, Value& v, Args&) {
  int64_t n = 0;
  bool in_word = false;
  for (uint32_t cp : code_points(soft_str(v))) {
    bool w = py_is_word_char(cp);
    n += w && !in_word;
    in_word = w;
  }
  return Value::integer(n);
}
Value f_center(Interp&, Value& v, Args& a) {
  std::string s = soft_str(v);
  const Value& w = arg(a, 0, "width");
  if (given(w) && !int_like(w))
    throw Error("'" + std::string(type_name(w)) + "' object cannot be interpreted as an integer");
  int64_t width = given(w) ? as_int(w) : 80, len = static_cast<int64_t>(py_len(s));
  if (width <= len) return like(v, Value::str(s));
  if (width > (64 << 20)) throw Error("the centered string would pass the output limit");
  std::size_t pad = static_cast<std::size_t>(width - len), left = pad / 2 + (pad & static_cast<std::size_t>(width) & 1);
  return like(v, Value::str(std::string(left, ' ') + s + std::string(pad - left, ' ')));
}
// jinja2's attr: Python's getattr only, so a dict's keys are not attributes
// (a namespace's are), its methods are.
Value f_attr(Interp&, Value& v, Args& a) {
  std::string name = soft_str(arg(a, 0, "name"));
  if (v.is_dict() && !v.ns) return has_method(v, name) ? method_attr(v, name) : Value::undefined(name);
  return get_attr(v, name);  // a dict's keys are no attributes; the rest reads as `.name`
}

// select/reject/selectattr/rejectattr share this. As in jinja2, a false
// value (None, undefined, empty) selects nothing, and the test is looked up
// when the first item is tested.
Value select_impl(Interp& in, Value& v, Args& a, bool by_attr, bool keep) {
  if (!truthy(v)) return iterator({});
  std::size_t k = 0;
  std::vector<Value> parts;  // the attribute's, split once for every item
  if (by_attr) {             // positional only: keywords go to the test
    if (a.pos.empty()) throw Error("Missing parameter for attribute name");
    parts = attribute_parts(a.pos[k++]);
  }
  std::string name;
  bool tested = k < a.pos.size();  // without a test, truth (the keywords unused)
  TestFn test = nullptr;
  Args targs;
  if (tested) {
    name = soft_str(a.pos[k++]);
    targs.pos.assign(a.pos.begin() + static_cast<std::ptrdiff_t>(k), a.pos.end());
    targs.kw = a.kw;
  }
  std::vector<Value> out;
  for (const Value& x : iterate(v)) {
    Value subject = by_attr ? attr_path(x, parts) : x;
    bool ok;
    if (tested) {
      if (!test) {
        if (!(test = find_test(name))) throw Error("No test named '" + name + "'.");
        if (const Signature* sig = test_signature(name)) check_call(*sig, name, targs);  // the same for every item
      }
      ok = test(in, subject, targs);  // a test reads its arguments, never changes them
    } else {
      ok = truthy(subject);
    }
    if (ok == keep) out.push_back(x);
  }
  return iterator(std::move(out));
}
Value f_select(Interp& in, Value& v, Args& a) { return select_impl(in, v, a, false, true); }
Value f_reject(Interp& in, Value& v, Args& a) { return select_impl(in, v, a, false, false); }
Value f_selectattr(Interp& in, Value& v, Args& a) { return select_impl(in, v, a, true, true); }
Value f_rejectattr(Interp& in, Value& v, Args& a) { return select_impl(in, v, a, true, false); }

Value f_map(Interp& in, Value& v, Args& a) {
  if (!truthy(v)) return iterator({});  // jinja2: a false value maps to nothing
  std::vector<Value> out;
  const Value& attr = arg(a, 99, "attribute");
  if (a.pos.empty() && given(attr)) {
    for (const auto& [name, x] : a.kw)
      if (name != "attribute" && name != "default") throw Error("Unexpected keyword argument '" + name + "'");
    const Value& d = arg(a, 99, "default");
    const Value* dflt = given(d) && !d.is_none() ? &d : nullptr;
    const std::vector<Value> parts = attribute_parts(attr);
    for (const Value& x : iterate(v)) out.push_back(attr_path(x, parts, dflt));
    return iterator(std::move(out));
  }
  if (a.pos.empty()) throw Error("map requires a filter argument");
  std::string name = soft_str(a.pos[0]);
  FilterFn f = nullptr;
  Args fa;
  fa.pos.assign(a.pos.begin() + 1, a.pos.end());
  fa.kw = a.kw;
  for (Value x : iterate(v)) {
    if (!f) {
      if (!(f = find_filter(name))) throw Error("No filter named '" + name + "'.");
      if (const Signature* sig = filter_signature(name)) check_call(*sig, name, fa);  // the same for every item
    }
    Args copy = fa;
    out.push_back(f(in, x, copy));
  }
  return iterator(std::move(out));
}

std::vector<Value> keyed(const std::vector<Value>& items, const Value& attr, bool cs) {
  std::vector<Value> keys;
  const std::vector<Value> parts = given(attr) ? attribute_parts(attr) : std::vector<Value>();
  for (const Value& x : items) keys.push_back(fold(given(attr) ? attr_path(x, parts) : x, cs));
  return keys;
}
// jinja2's sort key: the list of the comma-separated attributes' values
// (the item itself without one), compared as Python compares lists: equal
// items first (two undefined values are equal), then `<`.
Value f_sort(Interp&, Value& v, Args& a) {
  bool rev = truthy(arg(a, 0, "reverse")), cs = truthy(arg(a, 1, "case_sensitive"));
  const Value& attr = arg(a, 2, "attribute");
  std::vector<std::string> paths;
  if (attr.is_str()) {
    for (std::size_t b = 0;;) {
      std::size_t e = attr.s->find(',', b);
      paths.push_back(attr.s->substr(b, e == std::string::npos ? std::string::npos : e - b));
      if (e == std::string::npos) break;
      b = e + 1;
    }
  } else if (given(attr) && !attr.is_none()) {
    paths.push_back(soft_str(attr));
  }
  std::vector<Value> items = iterate(v);
  std::vector<std::vector<Value>> path_parts, keys;
  for (const std::string& p : paths) path_parts.push_back(attribute_parts(Value::str(p)));
  for (const Value& x : items) {
    std::vector<Value> k;
    if (paths.empty()) k.push_back(fold(x, cs));
    for (const std::vector<Value>& parts : path_parts) k.push_back(fold(attr_path(x, parts), cs));
    keys.push_back(std::move(k));
  }
  auto key_less = [](const std::vector<Value>& x, const std::vector<Value>& y) {
    for (std::size_t i = 0; i < x.size() && i < y.size(); ++i)
      if (!equal(x[i], y[i])) return less(x[i], y[i]);
    return x.size() < y.size();
  };
  std::vector<std::size_t> order(items.size());
  for (std::size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) {
    return rev ? key_less(keys[y], keys[x]) : key_less(keys[x], keys[y]);
  });
  std::vector<Value> out;
  for (std::size_t k : order) out.push_back(items[k]);
  return Value::new_list(std::move(out));
}
Value f_unique(Interp&, Value& v, Args& a) {
  std::vector<Value> items = iterate(v),
                     keys = keyed(items, arg(a, 1, "attribute"), truthy(arg(a, 0, "case_sensitive")));
  std::vector<Value> out, seen;
  for (std::size_t k = 0; k < items.size(); ++k) {
    require_hashable(keys[k]);  // jinja2 keeps a set of the keys seen
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
struct NamedFilter {
  std::string_view name;
  FilterFn fn;
};
constexpr NamedFilter kFilters[] = {
    {"default", f_default},
    {"d", f_default},
    {"length", filter_length},
    {"count", filter_length},
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
    {"forceescape", f_forceescape},
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
    {"truncate", f_truncate},
    {"batch", f_batch},
    {"slice", f_slice},
    {"groupby", f_groupby},
    {"filesizeformat", f_filesizeformat},
    {"xmlattr", f_xmlattr},
    {"urlencode", f_urlencode},
    {"striptags", f_striptags},
    {"wordwrap", f_wordwrap},
    {"pprint", f_pprint},
    {"random", f_random},
    {"urlize", f_urlize},
};

}  // namespace

FilterFn find_filter(std::string_view name) {
  for (const auto& f : kFilters)
    if (f.name == name) return f.fn;
  return nullptr;
}

}  // namespace tokfeed::tmpl
