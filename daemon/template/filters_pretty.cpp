// jinja2's wordwrap (Python's textwrap), pprint (Python's pprint.pformat),
// urlize and random filters.
#include <algorithm>
#include <cmath>

#include "template/filter_util.hpp"
#include "template/interp.hpp"
#include "template/pystr.hpp"

namespace tokfeed::tmpl {

namespace {

using Chars = std::vector<uint32_t>;

std::string utf8(const Chars& c, std::size_t from = 0, std::size_t to = SIZE_MAX) {
  std::string out;
  for (std::size_t i = from; i < c.size() && i < to; ++i) utf8_append(c[i], out);
  return out;
}

// ---- wordwrap: textwrap.TextWrapper(expand_tabs=False, replace_whitespace=False)

// textwrap's whitespace: ASCII's alone ('\t\n\x0b\x0c\r ').
bool tw_space(uint32_t c) { return c == ' ' || c == '\t' || c == '\n' || c == 0x0b || c == 0x0c || c == '\r'; }
bool decimal(uint32_t c) {
  std::string s;
  utf8_append(c, s);
  return py_isdecimal(s);
}
// wordsep_re's classes: word_punct [\w!"'&.,?] and letter [^\d\W].
bool word_punct(uint32_t c) {
  return c == '!' || c == '"' || c == '\'' || c == '&' || c == '.' || c == ',' || c == '?' || py_is_word_char(c);
}
bool letter(uint32_t c) { return py_is_word_char(c) && !decimal(c); }

// The length of TextWrapper.wordsep_re's match at t[i] (each position
// matches: a run of whitespace, an em-dash between words, or a word up to
// the end of a hyphenated part, the whitespace or an em-dash).
std::size_t wordsep_match(const Chars& t, std::size_t i) {
  const std::size_t n = t.size();
  auto at = [&](std::size_t k) -> uint32_t { return k < n ? t[k] : 0xFFFFFFFFu; };
  auto is_letter = [&](std::size_t k) { return k < n && letter(t[k]); };
  // A run of two dashes or more at k followed by a word character.
  auto dashes_word = [&](std::size_t k) {
    std::size_t e = k;
    while (e < n && t[e] == '-') ++e;
    return e - k >= 2 && e < n && py_is_word_char(t[e]);
  };
  if (tw_space(t[i])) {
    std::size_t j = i;
    while (j < n && tw_space(t[j])) ++j;
    return j - i;
  }
  if (t[i] == '-' && i > 0 && word_punct(t[i - 1]) && dashes_word(i)) {
    std::size_t j = i;
    while (j < n && t[j] == '-') ++j;
    return j - i;
  }
  for (std::size_t j = i + 1; j <= n; ++j) {  // t[i:j] are no whitespace (lazily longer)
    if (at(j) == '-') {
      const bool behind = (j >= 2 && is_letter(j - 2) && is_letter(j - 1)) ||
                          (j >= 3 && is_letter(j - 3) && t[j - 2] == '-' && is_letter(j - 1));
      const bool ahead = is_letter(j + 1) && (is_letter(j + 2) || (at(j + 2) == '-' && is_letter(j + 3)));
      if (behind && ahead) return j + 1 - i;
    }
    if (j == n || tw_space(t[j])) return j - i;
    if (word_punct(t[j - 1]) && dashes_word(j)) return j - i;
  }
  return n - i;
}

struct Wrap {
  double width;
  bool int_width;  // an int (or bool) width: a float one fails where a long word is broken
  bool break_long_words, hyphens_split, break_on_hyphens;
};

// textwrap.wrap(line) with jinja2's options.
std::vector<std::string> wrap_line(const Chars& line, const Wrap& w) {
  // The chunks as [begin, end) spans of `line`, in order; `next` the first left.
  std::vector<std::pair<std::size_t, std::size_t>> chunks;
  for (std::size_t i = 0; i < line.size();) {
    std::size_t j = i;
    if (w.hyphens_split) {
      j = i + wordsep_match(line, i);
    } else {
      const bool sp = tw_space(line[i]);
      while (j < line.size() && tw_space(line[j]) == sp) ++j;
    }
    chunks.emplace_back(i, j);
    i = j;
  }
  if (w.width <= 0) throw Error("invalid width " + to_str(Value::real(w.width)) + " (must be > 0)");
  auto size = [](const std::pair<std::size_t, std::size_t>& c) { return c.second - c.first; };
  auto blank = [&](const std::pair<std::size_t, std::size_t>& c) {
    for (std::size_t k = c.first; k < c.second; ++k)
      if (!py_isspace(line[k])) return false;
    return true;
  };
  std::vector<std::string> lines;
  std::vector<std::pair<std::size_t, std::size_t>> cur;
  std::size_t next = 0;
  while (next < chunks.size()) {
    cur.clear();
    double cur_len = 0;
    if (!lines.empty() && blank(chunks[next])) ++next;
    while (next < chunks.size()) {
      const auto l = static_cast<double>(size(chunks[next]));
      if (cur_len + l > w.width) break;
      cur.push_back(chunks[next++]);
      cur_len += l;
    }
    if (next < chunks.size() && static_cast<double>(size(chunks[next])) > w.width) {
      // _handle_long_word
      if (w.break_long_words) {
        double space_left = w.width < 1 ? 1 : w.width - cur_len;
        if (!(w.width < 1) && !w.int_width) throw Error("slice indices must be integers or None");
        auto& chunk = chunks[next];
        auto end = static_cast<std::size_t>(space_left);
        if (w.break_on_hyphens && static_cast<double>(size(chunk)) > space_left) {
          // After the last hyphen before space_left, where something but hyphens is before it.
          for (std::size_t h = std::min(end, size(chunk)); h-- > 1;) {
            if (line[chunk.first + h] != '-') continue;
            for (std::size_t k = chunk.first; k < chunk.first + h; ++k)
              if (line[k] != '-') {
                end = h + 1;
                break;
              }
            break;
          }
        }
        end = std::min(end, size(chunk));
        cur.emplace_back(chunk.first, chunk.first + end);
        chunk.first += end;
      } else if (cur.empty()) {
        cur.push_back(chunks[next++]);
      }
    }
    if (!cur.empty() && blank(cur.back())) cur.pop_back();
    if (!cur.empty()) {
      std::string text;
      for (const auto& c : cur) text += utf8(line, c.first, c.second);
      lines.push_back(std::move(text));
    }
  }
  return lines;
}

// ---- pprint: pprint.PrettyPrinter(indent=1, width=80, sort_dicts=True)

bool pp_dict(const Value& v) { return v.is_dict() && !v.ns && !v.view; }
bool pp_seq(const Value& v) { return v.is_seq() && !(v.tuple && v.list->group); }
bool pp_str(const Value& v) { return v.is_str() && !v.markup; }

// sorted(items, key=_safe_tuple) of a dict's keys (None, bools, numbers,
// strs, tuples): values compare where Python's < does, otherwise by type
// name ("<class 'NoneType'>" first, "<class 'str'>" after the numbers',
// "<class 'tuple'>" last).
std::vector<std::size_t> sorted_keys(const DictObj& d) {
  std::vector<std::pair<Value, std::size_t>> keys;
  for (std::size_t k = 0; k < d.items().size(); ++k) keys.emplace_back(d.key(d.items()[k].first), k);
  auto rank = [](const Value& v) { return v.is_none() ? 0 : v.is_str() ? 2 : v.is_list() ? 3 : 1; };
  std::stable_sort(keys.begin(), keys.end(), [&](const auto& a, const auto& b) {
    const int ra = rank(a.first), rb = rank(b.first);
    if (ra != rb) return ra < rb;
    if (ra == 0) return false;
    return less(a.first, b.first);
  });
  std::vector<std::size_t> out;
  for (const auto& [k, i] : keys) out.push_back(i);
  return out;
}

struct Pretty {
  static constexpr int64_t kWidth = 80;
  int depth = 0;

  struct Deeper {
    int& d;
    explicit Deeper(int& depth) : d(depth) {
      if (++d > kMaxNesting) throw Error("maximum recursion depth exceeded while calling a Python object");
    }
    ~Deeper() { --d; }
  };

  // PrettyPrinter._safe_repr: repr with dicts' items sorted.
  void safe_repr(const Value& v, std::string& out) {
    Deeper guard(depth);
    if (pp_dict(v)) {
      out += '{';
      bool first = true;
      for (std::size_t i : sorted_keys(*v.dict)) {
        if (!first) out += ", ";
        first = false;
        const auto& [k, x] = v.dict->items()[i];
        safe_repr(v.dict->key(k), out);
        out += ": ";
        safe_repr(x, out);
      }
      out += '}';
      return;
    }
    if (pp_seq(v)) {
      const auto& items = v.list->items;
      out += v.tuple ? '(' : '[';
      for (std::size_t i = 0; i < items.size(); ++i) {
        if (i) out += ", ";
        safe_repr(items[i], out);
      }
      if (v.tuple && items.size() == 1) out += ',';
      out += v.tuple ? ')' : ']';
      return;
    }
    append_repr(v, out);
  }
  std::string repr_of(const Value& v) {
    std::string r;
    safe_repr(v, r);
    return r;
  }

  void format(const Value& v, std::string& out, int64_t indent, int64_t allowance, int level) {
    Deeper guard(depth);
    std::string rep = repr_of(v);
    if (static_cast<int64_t>(py_len(rep)) > kWidth - indent - allowance) {
      if (pp_dict(v)) return pprint_dict(v, out, indent, allowance, level + 1);
      if (pp_seq(v)) return pprint_seq(v, out, indent, allowance, level + 1);
      if (pp_str(v)) return pprint_str(*v.s, out, indent, allowance, level + 1);
    }
    out += rep;
  }

  void pprint_dict(const Value& v, std::string& out, int64_t indent, int64_t allowance, int level) {
    out += '{';
    if (!v.dict->items().empty()) {
      allowance += 1;
      indent += 1;
      const std::vector<std::size_t> order = sorted_keys(*v.dict);
      for (std::size_t n = 0; n < order.size(); ++n) {
        const bool last = n + 1 == order.size();
        const auto& [k, x] = v.dict->items()[order[n]];
        std::string rep = repr_of(v.dict->key(k));
        out += rep;
        out += ": ";
        format(x, out, indent + static_cast<int64_t>(py_len(rep)) + 2, last ? allowance : 1, level);
        if (!last) out += ",\n" + std::string(static_cast<std::size_t>(indent), ' ');
      }
    }
    out += '}';
  }

  void pprint_seq(const Value& v, std::string& out, int64_t indent, int64_t allowance, int level) {
    const auto& items = v.list->items;
    const std::string end = !v.tuple ? "]" : items.size() == 1 ? ",)" : ")";
    out += v.tuple ? '(' : '[';
    allowance += static_cast<int64_t>(end.size());
    indent += 1;
    for (std::size_t n = 0; n < items.size(); ++n) {
      if (n) out += ",\n" + std::string(static_cast<std::size_t>(indent), ' ');
      format(items[n], out, indent, n + 1 == items.size() ? allowance : 1, level);
    }
    out += end;
  }

  static int64_t repr_len(std::string_view s) {
    std::string r;
    py_repr(s, r);
    return static_cast<int64_t>(py_len(r));
  }

  void pprint_str(const std::string& s, std::string& out, int64_t indent, int64_t allowance, int level) {
    if (s.empty()) return py_repr(s, out);
    const std::vector<std::string> lines = py_splitlines(s, true);
    if (level == 1) indent += 1, allowance += 1;
    const int64_t max_width = kWidth - indent;
    int64_t max_width1 = max_width;
    std::vector<std::string> chunks;
    std::string rep;
    for (std::size_t i = 0; i < lines.size(); ++i) {
      const std::string& line = lines[i];
      rep.clear();
      py_repr(line, rep);
      const bool last_line = i + 1 == lines.size();
      if (last_line) max_width1 -= allowance;
      if (static_cast<int64_t>(py_len(rep)) <= max_width1) {
        chunks.push_back(rep);
        continue;
      }
      // re.findall(r'\S*\s*', line), the empty last match dropped.
      std::vector<std::string> parts;
      for (std::size_t p = 0; p < line.size();) {
        std::size_t q = p;
        uint32_t c = 0;
        while (q < line.size()) {
          std::size_t len = utf8_decode(line, q, c);
          if (py_isspace(c)) break;
          q += len;
        }
        while (q < line.size()) {
          std::size_t len = utf8_decode(line, q, c);
          if (!py_isspace(c)) break;
          q += len;
        }
        parts.push_back(line.substr(p, q - p));
        p = q;
      }
      int64_t max_width2 = max_width;
      std::string current;
      for (std::size_t j = 0; j < parts.size(); ++j) {
        std::string candidate = current + parts[j];
        if (j + 1 == parts.size() && last_line) max_width2 -= allowance;
        if (repr_len(candidate) > max_width2) {
          if (!current.empty()) {
            chunks.emplace_back();
            py_repr(current, chunks.back());
          }
          current = parts[j];
        } else {
          current = std::move(candidate);
        }
      }
      if (!current.empty()) {
        chunks.emplace_back();
        py_repr(current, chunks.back());
      }
    }
    if (chunks.size() == 1) {
      out += rep;
      return;
    }
    if (level == 1) out += '(';
    for (std::size_t i = 0; i < chunks.size(); ++i) {
      if (i) out += "\n" + std::string(static_cast<std::size_t>(indent), ' ');
      out += chunks[i];
    }
    if (level == 1) out += ')';
  }
};

// ---- urlize: jinja2.utils.urlize with transformers' policies (rel "noopener")

// What [a-z] matches under re.IGNORECASE: ASCII letters, and İ, ı, ſ, K
// (whose simple case mappings are ASCII letters).
bool ci_letter(uint32_t c) {
  return (c < 128 && ((c | 0x20) >= 'a' && (c | 0x20) <= 'z')) || c == 0x130 || c == 0x131 || c == 0x17F || c == 0x212A;
}
// Whether c matches the ASCII letter or digit `want` under re.IGNORECASE.
bool ci_is(uint32_t c, char want) {
  if (c < 128) return (c >= 'A' && c <= 'Z' ? c | 0x20 : c) == static_cast<uint32_t>(want);
  if (want == 'i') return c == 0x130 || c == 0x131;
  if (want == 's') return c == 0x17F;
  if (want == 'k') return c == 0x212A;
  return false;
}
bool ci_prefix(const Chars& t, std::size_t at, std::string_view word) {
  if (at + word.size() > t.size()) return false;
  for (std::size_t k = 0; k < word.size(); ++k) {
    const char w = word[k];
    if (w >= 'a' && w <= 'z' ? !ci_is(t[at + k], w) : t[at + k] != static_cast<unsigned char>(w)) return false;
  }
  return true;
}
bool label_char(uint32_t c) { return c == '%' || c == '-' || py_is_word_char(c); }  // [\w%-]
bool hex_char(uint32_t c) { return decimal(c) || (c < 128 && (c | 0x20) >= 'a' && (c | 0x20) <= 'f'); }

// _http_re's tail from t[e]: (?::\d{1,5})? (?:[/?#]\S*)? $ (the text has no whitespace).
bool http_rest(const Chars& t, std::size_t e) {
  if (e == t.size() || t[e] == '/' || t[e] == '?' || t[e] == '#') return true;
  if (t[e] != ':') return false;
  std::size_t d = e + 1;
  while (d < t.size() && decimal(t[d])) ++d;
  const std::size_t n = d - e - 1;
  return n >= 1 && n <= 5 && (d == t.size() || t[d] == '/' || t[d] == '?' || t[d] == '#');
}

// Whether the whole of `t` matches jinja2's _http_re.
bool http_match(const Chars& t) {
  const std::size_t n = t.size();
  // (https?://|www\.) (([\w%-]+\.)+)? ([a-z]{2,63} | xn--[\w%]{2,59})
  std::size_t p = ci_prefix(t, 0, "https://") ? 8 : ci_prefix(t, 0, "http://") ? 7 : ci_prefix(t, 0, "www.") ? 4 : 0;
  if (p) {
    for (std::size_t s = p; s <= n;) {  // s: where the tld starts (after the labels before it)
      std::size_t e = s;
      while (e < n && e - s < 63 && ci_letter(t[e])) {
        ++e;
        if (e - s >= 2 && http_rest(t, e)) return true;
      }
      if (ci_prefix(t, s, "xn--"))
        for (std::size_t k = s + 4; k < n && k - s - 4 < 59 && (t[k] == '%' || py_is_word_char(t[k]));) {
          ++k;
          if (k - s - 4 >= 2 && http_rest(t, k)) return true;
        }
      std::size_t d = s;  // the next label
      while (d < n && label_char(t[d])) ++d;
      if (d == s || d >= n || t[d] != '.') break;
      s = d + 1;
    }
  }
  // ([\w%-]{2,63}\.)+ (com|net|int|edu|gov|org|info|mil)
  for (std::size_t s = 0;;) {
    std::size_t d = s;
    while (d < n && label_char(t[d])) ++d;
    if (d - s < 2 || d - s > 63 || d >= n || t[d] != '.') break;
    s = d + 1;
    for (std::string_view tld : {"com", "net", "int", "edu", "gov", "org", "info", "mil"})
      if (ci_prefix(t, s, tld) && http_rest(t, s + tld.size())) return true;
  }
  // (https?://) (IPv4 | IPv6)
  p = ci_prefix(t, 0, "https://") ? 8 : ci_prefix(t, 0, "http://") ? 7 : 0;
  if (!p) return false;
  std::size_t q = p;
  bool v4 = true;
  for (int g = 0; g < 4 && v4; ++g) {
    if (g) {
      if (q >= n || t[q] != '.') v4 = false;
      ++q;
    }
    std::size_t d = q;
    while (d < n && d - q < 3 && decimal(t[d])) ++d;
    if (d == q) v4 = false;
    q = d;
  }
  if (v4 && http_rest(t, q)) return true;
  // \[([\da-f]{0,4}:){2}([\da-f]{0,4}:?){1,6}]
  if (p >= n || t[p] != '[') return false;
  std::size_t close = p + 1;
  while (close < n && (hex_char(t[close]) || t[close] == ':')) ++close;
  if (close >= n || t[close] != ']') return false;
  std::size_t at = p + 1;
  for (int g = 0; g < 2; ++g) {
    std::size_t d = at;
    while (d < close && hex_char(t[d])) ++d;
    if (d - at > 4 || d >= close || t[d] != ':') return false;
    at = d + 1;
  }
  // The rest: runs of hex between colons, each piece up to 4 digits and a colon.
  std::size_t pieces = 0, run = 0;
  for (std::size_t k = at; k < close; ++k) {
    if (t[k] == ':') {
      pieces += std::max<std::size_t>(1, (run + 3) / 4);
      run = 0;
    } else {
      ++run;
    }
  }
  pieces += (run + 3) / 4;
  return pieces <= 6 && http_rest(t, close + 1);
}

// ^\S+@\w[\w.-]*\.\w+$ (the text has no whitespace): the '@' is the one
// before the run of [\w.-] that ends the text, with something before it, a
// word character after it, and after the last '.' word characters alone.
bool email_match(const Chars& t) {
  const std::size_t n = t.size();
  std::size_t dot = SIZE_MAX;  // the last '.'
  for (std::size_t k = n; k-- > 0;)
    if (t[k] == '.') {
      dot = k;
      break;
    }
  if (dot == SIZE_MAX || dot + 1 >= n) return false;
  for (std::size_t k = dot + 1; k < n; ++k)
    if (!py_is_word_char(t[k])) return false;
  std::size_t from = n;
  while (from > 0 && (t[from - 1] == '.' || t[from - 1] == '-' || py_is_word_char(t[from - 1]))) --from;
  const std::size_t at = from - 1;
  return from >= 2 && t[at] == '@' && at + 1 < dot && py_is_word_char(t[at + 1]);
}

std::size_t count_of(std::string_view s, std::string_view x) {
  std::size_t n = 0;
  for (std::size_t at = s.find(x); at != std::string_view::npos; at = s.find(x, at + x.size())) ++n;
  return n;
}

}  // namespace

Value f_wordwrap(Interp&, Value& v, Args& a) {
  const Value& width = arg(a, 0, "width");
  const Value& long_words = arg(a, 1, "break_long_words");
  const Value& wrapstring = arg(a, 2, "wrapstring");
  const Value& hyphens = arg(a, 3, "break_on_hyphens");
  if (!v.is_str()) throw Error("'" + std::string(type_name(v)) + "' object has no attribute 'splitlines'");
  Wrap w;
  w.width = 79;
  w.int_width = true;
  const std::vector<std::string> lines = py_splitlines(*v.s, false);
  if (given(width) && !lines.empty()) {  // textwrap reads it once there is a line
    if (!width.is_number())
      throw Error("'<=' not supported between instances of '" + std::string(type_name(width)) + "' and 'int'");
    w.width = as_double(width);
    w.int_width = width.kind != Kind::kFloat;
  }
  w.break_long_words = !given(long_words) || truthy(long_words);
  // textwrap splits at hyphens where break_on_hyphens `is True`; it breaks
  // a long word after one where it is truthy.
  w.hyphens_split = !given(hyphens) || (hyphens.kind == Kind::kBool && hyphens.b);
  w.break_on_hyphens = !given(hyphens) || truthy(hyphens);
  std::string sep = "\n";
  bool markup = false;
  if (given(wrapstring) && !wrapstring.is_none()) {
    if (!wrapstring.is_str())
      throw Error("'" + std::string(type_name(wrapstring)) + "' object has no attribute 'join'");
    sep = *wrapstring.s;
    markup = wrapstring.markup;  // Markup.join escapes the lines
  }
  std::string out;
  bool first_line = true;
  for (const std::string& line : lines) {
    if (!first_line) out += sep;
    first_line = false;
    bool first = true;
    for (const std::string& piece : wrap_line(code_points(line), w)) {
      if (!first) out += sep;
      first = false;
      if (markup) html_escape(piece, out);
      else out += piece;
    }
  }
  return markup ? tmpl::markup(std::move(out)) : Value::str(std::move(out));
}

Value f_pprint(Interp&, Value& v, Args&) {
  Pretty p;
  std::string out;
  p.format(v, out, 0, 0, 0);
  return Value::str(std::move(out));
}

Value f_urlize(Interp& in, Value& v, Args& a) {
  // Six parameters, more than a Signature holds: bound here.
  static constexpr std::string_view kParams[] = {"trim_url_limit", "nofollow", "target", "rel", "extra_schemes"};
  if (a.pos.size() > 5) throw Error("do_urlize() takes from 2 to 7 positional arguments");
  for (std::size_t k = 0; k < a.kw.size(); ++k) {
    const auto* p = std::find(std::begin(kParams), std::end(kParams), a.kw[k].first);
    if (p == std::end(kParams)) throw Error("do_urlize() got an unexpected keyword argument '" + a.kw[k].first + "'");
    if (static_cast<std::size_t>(p - std::begin(kParams)) < a.pos.size())
      throw Error("do_urlize() got multiple values for argument '" + a.kw[k].first + "'");
  }
  const Value& limit = arg(a, 0, "trim_url_limit");
  const Value& nofollow = arg(a, 1, "nofollow");
  const Value& target = arg(a, 2, "target");
  const Value& rel_arg = arg(a, 3, "rel");
  const Value& schemes_arg = arg(a, 4, "extra_schemes");
  // rel: the words of `rel`, nofollow, and the policy's noopener, sorted.
  std::vector<std::string> rel_parts;
  if (given(rel_arg) && truthy(rel_arg)) {
    if (!rel_arg.is_str()) throw Error("'" + std::string(type_name(rel_arg)) + "' object has no attribute 'split'");
    rel_parts = py_split(*rel_arg.s, std::nullopt, -1, false);
  }
  if (truthy(nofollow)) rel_parts.emplace_back("nofollow");
  rel_parts.emplace_back("noopener");
  std::sort(rel_parts.begin(), rel_parts.end());
  rel_parts.erase(std::unique(rel_parts.begin(), rel_parts.end()), rel_parts.end());
  std::string rel_attr = " rel=\"";
  for (std::size_t k = 0; k < rel_parts.size(); ++k) {
    if (k) rel_attr += ' ';
    html_escape(rel_parts[k], rel_attr);
  }
  rel_attr += '"';
  std::string target_attr;
  if (given(target) && truthy(target)) target_attr = " target=\"" + *markup_escape(target).s + "\"";
  std::vector<std::string> schemes;
  if (given(schemes_arg) && !schemes_arg.is_none()) {
    for (const Value& x : iterate(schemes_arg)) {
      if (!x.is_str()) throw Error("expected string or bytes-like object");
      // ^([\w.+-]{2,}:(/){0,2})$
      Chars c = code_points(*x.s);
      std::size_t k = 0;
      while (k < c.size() && (c[k] == '.' || c[k] == '+' || c[k] == '-' || py_is_word_char(c[k]))) ++k;
      bool ok = k >= 2 && k < c.size() && c[k] == ':';
      std::size_t slashes = 0;
      for (std::size_t m = k + 1; ok && m < c.size(); ++m) ok = c[m] == '/' && ++slashes <= 2;
      if (!ok) {
        std::string r;
        py_repr(*x.s, r);
        throw Error(r + " is not a valid URI scheme prefix.");
      }
      schemes.push_back(*x.s);
    }
  }
  auto trim = [&](const std::string& x) -> std::string {
    if (!given(limit) || limit.is_none()) return x;
    if (!limit.is_number())
      throw Error("'>' not supported between instances of 'int' and '" + std::string(type_name(limit)) + "'");
    Chars c = code_points(x);
    if (static_cast<double>(c.size()) <= as_double(limit)) return x;
    if (!int_like(limit)) throw Error("slice indices must be integers or None or have an __index__ method");
    const int64_t n = as_int(limit);
    const std::size_t keep =
        n < 0 ? (static_cast<std::size_t>(-n) > c.size() ? 0 : c.size() - static_cast<std::size_t>(-n))
              : static_cast<std::size_t>(n);
    return utf8(c, 0, keep) + "...";
  };
  const std::string text = *markup_escape(v).s;
  // re.split(r"(\s+)", text): words and the whitespace between them.
  std::vector<std::string> words;
  for (std::size_t i = 0; i < text.size();) {
    uint32_t c = 0;
    utf8_decode(text, i, c);
    const bool sp = py_isspace(c);
    std::size_t j = i;
    while (j < text.size()) {
      std::size_t len = utf8_decode(text, j, c);
      if (py_isspace(c) != sp) break;
      j += len;
    }
    words.push_back(text.substr(i, j - i));
    i = j;
  }
  std::string out;
  for (const std::string& word : words) {
    std::string head, middle = word, tail;
    // ^([(<]|&lt;)+
    std::size_t h = 0;
    for (;;) {
      if (h < middle.size() && (middle[h] == '(' || middle[h] == '<')) ++h;
      else if (middle.compare(h, 4, "&lt;") == 0) h += 4;
      else break;
    }
    head = middle.substr(0, h);
    middle.erase(0, h);
    // ([)>.,\n]|&gt;)+$: the leftmost start from which the rest is such tokens.
    {
      const std::size_t n = middle.size();
      std::vector<char> ok(n + 1, 0);
      ok[n] = 1;
      for (std::size_t k = n; k-- > 0;) {
        const char c = middle[k];
        if (c == ')' || c == '>' || c == '.' || c == ',' || c == '\n') ok[k] = ok[k + 1];
        else if (middle.compare(k, 4, "&gt;") == 0) ok[k] = ok[k + 4];
      }
      for (std::size_t k = 0; k < n; ++k)
        if (ok[k]) {
          tail = middle.substr(k);
          middle.resize(k);
          break;
        }
    }
    // Balance parentheses: move closing ones from the tail back.
    for (auto [open, close] : {std::pair<std::string_view, std::string_view>{"(", ")"}, {"<", ">"}, {"&lt;", "&gt;"}}) {
      const std::size_t starts = count_of(middle, open);
      if (starts <= count_of(middle, close)) continue;
      const std::size_t moves = std::min(starts, count_of(tail, close));
      std::size_t from = 0;  // what moved: tail[0, from)
      for (std::size_t m = 0; m < moves; ++m) from = tail.find(close, from) + close.size();
      middle += tail.substr(0, from);
      tail.erase(0, from);
    }
    const Chars mc = code_points(middle);
    if (http_match(mc)) {
      const bool scheme = middle.rfind("https://", 0) == 0 || middle.rfind("http://", 0) == 0;
      middle = "<a href=\"" + std::string(scheme ? "" : "https://") + middle + "\"" + rel_attr + target_attr + ">" +
               trim(middle) + "</a>";
    } else if (middle.rfind("mailto:", 0) == 0 && email_match(code_points(middle.substr(7)))) {
      middle = "<a href=\"" + middle + "\">" + middle.substr(7) + "</a>";
    } else if (middle.find('@') != std::string::npos && middle.rfind("www.", 0) != 0 && middle[0] != '@' &&
               middle.find(':') == std::string::npos && email_match(mc)) {
      middle = "<a href=\"mailto:" + middle + "\">" + middle + "</a>";
    } else {
      for (const std::string& sch : schemes)
        if (middle != sch && middle.rfind(sch, 0) == 0)
          middle = "<a href=\"" + middle + "\"" + rel_attr + target_attr + ">" + middle + "</a>";
    }
    out += head;
    out += middle;
    out += tail;
  }
  if (in.autoescape) return markup(std::move(out));  // Markup under autoescape
  return Value::str(std::move(out));
}

// jinja2's random: random.choice(seq). Where there is one item it is that
// item, and an empty sequence gives undefined; a choice among several is
// random, which a render cannot reproduce.
Value f_random(Interp&, Value& v, Args&) {
  if (v.is_str()) {
    std::vector<uint32_t> cps = code_points(*v.s);
    if (cps.empty()) return Value::undefined("No random item, sequence was empty.");
    if (cps.size() == 1) return Value::str(*v.s);
  } else if (v.is_seq() || v.is_range()) {
    std::vector<Value> items = iterate(v);
    if (items.empty()) return Value::undefined("No random item, sequence was empty.");
    if (items.size() == 1) return items[0];
  } else if (v.is_undefined()) {
    return Value::undefined("No random item, sequence was empty.");
  } else if (v.is_dict() && !v.ns) {  // seq[0]
    if (v.dict->items().empty()) return Value::undefined("No random item, sequence was empty.");
    if (v.dict->items().size() == 1) {
      if (const Value* x = v.dict->find(key_of(Value::integer(0)))) return *x;
      throw Error("KeyError: 0");
    }
  } else if (v.is_list() && v.view && !v.gen) {  // a dict view: no index
    if (v.list->items.empty()) return Value::undefined("No random item, sequence was empty.");
    throw Error("'" + std::string(type_name(v)) + "' object is not subscriptable");
  } else {
    throw Error("object of type '" + std::string(type_name(v)) + "' has no len()");
  }
  throw Error("the random filter picks a random item, which the engine does not render");
}

}  // namespace tokfeed::tmpl
