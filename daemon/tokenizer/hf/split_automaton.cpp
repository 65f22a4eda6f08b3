#include "tokenizer/hf/split_automaton.hpp"

#include <algorithm>
#include <iterator>
#include <map>

namespace tokfeed::text::hf {

namespace {

using Node = SplitProgram::Node;
using State = std::vector<uint32_t>;  // the nodes the live paths wait at, in the order backtracking tries them

// One step of every path of `from` on a char of class `cls`: the state
// after the char, and whether a match ends before it.
class Stepper {
 public:
  explicit Stepper(const SplitProgram& program) : program_(program), seen_(program.nodes.size(), 0) {}

  bool step(const State& from, uint64_t cls, State& to) {
    ++stamp_;
    cls_ = cls;
    to_ = &to;
    matched_ = false;
    to.clear();
    for (uint32_t node : from) {
      follow(node);
      if (matched_) break;
    }
    return matched_;
  }

 private:
  // Depth first, alternatives in order: the order backtracking tries them.
  // The program has no empty loops (its atoms take a char, its groups are not
  // repeated), so the depth is bounded by its size.
  void follow(uint32_t at) {
    if (matched_ || seen_[at] == stamp_) return;
    seen_[at] = stamp_;
    const Node& node = program_.nodes[at];
    switch (node.kind) {
      case Node::kAtom:
        if ((node.atom & cls_) != 0) add(node.next);
        return;
      case Node::kFork:
        for (uint32_t alt : node.alts) follow(alt);
        return;
      case Node::kAhead:
        if ((node.atom & cls_) != 0) follow(node.next);
        return;
      case Node::kNotAhead:
        if ((node.atom & cls_) == 0) follow(node.next);
        return;
      case Node::kMatch: matched_ = true; return;
    }
  }

  void add(uint32_t node) {
    for (uint32_t n : *to_)
      if (n == node) return;  // the same future, tried first by an earlier path
    to_->push_back(node);
  }

  const SplitProgram& program_;
  std::vector<uint32_t> seen_;  // the stamp of the last step that reached each node
  uint32_t stamp_ = 0;
  uint64_t cls_ = 0;
  State* to_ = nullptr;
  bool matched_ = false;
};

}  // namespace

std::unique_ptr<SplitAutomaton> SplitAutomaton::build(const SplitProgram& program,
                                                      const std::vector<uint64_t>& class_atoms,
                                                      const uint8_t (&ascii_class)[128], size_t max_states,
                                                      std::string& why) {
  std::unique_ptr<SplitAutomaton> a(new SplitAutomaton());
  if (class_atoms.size() > kRow - kClasses) {
    why = "more than " + std::to_string(kRow - kClasses) + " class ids";
    return nullptr;
  }
  std::map<State, uint32_t> ids;
  std::vector<const State*> states;  // by id; id 0 is the empty state
  auto id_of = [&](const State& s) {
    auto [it, added] = ids.emplace(s, uint32_t(states.size()));
    if (added) states.push_back(&it->first);
    return it->second;
  };
  id_of(State{});
  id_of(State{program.start});  // kStartRow
  Stepper stepper(program);
  State to;
  // States in the order they are found; each one's row is added as it is reached.
  for (size_t s = 0; s < states.size(); ++s) {
    if (states.size() > max_states) {
      why = "an automaton of more than " + std::to_string(max_states) + " states";
      return nullptr;
    }
    Step cls_steps[kRow - kClasses];
    std::fill(std::begin(cls_steps), std::end(cls_steps), kStop);  // ids past the last take no path
    for (size_t c = 0; c < class_atoms.size(); ++c) {
      const bool matched = stepper.step(*states[s], class_atoms[c], to);
      const uint32_t next = id_of(to);
      cls_steps[c] = next * kRow | (next == 0 ? kStop : 0) | (matched ? kMatchBefore : 0);
    }
    for (int byte = 0; byte < 256; ++byte)
      for (int copy = 0; copy < 4; ++copy)
        a->steps_.push_back(byte < 0x80 ? cls_steps[ascii_class[byte]] : kStop | kDecode);
    for (uint32_t c = 0; c < kRow - kClasses; ++c) a->steps_.push_back(cls_steps[c]);
  }
  // A match that ends where no path is left, before a char the start state
  // takes: the next match starts there, and the step goes on.
  for (size_t at = 0; at < a->steps_.size(); ++at) {
    Step& step = a->steps_[at];
    if ((step & (kStop | kDecode | kMatchBefore)) != (kStop | kMatchBefore)) continue;
    const size_t in_row = at % kRow;
    const uint32_t cls = in_row < kClasses ? ascii_class[in_row / 4] : uint32_t(in_row - kClasses);
    const Step from_start = a->steps_[kStartRow + kClasses + cls];
    if ((from_start & kStop) == 0) step = (from_start & ~kFlags) | kRestart | kMatchBefore;
  }
  a->build_pairs(ascii_class);
  return a;
}

void SplitAutomaton::build_pairs(const uint8_t (&ascii_class)[128]) {
  // The ASCII class ids, numbered from 0 in order; one more for the bytes
  // from 0x80. A byte of each stands for its class.
  uint32_t compact[256];
  std::vector<int> byte_of;
  std::map<uint8_t, uint32_t> number;
  for (int b = 0; b < 128; ++b) {
    auto [it, added] = number.emplace(ascii_class[b], uint32_t(byte_of.size()));
    if (added) byte_of.push_back(b);
    compact[b] = it->second;
  }
  const uint32_t k = uint32_t(byte_of.size()) + 1;
  for (int b = 128; b < 256; ++b) compact[b] = k - 1;
  const size_t states = steps_.size() / kRow;
  if (k > 32) return;
  // Three bytes a step where the table stays within 2^16 entries (320 KiB),
  // else two where it does.
  int width = 3, shift = 0;
  for (;; --width) {
    if (width < 2) return;
    const size_t cells = width == 3 ? size_t(k) * k * k : size_t(k) * k;
    shift = 0;
    while ((size_t(1) << shift) < cells) ++shift;
    if (states << shift <= (size_t(1) << 16)) break;
  }
  const size_t stride = size_t(1) << shift;
  auto p = std::make_unique<Pairs>();
  p->ascii_classes = k - 1;
  p->width = width;
  p->shift = shift;
  for (int b = 0; b < 256; ++b) {
    p->first[b] = width == 3 ? compact[b] * k * k : compact[b] * k;
    p->second[b] = width == 3 ? compact[b] * k : compact[b];
    p->third[b] = compact[b];
  }
  p->next.assign(states * stride, 0);
  p->flags.assign(states * stride, kPairStop);
  // Every sequence of `width` ASCII classes from every state, while no step stops.
  for (size_t st = 0; st < states; ++st) {
    uint32_t cls[3] = {0, 0, 0};
    for (;;) {
      Step row = Step(st * kRow), last = 0;
      uint8_t flags = 0;
      bool stops = false;
      for (int d = 0; d < width && !stops; ++d) {
        last = steps_[(row & ~kFlags) + 4 * size_t(byte_of[cls[d]])];
        stops = (last & kStop) != 0;
        if (last & kRestart) flags = uint8_t((flags | kPairRestart1 << d) + 1);  // its bit, one more in the count
        row = last;
      }
      if (!stops) {
        const size_t at = st * stride + p->first[byte_of[cls[0]]] + p->second[byte_of[cls[1]]] +
                          (width == 3 ? p->third[byte_of[cls[2]]] : 0);
        p->next[at] = uint32_t((last / kRow) << shift);
        p->flags[at] = uint8_t(flags | (last & kMatchBefore ? kPairMatchLast : 0));
      }
      int d = width - 1;  // the next sequence, the last class fastest
      while (d >= 0 && ++cls[d] + 1 == k) cls[d--] = 0;
      if (d < 0) break;
    }
  }
  pairs_ = std::move(p);
}

}  // namespace tokfeed::text::hf
