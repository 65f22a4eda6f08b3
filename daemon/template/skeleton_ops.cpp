#include "template/skeleton_ops.hpp"

#include <algorithm>

#include "template/parser.hpp"
#include "template/pystr.hpp"

namespace tokfeed::tmpl::skeleton {

namespace {

// Filters that are functions of their subject and arguments alone (no
// environment, no autoescape).
bool plain_filter(FilterFn f) {
  static const FilterFn kPlain[] = {find_filter("trim"),  find_filter("upper"),      find_filter("lower"),
                                    find_filter("title"), find_filter("capitalize"), find_filter("length"),
                                    find_filter("count"), find_filter("string"),     find_filter("first"),
                                    find_filter("last"),  find_filter("wordcount"),  find_filter("tojson")};
  return f && std::find(std::begin(kPlain), std::end(kPlain), f) != std::end(kPlain);
}

// The leaf of a str that is one whole sentinel, or -1.
int64_t whole(const Value& v, const Trace& t) {
  if (!v.is_str() || v.markup) return -1;
  const std::string& s = v.s.unread();
  uint32_t leaf;
  if (s.size() != kSentinelSize || find(s, 0, leaf) != 0 || leaf >= t.leaves.size()) return -1;
  return leaf;
}

// Arguments that hold no sentinel and nothing a sentinel could hide in.
bool plain(const Value& v) {
  switch (v.kind) {
    case Kind::kStr: {
      uint32_t leaf;
      return find(v.s.unread(), 0, leaf) == std::string::npos;
    }
    case Kind::kList:
    case Kind::kDict:
    case Kind::kFunc: return false;
    default: return true;
  }
}

bool plain(const Args& a) {
  return std::all_of(a.pos.begin(), a.pos.end(), [](const Value& v) { return plain(v); }) &&
         std::all_of(a.kw.begin(), a.kw.end(), [](const auto& kv) { return plain(kv.second); });
}

// Whether `v` is a list or dict whose strings are each one whole sentinel
// of a message's hole (a leaf before t.tools_first) or hold none, its keys
// and other values plain (no namespace, loop, generator or function);
// `first` is set to its first sentinel's leaf (where it is still -1).
// `left` bounds the values walked.
bool leaf_tree(const Value& v, const Trace& t, int64_t& first, int& left, int depth = 0) {
  if (--left < 0 || depth > 64) return false;
  switch (v.kind) {
    case Kind::kStr: {
      if (v.markup) return false;
      const int64_t leaf = whole(v, t);
      if (leaf >= 0 && static_cast<std::size_t>(leaf) >= t.tools_first) return false;
      if (leaf >= 0 && first < 0) first = leaf;
      return leaf >= 0 || plain(v);
    }
    case Kind::kList:
      if (v.gen || v.view || v.list->group) return false;
      for (const Value& x : v.list->items)
        if (!leaf_tree(x, t, first, left, depth + 1)) return false;
      return true;
    case Kind::kDict:
      if (v.dict->hole != DictObj::kNoHole) {
        // A record's dict whole (its leaf's value, not a string).
        const uint32_t leaf = v.dict->hole;
        if (leaf >= t.leaves.size() || leaf >= t.tools_first) return false;
        if (first < 0) first = leaf;
        return true;
      }
      if (v.ns || v.view || !v.dict->key_objs().empty()) return false;
      for (const auto& [k, x] : v.dict->items()) {
        uint32_t leaf;
        if (find(k, 0, leaf) != std::string::npos || !leaf_tree(x, t, first, left, depth + 1)) return false;
      }
      return true;
    case Kind::kFunc: return false;
    default: return true;
  }
}

// `v` (a leaf_tree) with each sentinel's string in its place: `leaf(k)`
// gives leaf k's, or throws where there is none.
template <class Leaf>
Value with_leaves(const Value& v, const Leaf& leaf) {
  switch (v.kind) {
    case Kind::kStr: {
      const std::string& s = v.s.unread();
      uint32_t l;
      return s.size() == kSentinelSize && find(s, 0, l) == 0 ? leaf(l) : v;
    }
    case Kind::kList: {
      std::vector<Value> items;
      items.reserve(v.list->items.size());
      for (const Value& x : v.list->items) items.push_back(with_leaves(x, leaf));
      Value r = Value::new_list(std::move(items));
      r.tuple = v.tuple;
      return r;
    }
    case Kind::kDict: {
      if (v.dict->hole != DictObj::kNoHole) return leaf(v.dict->hole);
      Value r = Value::new_dict();
      r.dict->items().reserve(v.dict->items().size());
      for (const auto& [k, x] : v.dict->items()) r.dict->items().emplace_back(k, with_leaves(x, leaf));
      return r;
    }
    default: return v;
  }
}

Interp& replay_interp() {
  static thread_local Interp in;
  return in;
}

// The operation on the record's string `subject`; throws as it does.
Value apply(const Op& op, const Value& subject) {
  // Its arguments, copied into buffers kept from call to call (a call may
  // take them apart).
  static thread_local Args args;
  args.pos.assign(op.args.pos.begin(), op.args.pos.end());
  args.kw.assign(op.args.kw.begin(), op.args.kw.end());
  switch (op.kind) {
    case Op::Kind::kMethod: return str_method(subject, op.name, args);
    case Op::Kind::kFilter: {
      // A bare tojson of a list or dict, as f_tojson writes it (without the
      // record's memo, which keeps the objects a render dumps).
      if (op.tree.kind != Kind::kUndefined) return Value::str(tojson(subject, false, nullptr, false, nullptr, nullptr));
      Value s = subject;
      return op.filter(replay_interp(), s, args);
    }
    case Op::Kind::kIn: return Value::boolean(contains(subject, args.pos[0]));
    case Op::Kind::kSlice: return slice(subject, args.pos[0], args.pos[1], args.pos[2]);
    case Op::Kind::kEqual: return Value::boolean(equal(subject.list->items[0], subject.list->items[1]));
  }
  return Value();
}

bool plain_str(const Value& v) { return v.is_str() && !v.markup; }

bool same_value(const Value& a, const Value& b) { return a.kind == b.kind && a.markup == b.markup && equal(a, b); }

// Whether two trees are the same objects (an equality's: its two operands).
bool same_tree(const Op& a, const Op& b) {
  if (a.tree.kind == Kind::kUndefined) return true;
  if (a.kind != Op::Kind::kEqual) return a.tree.s.raw() == b.tree.s.raw();
  const auto &x = a.tree.list->items, &y = b.tree.list->items;
  return x[0].s.raw() == y[0].s.raw() && x[1].s.raw() == y[1].s.raw();
}

// Whether a and b ask the same of the same leaf (with plain arguments).
bool same_question(const Op& a, const Op& b) {
  if (a.kind != b.kind || a.subject != b.subject || a.name != b.name || a.filter != b.filter ||
      a.args.pos.size() != b.args.pos.size() || a.args.kw.size() != b.args.kw.size() || a.tree.kind != b.tree.kind ||
      !same_tree(a, b))
    return false;
  for (std::size_t k = 0; k < a.args.pos.size(); ++k)
    if (!same_value(a.args.pos[k], b.args.pos[k])) return false;
  for (std::size_t k = 0; k < a.args.kw.size(); ++k)
    if (a.args.kw[k].first != b.args.kw[k].first || !same_value(a.args.kw[k].second, b.args.kw[k].second)) return false;
  return true;
}

// What the skeleton's render sees of an answer kept.
Value shown(const Op& op) {
  switch (op.answer) {
    case Op::Answer::kValue: return op.value;
    case Op::Answer::kEmpty: return Value::str(std::string());
    case Op::Answer::kLeaf: return Value::str(sentinel(op.first));
    case Op::Answer::kSame: return Value::str(sentinel(op.subject));
    case Op::Answer::kList: {
      std::vector<Value> items;
      uint32_t leaf = op.first;
      for (uint8_t a : op.items) {
        const auto answer = static_cast<Op::Answer>(a);
        items.push_back(Value::str(answer == Op::Answer::kLeaf   ? sentinel(leaf++)
                                   : answer == Op::Answer::kSame ? sentinel(op.subject)
                                                                 : std::string()));
      }
      return Value::new_list(std::move(items), op.tuple);
    }
  }
  return Value();
}

// An answer's string: the empty string, the subject's own, or a new leaf's.
Op::Answer string_answer(const Value& r, const Value& subject) {
  const std::string& s = r.s.unread();
  if (s.empty()) return Op::Answer::kEmpty;
  if (!subject.is_str()) return Op::Answer::kLeaf;  // a dump of a record's dict
  return r.s == subject.s || s == subject.s.unread() ? Op::Answer::kSame : Op::Answer::kLeaf;
}

// Records the answer `r` of `op` in `t` (new leaves for its strings), and
// gives what the skeleton's render sees. False for an answer of another
// kind (the operation then reads the sentinel).
bool keep(Trace& t, Op op, const Value& r, Value& out) {
  const Value subject = t.leaves[op.subject];  // a copy: t.leaves grows below
  switch (r.kind) {
    case Kind::kBool:
    case Kind::kInt:
    case Kind::kFloat:
    case Kind::kNone:
      op.answer = Op::Answer::kValue;
      op.value = r;
      out = r;
      break;
    case Kind::kStr:
      if (r.markup || t.leaves.size() >= kMaxLeaves) return false;
      op.answer = string_answer(r, subject);
      if (t.general && op.answer == Op::Answer::kSame) op.answer = Op::Answer::kLeaf;
      if (op.answer == Op::Answer::kLeaf) {
        op.first = static_cast<uint32_t>(t.leaves.size());
        t.leaves.push_back(r);
      }
      out = shown(op);
      break;
    case Kind::kList: {
      if (!r.is_seq() || r.list->group) return false;
      const auto& items = r.list->items;
      if (!std::all_of(items.begin(), items.end(), plain_str) || t.leaves.size() + items.size() > kMaxLeaves)
        return false;
      op.answer = Op::Answer::kList;
      op.first = static_cast<uint32_t>(t.leaves.size());
      op.tuple = r.tuple;
      for (const Value& x : items) {
        Op::Answer a = string_answer(x, subject);
        if (t.general && a == Op::Answer::kSame) a = Op::Answer::kLeaf;
        op.items.push_back(static_cast<uint8_t>(a));
        if (a == Op::Answer::kLeaf) t.leaves.push_back(x);
      }
      out = shown(op);
      break;
    }
    default: return false;
  }
  t.ops.push_back(std::move(op));
  return true;
}

bool ask(Op op, const Value& subject, Value& out) {
  Watch* w = tl_watch;
  if (!w || !w->trace) return false;
  Trace& t = *w->trace;
  static const FilterFn kToJson = find_filter("tojson");
  int64_t leaf = whole(subject, t);
  const bool dump = op.kind == Op::Kind::kFilter && op.filter == kToJson && op.args.pos.empty() && op.args.kw.empty();
  if (leaf < 0 && (dump || op.kind == Op::Kind::kEqual) && (subject.is_seq() || subject.is_dict())) {
    int left = 4096;
    if (!leaf_tree(subject, t, leaf, left)) return false;
    if (leaf >= 0) op.tree = subject;  // the same object asked again is the same question
  }
  if (leaf < 0 || !plain(op.args)) return false;
  op.subject = static_cast<uint32_t>(leaf);
  // Asked before (by this render or another of the record's): the same
  // answer, its strings the same leaves, so that the renders' texts agree
  // where the record's do.
  for (const Op& before : t.ops)
    if (same_question(before, op)) {
      out = shown(before);
      return true;
    }
  Value r;
  {
    // The record's string is not the skeleton's: its bytes are read freely.
    struct Unwatched {
      Watch* w = tl_watch;
      Unwatched() noexcept { tl_watch = nullptr; }
      ~Unwatched() { tl_watch = w; }
    } unwatched;
    try {
      r = op.tree.kind == Kind::kUndefined ? apply(op, t.leaves[op.subject])
                                           : apply(op, with_leaves(op.tree, [&](uint32_t l) { return t.leaves[l]; }));
    } catch (const Error&) {
      return false;  // the record's string fails it: the skeleton's read says so
    }
  }
  return keep(t, std::move(op), r, out);
}

}  // namespace

void saw_tree(const Value& v) {
  Watch* w = tl_watch;
  if (!w || w->reads.size() > kMaxLeaves) return;
  switch (v.kind) {
    case Kind::kStr: {
      const std::string& s = v.s.unread();
      uint32_t leaf;
      for (std::size_t at = find(s, 0, leaf); at != std::string::npos; at = find(s, at + kSentinelSize, leaf))
        w->reads.push_back(leaf);
      break;
    }
    case Kind::kList:
      for (const Value& x : v.list->items) saw_tree(x);
      break;
    case Kind::kDict:
      if (v.dict->hole != DictObj::kNoHole) {
        w->reads.push_back(v.dict->hole);
        break;
      }
      for (const auto& kv : v.dict->items()) saw_tree(kv.second);
      break;
    default: break;
  }
}

bool ask_method(const Value& subject, std::string_view name, const Args& args, Value& out) {
  Op op;
  op.kind = Op::Kind::kMethod;
  op.name = name;
  op.args = args;
  return ask(std::move(op), subject, out);
}

bool ask_filter(const Interp& in, FilterFn f, const Value& subject, const Args& args, Value& out) {
  if (in.autoescape || !plain_filter(f)) return false;
  Op op;
  op.kind = Op::Kind::kFilter;
  op.filter = f;
  op.args = args;
  return ask(std::move(op), subject, out);
}

bool ask_in(const Value& subject, const Value& needle, bool& out) {
  if (!plain_str(needle)) return false;
  Op op;
  op.kind = Op::Kind::kIn;
  op.args.pos.push_back(needle);
  Value r;
  if (!ask(std::move(op), subject, r)) return false;
  out = r.b;
  return true;
}

bool ask_equal(const Value& a, const Value& b, bool& out) {
  if (a.kind != b.kind || !(a.is_seq() || a.is_dict())) return false;
  if (a.s.raw() == b.s.raw()) {
    out = true;  // one object: equal whatever its strings (Python's identity first)
    return true;
  }
  Op op;
  op.kind = Op::Kind::kEqual;
  Value r;
  if (!ask(std::move(op), Value::new_list({a, b}), r)) return false;
  out = r.b;
  return true;
}

bool ask_slice(const Value& subject, const Value& a, const Value& b, const Value& c, Value& out) {
  Op op;
  op.kind = Op::Kind::kSlice;
  op.args.pos = {a, b, c};
  return ask(std::move(op), subject, out);
}

namespace {

// Whether a string answer `got` serves where `kept` was kept: a new leaf's
// sentinel served for a string that is the subject's too (the texts meet
// such a pair only where a Split says they differ).
bool answers(Op::Answer got, Op::Answer kept) {
  return got == kept || (kept == Op::Answer::kLeaf && got == Op::Answer::kSame);
}

// The next byte of a skeleton's text at `k`: a literal's (leaf -1) or a
// sentinel's leaf. False inside a sentinel or past the end.
bool next_of(std::string_view t, std::size_t k, const Trace& tr, int32_t& leaf, uint8_t& byte) {
  if (k >= t.size()) return false;
  const std::size_t start = covering(t, k);
  if (start == std::string_view::npos) {
    leaf = -1;
    byte = static_cast<uint8_t>(t[k]);
    return true;
  }
  uint32_t l;
  if (start != k || find(t.substr(k, kSentinelSize), 0, l) != 0 || l >= tr.leaves.size()) return false;
  leaf = static_cast<int32_t>(l);
  return true;
}

// The first byte of side a (or b) of `s`: its literal's, or its leaf's
// (`text(leaf)`, a string_view).
template <typename Text>
uint8_t first_byte(const Split& s, bool a, const Text& text) {
  const int32_t leaf = a ? s.a_leaf : s.b_leaf;
  if (leaf < 0) return a ? s.a_byte : s.b_byte;
  return static_cast<uint8_t>(text(static_cast<std::size_t>(leaf))[0]);
}

// Where `op` takes characters off its subject's ends (the trim filter; the
// strip, lstrip and rstrip methods) given at most the characters, a str or
// none: its answer is then a part of the subject's bytes. `chars` is null
// for whitespace.
bool strips(const Op& op, bool& left, bool& right, const Value*& chars) {
  static const FilterFn kTrim = find_filter("trim");
  if (!op.args.kw.empty() || op.args.pos.size() > 1) return false;
  if (op.kind == Op::Kind::kFilter) {
    if (op.filter != kTrim) return false;
    left = right = true;
  } else if (op.kind == Op::Kind::kMethod && (op.name == "strip" || op.name == "lstrip" || op.name == "rstrip")) {
    left = op.name != "rstrip";
    right = op.name != "lstrip";
  } else {
    return false;
  }
  chars = op.args.pos.empty() || op.args.pos[0].is_none() ? nullptr : &op.args.pos[0];
  return !chars || (chars->is_str() && !chars->markup);
}

// Where `op` asks a yes or no of its subject's bytes alone (`in` of a
// string, startswith or endswith given one string): the answer, without
// the subject as a value. False where it does not.
bool text_test(const Op& op, std::string_view s, bool& out) {
  if (op.answer != Op::Answer::kValue || !op.args.kw.empty() || op.args.pos.size() != 1) return false;
  const Value& a = op.args.pos[0];
  if (!a.is_str() || a.markup) return false;
  const std::string_view x = a.s.unread();
  if (op.kind == Op::Kind::kIn) out = s.find(x) != std::string_view::npos;
  else if (op.kind == Op::Kind::kMethod && op.name == "startswith") out = s.starts_with(x);
  else if (op.kind == Op::Kind::kMethod && op.name == "endswith") out = s.ends_with(x);
  else return false;
  return true;
}

}  // namespace

bool split_at(std::string_view a, std::string_view b, std::size_t k) {
  Watch* w = tl_watch;
  if (!w || !w->trace) return false;
  Trace& t = *w->trace;
  Split s{-1, -1, 0, 0};
  if (!next_of(a, k, t, s.a_leaf, s.a_byte) || !next_of(b, k, t, s.b_leaf, s.b_byte)) return false;
  if (s.a_leaf >= 0 && s.a_leaf == s.b_leaf) return false;
  auto text = [&](std::size_t k) { return std::string_view(t.leaves[k].s.unread()); };
  if (first_byte(s, true, text) == first_byte(s, false, text)) {
    if (!t.stuck) t.stuck = s;
    return false;
  }
  if (std::find(t.splits.begin(), t.splits.end(), s) == t.splits.end()) t.splits.push_back(s);
  return true;
}

bool replay(const std::vector<Op>& ops, const std::vector<Split>& splits, Answers& leaves) {
  for (const Op& op : ops) {
    if (op.subject >= leaves.size()) return false;
    bool yes;
    if (op.tree.kind == Kind::kUndefined && leaves.is_str(op.subject) && text_test(op, leaves.text(op.subject), yes)) {
      // (UTF-8: a string's bytes hold another's where its characters do.)
      if (op.value.kind != Kind::kBool || op.value.b != yes) return false;
      continue;
    }
    bool left, right;
    const Value* chars;
    if (strips(op, left, right, chars)) {
      // The answer is apply's without the copy: the part of the subject's
      // bytes that is left.
      if (op.answer == Op::Answer::kValue || op.answer == Op::Answer::kList) return false;
      const std::string_view s = leaves.text(op.subject);
      const std::string_view r = chars ? py_strip(s, std::optional<std::string>(chars->s.unread()), left, right)
                                       : py_strip(s, std::nullopt, left, right);
      const Op::Answer got = r.empty()              ? Op::Answer::kEmpty
                             : r.size() == s.size() ? Op::Answer::kSame
                                                    : Op::Answer::kLeaf;
      if (!answers(got, op.answer)) return false;
      if (op.answer == Op::Answer::kLeaf) {
        if (leaves.size() != op.first) return false;
        leaves.push_part(r);
      }
      continue;
    }
    Value r;
    try {
      if (op.tree.kind == Kind::kUndefined) {
        r = apply(op, leaves.value(op.subject));
      } else {
        r = apply(op, with_leaves(op.tree, [&](uint32_t l) {
                    if (l >= leaves.size()) throw Error("no such leaf");
                    return leaves.value(l);
                  }));
      }
    } catch (...) {
      return false;  // it fails on this record's string: not the answer kept
    }
    switch (op.answer) {
      case Op::Answer::kValue:
        if (r.kind != op.value.kind || !equal(r, op.value)) return false;
        break;
      case Op::Answer::kEmpty:
      case Op::Answer::kSame:
      case Op::Answer::kLeaf:
        if (!plain_str(r) || !answers(string_answer(r, leaves.value(op.subject)), op.answer)) return false;
        if (op.answer == Op::Answer::kLeaf) {
          if (leaves.size() != op.first) return false;
          leaves.push(std::move(r));
        }
        break;
      case Op::Answer::kList: {
        if (!r.is_seq() || r.list->group || r.tuple != op.tuple || r.list->items.size() != op.items.size() ||
            leaves.size() != op.first)
          return false;
        for (std::size_t k = 0; k < op.items.size(); ++k) {
          const Value& x = r.list->items[k];
          const auto a = static_cast<Op::Answer>(op.items[k]);
          if (!plain_str(x) || !answers(string_answer(x, leaves.value(op.subject)), a)) return false;
          if (a == Op::Answer::kLeaf) leaves.push(x);
        }
        break;
      }
    }
  }
  for (const Split& s : splits)
    if (alike_at(s, leaves)) return false;
  return true;
}

bool alike_at(const Split& s, const Answers& leaves) {
  if (std::max(s.a_leaf, s.b_leaf) >= static_cast<int32_t>(leaves.size())) return true;
  auto text = [&](std::size_t k) { return leaves.text(k); };
  return first_byte(s, true, text) == first_byte(s, false, text);
}

}  // namespace tokfeed::tmpl::skeleton
