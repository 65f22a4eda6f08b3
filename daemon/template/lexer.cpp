#include "template/lexer.hpp"

#include <unicode/uchar.h>

#include <algorithm>

#include "template/pystr.hpp"
#include "template/value.hpp"

namespace tokfeed::tmpl {

std::string where(Pos p) { return std::to_string(p.line) + ":" + std::to_string(p.col); }

namespace {

// The length of the char at s[i] when it is whitespace as Python's
// str.isspace() says (jinja2's `\s` and str.rstrip() test the same chars:
// U+0085, U+00A0, U+2003, U+3000, ... as well as ASCII's), else 0.
std::size_t space_len(std::string_view s, std::size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return py_isspace(c) ? 1 : 0;
  uint32_t cp = 0;
  const std::size_t n = utf8_decode(s, i, cp);
  return n > 1 && cp >= 0x80 && py_isspace(cp) ? n : 0;
}
// The length of the whitespace char that ends at s[end - 1], or 0.
std::size_t space_len_before(std::string_view s, std::size_t end) {
  if (end == 0) return 0;
  std::size_t i = end - 1;
  while (i > 0 && end - i < 4 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  const std::size_t n = space_len(s, i);
  return i + n == end ? n : 0;
}
// The position past the whitespace that starts at s[i].
std::size_t skip_spaces(std::string_view s, std::size_t i) {
  while (i < s.size())
    if (std::size_t n = space_len(s, i)) i += n;
    else break;
  return i;
}
// `text` without the whitespace at its end (str.rstrip()).
void rstrip(std::string& text) {
  while (std::size_t n = space_len_before(text, text.size())) text.resize(text.size() - n);
}
bool name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool name_char(char c) { return name_start(c) || (c >= '0' && c <= '9'); }
bool digit(char c) { return c >= '0' && c <= '9'; }

class Lexer {
 public:
  explicit Lexer(std::string src) : s_(std::move(src)) {
    line_starts_.push_back(0);
    for (std::size_t i = 0; i < s_.size(); ++i)
      if (s_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    std::size_t pos = 0;
    bool strip_next = false, line_starting = true;
    while (pos <= s_.size()) {
      std::size_t start = next_tag(pos);
      std::string text = s_.substr(pos, (start == std::string::npos ? s_.size() : start) - pos);
      if (strip_next) {
        text.erase(0, skip_spaces(text, 0));
        strip_next = false;
      }
      if (start == std::string::npos) {
        emit_text(std::move(text), pos);
        break;
      }
      char type = s_[start + 1];
      char mark = start + 2 < s_.size() ? s_[start + 2] : '\0';
      if (mark == '-') {
        rstrip(text);
      } else if (mark != '+' && type != '{') {
        std::size_t l = text.rfind('\n');
        l = l == std::string::npos ? 0 : l + 1;
        if ((l > 0 || line_starting) && l < text.size() && skip_spaces(text, l) == text.size()) text.erase(l);
      }
      emit_text(std::move(text), pos);
      std::size_t body = start + 2 + (mark == '-' || mark == '+' ? 1 : 0);
      char end_mark = '\0';
      if (type == '#') {
        std::size_t e = s_.find("#}", body);
        if (e == std::string::npos) fail(start, "unterminated comment");
        end_mark = e > body && (s_[e - 1] == '-' || s_[e - 1] == '+') ? s_[e - 1] : '\0';
        pos = e + 2;
      } else if (type == '%' && raw_tag(body, "raw", pos)) {
        pos = lex_raw(start, pos, s_[pos - 3]);
        end_mark = s_[pos - 3];
      } else {
        out_.push_back({type == '{' ? Tok::kVarBegin : Tok::kBlockBegin, at(start), {}});
        pos = lex_expr(body, type == '{' ? '}' : '%', end_mark);
      }
      if (end_mark == '-') {
        strip_next = true;
      } else if (end_mark != '+' && type != '{' && pos < s_.size() && s_[pos] == '\n') {
        ++pos;  // trim_blocks
      }
      line_starting = pos > 0 && s_[pos - 1] == '\n';
    }
    out_.push_back({Tok::kEnd, at(s_.size()), {}});
    return std::move(out_);
  }

 private:
  Pos at(std::size_t off) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), off);
    std::size_t line = static_cast<std::size_t>(it - line_starts_.begin());
    std::size_t ls = line_starts_[line - 1];
    return {static_cast<uint32_t>(line), static_cast<uint32_t>(py_len(std::string_view(s_).substr(ls, off - ls)) + 1)};
  }
  [[noreturn]] void fail(std::size_t off, const std::string& what) const { throw Error(where(at(off)) + ": " + what); }
  // The length in bytes of the char at s_[i] (1 for a byte that starts none).
  std::size_t char_len(std::size_t i) const {
    uint32_t cp = 0;
    return utf8_decode(s_, i, cp);
  }

  std::size_t next_tag(std::size_t from) const {
    for (std::size_t i = s_.find('{', from); i != std::string::npos; i = s_.find('{', i + 1)) {
      if (i + 1 < s_.size() && (s_[i + 1] == '{' || s_[i + 1] == '%' || s_[i + 1] == '#')) return i;
    }
    return std::string::npos;
  }

  void emit_text(std::string text, std::size_t off) {
    if (!text.empty()) out_.push_back({Tok::kText, at(off), std::move(text)});
  }

  // Whether s_[body...] is `\s*NAME\s*[-+]?%}`; sets `after` past it.
  // jinja2 reads `{% raw +%}` as no raw tag (then an unknown tag).
  bool raw_tag(std::size_t body, std::string_view name, std::size_t& after) const {
    std::size_t i = skip_spaces(s_, body);
    if (s_.compare(i, name.size(), name) != 0) return false;
    i += name.size();
    if (i < s_.size() && name_char(s_[i])) return false;
    i = skip_spaces(s_, i);
    if (i < s_.size() && (s_[i] == '-' || (s_[i] == '+' && name != "raw"))) ++i;
    if (s_.compare(i, 2, "%}") != 0) return false;
    after = i + 2;
    return true;
  }

  // The body of {% raw %}…{% endraw %}; returns the position after endraw.
  std::size_t lex_raw(std::size_t start, std::size_t content, char open_mark) {
    for (std::size_t i = s_.find("{%", content); i != std::string::npos; i = s_.find("{%", i + 2)) {
      char mark = i + 2 < s_.size() ? s_[i + 2] : '\0';
      std::size_t body = i + 2 + (mark == '-' || mark == '+' ? 1 : 0);
      std::size_t after;
      if (!raw_tag(body, "endraw", after)) continue;
      std::string text = s_.substr(content, i - content);
      // jinja2 strips after `{% raw -%}`, but trim_blocks never applies
      // to `{% raw %}` (its end tag takes the newline after it).
      if (open_mark == '-') text.erase(0, skip_spaces(text, 0));
      if (mark == '-') {
        rstrip(text);
      } else if (mark != '+') {
        std::size_t l = text.rfind('\n');
        l = l == std::string::npos ? 0 : l + 1;
        if (l > 0 && skip_spaces(text, l) == text.size()) text.erase(l);
      }
      emit_text(std::move(text), content);
      return after;
    }
    fail(start, "missing '{% endraw %}' for '{% raw %}'");
  }

  // Expression tokens up to the closing `}}` or `%}`; returns the position
  // after it and sets `end_mark` to its '-' or '+'.
  std::size_t lex_expr(std::size_t i, char closer, char& end_mark) {
    int depth = 0;
    const Tok end_tok = closer == '}' ? Tok::kVarEnd : Tok::kBlockEnd;
    for (;;) {
      i = skip_spaces(s_, i);
      if (i >= s_.size())
        fail(i,
             closer == '}' ? "unexpected end of template; expected '}}'" : "unexpected end of template; expected '%}'");
      char c = s_[i];
      if (depth == 0 && (c == '-' || c == '+') && i + 2 < s_.size() && s_[i + 1] == closer && s_[i + 2] == '}') {
        out_.push_back({end_tok, at(i), {}});
        end_mark = c;
        return i + 3;
      }
      if (depth == 0 && c == closer && i + 1 < s_.size() && s_[i + 1] == '}') {
        out_.push_back({end_tok, at(i), {}});
        end_mark = '\0';
        return i + 2;
      }
      Pos p = at(i);
      if (name_start(c)) {
        std::size_t b = i;
        while (i < s_.size() && name_char(s_[i])) ++i;
        out_.push_back({Tok::kName, p, s_.substr(b, i - b)});
      } else if (digit(c)) {
        i = lex_number(i, p);
      } else if (c == '"' || c == '\'') {
        i = lex_string(i, p);
      } else {
        static const char* two[] = {"**", "//", "==", "!=", "<=", ">="};
        std::string op(1, c);
        for (const char* t : two)
          if (s_.compare(i, 2, t) == 0) op = t;
        if (op.size() == 1 && std::string_view("+-*/%~<>=()[]{},.:|").find(c) == std::string_view::npos)
          fail(i, "unexpected character '" + s_.substr(i, char_len(i)) + "'");
        if (c == '(' || c == '[' || c == '{') ++depth;
        if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
        i += op.size();
        out_.push_back({Tok::kOp, p, std::move(op)});
      }
    }
  }

  std::size_t lex_number(std::size_t i, Pos p) {
    std::size_t b = i;
    auto digits = [&] {
      while (i < s_.size() && (digit(s_[i]) || (s_[i] == '_' && i + 1 < s_.size() && digit(s_[i + 1])))) ++i;
    };
    digits();
    bool is_float = false;
    if (i + 1 < s_.size() && s_[i] == '.' && digit(s_[i + 1])) {
      ++i;
      digits();
      is_float = true;
    }
    if (i < s_.size() && (s_[i] == 'e' || s_[i] == 'E')) {
      std::size_t j = i + 1;
      if (j < s_.size() && (s_[j] == '+' || s_[j] == '-')) ++j;
      if (j < s_.size() && digit(s_[j])) {
        i = j;
        digits();
        is_float = true;
      }
    }
    std::string t = s_.substr(b, i - b);
    t.erase(std::remove(t.begin(), t.end(), '_'), t.end());
    out_.push_back({is_float ? Tok::kFloat : Tok::kInt, p, std::move(t)});
    return i;
  }

  std::size_t lex_string(std::size_t i, Pos p) {
    char q = s_[i++];
    std::string v;
    for (;;) {
      if (i >= s_.size()) fail(i, "unterminated string");
      char c = s_[i];
      if (c == q) return out_.push_back({Tok::kString, p, std::move(v)}), i + 1;
      if (c != '\\') {
        v += c;
        ++i;
        continue;
      }
      if (i + 1 >= s_.size()) fail(i, "unterminated string");
      char e = s_[i + 1];
      i += 2;
      switch (e) {
        case 'n': v += '\n'; break;
        case 't': v += '\t'; break;
        case 'r': v += '\r'; break;
        case '\\': v += '\\'; break;
        case '\'': v += '\''; break;
        case '"': v += '"'; break;
        case 'a': v += '\a'; break;
        case 'b': v += '\b'; break;
        case 'f': v += '\f'; break;
        case 'v': v += '\v'; break;
        case '\n': break;
        case '0':
        case '1':
        case '2':
        case '3':
        case '4':
        case '5':
        case '6':
        case '7': {  // \ooo: one to three octal digits
          uint32_t cp = static_cast<uint32_t>(e - '0');
          for (int k = 0; k < 2 && i < s_.size() && s_[i] >= '0' && s_[i] <= '7'; ++k, ++i)
            cp = cp * 8 + static_cast<uint32_t>(s_[i] - '0');
          utf8_append(cp, v);
          break;
        }
        case 'N': {  // \N{NAME}: a Unicode character name or alias
          std::size_t close = s_.find('}', i);
          if (i >= s_.size() || s_[i] != '{' || close == std::string::npos) fail(i, "malformed \\N character escape");
          std::string name = s_.substr(i + 1, close - i - 1);
          for (char& ch : name) ch = static_cast<char>(ch >= 'a' && ch <= 'z' ? ch - 32 : ch);
          UErrorCode err = U_ZERO_ERROR;
          UChar32 cp = u_charFromName(U_UNICODE_CHAR_NAME, name.c_str(), &err);
          if (U_FAILURE(err)) {
            err = U_ZERO_ERROR;
            cp = u_charFromName(U_CHAR_NAME_ALIAS, name.c_str(), &err);
          }
          if (U_FAILURE(err) || name.empty()) fail(i, "unknown Unicode character name '" + name + "'");
          utf8_append(static_cast<uint32_t>(cp), v);
          i = close + 1;
          break;
        }
        case 'x':
        case 'u':
        case 'U': {
          std::size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (i + n > s_.size()) fail(i, "truncated \\" + std::string(1, e) + " escape");
          uint32_t cp = 0;
          for (std::size_t k = 0; k < n; ++k) {
            char h = s_[i + k];
            int d = digit(h)                 ? h - '0'
                    : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                    : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                             : -1;
            if (d < 0) fail(i, "truncated \\" + std::string(1, e) + " escape");
            cp = cp * 16 + static_cast<uint32_t>(d);
          }
          utf8_append(cp, v);
          i += n;
          break;
        }
        default: v += '\\'; v += e;
      }
    }
  }

  std::string s_;
  std::vector<std::size_t> line_starts_;
  std::vector<Token> out_;
};

}  // namespace

std::vector<Token> lex(std::string_view source) {
  // Jinja reads the source as lines joined by '\n' and drops one final newline.
  std::string s;
  s.reserve(source.size());
  for (std::size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      s += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      s += source[i];
    }
  }
  if (!s.empty() && s.back() == '\n') s.pop_back();
  return Lexer(std::move(s)).run();
}

}  // namespace tokfeed::tmpl
