// The tracker of a render with resume points (template/resume.hpp).
#include "template/resume.hpp"

#include <algorithm>

#include "template/interp.hpp"

namespace tokfeed::tmpl {

namespace {

bool int_like(const Value& v) { return v.kind == Kind::kInt || v.kind == Kind::kBool; }
int64_t as_int(const Value& v) { return v.kind == Kind::kBool ? v.b : v.i; }

// Whether `v` holds an object a render mutates (a namespace, an iterator
// that iterating uses up) or a function (which may close over a loop's
// variables); with `functions_only`, a function alone. `left` bounds the
// walk: past it, the answer is yes.
bool holds_mutable(const Value& v, int& left, bool functions_only = false) {
  if (--left < 0) return true;
  switch (v.kind) {
    case Kind::kFunc: return true;
    case Kind::kList:
      if (v.gen && !functions_only) return true;
      for (const Value& x : v.list->items)
        if (holds_mutable(x, left, functions_only)) return true;
      return false;
    case Kind::kDict:
      if (v.ns && !functions_only) return true;
      for (const auto& [k, x] : v.dict->items)
        if (holds_mutable(x, left, functions_only)) return true;
      return false;
    default: return false;
  }
}

// Which sets of the same object stay the same object in the copy.
using Memo = std::vector<std::pair<const void*, Value>>;

// A copy of `v` in which every namespace and iterator is a new object with
// the same contents (the containers on the way to them copied too), so
// what the render does to them later does not reach the copy.
Value copy_mutable(const Value& v, Memo& memo, std::vector<std::shared_ptr<DictObj>>& made) {
  const void* key = v.kind == Kind::kList   ? static_cast<const void*>(v.list.get())
                    : v.kind == Kind::kDict ? static_cast<const void*>(v.dict.get())
                                            : nullptr;
  if (!key) return v;
  for (const auto& [k, c] : memo)
    if (k == key) return c;
  Value out = v;
  if (v.kind == Kind::kDict) {
    out.dict = std::make_shared<DictObj>();
    memo.emplace_back(key, out);  // before the items: a namespace may hold itself
    bool changed = v.ns;
    out.dict->items.reserve(v.dict->items.size());
    for (const auto& [k, x] : v.dict->items) {
      out.dict->items.emplace_back(k, copy_mutable(x, memo, made));
      const Value& c = out.dict->items.back().second;
      changed = changed || c.list != x.list || c.dict != x.dict;
    }
    if (!changed) return memo.back().second = v;
    if (v.ns) made.push_back(out.dict);
    return out;
  }
  out.list = std::make_shared<ListObj>();
  memo.emplace_back(key, out);
  bool changed = v.gen;
  out.list->items.reserve(v.list->items.size());
  for (const Value& x : v.list->items) {
    out.list->items.push_back(copy_mutable(x, memo, made));
    const Value& c = out.list->items.back();
    changed = changed || c.list != x.list || c.dict != x.dict;
  }
  if (!changed) return memo.back().second = v;
  return out;
}

}  // namespace

ResumeState::~ResumeState() {
  for (auto& d : copies) {
    std::vector<std::pair<std::string, Value>> items;
    items.swap(d->items);
  }
}

bool Resumes::ready(std::size_t k, bool g) const noexcept {
  return state && k < state->ready.size() && (state->ready[k] & (g ? 2 : 1));
}

void Tracker::spoil(int64_t hi, uint8_t bits) {
  if (!watching) return;
  hi = std::min(hi, static_cast<int64_t>(n));
  for (int64_t k = cur + 1; k <= hi; ++k) clean[static_cast<std::size_t>(k)] &= static_cast<uint8_t>(~bits);
  settle();
}

void Tracker::settle() {
  for (std::size_t k = static_cast<std::size_t>(cur + 1); k <= n; ++k)
    if (want[k] & clean[k]) return;
  watching = false;  // no resume point is left to take
}

void Tracker::truth(const Value& v) {
  if (!watching || v.kind != Kind::kList) return;
  int64_t o = offset_of(v.list.get());
  // messages[o:k] is empty for k <= o, as messages[o:] is not when n > o.
  if (o >= 0 && static_cast<std::size_t>(o) < n) spoil(o);
}

void Tracker::item(const Value& obj, const Value& key) {
  if (!watching) return;
  if (obj.kind == Kind::kDict && obj.dict.get() == loop) {
    if (key.is_str()) attr(obj, *key.s);
    else spoil_all();
    return;
  }
  if (obj.kind != Kind::kList) return;
  int64_t o = offset_of(obj.list.get());
  if (o < 0) return;
  // messages[o + i] is in messages[:k] for k > o + i; a negative index
  // counts from the end, which differs for every prefix.
  if (int_like(key) && as_int(key) >= 0) spoil(o + as_int(key));
  else spoil_all();
}

void Tracker::attr(const Value& obj, std::string_view name) {
  if (!watching) return;
  if (obj.kind == Kind::kDict && obj.dict.get() == loop) {
    // What the render of messages[:k] reads differently in the iteration
    // over message cur: loop.last and loop.nextitem for k = cur + 1 (its
    // last iteration), the counts from the end for every k.
    if (name == "last" || name == "nextitem") spoil(cur + 1);
    else if (name == "length" || name == "revindex" || name == "revindex0") spoil_all();
    return;
  }
  operand(obj);
}

void Tracker::slice(const Value& obj, const Value& start, const Value& stop, const Value& step, const Value& out) {
  if (!watching || !watched(obj)) return;
  int64_t o = obj.kind == Kind::kList ? offset_of(obj.list.get()) : -1;
  bool from = start.is_none() || (int_like(start) && as_int(start) >= 0);
  if (o < 0 || !from || !stop.is_none() || !step.is_none() || out.kind != Kind::kList) {
    spoil_all();
    return;
  }
  // messages[:k][o:][s:] is messages[o + s:k]: a prefix of messages[o + s:].
  state->lists.emplace_back(out, static_cast<std::size_t>(o + (start.is_none() ? 0 : as_int(start))));
}

void Tracker::stored(const Value& v) {
  if (!watching) return;
  int left = 256;
  if (watched(v) || holds_mutable(v, left, true)) spoil_all();
}

namespace {

// The statements from the top-level body down to `target` through `if`
// bodies alone.
bool find_path(const Body& body, const Stmt* target, std::vector<std::pair<const Body*, std::size_t>>& path) {
  for (std::size_t i = 0; i < body.size(); ++i) {
    const Stmt& s = *body[i];
    if (&s == target) {
      path.emplace_back(&body, i);
      return true;
    }
    if (s.kind != SK::kIf) continue;
    path.emplace_back(&body, i);
    for (const Body& b : s.bodies)
      if (find_path(b, target, path)) return true;
    path.pop_back();
  }
  return false;
}

}  // namespace

bool Tracker::enter_loop(const Interp& in, const Stmt& s, const Value& seq) {
  if (!watching || !watched(seq)) return false;
  const int64_t o = seq.kind == Kind::kList ? offset_of(seq.list.get()) : -1;
  std::vector<std::pair<const Body*, std::size_t>> path;
  if (main || o < 0 || s.targets.size() != 1 || s.exprs[1] || s.has_else || in.frames.size() != 1 ||
      in.out != in.root || !find_path(*top, &s, path)) {
    spoil_all();  // a loop over the messages the prefixes would run fewer times
    return false;
  }
  main = &s;
  offset = static_cast<std::size_t>(o);
  state->path = std::move(path);
  // Inside the loop, top-level variables change only through the objects
  // they hold: those the points copy.
  state->top = in.frames[0].vars;
  state->top_capacity = in.frames[0].vars.capacity();
  for (std::size_t i = 0; i < state->top.size(); ++i) {
    const Value& v = state->top[i].second;
    if (i < vars->size()) {
      const Value& given = (*vars)[i].second;
      if (v.kind == given.kind && v.list == given.list && v.dict == given.dict && v.fn == given.fn) continue;
    }
    int left = 4096;
    if (holds_mutable(v, left)) state->held.push_back(i);
  }
  return true;
}

void Tracker::iteration(const Interp& in, std::size_t k) {
  if (!watching) return;
  if (k <= n && (want[k] & clean[k])) {
    ResumePoint& p = state->points[k];
    p.taken = true;
    p.output = in.root->size();
    p.capacity = in.root->capacity();
    p.pieces = in.provenance ? in.provenance->pieces.size() : 0;
    p.generation = in.generation ? in.generation->size() : 0;
    p.steps = in.steps;
    if (in.provenance) p.seen = in.provenance->seen;
    Memo memo;
    for (std::size_t i : state->held) p.mutable_.push_back(copy_mutable(state->top[i].second, memo, state->copies));
    state->ready[k] = want[k] & clean[k];
  }
  cur = static_cast<int64_t>(k);
  settle();
}

void restore(const ResumeState& st, std::size_t k, bool g, Interp& in) {
  const ResumePoint& p = st.points[k];
  auto& vars = in.frames[0].vars;
  vars.reserve(st.top_capacity);  // to grow as the full render's do
  vars = st.top;
  Memo memo;
  for (std::size_t j = 0; j < st.held.size(); ++j)
    vars[st.held[j]].second = copy_mutable(p.mutable_[j], memo, in.namespaces);
  // messages[o:] becomes messages[:k][o:], one list for each.
  const auto& all = st.lists.front().first.list->items;
  std::vector<Value> lists;
  for (const auto& [l, o] : st.lists) {
    std::size_t e = std::max(o, std::min(k, all.size()));
    lists.push_back(Value::new_list(std::vector<Value>(all.begin() + static_cast<std::ptrdiff_t>(std::min(o, e)),
                                                       all.begin() + static_cast<std::ptrdiff_t>(e))));
  }
  for (auto& [name, v] : vars) {
    if (v.kind != Kind::kList) continue;
    for (std::size_t j = 0; j < st.lists.size(); ++j)
      if (v.list == st.lists[j].first.list) v = lists[j];
  }
  vars[st.prompt_var].second = Value::boolean(g);
  in.root->reserve(p.capacity);  // to grow as the full render's output grows, in the same allocations
  in.root->assign(st.full, 0, p.output);
  in.steps = p.steps;
  if (in.generation) in.generation->assign(st.full_generation.begin(), st.full_generation.begin() + p.generation);
  if (in.provenance && st.provenance) {
    auto& pieces = in.provenance->pieces;
    pieces.assign(st.full_pieces.begin(), st.full_pieces.begin() + static_cast<std::ptrdiff_t>(p.pieces));
    if (!pieces.empty()) pieces.back().end = std::min(pieces.back().end, p.output);
    in.provenance->seen = p.seen;
  }
}

Flow run_after_loop(Interp& in, const ResumeState& st) {
  for (std::size_t level = st.path.size(); level-- > 0;) {
    Flow f = exec(in, *st.path[level].first, st.path[level].second + 1);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

}  // namespace tokfeed::tmpl
