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
  int shift = 0;
  while ((uint32_t(1) << shift) < k * k) ++shift;
  const size_t stride = size_t(1) << shift, states = steps_.size() / kRow;
  if (k > 32 || states * stride > (size_t(1) << 16)) return;  // few states and classes only: a table of 320 KiB at most
  auto p = std::make_unique<Pairs>();
  p->ascii_classes = k - 1;
  p->shift = shift;
  for (int b = 0; b < 256; ++b) p->first[b] = compact[b] * k, p->second[b] = compact[b];
  p->next.assign(states * stride, 0);
  p->flags.assign(states * stride, kPairStop);
  for (size_t st = 0; st < states; ++st)
    for (uint32_t c1 = 0; c1 + 1 < k; ++c1) {
      const Step s1 = steps_[st * kRow + 4 * size_t(byte_of[c1])];
      if (s1 & kStop) continue;
      for (uint32_t c2 = 0; c2 + 1 < k; ++c2) {
        const Step s2 = steps_[(s1 & ~kFlags) + 4 * size_t(byte_of[c2])];
        if (s2 & kStop) continue;
        const size_t at = st * stride + c1 * k + c2;
        p->next[at] = uint32_t((s2 / kRow) << shift);
        p->flags[at] = uint8_t((s1 & kRestart ? kPairRestart1 : 0) | (s2 & kRestart ? kPairRestart2 : 0) |
                               (s2 & kMatchBefore ? kPairMatch2 : 0));
      }
    }
  pairs_ = std::move(p);
}

}  // namespace tokfeed::text::hf
