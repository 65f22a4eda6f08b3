// The tracker of a render with resume points (template/resume.hpp).
#include "template/resume.hpp"

#include <algorithm>
#include <cstring>

#include "template/budget.hpp"
#include "template/interp.hpp"

namespace tokfeed::tmpl {

namespace {

bool int_like(const Value& v) { return v.kind == Kind::kInt || v.kind == Kind::kBool; }
int64_t as_int(const Value& v) { return v.kind == Kind::kBool ? v.b : v.i; }

enum Reach : int { kFunctions = 1, kNamespaces = 2, kIterators = 4, kMutable = 7 };

// Whether `v` holds what `what` names: a function (which may close over a
// loop's variables), a namespace, an iterator (which iterating uses up).
// `left` bounds the walk: past it, the answer is yes.
bool holds(const Value& v, int& left, int what = kMutable) {
  if (--left < 0) return true;
  switch (v.kind) {
    case Kind::kFunc: return what & kFunctions;
    case Kind::kList:
      if (v.gen && (what & kIterators)) return true;
      for (const Value& x : v.list->items)
        if (holds(x, left, what)) return true;
      return false;
    case Kind::kDict:
      if (v.ns && (what & kNamespaces)) return true;
      // A skeleton's stand-in for a record's dict holds none (JSON's values).
      if (v.dict->hole != DictObj::kNoHole) return false;
      for (const auto& [k, x] : v.dict->items())
        if (holds(x, left, what)) return true;
      return false;
    default: return false;
  }
}

// Which sets of the same object stay the same object in the copy.
using Memo = std::vector<std::pair<const void*, Value>>;

// A copy of `v` in which every namespace and iterator is a new object with
// the same contents (the containers on the way to them copied too), so
// what the render does to them later does not reach the copy.
Value copy_mutable(const Value& v, Memo& memo, std::vector<Ref<DictObj>>& made) {
  const void* key = v.kind == Kind::kList   ? static_cast<const void*>(v.list.get())
                    : v.kind == Kind::kDict ? static_cast<const void*>(v.dict.get())
                                            : nullptr;
  if (!key) return v;
  for (const auto& [k, c] : memo)
    if (k == key) return c;
  Value out = v;
  if (v.kind == Kind::kDict) {
    out.dict = Ref<DictObj>::make();
    memo.emplace_back(key, out);  // before the items: a namespace may hold itself
    bool changed = v.ns;
    out.dict->items().reserve(v.dict->items().size());
    out.dict->key_objs() = v.dict->key_objs();
    for (const auto& [k, x] : v.dict->items()) {
      out.dict->items().emplace_back(k, copy_mutable(x, memo, made));
      const Value& c = out.dict->items().back().second;
      changed = changed || c.list != x.list || c.dict != x.dict;
    }
    if (!changed) return memo.back().second = v;
    if (v.ns) made.push_back(out.dict);
    return out;
  }
  out.list = Ref<ListObj>::make();
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
    items.swap(d->items());
  }
}

bool Resumes::ready(std::size_t k, bool g) const noexcept {
  return state && k < state->ready.size() && (state->ready[k] & (g ? 10 : 5));
}

void Resumes::keep(std::string&& text, std::size_t same) const {
  if (!state) return;
  ResumeState::Spare& s = state->spares[state->next_spare];
  state->next_spare = (state->next_spare + 1) % state->spares.size();
  s.same = std::min(same, text.size());
  s.text = std::move(text);
}

void Tracker::preamble_read(int64_t lo, int64_t hi, uint8_t bits) {
  if (top_at == SIZE_MAX || tried == top_at || !passes.empty() || !watching) return;
  bool fresh = false;
  hi = std::min(hi, static_cast<int64_t>(n));
  for (int64_t k = std::max(lo, cur + 1); k <= hi && !fresh; ++k)
    fresh = (want[static_cast<std::size_t>(k)] & clean[static_cast<std::size_t>(k)] & bits) != 0;
  if (!fresh) return;  // what it concerns was concerned before, or is not wanted
  tried = top_at;
  StepsUncounted uncounted;
  const Stmt& s = *(*top)[top_at];
  // A set evaluates its value before it assigns: up to this read it has
  // changed nothing (what the value calls cannot reach the top-level
  // variables, which hold nothing mutable, nor write the output).
  if (s.kind != SK::kSet || !s.text.empty() || in->frames.empty()) return;
  const Scope& now = in->frames[0].vars;
  for (std::size_t i = 0; i < now.size(); ++i) {
    const Value& v = now[i].second;
    if (i < vars->size()) {
      const Value& given = (*vars)[i].second;
      if (v.kind == given.kind && (v.kind <= Kind::kStr || v.s.raw() == given.s.raw())) continue;
    }
    int left = 4096;
    if (holds(v, left)) return;
  }
  if (in->provenance)
    for (char c : in->provenance->seen)
      if (c) return;
  Start& st = state->starts.emplace_back();
  st.at = top_at;
  st.top.reserve(now.size());
  for (const auto& [name, v] : now) st.top.push_back(v);
  st.top_capacity = now.capacity();
  st.output = in->root->size();
  st.capacity = in->root->capacity();
  st.pieces = in->provenance ? in->provenance->pieces.size() : 0;
  st.generation = in->generation ? in->generation->size() : 0;
  st.steps = top_steps;
  st.clean = clean;
  st.prompt = prompt_seen;
}

void Tracker::spoil(int64_t hi, uint8_t bits) {
  if (!watching) return;
  if (passes.empty()) {
    preamble_read(cur + 1, hi, bits);
    state->preamble = true;  // the prefixes may still run up to the first main loop themselves
  } else {
    bits |= static_cast<uint8_t>(bits << 2);
  }
  spoil_bits(hi, bits);
}

void Tracker::spoil_now(int64_t hi, uint8_t bits) {
  if (!watching) return;
  if (passes.empty()) preamble_read(cur + 1, hi, bits);
  if (never.empty()) never.assign(n + 1, 0);
  for (int64_t k = cur + 1; k <= std::min(hi, static_cast<int64_t>(n)); ++k)
    never[static_cast<std::size_t>(k)] |= static_cast<uint8_t>(bits << 2);
  if (may_reenter) count_reentries();
  spoil_bits(hi, static_cast<uint8_t>(bits | bits << 2));
}

void Tracker::spoil_one(std::size_t k, uint8_t bits) {
  if (!watching || static_cast<int64_t>(k) <= cur || k > n) return;
  if (passes.empty()) {
    preamble_read(static_cast<int64_t>(k), static_cast<int64_t>(k), bits);
    state->preamble = true;
  } else bits |= static_cast<uint8_t>(bits << 2);
  clean[k] &= static_cast<uint8_t>(~bits);
}

void Tracker::spoil_bits(int64_t hi, uint8_t bits) {
  if (!watching) return;
  hi = std::min(hi, static_cast<int64_t>(n));
  for (int64_t k = cur + 1; k <= hi; ++k) clean[static_cast<std::size_t>(k)] &= static_cast<uint8_t>(~bits);
  settle();
}

void Tracker::settle() {
  for (std::size_t k = static_cast<std::size_t>(cur + 1); k <= n; ++k)
    if (usable(k)) return;
  if (may_reenter) return;  // a prefix may still run up to a later main loop itself
  watching = false;         // no resume point is left to take
}

void Tracker::count_reentries() {
  may_reenter = false;
  for (std::size_t k = 1; k <= n && !may_reenter; ++k) may_reenter = reenters(k);
}

void Tracker::truth_read(const Value& v) {
  int64_t o = offset_of(v.list.get());
  // messages[o:k] is empty for k <= o, as messages[o:] is not when n > o.
  if (o >= 0 && static_cast<std::size_t>(o) < n) spoil(o);
}

void Tracker::item_read(const Value& obj, const Value& key) {
  if (is_slot(obj)) {
    slot_use(obj.dict.get(), {}, SlotUse::kOpaque);
    return;
  }
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

void Tracker::attr_read(const Value& obj, std::string_view name) {
  const Claim claimed = claim;
  claim = Claim::kNone;
  if (is_slot(obj)) {
    // An attribute, or a method reading them all.
    const bool attribute = obj.dict->find(name) != nullptr;
    if (claimed == Claim::kAttr && attribute) {
      claimed_ns = obj.dict.get();
      claimed_name = name;
    } else {
      slot_use(obj.dict.get(), attribute ? name : std::string_view(), SlotUse::kOpaque);
    }
    return;
  }
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
  StepsUncounted uncounted;
  state->lists.emplace_back(out, static_cast<std::size_t>(o + (start.is_none() ? 0 : as_int(start))));
}

void Tracker::operand_read(const Value& v) {
  if (is_slot(v)) {
    slot_use(v.dict.get(), {}, SlotUse::kOpaque);
    return;
  }
  if (claim == Claim::kLength && v.kind == Kind::kList) {
    claim = Claim::kNone;
    claimed_length = offset_of(v.list.get());  // the comparison decides which prefixes it concerns
    return;
  }
  spoil_all();
}

namespace {

// Whether `a` and `b` are one value: the same scalar, an equal str, the
// same object (a template tells no two of these apart).
bool same_value(const Value& a, const Value& b) {
  if (a.kind != b.kind || a.tuple != b.tuple || a.ns != b.ns || a.gen != b.gen || a.view != b.view) return false;
  switch (a.kind) {
    case Kind::kNone: return true;
    case Kind::kBool: return a.b == b.b;
    case Kind::kInt: return a.i == b.i;
    case Kind::kFloat: return std::memcmp(&a.f, &b.f, sizeof a.f) == 0;
    case Kind::kStr: return a.s.raw() == b.s.raw() || a.s.unread() == b.s.unread();
    case Kind::kUndefined:
    case Kind::kFunc:
    case Kind::kList:
    case Kind::kDict: return a.s.raw() == b.s.raw();  // the same object (or hint)
  }
  return false;
}

}  // namespace

void Tracker::set_attr(const Value& ns, std::string_view name, const Value& v) {
  const Value* old = ns.dict->find(name);
  if (!old || !same_value(*old, v)) ++effects;
  if (is_slot(ns)) {
    ++slot_writes;
    slot_use(ns.dict.get(), name, SlotUse::kWrite);
  }
}

bool Tracker::ahead_changed(const Interp& in) const {
  return in.out->size() != lookahead.out || in.root->size() != lookahead.root || effects != lookahead.effects ||
         slot_writes != lookahead.writes;
}

void Tracker::ahead_iteration(const Interp& in, std::size_t t) {
  if (!lookahead.active) return;
  if (!lookahead.quiet) {
    spoil(static_cast<int64_t>(t));
    return;
  }
  if (lookahead.item >= 0 && ahead_changed(in)) spoil(lookahead.item);
  AheadRun& run = state->aheads.back();
  if (run.starts.size() == run.starts.capacity()) {
    StepsUncounted uncounted;
    run.starts.reserve(std::max<std::size_t>(8, 2 * run.starts.size()));
  }
  run.starts.push_back(in.steps);
  lookahead.item = static_cast<int64_t>(t);
  lookahead.out = in.out->size();
  lookahead.root = in.root->size();
  lookahead.effects = effects;
  lookahead.writes = slot_writes;
}

void Tracker::ahead_end(const Interp& in) {
  if (!lookahead.active) return;
  if (lookahead.quiet) {
    if (lookahead.item >= 0 && ahead_changed(in)) spoil(lookahead.item);
    state->aheads.back().end = in.steps;
  }
  lookahead = Ahead();
}

void Tracker::slot_use(const DictObj* ns, std::string_view name, SlotUse::Kind kind) {
  if (!record_use()) return;
  StepsUncounted uncounted;
  SlotUse& u = state->uses.emplace_back();
  u.ns = ns;
  u.name = name;
  u.kind = kind;
  u.at = *steps;
}

void Tracker::stored(const Value& v) {
  if (!watching) return;
  if (is_slot(v)) slot_use(v.dict.get(), {}, SlotUse::kOpaque);
  int left = 256;
  if (watched(v) || holds(v, left, kFunctions)) spoil_now(static_cast<int64_t>(n));
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

// find_path(top, &s, path) where the parser found the way (Stmt::top_path):
// the path rebuilt from it, its vector grown as the search grows it (its
// blocks are counted by the render's budget).
bool top_path(const Body& top, const Stmt& s, std::vector<std::pair<const Body*, std::size_t>>& path) {
  if (s.top_path_peak == 0) return find_path(top, &s, path);
  for (std::size_t room = 1;; room *= 2) {
    path.reserve(room);
    if (room >= s.top_path_peak) break;
  }
  const Body* body = &top;
  for (const auto& [sel, at] : s.top_path) {
    if (!path.empty()) body = &(*path.back().first)[path.back().second]->bodies[sel];
    path.emplace_back(body, at);
  }
  return true;
}

}  // namespace

namespace {

// Whether `v` holds, below itself, one of `ns`, or a function other than a
// top-level macro (a bound method, a closure may read a namespace unseen).
bool reaches(const Value& v, const std::vector<Value>& ns, int& left, bool self = true) {
  if (--left < 0) return true;
  switch (v.kind) {
    case Kind::kFunc: return !v.fn->macro;
    case Kind::kList:
      for (const Value& x : v.list->items)
        if (reaches(x, ns, left, false)) return true;
      return false;
    case Kind::kDict:
      if (!self && v.ns)
        for (const Value& s : ns)
          if (s.dict == v.dict) return true;
      for (const auto& [k, x] : v.dict->items())
        if (reaches(x, ns, left, false)) return true;
      return false;
    default: return false;
  }
}

}  // namespace

void Tracker::watch_slots(const MainLoop& m, Entry& e) {
  // The namespaces the top-level variables hold themselves, where nothing
  // else reaches them: every read of their attributes is then an attribute
  // read, seen by attr(), item() or operand().
  std::vector<Value> ns;
  for (std::size_t i : m.held)
    if (m.top[i].second.kind == Kind::kDict && m.top[i].second.ns) ns.push_back(m.top[i].second);
  if (ns.empty()) return;
  int left = 4096;
  for (std::size_t i : m.held)
    if (reaches(m.top[i].second, ns, left)) return;
  e.live.assign(m.top.size(), nullptr);
  for (std::size_t i : m.held)
    if (m.top[i].second.kind == Kind::kDict && m.top[i].second.ns) e.live[i] = m.top[i].second.dict.get();
  slots = std::move(ns);
}

bool Tracker::record_use() {
  // Each use costs the render a step: a template that makes more than
  // this many is watched no more.
  constexpr std::size_t kMaxUses = std::size_t{1} << 16;
  if (state->uses.size() < kMaxUses) return true;
  spoil_now(static_cast<int64_t>(n));
  return false;
}

bool Tracker::enter_loop(const Interp& in, const Stmt& s, const Value& seq, int64_t& ahead_at) {
  if (!watching || !watched(seq)) return false;
  StepsUncounted uncounted;
  const int64_t o = seq.kind == Kind::kList ? offset_of(seq.list.get()) : -1;
  if (main && o >= 0 && !lookahead.active && !s.uses_loop && !s.exprs[1] && !s.has_else && !s.recursive) {
    ahead_at = o;
    lookahead = Ahead();
    lookahead.active = true;
    lookahead.quiet = !main->followed && !passes.back().iterators && in.memo_calls == 0;
    if (lookahead.quiet) state->aheads.emplace_back().offset = static_cast<std::size_t>(o);
    return false;
  }
  std::vector<std::pair<const Body*, std::size_t>> path;
  if (main || o < 0 || !s.one_name() || s.exprs[1] || s.has_else || in.frames.size() != 1 || in.out != in.root ||
      !top_path(*top, s, path)) {
    spoil_all();  // a loop over the messages the prefixes would run fewer times
    return false;
  }
  main = &s;
  pre = nullptr;
  top_at = SIZE_MAX;
  offset = static_cast<std::size_t>(o);
  copies_.reset();  // another loop's top-level values
  MainLoop& m = state->loops.emplace_back();
  m.path = std::move(path);
  m.offset = offset;
  m.stmt = &s;
  // Inside the loop, top-level variables change only through the objects
  // they hold: those the points copy.
  m.top = in.frames[0].vars;
  m.top_capacity = in.frames[0].vars.capacity();
  Pass& pass = passes.emplace_back();
  pass.offset = offset;
  pass.begin = in.root->size();
  if (s.followed) count_reentries();
  else may_reenter = false;  // no later main loop to run up to
  for (std::size_t i = 0; i < m.top.size(); ++i) {
    const Value& v = m.top[i].second;
    if (i < vars->size()) {
      const Value& given = (*vars)[i].second;
      if (v.kind == given.kind && (v.kind <= Kind::kStr || v.s.raw() == given.s.raw())) continue;
    }
    int left = 4096;
    if (!holds(v, left)) continue;  // nor an iterator: the walk for one takes the same path
    m.held.push_back(i);
    left = 4096;
    pass.iterators = pass.iterators || holds(v, left, kIterators);
  }
  // A later main loop, where a prefix cannot resume from its point (an
  // iteration of an earlier one after its messages changed something:
  // loop_ended): such prefixes run up to this loop themselves, so what they
  // read before it is theirs, and the entry moves here.
  // (Not after one that wrote output or could use up an iterator: the
  // prefix's state would not be the full render's here.)
  bool reentry = state->loops.size() > 1;
  for (std::size_t i = 0; i + 1 < passes.size() && reentry; ++i) reentry = !passes[i].wrote && !passes[i].iterators;
  bool wanted = false;
  for (std::size_t k = 1; k <= n && reentry && !wanted; ++k) wanted = (want[k] & ~clean[k] & 3) && reenters(k);
  reentry = reentry && wanted;
  if (reentry) {
    for (std::size_t k = 0; k <= n; ++k)
      clean[k] |= static_cast<uint8_t>((want[k] << 2) & ~(never.empty() ? 0 : never[k]));
    state->preamble = true;
    state->uses.clear();  // those of the entry before
    slots.clear();
  }
  // The entry, where a prefix that read differently before the loop may
  // still resume from here.
  bool entry = false;
  for (std::size_t k = 0; k <= n && (state->loops.size() == 1 || reentry) && state->preamble; ++k)
    entry = entry || ((usable(k) >> 2) & ~usable(k) & 3);
  if (entry) {
    state->entry_loop = state->loops.size() - 1;
    assign_scope(state->vars, *vars);
    Entry& e = state->entry;
    e.top = m.top;
    Memo memo;
    for (std::size_t i : m.held) e.top[i].second = copy_mutable(m.top[i].second, memo, state->copies);
    e.top_capacity = m.top_capacity;
    e.output = in.root->size();
    e.capacity = in.root->capacity();
    e.pieces = in.provenance ? in.provenance->pieces.size() : 0;
    e.generation = in.generation ? in.generation->size() : 0;
    e.steps = in.steps;
    if (in.provenance) e.seen = in.provenance->seen;
    e.seq = seq;
    watch_slots(m, e);
  }
  return true;
}

namespace {

// Whether the iteration that started at `pass.output`/`pass.effects`
// changed what later statements see.
bool changed_since(const Tracker& t, const Tracker::Pass& pass, const Interp& in) {
  return pass.iterators || in.root->size() != pass.output || t.effects != pass.effects;
}

}  // namespace

void Tracker::loop_ended(const Interp& in) {
  Pass& pass = passes.back();
  if (!pass.starts.empty() && changed_since(*this, pass, in)) pass.changed = cur;
  pass.end = in.steps;
  pass.wrote = in.root->size() != pass.begin;
  // A later main loop's prefixes ran this one's iterations before message
  // k alone: k must not exceed a message whose iteration changed anything.
  for (int64_t k = 0; k <= pass.changed && k <= static_cast<int64_t>(n); ++k) clean[static_cast<std::size_t>(k)] = 0;
  main = nullptr;
  loop = nullptr;
  cur = -1;
  settle();
}

namespace {

// Whether the loop's own scope holds only values a copy keeps as they are
// (no namespace, iterator or function: the loop's `loop` is replaced), at
// the start of the iteration over message k. The message the iteration
// before was bound to is a record's, plain all through.
bool plain_scope(const Interp& in, const Tracker& t, std::size_t k) {
  if (in.frames.size() != 2) return false;
  const auto& all = t.state->lists.front().first.list->items;
  const DictObj* previous = k > 0 && k - 1 < all.size() && all[k - 1].is_dict() ? all[k - 1].dict.get() : nullptr;
  for (const auto& [name, v] : in.frames.back().vars) {
    if (name == "loop" || (previous && v.is_dict() && v.dict.get() == previous)) continue;
    int left = 256;
    if (holds(v, left)) return false;
  }
  return true;
}

}  // namespace

void Tracker::iteration(const Interp& in, std::size_t k) {
  Pass& pass = passes.back();
  if (!pass.starts.empty() && changed_since(*this, pass, in)) pass.changed = cur;
  if (pass.starts.size() == pass.starts.capacity()) {
    StepsUncounted uncounted;
    pass.starts.reserve(std::max<std::size_t>(16, 2 * pass.starts.size()));
  }
  pass.starts.push_back(in.steps);
  pass.output = in.root->size();
  pass.effects = effects;
  if (!watching) return;
  if (pass.iterators || !copies_kept || effects != copies_effects) copies_.reset();
  // The prefix messages[:k] leaves the loop here; a point taken inside it
  // at the iteration before is kept where it serves more renders.
  const bool inside = k <= n && state->points[k].inside && state->ready[k];
  if (k <= n && usable(k) && !(inside && (state->ready[k] & ~usable(k)))) {
    inside_wasted += inside;
    // A prefix whose value of a slot differs may still resume from the
    // point inside the loop, where the iteration over message k - 1 gives
    // another outcome.
    if (inside && !slots.empty()) {
      StepsUncounted uncounted;
      if (state->inside.size() <= n) state->inside.resize(n + 1);
      state->inside[k] = std::move(state->points[k]);
    }
    take_point(in, k, false);
  } else {
    inside_useful += inside;
  }
  // The iteration over message k is the last of messages[:k + 1]. Points
  // inside the loop cost a copy each: a template whose iterations read
  // nothing that ends them (loop.last) stops taking them, unless a prefix
  // may have computed a slot otherwise (its last iteration's comparisons
  // with it may come out otherwise: prefix_at_loop resumes there).
  if (k + 1 < n && (main->reads_ahead || !slots.empty()) && usable(k + 1) && plain_scope(in, *this, k))
    take_point(in, k + 1, true);
  cur = static_cast<int64_t>(k);
  settle();
}

void Tracker::take_point(const Interp& in, std::size_t k, bool inside) {
  StepsUncounted uncounted;
  ResumePoint& p = state->points[k];
  p = ResumePoint();
  p.taken = true;
  p.inside = inside;
  p.prefix = k;
  if (inside) p.scope = in.frames.back().vars;
  p.loop = state->loops.size() - 1;
  p.output = in.root->size();
  p.capacity = in.root->capacity();
  p.pieces = in.provenance ? in.provenance->pieces.size() : 0;
  p.generation = in.generation ? in.generation->size() : 0;
  // The prefix runs each earlier main loop's iterations up to message k.
  p.steps = in.steps;
  p.at = in.steps;
  // The prefix ran the look-ahead loops' iterations before message k alone.
  p.aheads = state->aheads.size();
  p.steps -= state->ahead_steps(k, p.aheads);
  for (std::size_t i = 0; i + 1 < passes.size(); ++i) {
    const std::size_t j = k > passes[i].offset ? k - passes[i].offset : 0;
    if (j < passes[i].starts.size()) p.steps -= passes[i].end - passes[i].starts[j];
  }
  // Shared by the points taken while no other message was bound.
  if (in.provenance && (!seen_ || *seen_ != in.provenance->seen))
    seen_ = std::make_shared<const std::vector<char>>(in.provenance->seen);
  p.seen = seen_;
  Memo memo;
  const MainLoop& m = state->loops.back();
  if (!copies_) {
    auto copies = std::make_shared<std::vector<Value>>();
    for (std::size_t i : m.held) copies->push_back(copy_mutable(m.top[i].second, memo, state->copies));
    copies_kept = true;
    for (const Value& c : *copies) {
      int left = 4096;
      copies_kept = copies_kept && !holds(c, left, kIterators);
    }
    copies_ = std::move(copies);
    copies_effects = effects;
  }
  p.mutable_ = copies_;
  state->ready[k] = usable(k);
}

namespace {

// The full render's output up to `at` (a resume point or a start), with
// its steps, generation spans and provenance pieces then: where a resumed
// render goes on from.
template <class Mark>
void restore_output(const ResumeState& st, const Mark& at, Interp& in) {
  // The output grows as the full render's did, in the same allocations (the
  // steps count them): its buffer has the capacity F's had at the mark. A
  // spare of that capacity holds the most of F's bytes already.
  std::string& out = *in.root;
  ResumeState::Spare* best = nullptr;
  if (at.capacity > kOutputReserve)
    for (ResumeState::Spare& s : st.spares)
      if (s.text.capacity() == at.capacity && (!best || s.same > best->same)) best = &s;
  if (best) {
    out.swap(best->text);
    out.resize(std::min(best->same, at.output));
    best->same = 0;  // it holds this render's buffer now
    out.append(st.full, out.size(), at.output - out.size());
  } else {
    out.reserve(at.capacity);
    out.assign(st.full, 0, at.output);
  }
  in.steps = at.steps;
  if (in.generation) in.generation->assign(st.full_generation.begin(), st.full_generation.begin() + at.generation);
  if (in.provenance && st.provenance) {
    auto& pieces = in.provenance->pieces;
    pieces.assign(st.full_pieces.begin(), st.full_pieces.begin() + static_cast<std::ptrdiff_t>(at.pieces));
    if (!pieces.empty()) pieces.back().end = std::min(pieces.back().end, at.output);
  }
}

}  // namespace

void restore(const ResumeState& st, std::size_t k, bool g, Interp& in) { restore(st, st.points[k], k, g, in); }

void restore(const ResumeState& st, const ResumePoint& p, std::size_t k, bool g, Interp& in) {
  const MainLoop& main = st.loops[p.loop];
  auto& vars = in.frames[0].vars;
  vars.reserve(main.top_capacity);  // to grow as the full render's do
  vars = main.top;
  Memo memo;
  for (std::size_t j = 0; j < main.held.size(); ++j)
    vars[main.held[j]].second = copy_mutable((*p.mutable_)[j], memo, in.namespaces);
  // messages[o:] becomes messages[:k][o:], one list for each.
  const auto& all = st.lists.front().first.list->items;
  std::vector<Value> lists;
  for (const auto& [l, o] : st.lists) {
    std::size_t e = std::max(o, std::min(k, all.size()));
    lists.push_back(Value::recycled_list(std::vector<Value>(all.begin() + static_cast<std::ptrdiff_t>(std::min(o, e)),
                                                            all.begin() + static_cast<std::ptrdiff_t>(e))));
  }
  auto prefix_lists = [&](Scope& in_scope) {
    for (auto& [name, v] : in_scope) {
      if (v.kind != Kind::kList) continue;
      for (std::size_t j = 0; j < st.lists.size(); ++j)
        if (v.list == st.lists[j].first.list) v = lists[j];
    }
  };
  prefix_lists(vars);
  if (p.inside) {  // the loop's scope and items, which run_after_loop runs on
    const std::size_t o = st.loops[p.loop].offset;
    in.resume_items = Value::recycled_list(
        std::vector<Value>(all.begin() + static_cast<std::ptrdiff_t>(o), all.begin() + static_cast<std::ptrdiff_t>(k)));
    in.frames.emplace_back();
    in.frames.back().vars = p.scope;
    prefix_lists(in.frames.back().vars);
  }
  vars[st.prompt_var].second = Value::boolean(g);
  restore_output(st, p, in);
  if (in.provenance && st.provenance) {
    if (p.seen) in.provenance->seen = *p.seen;
    // An earlier main loop bound its iterations to every message; the
    // prefix's, to its own.
    for (std::size_t m = k; m < in.provenance->seen.size(); ++m) in.provenance->seen[m] = 0;
  }
}

void restore_start(const ResumeState& st, const Start& s, std::size_t k, bool g, Interp& in) {
  auto& vars = in.frames[0].vars;
  vars.reserve(s.top_capacity);               // to grow as the full render's do
  const Scope& names = st.loops.front().top;  // the top-level variables only grow: theirs come first
  for (std::size_t i = 0; i < s.top.size(); ++i) vars.emplace_back(names[i].first, s.top[i]);
  // messages[o:] becomes messages[:k][o:], one list for each.
  const auto& all = st.lists.front().first.list->items;
  std::vector<Value> lists(st.lists.size());
  for (auto& [name, v] : vars) {
    if (v.kind != Kind::kList) continue;
    for (std::size_t j = 0; j < st.lists.size(); ++j)
      if (v.list == st.lists[j].first.list) {
        if (lists[j].kind != Kind::kList) {
          const std::size_t o = st.lists[j].second, e = std::max(o, std::min(k, all.size()));
          lists[j] = Value::recycled_list(std::vector<Value>(all.begin() + static_cast<std::ptrdiff_t>(o),
                                                             all.begin() + static_cast<std::ptrdiff_t>(e)));
        }
        v = lists[j];
        break;
      }
  }
  vars[st.prompt_var].second = Value::boolean(g);
  restore_output(st, s, in);
}

Flow run_after_loop(Interp& in, const ResumeState& st, std::size_t k) {
  return run_after_loop(in, st, st.points[k], k);
}

Flow run_after_loop(Interp& in, const ResumeState& st, const ResumePoint& p, std::size_t k) {
  const MainLoop& main = st.loops[p.loop];
  const auto& path = main.path;
  if (p.inside) {
    // The loop over messages[:k][offset:], from the point's iteration on
    // (the last, but where prefix_at_loop resumes from an earlier one).
    const Stmt& loop = *(*path.back().first)[path.back().second];
    resume_iterations(in, loop, in.resume_items.list->items, p.prefix - 1 - main.offset);
    in.frames.pop_back();
  }
  for (std::size_t level = path.size(); level-- > 0;) {
    Flow f = exec(in, *path[level].first, path[level].second + 1);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

}  // namespace tokfeed::tmpl
