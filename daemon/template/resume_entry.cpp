// Prefix renders that run up to the first main loop themselves
// (ResumeState::preamble) and resume there where their state is the full
// render's (docs/chat_templates.md, "Prefix renders"), and the outcomes of
// comparisons that let a prefix resume though a value it computed there
// differs (SlotUse).
#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>
#include <vector>

#include "template/budget.hpp"
#include "template/interp.hpp"
#include "template/resume.hpp"

namespace tokfeed::tmpl {

namespace {

// An attribute of a Tracker::slots namespace whose value the prefix
// computed differently before the loop.
struct SlotDiff {
  const DictObj* ns;  // the full render's namespace
  std::string name;
  Value value;  // the prefix's
};

constexpr std::size_t kWritten = std::numeric_limits<std::size_t>::max();

// `l op r` as the comparison gave it, or false where it raises.
bool outcome(const std::string& op, const Value& l, const Value& r, bool& result) {
  try {
    result = compare_op(op, l, r);
    return true;
  } catch (const Error&) {
    return false;
  }
}

// Whether every use the full render made of the differing attributes
// before the point for k comes out the same with the prefix's values: a
// comparison gives the same outcome; a read as a whole does not agree; a
// set ends the checks of that attribute (what it set is the prefix's too).
// `targets`: per diff, the top-level variable that holds its namespace at
// the point (its value is then set to the prefix's), or kWritten.
bool uses_agree(const ResumeState& st, const ResumePoint& p, const std::vector<SlotDiff>& diffs,
                std::vector<std::size_t>& targets) {
  targets.clear();
  const MainLoop& main = st.loops[p.loop];
  for (const SlotDiff& d : diffs) {
    bool written = false;
    for (const SlotUse& u : st.uses) {
      if (u.at > p.at) break;  // after it (an iteration takes its step after the point)
      if (u.ns != d.ns || (!u.name.empty() && u.name != d.name)) continue;
      if (u.kind == SlotUse::kWrite) {
        written = true;
        break;
      }
      if (u.kind == SlotUse::kOpaque) return false;
      bool r = false;
      if (!outcome(u.op, u.left ? d.value : u.other, u.left ? u.other : d.value, r) || r != u.result) return false;
    }
    std::size_t target = kWritten;
    if (!written) {
      for (std::size_t i = 0; i < main.top.size() && target == kWritten; ++i)
        if (main.top[i].second.kind == Kind::kDict && main.top[i].second.dict.get() == d.ns) target = i;
      if (target == kWritten) return false;  // no longer a top-level variable's
    }
    targets.push_back(target);
  }
  return true;
}

// Where the uses before the point for k do not agree: the latest point
// inside the same main loop, at the start of an iteration j < k, before
// which they do. The prefix then runs the iterations from j on itself, as
// its loop over messages[:k] (restore() and run_after_loop() take k).
const ResumePoint* earlier_point(const ResumeState& st, std::size_t k, const std::vector<SlotDiff>& diffs,
                                 std::vector<std::size_t>& targets) {
  const std::size_t loop = st.points[k].loop;
  for (std::size_t j = k; j > 0; --j) {
    const ResumePoint* q = j < st.inside.size() && st.inside[j].taken ? &st.inside[j] : &st.points[j];
    if (!q->taken || !q->inside || q->loop != loop) continue;
    if (uses_agree(st, *q, diffs, targets)) return q;
  }
  return nullptr;
}

}  // namespace

namespace {

// The objects of a full render and of a prefix render paired one to one so
// far, for SameState: two open-addressed tables (each side's object to the
// other's), kept by the thread and emptied by a new generation, so that a
// long conversation's state, which pairs each of its messages, costs a
// probe a message and no allocation.
class PairTable {
 public:
  // The thread's table, empty.
  static PairTable& cleared() {
    static thread_local PairTable table;
    table.clear();
    return table;
  }
  // 1: f and p were paired before; 0: one of them was paired with another
  // object; -1: new, now paired.
  int pair(const void* f, const void* p) {
    if (full_.empty()) grow();
    Slot* a = find(full_, f);
    if (a->gen == gen_) return a->other == p;
    Slot* b = find(prefix_, p);
    if (b->gen == gen_) return 0;
    if (2 * (size_ + 1) > full_.size()) {
      grow();
      a = find(full_, f);
      b = find(prefix_, p);
    }
    *a = {f, p, gen_};
    *b = {p, f, gen_};
    ++size_;
    return -1;
  }

 private:
  struct Slot {
    const void* key = nullptr;
    const void* other = nullptr;
    uint32_t gen = 0;  // the slot is in use when it is the table's generation
  };

  void clear() {
    size_ = 0;
    if (++gen_ != 0) return;
    for (auto* t : {&full_, &prefix_})  // the generations wrapped: every slot made empty
      for (Slot& s : *t) s.gen = 0;
    gen_ = 1;
  }
  // The slot holding `key`, or the empty one where it goes.
  Slot* find(std::vector<Slot>& t, const void* key) {
    const std::size_t mask = t.size() - 1;
    std::size_t i = (reinterpret_cast<uintptr_t>(key) * 0x9E3779B97F4A7C15ull) >> shift_;
    while (t[i].gen == gen_ && t[i].key != key) i = (i + 1) & mask;
    return &t[i];
  }
  void grow() {
    OutsideBudget outside;  // kept for the thread's later renders, as its other tables
    std::vector<Slot> old = std::move(full_);
    const std::size_t n = old.empty() ? 64 : 2 * old.size();
    full_.assign(n, Slot{});
    prefix_.assign(n, Slot{});
    shift_ = 64 - static_cast<unsigned>(__builtin_ctzll(n));
    const uint32_t gen = gen_;
    gen_ = 1;
    size_ = 0;
    for (const Slot& s : old)
      if (s.gen == gen) {
        *find(full_, s.key) = {s.key, s.other, 1};
        *find(prefix_, s.other) = {s.other, s.key, 1};
        ++size_;
      }
  }

  std::vector<Slot> full_, prefix_;  // sizes: the same power of two
  unsigned shift_ = 58;
  uint32_t gen_ = 1;
  std::size_t size_ = 0;
};

// Whether the value `p` of a prefix render of messages[:k] is the value
// `f` of the full render at the same place, but for the messages the
// prefix lacks: the same data, each slice messages[o:] the full render
// kept being the prefix's messages[o:k], the same objects shared alike
// (paired(): the full render's objects and the prefix's met so far, one to
// one), a macro defined at the top level by the same statement.
class SameState {
 public:
  SameState(const ResumeState& st, std::size_t k) : st_(st), k_(k) {}

  // same() for a namespace a top-level variable holds (Tracker::slots),
  // but for attributes whose values are scalars in both: those go to
  // `diffs`, with the prefix's value.
  bool same_slots(const Value& f, const Value& p, const DictObj* live, std::vector<SlotDiff>& diffs) {
    if (f.kind != Kind::kDict || p.kind != Kind::kDict || !f.ns || !p.ns) return same(f, p);
    int known = paired(f.dict.get(), p.dict.get());
    if (known >= 0) return known != 0;
    const auto& fi = f.dict->items();
    const auto& pi = p.dict->items();
    if (fi.size() != pi.size()) return false;
    for (std::size_t i = 0; i < fi.size(); ++i) {
      if (fi[i].first != pi[i].first) return false;
      if (same(fi[i].second, pi[i].second, 1)) continue;
      if (!scalar(fi[i].second) || !scalar(pi[i].second)) return false;
      diffs.push_back({live, fi[i].first, pi[i].second});
    }
    return true;
  }

  bool same(const Value& f, const Value& p, int depth = 0) {
    if (f.kind != p.kind || f.tuple != p.tuple || f.ns != p.ns || f.gen != p.gen || f.view != p.view ||
        depth > kMaxNesting)
      return false;
    switch (f.kind) {
      case Kind::kUndefined:
      case Kind::kStr: return f.s == p.s || (f.s && p.s && f.s.unread() == p.s.unread());
      case Kind::kNone: return true;
      case Kind::kBool: return f.b == p.b;
      case Kind::kInt: return f.i == p.i;
      case Kind::kFloat: return std::memcmp(&f.f, &p.f, sizeof f.f) == 0;
      case Kind::kFunc: return f.fn == p.fn || (f.fn->macro && f.fn->macro == p.fn->macro);
      case Kind::kList: {
        int known = paired(f.list.get(), p.list.get());
        if (known >= 0 || f.list == p.list) return known != 0;
        const auto& fi = f.list->items;
        const auto& pi = p.list->items;
        for (const auto& [l, o] : st_.lists)
          if (l.list == f.list) {  // messages[o:], which the prefix has as messages[o:k]
            const auto& all = st_.lists.front().first.list->items;
            const std::size_t e = std::max(o, std::min(k_, all.size()));
            if (pi.size() != e - o) return false;
            for (std::size_t i = 0; i < pi.size(); ++i)
              if (!same_object(all[o + i], pi[i])) return false;
            return true;
          }
        if (fi.size() != pi.size()) return false;
        for (std::size_t i = 0; i < fi.size(); ++i)
          if (!same(fi[i], pi[i], depth + 1)) return false;
        return true;
      }
      case Kind::kDict: {
        int known = paired(f.dict.get(), p.dict.get());
        if (known >= 0 || f.dict == p.dict) return known != 0;
        const auto& fi = f.dict->items();
        const auto& pi = p.dict->items();
        if (fi.size() != pi.size()) return false;
        for (std::size_t i = 0; i < fi.size(); ++i)
          if (fi[i].first != pi[i].first || !same(fi[i].second, pi[i].second, depth + 1)) return false;
        return true;
      }
    }
    return false;
  }

 private:
  // 1: f and p were paired before; 0: one of them was paired with another
  // object; -1: new, now paired (their contents are to be compared).
  int paired(const void* f, const void* p) { return pairs_.pair(f, p); }
  // A message: the very same object in both.
  bool same_object(const Value& f, const Value& p) {
    if (f.kind != p.kind) return false;
    if (f.kind == Kind::kDict) return f.dict == p.dict && paired(f.dict.get(), p.dict.get()) != 0;
    return same(f, p);
  }

  static bool scalar(const Value& v) { return v.kind >= Kind::kNone && v.kind <= Kind::kStr; }

  const ResumeState& st_;
  std::size_t k_;
  PairTable& pairs_ = PairTable::cleared();
};

}  // namespace

namespace {

// restore() of the point the prefix resumes from, with its own values of
// the attributes that differ.
void resume_at(const ResumeState& st, const ResumeState::Probed& found, std::size_t k, bool g, Interp& in) {
  restore(st, *found.point, k, g, in);
  for (const auto& [var, name, value] : found.sets) in.frames[0].vars[var].second.dict->set(name, value);
}

}  // namespace

bool prefix_at_loop(Interp& in, const Stmt& s, const Value& seq) {
  Probe& probe = *in.probe;
  const ResumeState& st = *probe.state;
  if (&s != st.loops[st.entry_loop].stmt || in.frames.size() != 1 || in.out != in.root) return false;
  in.probe = nullptr;  // the first main loop: resumed from here, or rendered on in full
  const std::size_t k = probe.k;
  const Entry& e = st.entry;
  if (!(st.ready[k] & (probe.g ? 8 : 4))) return false;
  const auto& vars = in.frames[0].vars;
  if (vars.size() != e.top.size() || vars.capacity() != e.top_capacity || in.root->size() != e.output ||
      in.root->capacity() != e.capacity || in.root->compare(0, e.output, st.full, 0, e.output) != 0)
    return false;
  if (in.generation && (in.generation->size() != e.generation ||
                        !std::equal(in.generation->begin(), in.generation->end(), st.full_generation.begin())))
    return false;
  if (in.provenance && st.provenance) {
    const auto& pieces = in.provenance->pieces;
    if (pieces.size() != e.pieces) return false;
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      const auto& a = pieces[i];
      const auto& b = st.full_pieces[i];
      if (a.begin != b.begin || a.message != b.message || a.end != std::min(b.end, e.output)) return false;
    }
    if (!std::equal(in.provenance->seen.begin(), in.provenance->seen.begin() + static_cast<std::ptrdiff_t>(k),
                    e.seen.begin()))
      return false;
  } else if (in.provenance || st.provenance) {
    return false;
  }
  // What deciding and restoring allocate is no step of the render's: the
  // point's steps are the full render's, its output's growth included.
  std::optional<StepsUncounted> uncounted(std::in_place);
  SameState same(st, k);
  std::vector<SlotDiff> diffs;
  for (std::size_t i = 0; i < vars.size(); ++i) {
    if (vars[i].first != e.top[i].first) return false;
    if (i == st.prompt_var) continue;
    const DictObj* live = i < e.live.size() ? e.live[i] : nullptr;
    if (!(live ? same.same_slots(e.top[i].second, vars[i].second, live, diffs)
               : same.same(e.top[i].second, vars[i].second)))
      return false;
  }
  if (!same.same(e.seq, seq)) return false;  // messages[offset:k]
  std::vector<std::size_t> targets;  // per diff: the variable that holds its namespace at the point, npos: set before
  const ResumePoint* p = &st.points[k];
  if (p->loop != st.entry_loop) return false;  // taken before the entry moved
  if (!diffs.empty() && !uses_agree(st, *p, diffs, targets)) p = earlier_point(st, k, diffs, targets);
  if (!p) return false;
  ResumeState::Probed found;
  found.ok = true;
  found.steps = in.steps;
  found.point = p;
  for (std::size_t d = 0; d < diffs.size(); ++d)  // the prefix's own values, which the loop has not set
    if (targets[d] != kWritten) found.sets.emplace_back(targets[d], diffs[d].name, diffs[d].value);
  if (!probe.read_prompt) {
    if (st.probed.size() <= k) st.probed.resize(st.ready.size());
    st.probed[k] = found;
  }
  // The full render's steps from the loop to the point, plus this one's.
  const uint64_t steps = p->at - st.ahead_steps(k, p->aheads) - e.steps + in.steps;
  if (steps >= in.max_steps) return false;  // the render in full says where it stops
  resume_at(st, found, k, probe.g, in);
  uncounted.reset();
  probe.same = p->output;
  in.steps = steps;
  run_after_loop(in, st, *p, k);
  in.done = true;
  return true;
}

uint64_t probed_steps(const ResumeState& st, std::size_t k) {
  const ResumeState::Probed& found = st.probed[k];
  return found.point->at - st.ahead_steps(k, found.point->aheads) - st.entry.steps + found.steps;
}

void restore_probed(const ResumeState& st, std::size_t k, bool g, Interp& in) {
  resume_at(st, st.probed[k], k, g, in);
  in.steps = probed_steps(st, k);
}

Consumer::Consumer(Interp& in) : in_(in), t_(tracking(in) ? in.track : nullptr) {}

const Value& Consumer::operand_ref(const Expr& e, Value& tmp) {
  if (!t_ || n_ >= 2) return tmpl::operand_ref(in_, e, tmp);
  const Tracker::Claim c = claim(*t_, e);
  t_->claim = c;
  t_->claimed_ns = nullptr;
  t_->claimed_length = -1;
  const Value& v = tmpl::operand_ref(in_, e, tmp);
  Read& r = reads_[n_++];
  r.ns = t_->claimed_ns;
  if (r.ns) r.name = t_->claimed_name;
  r.length = t_->claimed_length;
  t_->claim = Tracker::Claim::kNone;
  t_->claimed_ns = nullptr;
  t_->claimed_length = -1;
  return v;
}

void Consumer::compared(const std::string& op, const Value& l, const Value& r, bool result) {
  if (!t_ || n_ != 2 || !t_->watching) return;
  const Read& a = reads_[0];
  const Read& b = reads_[1];
  if ((a.length >= 0 || a.ns) && (b.length >= 0 || b.ns)) {  // both differ: read as values
    for (const Read* x : {&a, &b})
      if (x->ns) t_->slot_use(x->ns, x->name, SlotUse::kOpaque);
    if (a.length >= 0 || b.length >= 0) t_->spoil_all();
    return;
  }
  if (a.length >= 0 || b.length >= 0) {
    // messages[:k][o:] | length is max(k - o, 0): the prefixes for which
    // the comparison comes out otherwise read it differently.
    const int64_t o = a.length >= 0 ? a.length : b.length;
    for (std::size_t k = static_cast<std::size_t>(std::max<int64_t>(t_->cur + 1, 0)); k <= t_->n; ++k) {
      const Value len = Value::integer(std::max<int64_t>(static_cast<int64_t>(k) - o, 0));
      bool same = false;
      if (!outcome(op, a.length >= 0 ? len : l, a.length >= 0 ? r : len, same) || same != result) t_->spoil_one(k);
    }
    t_->settle();
    return;
  }
  const Read& s = a.ns ? a : b;
  if (!s.ns || !t_->record_use()) return;
  StepsUncounted uncounted;
  SlotUse& u = t_->state->uses.emplace_back();
  u.ns = s.ns;
  u.name = s.name;
  u.kind = SlotUse::kCompare;
  u.left = a.ns != nullptr;
  u.op = op;
  u.other = a.ns ? r : l;
  u.result = result;
  u.at = *t_->steps;
}

}  // namespace tokfeed::tmpl
