#include "template/json_value.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <tuple>

namespace tokfeed::tmpl {

namespace {
// Up to this many keys a dict from JSON is built in place (DictObj::set
// indexes bigger ones).
constexpr std::size_t kAppended = 16;
}  // namespace

Value from_json(simdjson::dom::element e) {
  using simdjson::dom::element_type;
  switch (e.type()) {
    case element_type::NULL_VALUE: return Value::none();
    case element_type::BOOL: return Value::boolean(e.get_bool().value_unsafe());
    case element_type::INT64: return Value::integer(e.get_int64().value_unsafe());
    case element_type::UINT64:
      // 2^63 and up: Python's int, which no engine value holds exactly (a
      // float would print as another number).
      throw Error("the integer " + std::to_string(e.get_uint64().value_unsafe()) +
                  " is beyond the engine's 64-bit integers (Python's are unbounded)");
    case element_type::DOUBLE: return Value::real(e.get_double().value_unsafe());
    case element_type::STRING: return Value::recycled_str(e.get_string().value_unsafe());
    case element_type::ARRAY: {
      Value l = Value::recycled_list();
      simdjson::dom::array arr = e.get_array().value_unsafe();
      auto& items = l.list->items;
      items.reserve(arr.size());
      for (simdjson::dom::element x : arr) items.push_back(from_json(x));
      return l;
    }
    case element_type::OBJECT: {
      Value d = Value::recycled_dict();
      // Python's json.loads keeps the last of duplicate keys, at the first one's place.
      simdjson::dom::object obj = e.get_object().value_unsafe();
      auto& items = d.dict->items();
      items.reserve(obj.size());
      for (simdjson::dom::key_value_pair kv : obj) {
        if (kv.key.starts_with('\x01') || items.size() >= kAppended) {
          d.dict->set(kv.key.starts_with('\x01') ? str_key(kv.key) : std::string(kv.key), from_json(kv.value));
          continue;
        }
        // A small dict's keys are compared here and a new one appended
        // (DictObj::set's linear case, without its moves of the value).
        auto same = std::find_if(items.begin(), items.end(),
                                 [&](const auto& item) { return DictObj::same_key(item.first, kv.key); });
        if (same != items.end()) same->second = from_json(kv.value);
        else
          items.emplace_back(std::piecewise_construct, std::forward_as_tuple(kv.key),
                             std::forward_as_tuple(from_json(kv.value)));
      }
      return d;
    }
  }
  return Value::none();
}

Value parse_json(std::string_view text) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (auto err = parser.parse(text.data(), text.size()).get(root))
    return parse_python_json(text, simdjson::error_message(err));
  return from_json(root);
}

namespace {

// The byte offset of the first byte of `s` that does not begin or continue
// a UTF-8 sequence (an encoded surrogate, an overlong form or a code point
// past U+10FFFF included); s.size() when all of it is UTF-8.
std::size_t utf8_error_at(std::string_view s) {
  auto cont = [&](std::size_t i) { return i < s.size() && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80; };
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    const auto c1 = i + 1 < s.size() ? static_cast<unsigned char>(s[i + 1]) : 0;
    if (c >= 0xC2 && c <= 0xDF && cont(i + 1)) {
      i += 2;
    } else if (c >= 0xE0 && c <= 0xEF && cont(i + 1) && cont(i + 2) && !(c == 0xE0 && c1 < 0xA0) &&
               !(c == 0xED && c1 >= 0xA0)) {
      i += 3;
    } else if (c >= 0xF0 && c <= 0xF4 && cont(i + 1) && cont(i + 2) && cont(i + 3) && !(c == 0xF0 && c1 < 0x90) &&
               !(c == 0xF4 && c1 >= 0x90)) {
      i += 4;
    } else {
      return i;
    }
  }
  return s.size();
}

void append_utf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// A recursive descent over what CPython's json.scanner accepts (strict
// mode: no raw control characters in strings), building the values
// from_json builds. Syntax it refuses is `fail()`: simdjson's reason.
class PythonJson {
 public:
  PythonJson(std::string_view text, std::string_view reason) : t_(text), reason_(reason) {}

  Value document() {
    if (std::size_t bad = utf8_error_at(t_); bad < t_.size()) {
      char b[80];
      std::snprintf(b, sizeof b, "malformed JSON: not UTF-8 (byte 0x%02X at offset %zu)",
                    static_cast<unsigned char>(t_[bad]), bad);
      throw Error(b);
    }
    ws();
    Value v = value(0);
    ws();
    if (i_ != t_.size()) fail();
    return v;
  }

 private:
  static constexpr int kMaxDepth = 1024;  // simdjson's default; CPython's recursion limit is about as deep

  [[noreturn]] void fail() const { throw Error("malformed JSON: " + std::string(reason_)); }
  void ws() {
    while (i_ < t_.size() && (t_[i_] == ' ' || t_[i_] == '\t' || t_[i_] == '\n' || t_[i_] == '\r')) ++i_;
  }
  // Takes `c` where it is next.
  bool eat(char c) {
    if (i_ >= t_.size() || t_[i_] != c) return false;
    ++i_;
    return true;
  }
  bool literal(std::string_view w) {
    if (t_.substr(i_, w.size()) != w) return false;
    i_ += w.size();
    return true;
  }

  Value value(int depth) {
    if (depth > kMaxDepth || i_ >= t_.size()) fail();
    const char c = t_[i_];
    if (c == '"') return Value::recycled_str(string());
    if (c == '{') return object(depth);
    if (c == '[') return array(depth);
    if (literal("null")) return Value::none();
    if (literal("true")) return Value::boolean(true);
    if (literal("false")) return Value::boolean(false);
    if (literal("NaN")) return Value::real(std::numeric_limits<double>::quiet_NaN());
    if (literal("Infinity")) return Value::real(std::numeric_limits<double>::infinity());
    if (literal("-Infinity")) return Value::real(-std::numeric_limits<double>::infinity());
    return number();
  }

  Value object(int depth) {
    ++i_;
    Value d = Value::recycled_dict();
    ws();
    if (eat('}')) return d;
    for (;;) {
      if (i_ >= t_.size() || t_[i_] != '"') fail();
      const std::string key = string();
      ws();
      if (!eat(':')) fail();
      ws();
      // The last of duplicate keys at the first one's place, as json.loads.
      d.dict->set(str_key(key), value(depth + 1));
      ws();
      if (eat(',')) {
        ws();
        continue;
      }
      if (eat('}')) return d;
      fail();
    }
  }

  Value array(int depth) {
    ++i_;
    Value l = Value::recycled_list();
    ws();
    if (eat(']')) return l;
    for (;;) {
      l.list->items.push_back(value(depth + 1));
      ws();
      if (eat(',')) {
        ws();
        continue;
      }
      if (eat(']')) return l;
      fail();
    }
  }

  // Four hex digits after "\u" at i_ (past them after).
  uint32_t hex4() {
    if (i_ + 4 > t_.size()) fail();
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      const char h = t_[i_++];
      v <<= 4;
      if (h >= '0' && h <= '9') v |= static_cast<uint32_t>(h - '0');
      else if (h >= 'a' && h <= 'f') v |= static_cast<uint32_t>(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F') v |= static_cast<uint32_t>(h - 'A' + 10);
      else fail();
    }
    return v;
  }

  std::string string() {
    ++i_;
    std::string out;
    for (;;) {
      if (i_ >= t_.size()) fail();
      const char c = t_[i_];
      if (c == '"') {
        ++i_;
        return out;
      }
      if (static_cast<unsigned char>(c) < 0x20) fail();
      if (c != '\\') {
        out += c;
        ++i_;
        continue;
      }
      if (++i_ >= t_.size()) fail();
      const char e = t_[i_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          const std::size_t at = i_ - 2;
          uint32_t cp = hex4();
          if (cp >= 0xD800 && cp <= 0xDBFF && t_.substr(i_, 2) == "\\u") {
            const std::size_t back = i_;
            i_ += 2;
            const uint32_t lo = hex4();
            if (lo >= 0xDC00 && lo <= 0xDFFF) cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            else i_ = back;
          }
          if (cp >= 0xD800 && cp <= 0xDFFF)
            throw Error("a string holds the lone UTF-16 surrogate " + std::string(t_.substr(at, 6)) +
                        ", which Python reads but UTF-8 text cannot hold (nor a tokenizer take)");
          append_utf8(cp, out);
          break;
        }
        default: fail();
      }
    }
  }

  // -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?, json.scanner's number.
  Value number() {
    const std::size_t b = i_;
    auto digits = [&] {
      const std::size_t d = i_;
      while (i_ < t_.size() && t_[i_] >= '0' && t_[i_] <= '9') ++i_;
      return i_ - d;
    };
    if (i_ < t_.size() && t_[i_] == '-') ++i_;
    if (i_ < t_.size() && t_[i_] == '0') ++i_;
    else if (digits() == 0) fail();
    bool real = false;
    if (i_ + 1 < t_.size() && t_[i_] == '.' && t_[i_ + 1] >= '0' && t_[i_ + 1] <= '9') {
      ++i_;
      digits();
      real = true;
    }
    if (i_ < t_.size() && (t_[i_] == 'e' || t_[i_] == 'E')) {
      const std::size_t e = i_++;
      if (i_ < t_.size() && (t_[i_] == '+' || t_[i_] == '-')) ++i_;
      if (digits() == 0) i_ = e;  // not an exponent: the number ends before it
      else real = true;
    }
    const std::string_view n = t_.substr(b, i_ - b);
    if (!real) {
      int64_t x = 0;
      if (auto r = std::from_chars(n.data(), n.data() + n.size(), x); r.ec == std::errc()) return Value::integer(x);
      std::string shown(n.substr(0, 40));
      if (n.size() > 40) shown += "... (" + std::to_string(n.size() - (n[0] == '-')) + " digits)";
      throw Error("the integer " + shown + " is beyond the engine's 64-bit integers (Python's are unbounded)");
    }
    // strtod rounds as float() does, to inf past the largest double.
    const std::string z(n);
    return Value::real(std::strtod(z.c_str(), nullptr));
  }

  std::string_view t_;
  std::string_view reason_;
  std::size_t i_ = 0;
};

}  // namespace

Value parse_python_json(std::string_view text, std::string_view simdjson_reason) {
  return PythonJson(text, simdjson_reason).document();
}

}  // namespace tokfeed::tmpl
