#include "template/value.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "template/budget.hpp"
#include "template/pystr.hpp"

namespace tokfeed::tmpl {

Value Value::undefined(std::string hint) {
  Value v;
  if (!hint.empty()) v.s = StrRef::make(std::move(hint));
  return v;
}

Value Value::str(std::string x) {
  Value v;
  v.kind = Kind::kStr;
  v.s = StrRef::make(std::move(x));
  return v;
}

Value Value::new_list(std::vector<Value> items, bool tuple) {
  Value v;
  v.kind = Kind::kList;
  v.tuple = tuple;
  v.list = Ref<ListObj>::make();
  v.list->items = std::move(items);
  return v;
}

Value Value::new_dict() {
  Value v;
  v.kind = Kind::kDict;
  v.dict = Ref<DictObj>::make();
  return v;
}

Value Value::func(std::string name, std::function<Value(Interp&, Args&)> call) {
  Value v;
  v.kind = Kind::kFunc;
  v.fn = Ref<FuncObj>::make();
  v.fn->name = std::move(name);
  v.fn->call = std::move(call);
  return v;
}

// Strings, lists and dicts freed outside a render, kept on their thread
// with their buffers for Value::recycled_*: mapping a record to messages
// builds much the same values as the record before freed (docs/benchmarks.md,
// "Chat templates"). Inside a render nothing is kept or taken, so the
// render budget's counts are those without it. Bounded: at most kMaxObjects
// objects and kMaxBytes of their buffers per thread, none over kMaxBuffer.
// The thread's exit frees them; an object freed after that is deleted.
class Recycler {
 public:
  static constexpr std::size_t kMaxObjects = 4096;
  static constexpr std::size_t kMaxBytes = std::size_t{1} << 20;
  static constexpr std::size_t kMaxBuffer = std::size_t{16} << 10;

  // Keeps `p` (its last reference just dropped) if it may; else false.
  static bool keep(const RefCounted* p) noexcept {
    Pools& t = tl_pools;
    if (t.closed || current_budget() != nullptr || t.count >= kMaxObjects) return false;
    switch (p->type_) {
      case RefCounted::Type::kStr: {
        auto* o = const_cast<StrObj*>(static_cast<const StrObj*>(p));
        const std::size_t cap = o->text.capacity();
        const bool small = cap <= kSmallString;
        if (!small && (cap > kMaxBuffer || t.bytes + cap > kMaxBytes)) return false;
        open(t);
        (small ? t.small_strs : t.strs).push(o);
        if (!small) t.bytes += cap;
        break;
      }
      case RefCounted::Type::kList: {
        auto* o = const_cast<ListObj*>(static_cast<const ListObj*>(p));
        const std::size_t cap = o->items.capacity() * sizeof(Value);
        if (cap > kMaxBuffer) return false;
        o->items.clear();  // keeps what the items held, where it may
        o->group = false;
        if (t.count >= kMaxObjects || t.bytes + cap > kMaxBytes) return false;
        open(t);
        t.lists.push(o);
        t.bytes += cap;
        break;
      }
      case RefCounted::Type::kDict: {
        auto* o = const_cast<DictObj*>(static_cast<const DictObj*>(p));
        const std::size_t cap = capacity(*o) * sizeof(std::pair<std::string, Value>);
        if (cap > kMaxBuffer) return false;
        o->clear();
        if (t.count >= kMaxObjects || t.bytes + cap > kMaxBytes) return false;
        open(t);
        t.dicts.push(o);
        t.bytes += cap;
        break;
      }
      case RefCounted::Type::kFunc: return false;
    }
    ++t.count;
    return true;
  }

  // A kept string for `n` bytes, its one reference taken; null if none (or
  // inside a render).
  static StrObj* take_str(std::size_t n) noexcept {
    Pools& t = tl_pools;
    if (current_budget() != nullptr) return nullptr;
    StrObj* o = nullptr;
    if (n > kSmallString && (o = t.strs.pop())) t.bytes -= o->text.capacity();
    else o = t.small_strs.pop();  // for a long string, saves the object
    return o ? revive(t, o) : nullptr;
  }
  static ListObj* take_list() noexcept { return take(tl_pools.lists, sizeof(Value)); }
  static DictObj* take_dict() noexcept { return take(tl_pools.dicts, sizeof(std::pair<std::string, Value>)); }

 private:
  static constexpr std::size_t kSmallString = 15;  // std::string's own buffer

  // A LIFO of kept objects, linked through a vector kept as long as the thread.
  template <class T>
  struct Stack {
    T** items;
    std::size_t size, cap;
    bool empty() const noexcept { return size == 0; }
    T* pop() noexcept { return size ? items[--size] : nullptr; }
    void push(T* o) noexcept { items[size++] = o; }
  };
  // Trivially destructible, so it is usable in any thread_local destructor;
  // `release` frees what it keeps at the thread's exit.
  struct Pools {
    Stack<StrObj> small_strs, strs;
    Stack<ListObj> lists;
    Stack<DictObj> dicts;
    std::size_t count, bytes;
    bool armed, closed;
  };
  struct Release {
    bool armed = false;
    ~Release() noexcept {
      Pools& t = tl_pools;
      t.closed = true;
      while (StrObj* o = t.small_strs.pop()) delete o;
      while (StrObj* o = t.strs.pop()) delete o;
      while (ListObj* o = t.lists.pop()) delete o;
      while (DictObj* o = t.dicts.pop()) delete o;
      for (void* a : {static_cast<void*>(t.small_strs.items), static_cast<void*>(t.strs.items),
                      static_cast<void*>(t.lists.items), static_cast<void*>(t.dicts.items)})
        std::free(a);
    }
  };
  static TOKFEED_TLS Pools tl_pools;
  static TOKFEED_TLS Release tl_release;

  // Makes the stacks room for kMaxObjects each, once per thread (malloc,
  // so that no budget ever sees them).
  static void open(Pools& t) noexcept {
    if (t.armed) return;
    auto room = [](auto& st) {
      st.items = static_cast<std::remove_reference_t<decltype(*st.items)>*>(std::malloc(kMaxObjects * sizeof(void*)));
      st.size = 0;
      st.cap = kMaxObjects;
    };
    room(t.small_strs), room(t.strs), room(t.lists), room(t.dicts);
    if (!t.small_strs.items || !t.strs.items || !t.lists.items || !t.dicts.items) std::abort();
    tl_release.armed = true;  // constructs it: the thread's exit runs its destructor
    t.armed = true;
  }
  template <class T>
  static T* revive(Pools& t, T* o) noexcept {  // one reference: the caller's
    --t.count;
    o->refs_.store(1, std::memory_order_relaxed);
    return o;
  }
  static std::size_t capacity(const ListObj& o) noexcept { return o.items.capacity(); }
  static std::size_t capacity(const DictObj& o) noexcept { return o.unread_items().capacity(); }
  template <class T>
  static T* take(Stack<T>& st, std::size_t item) noexcept {
    Pools& t = tl_pools;
    if (current_budget() != nullptr) return nullptr;
    T* o = st.pop();
    if (!o) return nullptr;
    t.bytes -= capacity(*o) * item;
    return revive(t, o);
  }
};

TOKFEED_TLS Recycler::Pools Recycler::tl_pools;
TOKFEED_TLS Recycler::Release Recycler::tl_release;

Value Value::recycled_str(std::string_view x) {
  Value v;
  v.kind = Kind::kStr;
  if (StrObj* o = Recycler::take_str(x.size())) {
    v.s = StrRef::adopt(o);
    o->text.clear();  // then append: no general replace
    o->text.append(x.data(), x.size());
  } else {
    v.s = StrRef::make(std::string(x));
  }
  return v;
}

Value Value::recycled_list() {
  Value v;
  v.kind = Kind::kList;
  if (ListObj* o = Recycler::take_list()) v.list = Ref<ListObj>::adopt(o);
  else v.list = Ref<ListObj>::make();
  return v;
}

Value Value::recycled_list(std::vector<Value> items) {
  Value v = recycled_list();
  v.list->items = std::move(items);
  return v;
}

Value Value::recycled_dict() {
  Value v;
  v.kind = Kind::kDict;
  if (DictObj* o = Recycler::take_dict()) v.dict = Ref<DictObj>::adopt(o);
  else v.dict = Ref<DictObj>::make();
  return v;
}

void RefCounted::destroy(const RefCounted* p) noexcept {
  if (Recycler::keep(p)) return;
  switch (p->type_) {
    case Type::kStr: delete static_cast<const StrObj*>(p); return;
    case Type::kList: delete static_cast<const ListObj*>(p); return;
    case Type::kDict: delete static_cast<const DictObj*>(p); return;
    case Type::kFunc: delete static_cast<const FuncObj*>(p); return;
  }
}

std::string_view type_name(const Value& v) noexcept {
  switch (v.kind) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kStr: return "str";
    case Kind::kList:
      if (v.view) return v.view == 1 ? "dict_keys" : v.view == 2 ? "dict_values" : v.view == 3 ? "dict_items" : "range";
      return v.gen ? "generator" : v.tuple ? "tuple" : "list";
    case Kind::kDict: return v.ns ? "Namespace" : "dict";
    case Kind::kFunc: return "function";
  }
  return "?";
}

namespace {

double as_double(const Value& v) {
  switch (v.kind) {
    case Kind::kBool: return v.b ? 1.0 : 0.0;
    case Kind::kInt: return static_cast<double>(v.i);
    default: return v.f;
  }
}

bool int_like(const Value& v) { return v.kind == Kind::kInt || v.kind == Kind::kBool; }
int64_t as_int(const Value& v) { return v.kind == Kind::kBool ? (v.b ? 1 : 0) : v.i; }

}  // namespace

bool equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (int_like(a) && int_like(b)) return as_int(a) == as_int(b);
    return as_double(a) == as_double(b);
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Kind::kUndefined:
    case Kind::kNone: return true;
    case Kind::kStr: return *a.s == *b.s;
    case Kind::kList: {
      if (a.gen || b.gen) return a.list == b.list;
      if (a.is_range() || b.is_range()) {  // ranges equal as sequences, nothing else
        if (a.view != b.view) return false;
        const auto &x = a.list->items, &y = b.list->items;
        return x.size() == y.size() &&
               std::equal(x.begin(), x.end(), y.begin(), [](const Value& p, const Value& q) { return p.i == q.i; });
      }
      if (a.view || b.view) {  // keys and items compare as sets, values by identity
        if (a.view != b.view || a.view == 2) return a.list == b.list;
        const auto &x = a.list->items, &y = b.list->items;
        if (x.size() != y.size()) return false;
        for (const Value& v : x)
          if (std::none_of(y.begin(), y.end(), [&](const Value& w) { return equal(v, w); })) return false;
        return true;
      }
      if (a.tuple != b.tuple) return false;
      const auto &x = a.list->items, &y = b.list->items;
      if (x.size() != y.size()) return false;
      for (std::size_t i = 0; i < x.size(); ++i)
        if (!equal(x[i], y[i])) return false;
      return true;
    }
    case Kind::kDict: {
      if (a.ns || b.ns) return a.dict == b.dict;
      const auto &x = a.dict->items(), &y = b.dict->items();
      if (x.size() != y.size()) return false;
      for (const auto& [k, v] : x) {
        const Value* o = b.dict->find(k);
        if (!o || !equal(v, *o)) return false;
      }
      return true;
    }
    case Kind::kFunc: return a.fn == b.fn;
    default: return false;
  }
}

bool less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (int_like(a) && int_like(b)) return as_int(a) < as_int(b);
    return as_double(a) < as_double(b);
  }
  if (a.is_str() && b.is_str()) return *a.s < *b.s;  // UTF-8 byte order is code point order
  if (a.is_seq() && b.is_seq() && a.tuple == b.tuple) {
    const auto &x = a.list->items, &y = b.list->items;
    for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!equal(x[i], y[i])) return less(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  throw Error("'<' not supported between instances of '" + std::string(type_name(a)) + "' and '" +
              std::string(type_name(b)) + "'");
}

void append_float(double f, std::string& out) {
  if (std::isnan(f)) {
    out += "nan";
    return;
  }
  if (std::isinf(f)) {
    out += f < 0 ? "-inf" : "inf";
    return;
  }
  // Shortest round-trip digits, then Python's repr layout: fixed notation
  // for exponents in [-4, 16), else d.ddde+XX.
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, f, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  std::size_t e = sci.find('e');
  std::string mant = sci.substr(0, e);
  int exp = std::stoi(sci.substr(e + 1));
  bool neg = mant[0] == '-';
  if (neg) mant.erase(0, 1);
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  if (neg) out += '-';
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out += "0.";
      out.append(static_cast<std::size_t>(-exp - 1), '0');
      out += digits;
    } else {
      std::size_t ip = static_cast<std::size_t>(exp) + 1;
      if (digits.size() <= ip) {
        out += digits;
        out.append(ip - digits.size(), '0');
        out += ".0";
      } else {
        out += digits.substr(0, ip);
        out += '.';
        out += digits.substr(ip);
      }
    }
  } else {
    out += digits[0];
    if (digits.size() > 1) {
      out += '.';
      out += digits.substr(1);
    }
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    out += eb;
  }
}

void append_str(const Value& v, std::string& out) {
  switch (v.kind) {
    case Kind::kUndefined: return;
    case Kind::kNone: out += "None"; return;
    case Kind::kBool: out += v.b ? "True" : "False"; return;
    case Kind::kInt: out += std::to_string(v.i); return;
    case Kind::kFloat: append_float(v.f, out); return;
    case Kind::kStr: out += *v.s; return;
    default: append_repr(v, out);
  }
}

void append_through(const Value& v, std::string& out) {
  if (v.kind == Kind::kStr) out += v.s.through();
  else append_str(v, out);
}

std::string to_str(const Value& v) {
  if (v.is_str()) return *v.s;
  std::string out;
  append_str(v, out);
  return out;
}

namespace {

// The lists and dicts whose repr is being written on this thread: one met
// again is written as Python writes it ([...], {...}), so a namespace that
// holds itself prints as jinja2 prints it.
thread_local std::vector<const void*> tl_repr_stack;

struct ReprEnter {
  bool again;
  explicit ReprEnter(const void* obj) {
    again = std::find(tl_repr_stack.begin(), tl_repr_stack.end(), obj) != tl_repr_stack.end();
    if (again) return;
    if (tl_repr_stack.size() >= static_cast<std::size_t>(kMaxNesting))
      throw Error("maximum recursion depth exceeded while getting the repr of an object");
    tl_repr_stack.push_back(obj);
  }
  ~ReprEnter() {
    if (!again) tl_repr_stack.pop_back();
  }
};

}  // namespace

void append_repr(const Value& v, std::string& out) {
  switch (v.kind) {
    case Kind::kStr:
      if (v.markup) out += "Markup(";
      py_repr(*v.s, out);
      if (v.markup) out += ')';
      return;
    case Kind::kList: {
      if (v.gen) {
        out += "<generator object>";
        return;
      }
      if (v.is_range()) {
        const int64_t* r = v.list->range;
        out += "range(" + std::to_string(r[0]) + ", " + std::to_string(r[1]);
        if (r[2] != 1) out += ", " + std::to_string(r[2]);
        out += ')';
        return;
      }
      if (v.view) {  // dict_keys([...]), as Python prints a view
        Value plain = v;
        plain.view = 0;
        out += type_name(v);
        out += '(';
        append_repr(plain, out);
        out += ')';
        return;
      }
      ReprEnter guard(v.list.get());
      if (guard.again) {
        out += v.tuple ? "(...)" : "[...]";
        return;
      }
      out += v.tuple ? '(' : '[';
      const auto& items = v.list->items;
      for (std::size_t i = 0; i < items.size(); ++i) {
        if (i) out += ", ";
        append_repr(items[i], out);
      }
      if (v.tuple && items.size() == 1) out += ',';
      out += v.tuple ? ')' : ']';
      return;
    }
    case Kind::kDict: {
      if (!v.ns && v.view == kLoopView) {  // jinja2's LoopContext repr
        const Value *i = v.dict->find("index"), *n = v.dict->find("length");
        out += "<LoopContext ";
        if (i) append_str(*i, out);
        out += '/';
        if (n) append_str(*n, out);
        out += '>';
        return;
      }
      if (v.ns && v.view == kSelfView) {
        out += "<TemplateReference None>";
        return;
      }
      if (v.ns && v.view == kCyclerView) {
        out += "<jinja2.utils.Cycler object>";
        return;
      }
      if (v.ns) out += "<Namespace ";
      ReprEnter guard(v.dict.get());
      if (guard.again) {
        out += v.ns ? "{...}>" : "{...}";
        return;
      }
      out += '{';
      bool first = true;
      for (const auto& [k, x] : v.dict->items()) {
        if (!first) out += ", ";
        first = false;
        append_repr(v.dict->key(k), out);
        out += ": ";
        append_repr(x, out);
      }
      out += '}';
      if (v.ns) out += '>';
      return;
    }
    case Kind::kFunc: out += "<function " + v.fn->name + ">"; return;
    case Kind::kUndefined: out += "Undefined"; return;
    default: append_str(v, out);
  }
}

std::size_t DictObj::indexed(std::string_view key) const {
  for (int pass = 0; pass < 2; ++pass) {
    if (index_size_ != items_.size() || pass == 1) {
      index_.clear();
      index_.reserve(items_.size());
      for (std::size_t i = 0; i < items_.size(); ++i) index_.emplace(items_[i].first, i);  // first of duplicates wins
      index_size_ = items_.size();
    }
    auto it = index_.find(key);
    if (it == index_.end()) return items_.size();
    if (it->second < items_.size() && items_[it->second].first == key) return it->second;
  }
  return items_.size();
}

std::string str_key(std::string_view s) {
  if (s.empty() || s[0] != '\x01') return std::string(s);
  std::string k = "\x01s";
  k += s;
  return k;
}

std::string key_of(const Value& v) {
  switch (v.kind) {
    case Kind::kStr: return str_key(*v.s);
    case Kind::kBool: return std::string("\x01i") + (v.b ? "1" : "0");
    case Kind::kInt: return "\x01i" + std::to_string(v.i);
    case Kind::kFloat:
      // A float equal to an int is that int's key (Python's hash and ==).
      if (v.f == std::floor(v.f) && v.f >= -9223372036854775808.0 && v.f < 9223372036854775808.0)
        return "\x01i" + std::to_string(static_cast<int64_t>(v.f));
      {
        std::string r = "\001f";  // octal: "\x01f" would be one char, 0x1F
        append_float(v.f, r);
        return r;
      }
    case Kind::kNone: return "\x01n";
    case Kind::kList:
      // A tuple of hashable items: each item's key after its length.
      if (v.tuple && v.is_seq()) {
        std::string r = "\x01t";
        for (const Value& x : v.list->items) {
          std::string k = key_of(x);
          r += std::to_string(k.size());
          r += ':';
          r += k;
        }
        return r;
      }
      [[fallthrough]];
    default: throw Error("unhashable type: '" + std::string(type_name(v)) + "'");
  }
}

bool hashable(const Value& v) {
  switch (v.kind) {
    case Kind::kStr:
    case Kind::kBool:
    case Kind::kInt:
    case Kind::kFloat:
    case Kind::kNone: return true;
    case Kind::kList:
      if (!v.tuple || !v.is_seq()) return false;
      for (const Value& x : v.list->items)
        if (!hashable(x)) return false;
      return true;
    default: return false;
  }
}

Value key_value(const std::string& key) {
  if (key.empty() || key[0] != '\x01') return Value::str(key);
  char tag = key.size() > 1 ? key[1] : 's';
  const char* first = key.data() + std::min<std::size_t>(2, key.size());
  const char* last = key.data() + key.size();
  if (tag == 'i') {
    int64_t i = 0;
    if (std::from_chars(first, last, i).ec == std::errc()) return Value::integer(i);
  } else if (tag == 'f') {
    std::string digits(first, last);
    char* end = nullptr;
    double f = std::strtod(digits.c_str(), &end);
    if (end && *end == '\0' && !digits.empty()) return Value::real(f);
  } else if (tag == 'n') {
    return Value::none();
  } else if (tag == 't') {
    // A tuple key whose object was not kept (key_of's encoding read back).
    std::vector<Value> items;
    const char* p = first;
    while (p < last) {
      std::size_t n = 0;
      auto r = std::from_chars(p, last, n);
      if (r.ec != std::errc() || r.ptr == last || *r.ptr != ':' || n > static_cast<std::size_t>(last - r.ptr - 1))
        return Value::str(std::string(first, last));
      p = r.ptr + 1;
      items.push_back(key_value(std::string(p, p + n)));
      p += n;
    }
    return Value::new_list(std::move(items), true);
  }
  // 's' (a string key that starts with U+0001), or anything else: the text.
  return Value::str(std::string(first, last));
}

Value DictObj::key(const std::string& k) const {
  look();
  if (!key_objs_.empty() && k.size() > 1 && k[0] == '\x01' && (k[1] == 'i' || k[1] == 't'))
    for (const auto& [stored, obj] : key_objs_)
      if (stored == k) return obj;
  return key_value(k);
}

void DictObj::set_key(const Value& key, Value v) {
  std::string k = key_of(key);
  const std::size_t n = items_.size();
  set(k, std::move(v));
  if (items_.size() > n && (key.kind == Kind::kBool || (key.kind == Kind::kFloat && k[1] == 'i') || key.is_list()))
    key_objs_.emplace_back(std::move(k), key);
}

void DictObj::set_from(const DictObj& src, const std::string& k, Value v) {
  const std::size_t n = items_.size();
  set(k, std::move(v));
  if (items_.size() > n && !src.key_objs().empty()) {
    Value obj = src.key(k);
    if (obj.kind == Kind::kBool || obj.kind == Kind::kFloat || obj.is_list()) key_objs_.emplace_back(k, std::move(obj));
  }
}

std::string_view key_json(const DictObj& d, const std::string& k, std::string& buf) {
  if (k.size() > 1 && k[0] == '\x01' && k[1] == 't')
    throw Error("keys must be str, int, float, bool or None, not tuple");
  if (!d.key_objs().empty() || (k.size() > 1 && k[0] == '\x01' && k[1] == 'f')) {
    Value obj = d.key(k);
    if (obj.kind == Kind::kBool) return obj.b ? "true" : "false";
    if (obj.kind == Kind::kFloat) {
      if (std::isnan(obj.f)) return "NaN";
      if (std::isinf(obj.f)) return obj.f > 0 ? "Infinity" : "-Infinity";
      buf.clear();
      append_float(obj.f, buf);
      return buf;
    }
  }
  return key_json(k);
}

std::string_view key_json(std::string_view key) {
  if (key.empty() || key[0] != '\x01') return key;
  if (key.size() > 1 && key[1] == 'n') return "null";
  if (key.size() > 1 && key[1] == 't') throw Error("keys must be str, int, float, bool or None, not tuple");
  return key.substr(std::min<std::size_t>(2, key.size()));
}

void html_escape(std::string_view s, std::string& out) {
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
}

Value markup(std::string s) {
  Value v = Value::str(std::move(s));
  v.markup = true;
  return v;
}

Value markup_escape(const Value& v) {
  if (v.is_str() && v.markup) return v;
  std::string out;
  if (v.is_str()) html_escape(*v.s, out);
  else html_escape(to_str(v), out);
  return markup(std::move(out));
}

}  // namespace tokfeed::tmpl
