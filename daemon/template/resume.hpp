// Renders of a conversation's prefixes resumed from its full render
// (docs/chat_templates.md, "Prefix renders"). While the full render F runs,
// the tracker watches what the template reads that a render of
// messages[:k] (with add_generation_prompt g) would read differently: the
// list's length, its items from k on, its last items, `loop.last` and
// `loop.length` of the loop over it, add_generation_prompt. Until the first
// such read, the two renders run the same steps. So at the start of the
// main loop's iteration k, where the render of messages[:k] would leave the
// loop instead, the state it would leave it with is F's: the resume point
// keeps it (the output so far, the template's top-level variables, copies
// of what later iterations mutate), and the prefix render runs only the
// statements after the loop from there. A read the tracker cannot bound
// spoils every prefix not yet passed, which are then rendered in full.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "template/ast.hpp"
#include "template/interp.hpp"
#include "template/template.hpp"

namespace tokfeed::tmpl {

// The state at the start of a main loop's iteration over message k.
struct ResumePoint {
  bool taken = false;
  std::size_t loop = 0;                           // which main loop (ResumeState::loops)
  std::size_t output = 0;                         // bytes of F written before it
  std::size_t capacity = 0;                       // the output's capacity then (its growth is counted in steps)
  std::size_t pieces = 0;                         // provenance pieces that start before it
  std::size_t generation = 0;                     // {% generation %} spans before it
  uint64_t steps = 0;                             // steps the render had taken
  uint64_t at = 0;                                // the full render's own steps then (SlotUse::at)
  std::shared_ptr<const std::vector<char>> seen;  // provenance's `seen` then (shared as mutable_ is)
  // Copies of the top-level values that hold mutable objects, by `held`
  // index (shared by the points taken at one iteration; never changed).
  std::shared_ptr<const std::vector<Value>> mutable_;
  std::size_t aheads = 0;  // look-ahead runs before it (ResumeState::aheads)
  // A point inside the loop: taken at the start of the iteration over
  // message k - 1, which is the last of messages[:k] (its loop.last,
  // loop.length differ from F's), so the prefix render runs that iteration
  // itself, in the loop's scope as F had it then.
  bool inside = false;
  Scope scope;
  std::size_t prefix = 0;  // the k it was taken for: inside, the iteration over message k - 1 starts
};

// A main loop: what the render needs to resume after it.
struct MainLoop {
  // The statements around it, innermost last (a body and the loop's or
  // enclosing `if`'s index in it).
  std::vector<std::pair<const Body*, std::size_t>> path;
  Scope top;                      // the top-level variables at its start
  std::size_t top_capacity = 0;   // their vector's capacity then (its growth is counted in steps)
  std::vector<std::size_t> held;  // which of them hold a namespace or an iterator
  std::size_t offset = 0;         // it iterates messages[offset:]
  const Stmt* stmt = nullptr;     // the loop itself
};

// The full render's state where its first main loop starts, kept when the
// template read before it what the prefixes see differently (its length,
// its last items, add_generation_prompt): a prefix render then runs up to
// that loop itself and resumes only where its state there is the full
// render's (prefix_at_loop).
struct Entry {
  Scope top;  // the top-level variables, namespaces and iterators copied
  std::size_t top_capacity = 0;
  std::size_t output = 0, capacity = 0, pieces = 0, generation = 0;
  uint64_t steps = 0;
  std::vector<char> seen;
  Value seq;  // what the loop iterates
  // Per top-level variable: the namespace it holds in the full render (a
  // Tracker::slots one; `top` holds its copy), else null.
  std::vector<const DictObj*> live;
};

// What the full render did, from its first main loop on, with an attribute
// of a namespace that a top-level variable held there (Tracker::slots),
// which a prefix that ran up to that loop itself may have computed
// differently (Qwen3's last user query): a prefix whose value differs
// resumes where every use before its point comes out the same with its
// value (docs/chat_templates.md, "Prefix renders").
struct SlotUse {
  enum Kind : uint8_t {
    kOpaque,   // read as a value (printed, stored, computed with): the prefix's must be the same
    kCompare,  // compared with `other` by `op`, giving `result`
    kWrite,    // set: from here on the full render's value is the prefix's too
  };
  const DictObj* ns = nullptr;
  std::string name;  // empty: every attribute (the namespace read as a whole)
  Kind kind = kOpaque;
  bool left = false;  // kCompare: the attribute is the left operand
  std::string op;
  Value other;
  bool result = false;
  uint64_t at = 0;  // the full render's steps then
};

// A top-level `set` statement before the first main loop, at whose start
// the full render's state is that of each prefix render the reads before
// it did not concern: there the first read that concerns some prefix
// happened. A prefix render that runs up to the loop itself starts there
// instead of at the template's start (Template::resume).
struct Start {
  std::size_t at = 0;  // the statement's index in the template's body
  // The top-level variables' values (none holds a namespace, an iterator
  // or a function); their names are the first of MainLoop::top's.
  std::vector<Value> top;
  std::size_t top_capacity = 0;
  std::size_t output = 0, capacity = 0, pieces = 0, generation = 0;
  uint64_t steps = 0;          // before the statement's own step
  std::vector<uint8_t> clean;  // per k: Tracker::clean then (the low bits: no read before concerned it)
  bool prompt = false;         // add_generation_prompt was read before it
};

// A run of a look-ahead loop in the full render whose iterations that
// changed nothing a prefix may lack (Tracker::enter_loop): the prefixes
// without messages[t] did not take the steps of its iterations from the
// one over messages[t] on.
struct AheadRun {
  std::size_t offset = 0;        // it iterated messages[offset:]
  std::vector<uint64_t> starts;  // the steps at each iteration's start
  uint64_t end = 0;              // the steps when it ended
};

struct ResumeState {
  std::vector<MainLoop> loops;
  std::vector<AheadRun> aheads;  // in the order the full render ran them
  // The steps of the first `runs` look-ahead runs that the render of
  // messages[:k] does not take.
  uint64_t ahead_steps(std::size_t k, std::size_t runs) const {
    uint64_t skipped = 0;
    for (std::size_t r = 0; r < runs; ++r) {
      const AheadRun& a = aheads[r];
      const std::size_t j = k > a.offset ? k - a.offset : 0;
      if (j < a.starts.size()) skipped += a.end - a.starts[j];
    }
    return skipped;
  }
  std::size_t messages_var = 0;  // where `messages` and add_generation_prompt are in the render's vars
  std::size_t prompt_var = 0;
  std::vector<std::pair<Value, std::size_t>> lists;  // messages[o:] as read (the list, o)
  std::string full;                                  // F
  bool provenance = false;                           // whether F recorded it
  std::vector<Provenance::Piece> full_pieces;
  Spans full_generation;
  std::vector<ResumePoint> points;  // per k in [0, n]
  // Per k (where taken): a point inside the loop that a point at the start
  // of iteration k replaced, kept where prefixes run up to the loop
  // themselves (prefix_at_loop tries it where the other's SlotUses differ).
  std::vector<ResumePoint> inside;
  // Per k: which renders of messages[:k] resume (bits as Resumes::want),
  // and, shifted by 2, which resume after running up to the first main loop.
  std::vector<uint8_t> ready;
  std::vector<Ref<DictObj>> copies;  // namespaces the points hold: emptied at the end (cycles)
  Scope vars;                        // the render's variables (where `entry` is kept)
  bool preamble = false;             // read before the first main loop: `entry` decides
  Entry entry;
  // The main loop the entry is at: the first, or a later one where an
  // earlier one changed what the prefixes resuming in it would see
  // (Tracker::enter_loop).
  std::size_t entry_loop = 0;
  std::vector<SlotUse> uses;  // in the order the full render made them
  // Per k: what a prefix render that ran up to the first main loop found
  // there, where it resumed and read no add_generation_prompt before: the
  // render of messages[:k] with the other prompt resumes the same way
  // without running up to the loop (Template::resume).
  struct Probed {
    bool ok = false;
    uint64_t steps = 0;  // the prefix's own steps before the loop
    const ResumePoint* point = nullptr;
    // Where restore() leaves the full render's value of an attribute: the
    // top-level variable holding the namespace, the attribute, its value.
    std::vector<std::tuple<std::size_t, std::string, Value>> sets;
  };
  mutable std::vector<Probed> probed;
  std::vector<Start> starts;  // in the order the full render met them
  // Texts of resumed renders given back (Resumes::recycle): a buffer whose
  // capacity is a point's serves its render, which copies only F's bytes
  // past the `same` it starts with (restore_output). Three: the label rule
  // holds the renders of messages[:i] and messages[:i + 1] at once, and a
  // third serves one that asked for prefixes in another order.
  struct Spare {
    std::string text;
    std::size_t same = 0;
  };
  mutable std::array<Spare, 3> spares;
  mutable std::size_t next_spare = 0;  // the one the next text replaces
  // The latest start the render of messages[:k] with add_generation_prompt
  // g can begin at (null: the template's start).
  const Start* start_for(std::size_t k, bool g) const {
    for (std::size_t i = starts.size(); i-- > 0;)
      if (starts[i].clean[k] & (g ? 2 : 1)) return &starts[i];
    return nullptr;
  }
  ~ResumeState();
};

// The tracker a render with resume points runs with (Interp::track).
struct Tracker {
  const Body* top = nullptr;
  std::size_t n = 0;          // messages
  std::vector<uint8_t> want;  // per k: 1: render(messages[:k], false), 2: render(messages[:k], true)
  // Per k: which of those still run as F does (the bits of want), and
  // which would after running up to the first main loop themselves (want
  // shifted by 2: what was read before it aside).
  std::vector<uint8_t> clean;
  // Per k: the bits of `clean` shifted by 2 that running up to a later main
  // loop does not restore (spoil_now: what a prefix stores there that its
  // state cannot be compared by). Empty until the first.
  std::vector<uint8_t> never;
  uint8_t usable(std::size_t k) const { return static_cast<uint8_t>((want[k] | want[k] << 2) & clean[k]); }
  int64_t cur = -1;               // in a main loop: resume points are taken for k <= cur
  bool watching = true;           // false once no wanted prefix is left to resume
  const Stmt* main = nullptr;     // the main loop running
  const DictObj* loop = nullptr;  // its `loop`
  std::size_t offset = 0;         // it iterates messages[offset:]
  // Every main loop may be followed by another, which the prefixes reach
  // having run the first one's iterations before message k only: those
  // after must change nothing (the output, a namespace, an iterator).
  uint64_t effects = 0;  // namespace attributes set
  struct Pass {          // a main loop that has run, or runs
    std::size_t offset = 0;
    std::vector<uint64_t> starts;  // steps at each iteration's start
    uint64_t end = 0;              // steps at its end
    bool iterators = false;        // the top-level variables reach an iterator (an iteration may use one up)
    int64_t changed = -1;          // the last message whose iteration changed something
    std::size_t output = 0;        // the output's size and the namespace sets at the iteration's start
    uint64_t effects = 0;
    std::size_t begin = 0;  // the output's size at the loop's start
    bool wrote = false;     // it wrote output (loop_ended)
  };
  std::vector<Pass> passes;
  // From the first main loop on, where prefixes may run up to it
  // themselves: the namespaces the top-level variables hold there (kept
  // alive: their addresses name them in ResumeState::uses).
  std::vector<Value> slots;
  bool is_slot(const Value& v) const {
    if (slots.empty() || v.kind != Kind::kDict || !v.ns) return false;
    for (const Value& s : slots)
      if (s.dict == v.dict) return true;
    return false;
  }
  void slot_use(const DictObj* ns, std::string_view name, SlotUse::Kind kind);
  // Whether another SlotUse may be kept (else the render is watched no more).
  bool record_use();
  void watch_slots(const MainLoop& m, Entry& e);
  const uint64_t* steps = nullptr;  // the render's
  const Interp* in = nullptr;       // the render
  // Before the first main loop: the top-level statement running (npos:
  // none), what the render held at its start, and the statement that last
  // tried to become a Start.
  const Body* pre = nullptr;  // `top` until the first main loop starts (top_statement() is called till then)
  std::size_t top_at = SIZE_MAX, tried = SIZE_MAX;
  uint64_t top_steps = 0;
  bool prompt_seen = false;  // add_generation_prompt read
  // A top-level statement starts (Template::render).
  void top_statement(std::size_t at) {
    if (!passes.empty() || !watching) {
      top_at = SIZE_MAX;
      pre = nullptr;
      return;
    }
    top_at = at;
    top_steps = *steps;
  }
  // A read before the first main loop that concerns the prefixes k in
  // [lo, hi] (`bits` as spoil's): where it concerns one wanted that no
  // read concerned before, keeps the start of the statement running,
  // where it is a Start.
  void preamble_read(int64_t lo, int64_t hi, uint8_t bits);
  // What a comparison's operand read that the prefixes may see differently
  // but the comparison consumes itself (Consumer): a slot's attribute, the
  // length of messages[o:].
  enum class Claim : uint8_t { kNone, kAttr, kLength };
  Claim claim = Claim::kNone;  // the next such read is the operand's
  const DictObj* claimed_ns = nullptr;
  std::string_view claimed_name;  // the attribute expression's own (the parsed template outlives the render)
  int64_t claimed_length = -1;    // o, for messages[o:] | length
  const Vars* vars = nullptr;     // the render's own variables
  ResumeState* state = nullptr;   // its `lists`: messages and the slices messages[o:] read (kept alive)

  // The offset of `l` if it is messages[o:], else -1.
  int64_t offset_of(const ListObj* l) const {
    for (const auto& [p, o] : state->lists)
      if (p.list.get() == l) return static_cast<int64_t>(o);
    return -1;
  }
  bool watched(const Value& v) const {
    return (v.kind == Kind::kList && offset_of(v.list.get()) >= 0) || (v.kind == Kind::kDict && v.dict.get() == loop);
  }
  // Prefixes k in (cur, hi] read differently (bits: 1 g=false, 2 g=true).
  // Before the first main loop, a read only marks the state `preamble`.
  void spoil(int64_t hi, uint8_t bits = 3);
  void spoil_all(uint8_t bits = 3) { spoil(static_cast<int64_t>(n), bits); }
  // Every prefix not yet passed, before the first main loop too: what the
  // render stores that a resume point cannot restore as the prefix has it.
  void spoil_now(int64_t hi, uint8_t bits = 3);
  void spoil_bits(int64_t hi, uint8_t bits);
  // Prefix k alone (as spoil).
  void spoil_one(std::size_t k, uint8_t bits = 3);
  // Stops watching once no wanted prefix is left to resume.
  void settle();
  // Whether prefix k may still run up to a later main loop itself and
  // resume there (enter_loop).
  bool reenters(std::size_t k) const {
    return !passes.empty() && (static_cast<uint8_t>(want[k] << 2) & ~(never.empty() ? 0 : never[k]) & 12);
  }
  bool may_reenter = false;  // in a main loop that another follows, reenters(k) for some k >= 1
  void count_reentries();
  // `v` used where its value is read as a whole (printed, compared,
  // filtered, passed to a function).
  void operand(const Value& v) {
    if (watching && (watched(v) || is_slot(v))) operand_read(v);
  }
  void operand_read(const Value& v);
  // A namespace's attribute set (Stmt `set ns.name`).
  // (To the value it holds already: no effect, nothing later statements see
  // changes.)
  void set_attr(const Value& ns, std::string_view name, const Value& v);
  // `v` tested for truth.
  void truth(const Value& v) {
    if (watching && v.kind == Kind::kList) truth_read(v);
  }
  void truth_read(const Value& v);
  // obj[key] read.
  void item(const Value& obj, const Value& key) {
    if (!watching) return;
    if (obj.kind != Kind::kList && (obj.kind != Kind::kDict || (!obj.ns && obj.dict.get() != loop))) return;
    item_read(obj, key);
  }
  void item_read(const Value& obj, const Value& key);
  // obj.name read (an attribute, or a method called). Of anything but a
  // list, a namespace or `loop` (a message's `content`, a str's method) it
  // only ends a claim.
  void attr(const Value& obj, std::string_view name) {
    if (!watching) return;
    if (obj.kind != Kind::kList && (obj.kind != Kind::kDict || (!obj.ns && obj.dict.get() != loop))) {
      claim = Claim::kNone;
      return;
    }
    attr_read(obj, name);
  }
  void attr_read(const Value& obj, std::string_view name);
  // out = obj[start:stop:step] read: registered when it is messages[o:].
  void slice(const Value& obj, const Value& start, const Value& stop, const Value& step, const Value& out);
  // A value stored where the resume point cannot see it (a namespace
  // attribute): spoils when it may hold the loop or a macro's closure.
  void stored(const Value& v);
  // `{% for %}` over `seq`: whether it is a main loop. A loop inside the
  // main loop over messages[o:] whose body cannot tell how many items
  // follow (no `loop`, filter or else) is a look-ahead: `ahead_at` is set
  // to o, and its iterations are watched (ahead_iteration, ahead_end).
  bool enter_loop(const Interp& in, const Stmt& s, const Value& seq, int64_t& ahead_at);
  // The look-ahead's iteration over messages[t] starts. The prefixes
  // without message t leave the look-ahead before it: that concerns them
  // where the iteration changes something (writes output, sets a
  // namespace attribute; a set of a watched one, even to its value), and
  // where its steps cannot be left out of their points (another main loop
  // may follow, whose points count this one's iterations as a whole; a
  // pure macro's call may be kept, which counts the messages bound; an
  // iterator is in reach), any read of it does.
  void ahead_iteration(const Interp& in, std::size_t t);
  // The look-ahead ended (after its last iteration, or a break).
  void ahead_end(const Interp& in);
  struct Ahead {
    bool active = false;
    bool quiet = false;                // iterations that change nothing concern no prefix
    int64_t item = -1;                 // the message the iteration running is over
    std::size_t out = 0, root = 0;     // the output's sizes at its start
    uint64_t effects = 0, writes = 0;  // and the namespace sets
  } lookahead;
  uint64_t slot_writes = 0;  // sets of a watched namespace's attributes
  // Whether the look-ahead iteration running changed something.
  bool ahead_changed(const Interp& in) const;
  // The main loop's iteration over message k starts.
  void iteration(const Interp& in, std::size_t k);
  // Keeps the resume point of the render of messages[:k] (`inside`: at the
  // start of its last iteration, the one over message k - 1).
  void take_point(const Interp& in, std::size_t k, bool inside);
  // The copies the points hold of the top-level values that hold mutable
  // objects, once made: kept from one iteration to the next while no
  // namespace attribute was set (`effects`) and no iterator is in reach
  // (which an iteration may use up), as then the values are the same.
  std::shared_ptr<const std::vector<Value>> copies_;
  uint64_t copies_effects = 0;  // effects when copies_ was made
  bool copies_kept = false;     // copies_ reach no iterator: a later iteration may keep them
  std::shared_ptr<const std::vector<char>> seen_;
  int inside_useful = 0, inside_wasted = 0;  // points inside the loop that served, and that a later one replaced
  void loop_ended(const Interp& in);
};

// Whether the render watches what it reads (the hooks' fast test).
inline bool tracking(const Interp& in) { return in.track && in.track->watching; }

// A comparison's operands, read where the render tracks (eval.cpp): an
// operand that is `ns.name` of a Tracker::slots namespace, or
// `messages[o:] | length`, is consumed by the comparison alone, so the
// tracker records the outcome (SlotUse::kCompare; for the length, the
// prefixes whose length gives another outcome) instead of a read of the
// value as a whole.
class Consumer {
 public:
  // Whether the comparison `e` has such an operand (else it is evaluated
  // as any other).
  static bool wanted(const Tracker& t, const Expr& e) {
    return claim(t, *e.a[0]) != Tracker::Claim::kNone || claim(t, *e.a[1]) != Tracker::Claim::kNone;
  }
  explicit Consumer(Interp& in);
  // operand_ref() of the operand `e`, as the comparison's.
  const Value& operand_ref(const Expr& e, Value& tmp);
  // The comparison `l op r` gave `result`.
  void compared(const std::string& op, const Value& l, const Value& r, bool result);

 private:
  struct Read {
    const DictObj* ns = nullptr;
    std::string_view name;
    int64_t length = -1;
  };
  // The read `e` makes that the comparison may consume: its shape is one
  // whose read is the operand's own (nothing else runs in between).
  static Tracker::Claim claim(const Tracker& t, const Expr& e) {
    if (e.a.empty() || !e.a[0] || e.a[0]->kind != EK::kName) return Tracker::Claim::kNone;
    if (e.kind == EK::kAttr) return t.slots.empty() ? Tracker::Claim::kNone : Tracker::Claim::kAttr;
    if (e.kind == EK::kFilter && e.a.size() == 1 && e.kw.empty() && (e.name == "length" || e.name == "count"))
      return Tracker::Claim::kLength;
    return Tracker::Claim::kNone;
  }
  Interp& in_;
  Tracker* t_;
  Read reads_[2];
  int n_ = 0;
};

// A render of messages[:k] that runs up to the first main loop itself
// (ResumeState::preamble): there it compares its state with the full
// render's and, where they are the same but for the messages it lacks,
// resumes from the point for k (ResumeJump).
struct Probe {
  const ResumeState* state = nullptr;
  std::size_t k = 0;
  bool g = false;
  bool read_prompt = false;  // it read add_generation_prompt before the loop
  std::size_t same = 0;      // resumed: the bytes of the full render's output it starts with
};
// add_generation_prompt read by name (eval.cpp).
inline void prompt_read(Interp& in) {
  if (in.track && in.track->watching) {
    in.track->spoil_all(2);
    in.track->prompt_seen = true;
  }
  if (in.probe) in.probe->read_prompt = true;
}
// At the start of `{% for %}` `s` over `seq` in a probed render: where
// the render can resume from here, restores the point for k, runs the rest
// of the template and sets in.done (the statements in progress stop);
// true then. Clears in.probe at the first main loop.
bool prefix_at_loop(Interp& in, const Stmt& s, const Value& seq);

// Sets `in` (top-level variables, output, spans, provenance, steps) to the
// state the render of messages[:k] with add_generation_prompt = g leaves the
// main loop in, or, for a point inside it, starts its last iteration in
// (st.ready[k] says it can).
void restore(const ResumeState& st, std::size_t k, bool g, Interp& in);
void restore(const ResumeState& st, const ResumePoint& p, std::size_t k, bool g, Interp& in);
// The state the render of messages[:k] with add_generation_prompt g
// resumes from, where the render with the other prompt ran up to the loop
// (ResumeState::probed): restore() of its point, the prefix's own values
// of the attributes that differ, its steps (probed_steps()).
void restore_probed(const ResumeState& st, std::size_t k, bool g, Interp& in);
// Sets `in` to the state the render of messages[:k] with
// add_generation_prompt g has at the start `s` (ResumeState::start_for):
// the full render's, with messages[o:] cut to the prefix.
void restore_start(const ResumeState& st, const Start& s, std::size_t k, bool g, Interp& in);
uint64_t probed_steps(const ResumeState& st, std::size_t k);
// Runs what is left of the main loop that st.points[k] is in (its last
// iteration, for a point inside it), then the statements after it.
Flow run_after_loop(Interp& in, const ResumeState& st, std::size_t k);
Flow run_after_loop(Interp& in, const ResumeState& st, const ResumePoint& p, std::size_t k);

}  // namespace tokfeed::tmpl
