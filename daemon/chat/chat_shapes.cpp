// One render per shape (docs/chat_templates.md, "One render per shape").
//
// A record's shape is the record with each of its strings that the template
// does not read replaced by a hole: its lists' lengths, its dicts' keys, its
// numbers, and the strings the template does read. The label rule's renders
// of the first record of a shape run on its skeleton, the record with a
// sentinel in each hole (template/skeleton.hpp), while the engine watches
// for a read of a sentinel's bytes. Where none is read, the template only
// copied those strings on, so every record of that shape renders as the
// skeleton did with the sentinels replaced by its strings, and its trained
// spans move with them. A read names its string's path (messages[*].role,
// say): strings at that path are then part of the shape, and the skeleton
// renders again. Each thread keeps its shapes per template.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <optional>
#include <unordered_map>

#include "chat/chat_jinja.hpp"
#include "chat/shape_walk.hpp"
#include "template/skeleton_ops.hpp"

namespace tokfeed::text {

namespace {

using detail::KeyHash;
using detail::Leaf;
using detail::Paths;
using detail::Walk;
using tmpl::Kind;
using tmpl::Value;
namespace sk = tmpl::skeleton;

std::atomic<bool> g_shapes{true};

constexpr std::size_t kMaxShapes = 4096;      // shapes kept per template (then forgotten, and learnt again)
constexpr std::size_t kMaxBytes = 16u << 20;  // their keys' and renderings' bytes, likewise
constexpr int kMaxRounds = 8;                 // skeleton renders for one record
constexpr std::size_t kMaxSeen = 1u << 16;    // shapes seen once remembered (by their key's hash), then forgotten
constexpr uint64_t kFirstJudged = 64;         // records before a template is first judged
constexpr uint64_t kJudgedEvery = 256;        // then each this many
constexpr uint64_t kFirstSights = 32;         // shapes seen before any is learnt on its first sight
constexpr uint64_t kSightsKept = 512;         // shapes seen counted (then the counts are halved)
// A skeleton's render costs about three renders of the record; a record
// served from it, a fraction of one. Learning spends that from a credit
// that records served earn back (one each), and stops while the credit is
// spent: skeletons that serve no more than a record or two each (answers
// that differ from record to record, records the template refuses) cost
// at most a third of what the shapes save.
constexpr int64_t kLearnCost = 3;
constexpr int64_t kFirstCredit = 16 * kLearnCost;

// A shape's rendering: its text as literal pieces and holes, and its trained
// spans' ends as (piece, offset) marks.
struct Rendering {
  struct Piece {
    uint32_t size;  // a literal's bytes (leaf < 0)
    int32_t leaf;   // the hole's string, or -1
  };
  struct Mark {
    uint32_t piece, offset;
  };
  bool ok = false;  // false: the shape's records render directly
  std::string literals;
  std::vector<Piece> pieces;
  std::vector<Mark> marks;  // two per span
  // What the skeleton's renders spent, for the bound on the record's.
  uint64_t copies = 0, steps = 0, peak = 0;
  std::size_t longest = 0;

  // From the skeleton's rendering; false where it cannot stand for the
  // record's (a span that ends inside a sentinel, a sentinel of no leaf).
  bool compile(const Rendered& r, std::size_t leaves) {
    const std::string& t = r.text;
    std::vector<std::size_t> starts;  // each piece's start in t
    uint32_t leaf;
    std::size_t at = 0;
    for (std::size_t s = sk::find(t, 0, leaf); s != std::string::npos; s = sk::find(t, at, leaf)) {
      if (leaf >= leaves) return false;
      if (s > at) {
        starts.push_back(at);
        pieces.push_back({static_cast<uint32_t>(s - at), -1});
        literals.append(t, at, s - at);
      }
      starts.push_back(s);
      pieces.push_back({static_cast<uint32_t>(sk::kSentinelSize), static_cast<int32_t>(leaf)});
      at = s + sk::kSentinelSize;
    }
    if (at < t.size()) {
      starts.push_back(at);
      pieces.push_back({static_cast<uint32_t>(t.size() - at), -1});
      literals.append(t, at, t.size() - at);
    }
    starts.push_back(t.size());
    std::size_t p = 0;
    for (Span sp : r.trained) {
      for (uint32_t pos : {sp.begin, sp.end}) {
        while (starts[p + 1] <= pos && p + 1 < pieces.size()) ++p;
        if (pos == t.size()) {
          marks.push_back({static_cast<uint32_t>(pieces.size()), 0});
          continue;
        }
        const uint32_t off = static_cast<uint32_t>(pos - starts[p]);
        if (pieces[p].leaf >= 0 && off != 0) return false;
        marks.push_back({static_cast<uint32_t>(p), off});
      }
    }
    return ok = true;
  }

  // Whether the record's renders stay within the limits where the
  // skeleton's did: each string copied on and each answer adds at most the
  // record's strings' `bytes`, allocated (growing buffers) at most four
  // times over, a step per 4 KiB and one per allocation it changes.
  bool fits(std::size_t bytes, const tmpl::RenderLimits& limits) const {
    const uint64_t n = copies + 2 * ops.size(), extra = n * bytes;
    return steps + n * (4 * bytes / 4096 + 72) <= limits.max_steps / 2 &&
           peak + 4 * extra + n * 64 <= limits.max_bytes / 2 && longest + extra <= limits.max_output / 2;
  }

  // The record's rendering: the literals, and each hole's string.
  void fill(const std::vector<std::string_view>& leaves, std::size_t bytes, Rendered& out) const {
    static thread_local std::vector<uint32_t> starts;
    out.text.clear();
    out.trained.clear();
    out.text.reserve(literals.size() + bytes);
    starts.resize(pieces.size() + 1);
    const char* lit = literals.data();
    for (std::size_t k = 0; k < pieces.size(); ++k) {
      starts[k] = static_cast<uint32_t>(out.text.size());
      if (pieces[k].leaf < 0) {
        out.text.append(lit, pieces[k].size);
        lit += pieces[k].size;
      } else {
        out.text += leaves[static_cast<std::size_t>(pieces[k].leaf)];
      }
    }
    starts[pieces.size()] = static_cast<uint32_t>(out.text.size());
    for (std::size_t k = 0; k + 1 < marks.size(); k += 2)
      out.trained.push_back(
          {starts[marks[k].piece] + marks[k].offset, starts[marks[k + 1].piece] + marks[k + 1].offset});
  }

  std::vector<sk::Op> ops;        // what the skeleton asked the record's strings, with their answers
  std::vector<sk::Split> splits;  // where the record's texts must differ
  // (!ok) Where the skeleton was undecided: a record with its answers that
  // is alike there too renders directly, with no skeleton of its own.
  std::optional<sk::Split> stuck;
  // (!ok) The skeleton's renders refused it, having read none of its
  // strings and been undecided nowhere: every record of the shape whose
  // answers and splits are `ops` and `splits` is refused as well (but where
  // a limit falls otherwise), and renders directly without a skeleton of
  // its own.
  bool refused = false;
  // Learnt from the first record of its shape, and no other record of the
  // shape has come since.
  bool fresh = false;
};

constexpr std::size_t kMaxVariants = 8;  // renderings per shape, told apart by their answers

// One template's shapes on one thread.
class Shapes {
 public:
  std::string render(const ChatSpec& spec, const Value& messages, const Value& tools, Loss loss, Rendered& out) {
    if (off_) return render_labeled_direct(spec, messages, tools, loss, out);
    ++records_;
    judge();
    bool eager = false;  // the record is learnt on its shape's first sight
    for (int round = 0; !off_ && round <= kMaxRounds; ++round) {
      Walk& w = probe_;  // its buffers kept from record to record
      if (!w.run(messages, tools, loss, nullptr, nullptr)) break;
      auto it = shapes_.find(w.key());
      // A shape is learnt when a record of it comes a second time: the
      // first renders directly, and only its key's hash is kept, with
      // whether the template refused it. Records whose shapes never repeat
      // (a template that reads every string, a dataset whose every record
      // has tools of its own) then cost a walk each, not a skeleton; a
      // shape's records render directly while the template refuses them
      // (a skeleton would be refused too).
      //
      // Where most shapes come again (more than one in two of those seen
      // lately), the skeleton's render costs less than a direct render of
      // the first record and a skeleton for the second: a shape is then
      // learnt on its first sight, and its first record served from it.
      if (round == 0 && it == shapes_.end()) {
        if (seen_.size() >= kMaxSeen) seen_.clear();
        const auto [seen, first] = seen_.try_emplace(KeyHash()(w.key()), false);
        if (first) sighted();
        else if (!seen->second) ++again_;
        eager = first && 2 * again_ > sights_ && sights_ >= kFirstSights && credit_ >= kLearnCost;
        if (!eager && (first || seen->second)) {
          std::string reason = render_labeled_direct(spec, messages, tools, loss, out);
          seen->second = !reason.empty();
          return reason;
        }
      }
      if (round == 0 && it != shapes_.end() && it->second.front().fresh) {
        it->second.front().fresh = false;  // a shape learnt on its first sight comes again
        ++again_;
      }
      if (it != shapes_.end()) {
        bool stuck = false;
        for (const Rendering& r : it->second) {
          if (r.ok && serve(r, w, spec.limits, out)) {
            ++served_;
            ++credit_;
            return {};
          }
          stuck = stuck || (r.refused && refused_again(r, w)) || (r.stuck && stuck_again(r, w));
        }
        if (stuck || it->second.size() >= kMaxVariants) break;
      } else if (shapes_.size() >= kMaxShapes || bytes_ >= kMaxBytes) {
        shapes_.clear();
        bytes_ = 0;
      }
      if (round == kMaxRounds || credit_ < kLearnCost || !learn(spec, messages, tools, loss, eager)) break;
    }
    return render_labeled_direct(spec, messages, tools, loss, out);
  }

  // The record's JSON text served from its shape where it is a record
  // Walk::read takes, of a shape learnt, one of whose renderings serves
  // it: as render() would serve it from its values. False, with nothing
  // changed, where not: the record goes to record_to_chat and render().
  bool serve_text(const ChatSpec& spec, std::string_view json, Format format, Loss loss, Rendered& out) {
    if (off_ || judged_next()) return false;
    Walk& w = probe_;
    struct Drop {
      Walk& w;
      ~Drop() { w.held.clear(); }
    } drop{w};
    if (!w.read(json, format, loss)) return false;
    auto it = shapes_.find(w.key());
    if (it == shapes_.end()) return false;
    for (const Rendering& r : it->second) {
      if (!r.ok || !serve(r, w, spec.limits, out)) continue;
      ++records_;
      if (it->second.front().fresh) {
        it->second.front().fresh = false;
        ++again_;
      }
      ++served_;
      ++from_text_;
      ++credit_;
      return true;
    }
    return false;
  }

  ShapeStats stats() const { return {records_, served_, learnt_, from_text_}; }

 private:
  // Whether the next record is judged (judge()).
  bool judged_next() const { return records_ - judged_at_ >= (judged_at_ == 0 ? kFirstJudged : kJudgedEvery); }

  // After the first 64 records, then each 256: where fewer than one in
  // ten of them were served from a shape, the walks and skeletons cost
  // more than the shapes save, and the template's records render
  // directly from then on.
  void judge() {
    const uint64_t since = records_ - judged_at_ - 1;
    if (since < (judged_at_ == 0 ? kFirstJudged : kJudgedEvery)) return;
    if (10 * (served_ - served_at_) < since) {
      off_ = true;
      shapes_.clear();
      seen_.clear();
    }
    judged_at_ = records_ - 1;
    served_at_ = served_;
  }

  // A shape seen for the first time. The counts are halved now and then,
  // so that they tell of the shapes seen lately.
  void sighted() {
    if (++sights_ >= kSightsKept) {
      sights_ /= 2;
      again_ /= 2;
    }
  }

  // Renders the record as `r` where its answers are r's and it fits.
  bool serve(const Rendering& r, const Walk& w, const tmpl::RenderLimits& limits, Rendered& out) {
    strings_.clear();
    std::size_t bytes = w.bytes;
    for (const Leaf& l : w.leaves) strings_.push_back(l.text);
    if (!r.ops.empty() || !r.splits.empty()) {
      if (!replayed(r.ops, r.splits, w)) return false;
      for (std::size_t k = w.leaves.size(); k < answers_.size(); ++k) {
        strings_.push_back(answers_.text(k));
        bytes += strings_.back().size();
      }
    }
    if (!r.fits(bytes, limits)) return false;
    r.fill(strings_, bytes, out);
    return true;
  }

  // Whether the record's skeleton would be refused as r's was: the same
  // answers and splits.
  bool refused_again(const Rendering& r, const Walk& w) {
    return (r.ops.empty() && r.splits.empty()) || replayed(r.ops, r.splits, w);
  }

  // Whether the record's skeleton would be undecided where r's was: the
  // same answers up to there, and alike there.
  bool stuck_again(const Rendering& r, const Walk& w) {
    return replayed(r.ops, {}, w) && sk::alike_at(*r.stuck, answers_);
  }

  // Asks `ops` again of the record's strings (answers_: its holes, then
  // the answers) and checks `splits`: whether every answer is the one kept.
  bool replayed(const std::vector<sk::Op>& ops, const std::vector<sk::Split>& splits, const Walk& w) {
    answers_.clear();
    for (const Leaf& l : w.leaves) {
      if (l.value) answers_.push(*l.value);
      else answers_.push_part(l.text);
    }
    return sk::replay(ops, splits, answers_);
  }

  // Renders the record's skeleton: keeps what it gives as a rendering of
  // the record's shape (`eager`: learnt on the shape's first sight), or
  // adds the path of the string it read to the shape. False where neither.
  bool learn(const ChatSpec& spec, const Value& messages, const Value& tools, Loss loss, bool eager) {
    Walk w(paths_);
    Value sk_messages, sk_tools;
    if (!w.run(messages, tools, loss, &sk_messages, &sk_tools)) return false;
    ++learnt_;
    credit_ -= kLearnCost;
    sk::Trace trace;
    for (const Leaf& l : w.leaves) trace.leaves.push_back(*l.value);
    trace.tools_first = w.tools_first;
    // A shape's first rendering keeps the strings its operations did not
    // change as they are; its second tries one for any record.
    const auto known = shapes_.find(w.key());
    trace.general = known != shapes_.end() && known->second.size() == 1;
    sk::Watch watch;
    watch.trace = &trace;
    Rendered r;
    std::string reason;
    {
      sk::WatchScope scope(watch);
      reason = render_labeled_direct(spec, sk_messages, sk_tools, loss, r);
    }
    if (watch.read && watch.leaf >= 0) {
      bool added = false;
      watch.reads.push_back(static_cast<uint32_t>(watch.leaf));
      for (uint32_t leaf : watch.reads)
        if (leaf < w.paths.size()) added |= paths_.add(w.paths[leaf]);
      if (added) return true;
    }
    Rendering kept;
    if (!watch.read && reason.empty() && kept.compile(r, trace.leaves.size())) {
      kept.copies = watch.copies;
      kept.steps = watch.steps;
      kept.peak = watch.peak;
      kept.longest = watch.longest;
      kept.ops = std::move(trace.ops);
      kept.splits = std::move(trace.splits);
    } else {
      kept = Rendering();  // the shape's records render directly
      kept.refused = !watch.read && !reason.empty() && !trace.stuck;
      if (kept.refused) {
        kept.ops = std::move(trace.ops);
        kept.splits = std::move(trace.splits);
      } else if (watch.read && watch.leaf < 0 && trace.stuck) {
        kept.ops = std::move(trace.ops);
        kept.stuck = trace.stuck;
      }
    }
    kept.fresh = eager;
    bytes_ +=
        w.key().size() + kept.literals.size() + 16 * (kept.pieces.size() + kept.marks.size()) + 128 * kept.ops.size();
    auto it = shapes_.find(w.key());
    if (it == shapes_.end()) it = shapes_.emplace(std::string(w.key()), std::vector<Rendering>()).first;
    it->second.push_back(std::move(kept));
    return true;
  }

  Paths paths_;
  Walk probe_{paths_};
  // By key: its renderings.
  std::unordered_map<std::string, std::vector<Rendering>, KeyHash, std::equal_to<>> shapes_;
  // Records asked for, skeletons rendered, records served (of them, from
  // their text alone).
  uint64_t records_ = 0, learnt_ = 0, served_ = 0, from_text_ = 0;
  // Hashes of the keys of shapes not learnt, each with whether the
  // template refused the last record of it; the records and the records
  // served at the last judgement.
  std::unordered_map<uint64_t, bool> seen_;
  uint64_t judged_at_ = 0, served_at_ = 0;
  // Shapes seen (lately), and of them, those that came again.
  uint64_t sights_ = 0, again_ = 0;
  int64_t credit_ = kFirstCredit;  // of skeleton renders (kLearnCost each)
  std::size_t bytes_ = 0;          // what the shapes hold, about
  bool off_ = false;
  std::vector<std::string_view> strings_;  // a record's strings by leaf
  sk::Answers answers_;                    // the same, with the answers' strings
};

}  // namespace

void set_render_shapes(bool on) noexcept { g_shapes.store(on, std::memory_order_relaxed); }

uint64_t ChatSpec::Id::next() noexcept {
  static std::atomic<uint64_t> n{0};
  return ++n;
}

namespace {

std::unordered_map<uint64_t, std::unique_ptr<Shapes>>& thread_shapes() {
  static thread_local std::unordered_map<uint64_t, std::unique_ptr<Shapes>> shapes;
  return shapes;
}

}  // namespace

std::string render_labeled(const ChatSpec& spec, const Value& messages, const Value& tools, Loss loss, Rendered& out) {
  if (!g_shapes.load(std::memory_order_relaxed) || sk::tl_watch || !messages.is_seq())
    return render_labeled_direct(spec, messages, tools, loss, out);
  auto& shapes = thread_shapes();
  if (shapes.size() >= 64 && !shapes.count(spec.id.value)) shapes.clear();  // specs come and go (tests)
  auto& s = shapes[spec.id.value];
  if (!s) s = std::make_unique<Shapes>();
  return s->render(spec, messages, tools, loss, out);
}

bool serve_record_shape(const ChatSpec& spec, std::string_view json, Format format, Loss loss, Rendered& out) {
  if (!g_shapes.load(std::memory_order_relaxed) || sk::tl_watch) return false;
  auto& shapes = thread_shapes();
  auto it = shapes.find(spec.id.value);
  return it != shapes.end() && it->second->serve_text(spec, json, format, loss, out);
}

ShapeStats render_shape_stats(const ChatSpec& spec) {
  auto& shapes = thread_shapes();
  auto it = shapes.find(spec.id.value);
  return it == shapes.end() ? ShapeStats{} : it->second->stats();
}

}  // namespace tokfeed::text
