// Operations on a record's strings that a skeleton's render asks the record
// for (template/skeleton.hpp): a string method, a filter of a string, a
// slice or an `in` test whose subject is one whole sentinel and whose
// arguments are plain. The record's string answers, and the answer is kept: a boolean, a
// number or None as it is, a string as a new leaf (its own sentinel, or the
// empty string), a list of strings as a leaf per item. Another record of the
// shape renders as the skeleton did where the same operations, asked again
// of its strings (replay), give the same answers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "template/interp.hpp"

namespace tokfeed::tmpl::skeleton {

struct Op {
  enum class Kind : uint8_t { kMethod, kFilter, kIn, kSlice, kEqual };
  // kSame: the subject's string itself (an operation that changed nothing).
  enum class Answer : uint8_t { kValue, kLeaf, kEmpty, kSame, kList };
  Kind kind = Kind::kMethod;
  uint32_t subject = 0;  // the leaf asked
  std::string name;      // the method
  FilterFn filter = nullptr;
  Args args;  // the needle of `in`; a slice's start, stop and step
  Answer answer = Answer::kValue;
  Value value;                 // kValue: the answer
  uint32_t first = 0;          // kLeaf, kList: the (first) leaf it made
  std::vector<uint8_t> items;  // kList: per item, its answer: kLeaf, kEmpty or kSame
  bool tuple = false;          // kList: a tuple
  // A bare `tojson` of a list or dict (a tool call's arguments): the
  // skeleton's subject, each of its strings one whole sentinel or none
  // (`subject` is its first leaf). The record's is the same with each
  // sentinel's string in its place. kEqual: the two operands, as a list.
  Value tree;
};

// Two texts of the skeleton's renders that agree up to a sentinel in one
// (or both) and differ there: the record's texts differ there too where
// their next bytes do, each a literal byte or a leaf's first byte.
struct Split {
  int32_t a_leaf, b_leaf;  // -1: the literal byte
  uint8_t a_byte, b_byte;
  bool operator==(const Split&) const = default;
};

struct Trace {
  std::vector<Value> leaves;  // the record's strings, by leaf: the shape's holes, then the answers'
  // The leaves past the messages' holes: the tools' holes, then the
  // answers'. A dump holding one of them is not answered but reads it: the
  // tools then join the shape whole (records repeat their tools, and the
  // skeleton holds their JSON).
  std::size_t tools_first = SIZE_MAX;
  std::vector<Op> ops;
  std::vector<Split> splits;
  // The first split whose record's texts do not differ at its first bytes:
  // the skeleton cannot say where they do (undecided), and another record
  // with the same answers and the same first bytes there cannot be served
  // either.
  std::optional<Split> stuck;
  // Every string answer a leaf of its own, the subject's string or not: a
  // rendering that serves records whatever such operations change.
  bool general = false;
};

// Each answers the operation from the record's string where its subject is
// one whole sentinel of tl_watch->trace (or, for a bare `tojson`, a list or
// dict of such strings and plain values), setting `out`; false otherwise
// (the operation then reads the sentinel).
bool ask_method(const Value& subject, std::string_view name, const Args& args, Value& out);
bool ask_filter(const Interp& in, FilterFn f, const Value& subject, const Args& args, Value& out);
bool ask_in(const Value& subject, const Value& needle, bool& out);
// a == b of two lists or dicts (two messages): answered from the same with
// the record's strings in place.
bool ask_equal(const Value& a, const Value& b, bool& out);
// subject[a:b:c], its bounds each an int or None.
bool ask_slice(const Value& subject, const Value& a, const Value& b, const Value& c, Value& out);

// Under a Watch with a trace: whether the record's texts for the
// skeleton's texts `a` and `b`, equal before byte k, where a sentinel
// starts in one or both, differ at that point too; kept as a Split.
bool split_at(std::string_view a, std::string_view b, std::size_t k);

// The leaves of every sentinel in `v`'s strings (a list or dict a filter is
// about to read), noted in tl_watch->reads as read along with the first.
void saw_tree(const Value& v);

// A record's strings by leaf, as replay gives them: the shape's holes, then
// the answers'. An answer that is a part of its subject's bytes (a strip's)
// is held as a view of them; its Value is made only where a later operation
// asks it.
class Answers {
 public:
  void clear() {
    values_.clear();
    text_.clear();
  }
  std::size_t size() const { return text_.size(); }
  // A str (or a record's dict, a hole whose text is never asked), held by
  // the Answers.
  void push(Value v) {
    values_.push_back(std::move(v));
    text_.push_back(values_.back().is_str() ? std::string_view(values_.back().s.unread()) : std::string_view());
  }
  // A part of another leaf's bytes.
  void push_part(std::string_view part) {
    values_.emplace_back();
    text_.push_back(part);
  }
  std::string_view text(std::size_t k) const { return text_[k]; }
  // Whether leaf k is a string (not a record's dict).
  bool is_str(std::size_t k) const {
    return values_[k].kind == Kind::kUndefined || (values_[k].is_str() && !values_[k].markup);
  }
  const Value& value(std::size_t k) {
    if (values_[k].kind == Kind::kUndefined) values_[k] = Value::str(std::string(text_[k]));
    return values_[k];
  }

 private:
  std::vector<Value> values_;  // undefined: a part not made into a Value yet
  std::vector<std::string_view> text_;
};

// Asks `ops` again of `leaves` (the shape's holes of another record),
// appending the leaves they make, and checks `splits`: whether every answer
// is the one kept.
bool replay(const std::vector<Op>& ops, const std::vector<Split>& splits, Answers& leaves);

// Whether the record's texts (`leaves`, replayed) are alike at `s`'s first
// bytes, where a skeleton was stuck.
bool alike_at(const Split& s, const Answers& leaves);

}  // namespace tokfeed::tmpl::skeleton
