// jinja2's groupby, filesizeformat, xmlattr, urlencode and striptags
// filters, as jinja2 3.1 (and markupsafe) define them.
#include <algorithm>
#include <cctype>
#include <cmath>

#include "template/budget.hpp"
#include "template/filter_util.hpp"
#include "template/interp.hpp"
#include "template/pystr.hpp"

namespace tokfeed::tmpl {

namespace {

void max_args(const Args& a, std::size_t n, const char* name) {
  if (a.pos.size() > n) throw Error(std::string(name) + "() takes at most " + std::to_string(n + 1) + " arguments");
}

// jinja2's url_quote: str() of the value in UTF-8, every byte but
// letters, digits and `_.-~` (and `/` unless for a query string) as %XX;
// spaces as `+` in a query string.
void url_quote(const Value& v, bool for_qs, std::string& out) {
  static const char* hex = "0123456789ABCDEF";
  for (unsigned char c : to_str(v)) {
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
        c == '-' || c == '~' || (c == '/' && !for_qs)) {
      out += static_cast<char>(c);
    } else if (c == ' ' && for_qs) {
      out += '+';
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
}

bool is_alnum_ascii(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

// HTML's named references that may go without ';' (HTML 4's Latin-1 set,
// U+00A0 to U+00FF in order, and amp, lt, gt, quot, in upper case too,
// COPY, REG): the only names html.unescape reads in text without ';'.
struct Legacy {
  std::string_view name;
  uint32_t cp;
};
const std::vector<Legacy>& legacy_entities() {
  static const std::vector<Legacy> table = [] {
    OutsideBudget outside;  // made once for the process
    static const std::string_view latin1[] = {
        "nbsp",   "iexcl",  "cent",   "pound",  "curren", "yen",    "brvbar", "sect",   "uml",    "copy",   "ordf",
        "laquo",  "not",    "shy",    "reg",    "macr",   "deg",    "plusmn", "sup2",   "sup3",   "acute",  "micro",
        "para",   "middot", "cedil",  "sup1",   "ordm",   "raquo",  "frac14", "frac12", "frac34", "iquest", "Agrave",
        "Aacute", "Acirc",  "Atilde", "Auml",   "Aring",  "AElig",  "Ccedil", "Egrave", "Eacute", "Ecirc",  "Euml",
        "Igrave", "Iacute", "Icirc",  "Iuml",   "ETH",    "Ntilde", "Ograve", "Oacute", "Ocirc",  "Otilde", "Ouml",
        "times",  "Oslash", "Ugrave", "Uacute", "Ucirc",  "Uuml",   "Yacute", "THORN",  "szlig",  "agrave", "aacute",
        "acirc",  "atilde", "auml",   "aring",  "aelig",  "ccedil", "egrave", "eacute", "ecirc",  "euml",   "igrave",
        "iacute", "icirc",  "iuml",   "eth",    "ntilde", "ograve", "oacute", "ocirc",  "otilde", "ouml",   "divide",
        "oslash", "ugrave", "uacute", "ucirc",  "uuml",   "yacute", "thorn",  "yuml"};
    std::vector<Legacy> t;
    for (uint32_t k = 0; k < std::size(latin1); ++k) t.push_back({latin1[k], 0xa0 + k});
    for (const Legacy& x :
         {Legacy{"amp", '&'}, Legacy{"AMP", '&'}, Legacy{"lt", '<'}, Legacy{"LT", '<'}, Legacy{"gt", '>'},
          Legacy{"GT", '>'}, Legacy{"quot", '"'}, Legacy{"QUOT", '"'}, Legacy{"COPY", 0xa9}, Legacy{"REG", 0xae}})
      t.push_back(x);
    return t;
  }();
  return table;
}
const Legacy* find_legacy(std::string_view name) {
  for (const Legacy& x : legacy_entities())
    if (x.name == name) return &x;
  return nullptr;
}

// Python's html.unescape for the references it can be sure of: numeric
// ones; a name without ';' (only the legacy names above, or the longest of
// them that begins it, resolve; the rest is text); a legacy name or `apos`
// with ';'. Another name with ';' of two letters or digits or more may be
// one of HTML5's other 2,000 entities: it fails loudly rather than be left
// as it is.
std::string html_unescape(std::string_view s) {
  std::string out;
  std::size_t i = 0;
  while (i < s.size()) {
    std::size_t amp = s.find('&', i);
    if (amp == std::string_view::npos) break;
    out.append(s.substr(i, amp - i));
    std::size_t j = amp + 1;
    if (j < s.size() && s[j] == '#') {
      bool hexa = j + 1 < s.size() && (s[j + 1] == 'x' || s[j + 1] == 'X');
      std::size_t d = j + (hexa ? 2 : 1), e = d;
      uint64_t num = 0;
      while (e < s.size() && (hexa ? std::isxdigit(static_cast<unsigned char>(s[e]))
                                   : std::isdigit(static_cast<unsigned char>(s[e])))) {
        char c = s[e++];
        int dv = c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10;
        num = std::min<uint64_t>(num * (hexa ? 16 : 10) + static_cast<uint64_t>(dv), uint64_t{1} << 40);
      }
      if (e == d) {  // no digits: the '&' is text
        out += '&';
        i = j;
        continue;
      }
      if (e < s.size() && s[e] == ';') ++e;
      if (num == 0 || num == 0x0d || (num >= 0x80 && num <= 0x9f))
        throw Error("striptags: the character reference " + std::string(s.substr(amp, e - amp)) + " is not supported");
      bool invalid = (num >= 0x1 && num <= 0x8) || num == 0xb || (num >= 0xe && num <= 0x1f) || num == 0x7f ||
                     (num >= 0xfdd0 && num <= 0xfdef) || ((num & 0xfffe) == 0xfffe && num <= 0x10ffff);
      if ((num >= 0xd800 && num <= 0xdfff) || num > 0x10ffff) out += "\xef\xbf\xbd";
      else if (!invalid) utf8_append(static_cast<uint32_t>(num), out);
      i = e;
      continue;
    }
    // A name: 1 to 32 code points other than \t \n \f space < & # ;, then an optional ';'.
    std::size_t e = j;
    for (int n = 0; n < 32 && e < s.size(); ++n) {
      char c = s[e];
      if (c == '\t' || c == '\n' || c == '\f' || c == ' ' || c == '<' || c == '&' || c == '#' || c == ';') break;
      uint32_t cp;
      e += utf8_decode(s, e, cp);
    }
    if (e == j) {
      out += '&';
      i = j;
      continue;
    }
    const bool semi = e < s.size() && s[e] == ';';
    std::string_view name = s.substr(j, e - j);
    if (semi) {
      const Legacy* x = find_legacy(name);
      if (x || name == "apos") {
        if (x) utf8_append(x->cp, out);
        else out += '\'';
        i = e + 1;
        continue;
      }
      // HTML5's names are two ASCII letters or digits or more: such a name
      // may be one of them; anything else is read as a name without ';'.
      if (name.size() >= 2 && std::all_of(name.begin(), name.end(), is_alnum_ascii))
        throw Error("striptags: the HTML entity &" + std::string(name) + "; is not supported");
    }
    // The name itself, else the longest legacy name (two characters or
    // more) it begins with, else text.
    std::size_t len = 0;
    const Legacy* hit = nullptr;
    for (const Legacy& x : legacy_entities())
      if (x.name.size() >= 2 && name.starts_with(x.name) && x.name.size() > len) hit = &x, len = x.name.size();
    if (hit) {
      utf8_append(hit->cp, out);
      out += name.substr(len);
    } else {
      out += '&';
      out += name;
    }
    if (semi) out += ';';
    i = semi ? e + 1 : e;
  }
  out.append(s.substr(std::min(i, s.size())));
  return out;
}

}  // namespace

Value f_groupby(Interp&, Value& v, Args& a) {
  max_args(a, 3, "groupby");
  const Value& attr = arg(a, 0, "attribute");
  if (a.pos.empty() && std::none_of(a.kw.begin(), a.kw.end(), [](const auto& k) { return k.first == "attribute"; }))
    throw Error("sync_do_groupby() missing 1 required positional argument: 'attribute'");
  const Value& dflt = arg(a, 1, "default");
  const bool use_default = given(dflt) && !dflt.is_none();
  const bool cs = truthy(arg(a, 2, "case_sensitive"));
  const std::vector<Value> parts = attribute_parts(attr);
  auto key = [&](const Value& x, bool fold) {
    Value item = x;
    for (const Value& p : parts) {
      item = get_item(item, p);
      if (use_default && item.is_undefined()) item = dflt;
    }
    if (fold && item.is_str()) item = Value::str(py_lower(*item.s));
    return item;
  };
  std::vector<Value> items = iterate(v), keys;
  for (const Value& x : items) keys.push_back(key(x, !cs));
  std::vector<std::size_t> order(items.size());
  for (std::size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) { return less(keys[x], keys[y]); });
  std::vector<Value> out;
  for (std::size_t k = 0; k < order.size();) {
    const Value& group_key = keys[order[k]];
    std::vector<Value> members;
    std::size_t first = order[k];
    while (k < order.size() && equal(keys[order[k]], group_key)) members.push_back(items[order[k++]]);
    Value g = Value::new_list({cs ? group_key : key(items[first], false), Value::new_list(std::move(members))}, true);
    g.list->group = true;
    out.push_back(std::move(g));
  }
  return Value::new_list(std::move(out));
}

Value f_filesizeformat(Interp&, Value& v, Args& a) {
  max_args(a, 1, "filesizeformat");
  double bytes;
  if (v.is_str()) {
    if (!py_parse_float(*v.s, bytes)) throw Error("could not convert string to float: " + to_str(v));
  } else if (v.is_number()) {
    bytes = as_double(v);
  } else {
    no_undefined(v);
    throw Error("float() argument must be a string or a real number, not '" + std::string(type_name(v)) + "'");
  }
  const bool binary = truthy(arg(a, 0, "binary"));
  const double base = binary ? 1024 : 1000;
  static const char* const kDecimal[] = {"kB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB"};
  static const char* const kBinary[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB"};
  // base ** (i + 2): compared exactly (a long double holds 10**27), divided
  // by as a double (Python's float / int rounds the int first)
  static const long double kDecUnits[] = {1e6L, 1e9L, 1e12L, 1e15L, 1e18L, 1e21L, 1e24L, 1e27L};
  if (bytes == 1) return Value::str("1 Byte");
  if (bytes < base) {
    if (!(bytes > -9.2e18))
      throw Error("integer overflow: int() of " + to_str(Value::real(bytes)) + " is past 64 bits");
    return Value::str(std::to_string(static_cast<int64_t>(bytes)) + " Bytes");
  }
  long double unit = 0;
  int i = 0;
  for (; i < 8; ++i) {
    unit = binary ? std::ldexp(1.0L, 10 * (i + 2)) : kDecUnits[i];
    if (static_cast<long double>(bytes) < unit) break;
  }
  if (i == 8) i = 7;
  return Value::str(format_value(Value::real(base * bytes / static_cast<double>(unit)), ".1f") + " " +
                    (binary ? kBinary : kDecimal)[i]);
}

Value f_xmlattr(Interp& in, Value& v, Args& a) {
  max_args(a, 1, "xmlattr");
  no_undefined(v);
  if (!v.is_dict() || v.ns) throw Error("'" + std::string(type_name(v)) + "' object has no attribute 'items'");
  const Value& autospace = arg(a, 0, "autospace");
  std::string out;
  for (const auto& [k, x] : v.dict->items()) {
    if (x.is_none() || x.is_undefined()) continue;
    Value key = v.dict->key(k);
    if (!key.is_str()) throw Error("expected string or bytes-like object, got '" + std::string(type_name(key)) + "'");
    if (key.s->find_first_of(" \t\n\r\f\v/>=") != std::string::npos) {
      std::string r;
      append_repr(key, r);
      throw Error("Invalid character in attribute name: " + r);
    }
    if (!out.empty()) out += ' ';
    html_escape(*key.s, out);
    out += "=\"";
    html_escape(to_str(x), out);
    out += '"';
  }
  if ((!given(autospace) || truthy(autospace)) && !out.empty()) out.insert(0, " ");
  if (in.autoescape) return markup(std::move(out));  // Markup under autoescape
  return Value::str(std::move(out));
}

Value f_urlencode(Interp&, Value& v, Args& a) {
  max_args(a, 0, "urlencode");
  std::string out;
  const bool iterable = v.is_undefined() || v.is_list() || (v.is_dict() && !v.ns);
  if (v.is_str() || !iterable) {
    url_quote(v, false, out);
    return Value::str(std::move(out));
  }
  std::vector<Value> pairs;
  if (v.is_dict()) {
    for (const auto& [k, x] : v.dict->items()) pairs.push_back(Value::new_list({v.dict->key(k), x}, true));
  } else {
    pairs = iterate(v);
  }
  bool first = true;
  for (const Value& p : pairs) {
    std::vector<Value> kv = iterate(p);
    if (kv.size() != 2)
      throw Error(kv.size() < 2 ? "not enough values to unpack (expected 2, got " + std::to_string(kv.size()) + ")"
                                : "too many values to unpack (expected 2)");
    if (!first) out += '&';
    first = false;
    url_quote(kv[0], true, out);
    out += '=';
    url_quote(kv[1], true, out);
  }
  return Value::str(std::move(out));
}

Value f_striptags(Interp&, Value& v, Args& a) {
  max_args(a, 0, "striptags");
  std::string value = to_str(v);
  std::string joined;
  std::size_t pos = 0, start;
  bool any = false;
  while ((start = value.find('<', pos)) != std::string::npos) {
    std::size_t end;
    if (value.compare(start, 4, "<!--") == 0) {
      if ((end = value.find("-->", start + 4)) == std::string::npos) break;
      end += 3;
    } else {
      if ((end = value.find('>', start)) == std::string::npos) break;
      end += 1;
    }
    joined.append(value, pos, start - pos);
    pos = end;
    any = true;
  }
  if (any && pos > 0) {
    joined.append(value, pos, std::string::npos);
    value = std::move(joined);
  }
  std::string collapsed;
  for (const std::string& w : py_split(value, std::nullopt, -1, false)) {
    if (!collapsed.empty()) collapsed += ' ';
    collapsed += w;
  }
  return Value::str(html_unescape(collapsed));
}

}  // namespace tokfeed::tmpl
