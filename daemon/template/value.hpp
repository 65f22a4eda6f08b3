// Values of the chat-template engine: Python's data model as Jinja templates
// in transformers' environment see it (docs/chat_templates.md).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "template/skeleton.hpp"

namespace tokfeed::tmpl {

// Whether a[0:n] == b[0:n]. Names and keys are short: up to 16 bytes they
// are compared as two (possibly overlapping) words, without a call to
// memcmp.
inline bool bytes_equal(const char* a, const char* b, std::size_t n) noexcept {
  if (n >= 8) {
    if (n > 16) return std::memcmp(a, b, n) == 0;
    uint64_t x, y, u, v;
    std::memcpy(&x, a, 8);
    std::memcpy(&y, b, 8);
    std::memcpy(&u, a + n - 8, 8);
    std::memcpy(&v, b + n - 8, 8);
    return ((x ^ y) | (u ^ v)) == 0;
  }
  if (n >= 4) {
    uint32_t x, y, u, v;
    std::memcpy(&x, a, 4);
    std::memcpy(&y, b, 4);
    std::memcpy(&u, a + n - 4, 4);
    std::memcpy(&v, b + n - 4, 4);
    return ((x ^ y) | (u ^ v)) == 0;
  }
  for (std::size_t i = 0; i < n; ++i)
    if (a[i] != b[i]) return false;
  return true;
}

// A render or load error; `where` is "line:column" when known.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

// A render stopped by a limit (steps, memory, the record's budget, the
// daemon stopping), not by the template.
class LimitError : public Error {
 public:
  explicit LimitError(const std::string& msg) : Error(msg) {}
};

enum class Kind : uint8_t { kUndefined, kNone, kBool, kInt, kFloat, kStr, kList, kDict, kFunc };

struct Value;
struct Interp;
struct ListObj;
struct DictObj;
struct FuncObj;

// What a Value points at (a string, list, dict or function), reference
// counted. The count is atomic: a parsed template's literals are read by
// renders on several threads at once. A copied object starts a count of its
// own. The type is kept so that any reference frees it as what it is.
class RefCounted {
 public:
  enum class Type : uint8_t { kStr, kList, kDict, kFunc };
  explicit RefCounted(Type t) noexcept : type_(t) {}
  RefCounted(const RefCounted& o) noexcept : type_(o.type_) {}
  RefCounted& operator=(const RefCounted&) noexcept { return *this; }
  void retain() const noexcept { refs_.fetch_add(1, std::memory_order_relaxed); }
  // Whether this is the only reference (a value that nothing else holds).
  bool unique() const noexcept { return refs_.load(std::memory_order_acquire) == 1; }
  uint32_t references() const noexcept { return refs_.load(std::memory_order_acquire); }
  // Drops a reference; frees the object with its last.
  void release() const noexcept {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) destroy(this);
  }

 private:
  friend class Recycler;                              // value.cpp: revives kept objects
  static void destroy(const RefCounted* p) noexcept;  // value.cpp
  mutable std::atomic<uint32_t> refs_{1};
  Type type_;
};

// An owning pointer to a RefCounted object, one word wide. Every kind of
// reference holds the object as a RefCounted*, so a Value keeps them in one
// union and copies or frees whichever it holds through any of them.
class RefBase {
 public:
  RefBase() noexcept = default;
  RefBase(std::nullptr_t) noexcept {}
  RefBase(const RefBase& o) noexcept : p_(o.p_) {
    if (p_) p_->retain();
  }
  RefBase(RefBase&& o) noexcept : p_(o.p_) { o.p_ = nullptr; }
  ~RefBase() {
    if (p_) p_->release();
  }
  RefBase& operator=(const RefBase& o) noexcept {
    if (o.p_) o.p_->retain();
    if (p_) p_->release();
    p_ = o.p_;
    return *this;
  }
  // (Two references to one object each hold a count: assigning one to the
  // other drops the count the assigned-to one held.)
  RefBase& operator=(RefBase&& o) noexcept {
    if (this == &o) return *this;
    RefCounted* old = p_;
    p_ = o.p_;
    o.p_ = nullptr;
    if (old) old->release();
    return *this;
  }
  explicit operator bool() const noexcept { return p_ != nullptr; }
  void reset() noexcept {
    if (p_) p_->release();
    p_ = nullptr;
  }
  const RefCounted* raw() const noexcept { return p_; }

 protected:
  RefCounted* p_ = nullptr;
};

// shared_ptr's interface over a RefBase.
template <class T>
class Ref : public RefBase {
 public:
  using RefBase::RefBase;
  // A new T, its only reference.
  template <class... A>
  static Ref make(A&&... args) {
    Ref r;
    r.p_ = new T(std::forward<A>(args)...);
    return r;
  }
  // Takes over `obj`'s one reference (an object no other Ref holds).
  static Ref adopt(T* obj) noexcept {
    Ref r;
    r.p_ = obj;
    return r;
  }
  T* get() const noexcept { return static_cast<T*>(p_); }
  T* operator->() const noexcept { return get(); }
  T& operator*() const noexcept { return *get(); }
  friend bool operator==(const Ref& a, const Ref& b) noexcept { return a.p_ == b.p_; }
  friend bool operator==(const Ref& a, std::nullptr_t) noexcept { return a.p_ == nullptr; }
};

// A Value's string: immutable while a value holds it, shared by the values
// that copy it (only an object that no value holds any more is refilled:
// Value::recycled_str).
struct StrObj : RefCounted {
  explicit StrObj(std::string t) noexcept : RefCounted(Type::kStr), text(std::move(t)) {}
  std::string text;
};

// A reference to a StrObj, read as a pointer to its std::string.
class StrRef : public RefBase {
 public:
  using RefBase::RefBase;
  static StrRef make(std::string t) {
    StrRef r;
    r.p_ = new StrObj(std::move(t));
    return r;
  }
  // Takes over `obj`'s one reference (an object no other reference holds).
  static StrRef adopt(StrObj* obj) noexcept {
    StrRef r;
    r.p_ = obj;
    return r;
  }
  // The text, read (template/skeleton.hpp: a skeleton's render notes the
  // read of a sentinel).
  const std::string* get() const noexcept { return p_ ? &read() : nullptr; }
  const std::string* operator->() const noexcept { return &read(); }
  const std::string& operator*() const noexcept { return read(); }
  // The text copied on as it is, to the output or into a concatenation,
  // which a skeleton's render counts and does not take for a read.
  const std::string& through() const noexcept {
    skeleton::saw_copy();
    return static_cast<const StrObj*>(p_)->text;
  }
  // The text, for what does not depend on its bytes (its size reserved
  // ahead, whether it is empty: a sentinel and the string it stands for
  // are both non-empty).
  const std::string& unread() const noexcept { return static_cast<const StrObj*>(p_)->text; }
  uint32_t references() const noexcept { return p_->references(); }
  // The text itself, to append to in place: for a caller that knows no
  // other reference can see the change (references()).
  std::string& unshared_text() const noexcept { return static_cast<StrObj*>(p_)->text; }
  friend bool operator==(const StrRef& a, const StrRef& b) noexcept { return a.p_ == b.p_; }
  friend bool operator==(const StrRef& a, std::nullptr_t) noexcept { return a.p_ == nullptr; }

 private:
  const std::string& read() const noexcept {
    const std::string& t = static_cast<const StrObj*>(p_)->text;
    if (skeleton::tl_watch) [[unlikely]]
      skeleton::saw_read(t);
    return t;
  }
};

// Positional and keyword arguments of a call.
struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
};

constexpr uint8_t kRangeView = 4;   // Value::view of a range
constexpr uint8_t kLoopView = 2;    // Value::view of a dict that is a for loop's `loop` (printed <LoopContext i/n>)
constexpr uint8_t kCyclerView = 1;  // Value::view of a namespace that is a cycler() (no attribute assignment)
// Value::view of a namespace that is `self`, the template's blocks (jinja2's TemplateReference).
constexpr uint8_t kSelfView = 3;

struct Value {
  Kind kind = Kind::kUndefined;
  bool tuple = false;  // a list that is a Python tuple (repr with parentheses)
  bool ns = false;     // a dict that is a namespace() (attribute assignment allowed)
  bool gen = false;    // a list that is a Python iterator (map, select, ...): truthy, no len, used up once iterated
  // A list that is a dict view (1 dict_keys, 2 dict_values, 3 dict_items: no
  // index, no JSON) or a range (kRangeView: indexable, sliceable into a
  // range, not JSON; ListObj::range holds its start, stop and step).
  uint8_t view = 0;
  // A str that is markupsafe's Markup (the `safe` and `escape` filters'):
  // `+`, `%`, `*` and its str methods keep it Markup and escape the plain
  // str operands and arguments they take in (eval.cpp arith, strmethods.cpp).
  bool markup = false;
  union {
    bool b;
    int64_t i;
    double f;
  };
  // What the value points at, by kind (one word: the member its kind
  // names holds it; null for the other kinds). Str: the text; Undefined: the
  // name that was looked up (for messages), or null.
  union {
    StrRef s;
    Ref<ListObj> list;
    Ref<DictObj> dict;
    Ref<FuncObj> fn;
  };

  Value() noexcept : i(0), s() {}
  // The tag, the flags and the scalar are copied as the two words they
  // occupy (kHead bytes), the reference as whichever object it holds
  // (every reference member is a RefBase).
  Value(const Value& o) noexcept : s(o.s) { set_head(o.head()); }
  Value(Value&& o) noexcept : s(std::move(o.s)) { set_head(o.head()); }
  Value& operator=(const Value& o) noexcept {
    set_head(o.head());
    s = o.s;
    return *this;
  }
  Value& operator=(Value&& o) noexcept {
    set_head(o.head());
    s = std::move(o.s);
    return *this;
  }
  ~Value() { s.~StrRef(); }
  static Value undefined(std::string hint = {});
  // The same with the text of a str value as its hint, shared, not copied.
  static Value undefined(const StrRef& hint) {
    Value v;
    if (hint && !hint->empty()) v.s = hint;
    return v;
  }
  static Value none() {
    Value v;
    v.kind = Kind::kNone;
    return v;
  }
  static Value boolean(bool x) {
    Value v;
    v.kind = Kind::kBool;
    v.b = x;
    return v;
  }
  static Value integer(int64_t x) {
    Value v;
    v.kind = Kind::kInt;
    v.i = x;
    return v;
  }
  static Value real(double x) {
    Value v;
    v.kind = Kind::kFloat;
    v.f = x;
    return v;
  }
  static Value str(std::string x);
  static Value new_list(std::vector<Value> items = {}, bool tuple = false);
  static Value new_dict();
  static Value func(std::string name, std::function<Value(Interp&, Args&)> call);
  // str(), new_list() and new_dict() made, outside a render, from the
  // objects that values freed outside a render left on this thread, their
  // buffers kept (a record's JSON builds the same shapes record after
  // record): no allocation where one of the right size is kept. Inside a
  // render (a budget installed, template/budget.hpp) they are str(),
  // new_list() and new_dict().
  static Value recycled_str(std::string_view x);
  static Value recycled_list();
  static Value recycled_dict();
  // new_list(items) with a kept object (outside a render) and `items`'
  // own buffer: the list and its buffer are what new_list() makes (a
  // render that frees them counts the same bytes), without the object's
  // allocation.
  static Value recycled_list(std::vector<Value> items);

  bool is_undefined() const { return kind == Kind::kUndefined; }
  bool is_none() const { return kind == Kind::kNone; }
  bool is_str() const { return kind == Kind::kStr; }
  bool is_list() const { return kind == Kind::kList; }
  bool is_range() const { return kind == Kind::kList && view == kRangeView; }
  // A list or tuple proper: indexable, sliceable (not an iterator or a view).
  bool is_seq() const { return kind == Kind::kList && !gen && !view; }
  bool is_dict() const { return kind == Kind::kDict; }
  bool is_number() const { return kind == Kind::kInt || kind == Kind::kFloat || kind == Kind::kBool; }
  const std::string& text() const { return *s; }  // kStr only

 private:
  static constexpr std::size_t kHead = 16;  // the bytes before the reference: tag, flags, scalar
  struct Head {
    uint64_t w[2];
  };
  Head head() const noexcept {
    Head h;
    std::memcpy(&h, static_cast<const void*>(this), kHead);
    return h;
  }
  void set_head(const Head& h) noexcept { std::memcpy(static_cast<void*>(this), &h, kHead); }
};

static_assert(sizeof(Value) == 24, "a Value is a tag, a scalar and one reference");
static_assert(offsetof(Value, s) == 16, "a Value's tag, flags and scalar are its first two words");

struct ListObj : RefCounted {
  ListObj() noexcept : RefCounted(Type::kList) {}
  std::vector<Value> items;
  int64_t range[3] = {0, 0, 1};  // a range's start, stop, step (Value::view == kRangeView)
  // A groupby item (jinja2's _GroupTuple): a 2-tuple whose items are also
  // its attributes `grouper` and `list`.
  bool group = false;
};

// An insertion-ordered dict with string keys (what JSON and templates build).
// A big one (a record may hold 100k keys) finds keys through a hash index,
// built on first need and rebuilt when `items` changed size behind its back.
//
// A skeleton's dict may stand for a record's whose keys and values are not
// part of the record's shape (a tool call's arguments: docs/chat_templates.md,
// "One render per shape"): its `hole` is then the record's dict's leaf, and
// any look at its items or keys is a read of the hole (skeleton::saw_hole).
// Only its kind and that it is not empty (both in the shape) are not.
struct DictObj : RefCounted {
  static constexpr uint32_t kNoHole = ~0u;
  DictObj() noexcept : RefCounted(Type::kDict) {}
  // The items, read.
  std::vector<std::pair<std::string, Value>>& items() noexcept {
    look();
    return items_;
  }
  const std::vector<std::pair<std::string, Value>>& items() const noexcept {
    look();
    return items_;
  }
  // The items, for what does not depend on them: a skeleton's own walk
  // (template/skeleton_ops.cpp) and the value pool.
  const std::vector<std::pair<std::string, Value>>& unread_items() const noexcept { return items_; }
  bool empty() const noexcept { return items_.empty(); }
  uint32_t hole = kNoHole;
  // The keys whose object is not what their stored form reads back as: a
  // bool or a float equal to an int (True and 1.0 are the key 1; Python
  // keeps the object first inserted for a key). Empty in nearly every dict.
  // (Read through key_objs(), like the items.)
  std::vector<std::pair<std::string, Value>>& key_objs() noexcept {
    look();
    return key_objs_;
  }
  const std::vector<std::pair<std::string, Value>>& key_objs() const noexcept {
    look();
    return key_objs_;
  }
  // The object of the stored key `k` (key_value(k) but for key_objs).
  Value key(const std::string& k) const;
  // set() of the key object `key`, keeping its object where it is a new key.
  void set_key(const Value& key, Value v);
  // set() of `src`'s key `k`, its object along.
  void set_from(const DictObj& src, const std::string& k, Value v);
  // Drops the index, for a caller that rewrites `items` in place.
  void reindex() noexcept {
    if (!index_.empty()) index_.clear();
    index_size_ = 0;
  }
  // Empties the dict, keeping its buffer (and makes it no skeleton's).
  void clear() noexcept {
    items_.clear();
    key_objs_.clear();
    if (!index_.empty()) index_.clear();
    index_size_ = 0;
    hole = kNoHole;
  }
  // Whether the key `k` is `key`: keys of one length mostly differ in their
  // first byte, which rules them out at once.
  static bool same_key(const std::string& k, std::string_view key) noexcept {
    return k.size() == key.size() && (key.empty() || (k[0] == key[0] && bytes_equal(k.data(), key.data(), k.size())));
  }
  const Value* find(std::string_view key) const {
    look();
    if (items_.size() <= kLinear) {
      for (const auto& [k, v] : items_)
        if (same_key(k, key)) return &v;
      return nullptr;
    }
    std::size_t at = indexed(key);
    return at < items_.size() ? &items_[at].second : nullptr;
  }
  void set(std::string_view key, Value v) {
    look();
    if (items_.size() <= kLinear) {
      for (auto& [k, old] : items_)
        if (same_key(k, key)) {
          old = std::move(v);
          return;
        }
    } else if (std::size_t at = indexed(key); at < items_.size()) {
      items_[at].second = std::move(v);
      return;
    }
    items_.emplace_back(std::string(key), std::move(v));
    // A small dict has no index; a big one's stays complete as it grows.
    if (index_size_ != 0 && index_size_ + 1 == items_.size())
      index_.emplace(items_.back().first, items_.size() - 1), ++index_size_;
  }

 private:
  void look() const noexcept {
    if (hole != kNoHole) [[unlikely]]
      skeleton::saw_hole(hole);
  }
  static constexpr std::size_t kLinear = 16;
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
  };
  // The position of `key`, or items_.size().
  std::size_t indexed(std::string_view key) const;
  std::vector<std::pair<std::string, Value>> items_;
  std::vector<std::pair<std::string, Value>> key_objs_;
  mutable std::unordered_map<std::string, std::size_t, Hash, std::equal_to<>> index_;
  mutable std::size_t index_size_ = 0;  // items_.size() when index_ was last complete
};

struct FuncObj : RefCounted {
  FuncObj() noexcept : RefCounted(Type::kFunc) {}
  std::string name;
  // The {% macro %} statement of a macro defined at the top level (it
  // closes over nothing): two renders' are the same function.
  const void* macro = nullptr;
  // The {% macro %} or {% call %} statement (a Stmt) of a macro or a call
  // block's caller, whose attributes (name, arguments, ...) it reads.
  const void* def = nullptr;
  std::function<Value(Interp&, Args&)> call;
};

// How deep repr() and tojson go into nested lists and dicts (Python's
// recursion limit): deeper is an error, never a crash.
constexpr int kMaxNesting = 1000;

// markupsafe's escape(): & < > " ' as HTML entities, appended to `out`.
void html_escape(std::string_view s, std::string& out);
// Markup(s): the str `s` marked.
Value markup(std::string s);
// Markup.escape(v): `v` itself when it is Markup, else its str() escaped.
Value markup_escape(const Value& v);
// Python's type name, as errors name it.
std::string_view type_name(const Value& v) noexcept;
inline bool truthy(const Value& v) noexcept {
  switch (v.kind) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return v.b;
    case Kind::kInt: return v.i != 0;
    case Kind::kFloat: return v.f != 0.0;
    case Kind::kStr: return !v.s.unread().empty();
    case Kind::kList: return v.gen || !v.list->items.empty();
    case Kind::kDict: return v.ns || !v.dict->empty();
    case Kind::kFunc: return true;
  }
  return false;
}
// Python's ==.
bool equal(const Value& a, const Value& b);
// Python's <, or an Error for unorderable types.
bool less(const Value& a, const Value& b);
// str(v) appended to `out` (Undefined renders empty).
void append_str(const Value& v, std::string& out);
// The same for an operation that copies a str on as it is (`~`, output):
// StrRef::through().
void append_through(const Value& v, std::string& out);
std::string to_str(const Value& v);
// repr(v) appended to `out`.
void append_repr(const Value& v, std::string& out);
// Python's repr of a float.
void append_float(double f, std::string& out);
// Dict keys are strings; a key of another type (an int, a float, None) is
// stored encoded after a \x01 byte, so `{1024: x}` keeps an int key, and a
// string key that itself starts with \x01 is stored after "\x01s". No key is
// ever converted with an exception: a malformed one is its text.
std::string key_of(const Value& v);
// Whether Python can hash `v` as a dict key (a tuple of hashable items too).
bool hashable(const Value& v);
// The stored form of the string key `s` (what key_of(Value::str(s)) gives).
std::string str_key(std::string_view s);
Value key_value(const std::string& key);
// The key as json.dumps writes it (an int key 1 becomes "1").
std::string_view key_json(std::string_view key);
// The key `k` of `d` as json.dumps writes it (True becomes "true", 1.0
// "1.0"): in `k`, or in `buf`.
std::string_view key_json(const DictObj& d, const std::string& k, std::string& buf);

}  // namespace tokfeed::tmpl
