#include "tokenizer/hf/split_automaton.hpp"

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
  a->classes_ = uint32_t(class_atoms.size());
  std::map<State, uint32_t> ids;
  std::vector<const State*> states;  // by id; id 0 is the empty state
  auto id_of = [&](const State& s) {
    auto [it, added] = ids.emplace(s, uint32_t(states.size()));
    if (added) states.push_back(&it->first);
    return it->second;
  };
  id_of(State{});
  id_of(State{program.start});  // kStart
  Stepper stepper(program);
  State to;
  // States in the order they are found; each one's transitions are added as it is reached.
  for (size_t s = 0; s < states.size(); ++s) {
    if (states.size() > max_states) {
      why = "an automaton of more than " + std::to_string(max_states) + " states";
      return nullptr;
    }
    for (uint64_t cls : class_atoms) {
      const bool matched = stepper.step(*states[s], cls, to);
      a->class_steps_.push_back(Step(id_of(to)) << 1 | (matched ? kMatchBefore : 0));
    }
    for (int byte = 0; byte < 128; ++byte)
      a->ascii_steps_.push_back(a->class_steps_[s * a->classes_ + ascii_class[byte]]);
  }
  return a;
}

}  // namespace tokfeed::text::hf
