#include "tokenizer/hf/split_pattern.hpp"

#include <cctype>

namespace tokfeed::text::hf {

namespace {

using Item = SplitItem;
using Seq = SplitSeq;
constexpr uint32_t kMany = SplitItem::kMany;

class Parser {
 public:
  explicit Parser(std::string_view p) : p_(p) {}

  bool parse(std::vector<Seq>& branches) {
    branches = alternatives(false);
    if (!ok()) return false;
    if (i_ != p_.size()) return fail("unbalanced ')'");
    return true;
  }
  bool ok() const { return why_.empty(); }
  const std::string& why() const { return why_; }
  const std::vector<SplitAtom>& atoms() const { return atoms_; }

 private:
  bool fail(const std::string& what) {
    if (why_.empty()) why_ = what + " at offset " + std::to_string(i_);
    return false;
  }

  std::vector<Seq> alternatives(bool caseless) {
    std::vector<Seq> alts;
    for (;;) {
      alts.push_back(sequence(caseless));
      if (!ok()) return alts;
      if (i_ < p_.size() && p_[i_] == '|') {
        ++i_;
        continue;
      }
      return alts;
    }
  }

  Seq sequence(bool caseless) {
    Seq seq;
    while (ok() && i_ < p_.size() && p_[i_] != '|' && p_[i_] != ')') {
      Item item;
      if (!atom(caseless, item)) return seq;
      if (!quantifier(item)) return seq;
      seq.push_back(std::move(item));
    }
    return seq;
  }

  uint64_t atom_bit(size_t begin, size_t end, bool caseless) {
    SplitAtom key{std::string(p_.substr(begin, end - begin)), caseless};
    for (size_t k = 0; k < atoms_.size(); ++k)
      if (!(atoms_[k] < key) && !(key < atoms_[k])) return uint64_t(1) << k;
    if (atoms_.size() == 64) {
      fail("more than 64 distinct atoms");
      return 0;
    }
    atoms_.push_back(std::move(key));
    return uint64_t(1) << (atoms_.size() - 1);
  }

  // One UTF-8 char from i_ (the pattern is valid UTF-8: PCRE2 compiled it).
  void skip_char() {
    const unsigned char c = static_cast<unsigned char>(p_[i_]);
    i_ += c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if (i_ > p_.size()) i_ = p_.size();
  }

  // Past "{...}" at i_, if there.
  bool skip_braces() {
    if (i_ >= p_.size() || p_[i_] != '{') return false;
    const size_t close = p_.find('}', i_);
    if (close == std::string_view::npos) return fail("unclosed '{'");
    i_ = close + 1;
    return true;
  }

  bool class_set() {  // i_ at '['
    ++i_;
    if (i_ < p_.size() && p_[i_] == '^') ++i_;
    if (i_ < p_.size() && p_[i_] == ']') ++i_;
    while (i_ < p_.size()) {
      const char c = p_[i_];
      if (c == ']') {
        ++i_;
        return true;
      }
      if (c == '[' && i_ + 1 < p_.size() && (p_[i_ + 1] == ':' || p_[i_ + 1] == '.' || p_[i_ + 1] == '=')) {
        const size_t close = p_.find(std::string{p_[i_ + 1], ']'}, i_ + 2);
        if (close == std::string_view::npos) return fail("unclosed POSIX class");
        i_ = close + 2;
        continue;
      }
      if (c == '\\') {
        if (i_ + 1 >= p_.size()) return fail("'\\' at the end");
        const char e = p_[i_ + 1];
        if (e == 'Q' || e == 'E' || e == 'N' || e == 'c' || (e >= '0' && e <= '9'))
          return fail("escape \\" + std::string(1, e));
        i_ += 2;
        if (e == 'x' || e == 'p' || e == 'P' || e == 'o') {
          if (i_ < p_.size() && p_[i_] == '{') {
            if (!skip_braces()) return false;
          } else if (e == 'p' || e == 'P') {
            ++i_;
          } else if (e == 'o') {
            return fail("escape \\o");
          }
        } else if (static_cast<unsigned char>(e) >= 0x80) {
          --i_;
          skip_char();
        }
        continue;
      }
      skip_char();
    }
    return fail("unclosed '['");
  }

  bool atom(bool caseless, Item& item) {
    const size_t begin = i_;
    const char c = p_[i_];
    if (c == '(') {
      ++i_;
      Item::Kind kind = Item::kGroup;
      bool inner_caseless = caseless;
      if (i_ < p_.size() && p_[i_] == '?') {
        const std::string_view rest = p_.substr(i_ + 1);
        if (rest.substr(0, 1) == ":") {
          i_ += 2;
        } else if (rest.substr(0, 2) == "i:") {
          i_ += 3;
          inner_caseless = true;
        } else if (rest.substr(0, 1) == "=") {
          i_ += 2;
          kind = Item::kAhead;
        } else if (rest.substr(0, 1) == "!") {
          i_ += 2;
          kind = Item::kNotAhead;
        } else {
          return fail("group '(?" + std::string(rest.substr(0, 2)) + "'");
        }
      }
      item.kind = kind;
      item.alts = alternatives(inner_caseless);
      if (!ok()) return false;
      if (i_ >= p_.size() || p_[i_] != ')') return fail("unclosed '('");
      ++i_;
      return true;
    }
    if (c == '^' || c == '$') {
      ++i_;
      item.kind = c == '^' ? Item::kLineStart : Item::kLineEnd;
      return true;
    }
    if (c == '*' || c == '+' || c == '?' || c == '{') return fail("quantifier with nothing before it");
    if (c == '[') {
      if (!class_set()) return false;
    } else if (c == '\\') {
      if (i_ + 1 >= p_.size()) return fail("'\\' at the end");
      const char e = p_[i_ + 1];
      i_ += 2;
      switch (e) {
        case 'p':
        case 'P':
          if (i_ < p_.size() && p_[i_] == '{') {
            if (!skip_braces()) return false;
          } else {
            ++i_;
          }
          break;
        case 'x':
          if (i_ < p_.size() && p_[i_] == '{') {
            if (!skip_braces()) return false;
          } else {
            for (int k = 0; k < 2 && i_ < p_.size() && std::isxdigit(static_cast<unsigned char>(p_[i_])); ++k) ++i_;
          }
          break;
        case 'd':
        case 'D':
        case 'w':
        case 'W':
        case 's':
        case 'S':
        case 'h':
        case 'H':
        case 'v':
        case 'V':
        case 't':
        case 'n':
        case 'r':
        case 'f':
        case 'e':
        case 'a': break;
        default:
          if (std::isalnum(static_cast<unsigned char>(e))) return fail("escape \\" + std::string(1, e));
          if (static_cast<unsigned char>(e) >= 0x80) {
            --i_;
            skip_char();
          }
      }
    } else {
      skip_char();  // `.` or a literal char
    }
    item.kind = Item::kAtom;
    item.bit = atom_bit(begin, i_, caseless);
    return ok();
  }

  bool number(uint32_t& v) {
    const size_t b = i_;
    uint64_t x = 0;
    while (i_ < p_.size() && p_[i_] >= '0' && p_[i_] <= '9' && x < 100000) x = x * 10 + uint64_t(p_[i_++] - '0');
    v = uint32_t(x);
    return i_ > b && x < 65536;
  }

  bool quantifier(Item& item) {
    if (i_ >= p_.size()) return true;
    uint32_t min = 1, max = 1;
    const char c = p_[i_];
    if (c == '?') {
      min = 0;
      ++i_;
    } else if (c == '*') {
      min = 0, max = kMany;
      ++i_;
    } else if (c == '+') {
      max = kMany;
      ++i_;
    } else if (c == '{') {
      ++i_;
      if (!number(min)) return fail("'{' that is no quantifier");
      max = min;
      if (i_ < p_.size() && p_[i_] == ',') {
        ++i_;
        max = kMany;
        if (i_ < p_.size() && p_[i_] != '}' && !number(max)) return fail("'{' that is no quantifier");
      }
      if (i_ >= p_.size() || p_[i_] != '}' || max < min) return fail("'{' that is no quantifier");
      ++i_;
    } else {
      return true;
    }
    if (i_ < p_.size() && (p_[i_] == '?' || p_[i_] == '+')) return fail("lazy or possessive quantifier");
    if (item.kind == Item::kGroup) {
      if (max != 1) return fail("repeated group");
    } else if (item.kind != Item::kAtom) {
      return fail("quantified assertion");
    }
    item.min = min;
    item.max = max;
    return true;
  }

  std::string_view p_;
  size_t i_ = 0;
  std::string why_;
  std::vector<SplitAtom> atoms_;
};

// Lookaheads of one char, (?!\S): a check of its bits.
void mark_one_char_lookaheads(std::vector<Seq>& alts) {
  for (Seq& seq : alts)
    for (Item& it : seq) {
      mark_one_char_lookaheads(it.alts);
      if ((it.kind == Item::kAhead || it.kind == Item::kNotAhead) && it.alts.size() == 1 && it.alts[0].size() == 1 &&
          it.alts[0][0].kind == Item::kAtom && it.alts[0][0].min == 1 && it.alts[0][0].max == 1)
        it.bit = it.alts[0][0].bit;
    }
}

// The pattern as a program for the automaton (split_automaton.hpp): each
// quantified atom as its copies, forks for what is optional, greedy (one
// more char first); each group as a fork of its alternatives (then, if
// optional, of what follows it). A lookahead of more than one char, and the
// anchors, which look back or tell the end from invalid UTF-8, it leaves to
// backtracking.
class Lowering {
 public:
  bool lower(const std::vector<Seq>& branches, SplitProgram& program, std::string& why) {
    program_ = &program;
    const uint32_t match = add(Node::kMatch);
    std::vector<uint32_t> entries;
    for (const Seq& b : branches) entries.push_back(sequence(b, match));
    program.start = add(Node::kFork);
    program.nodes[program.start].alts = std::move(entries);
    why = why_;
    return why_.empty();
  }

 private:
  using Node = SplitProgram::Node;
  static constexpr size_t kMaxNodes = 4096;

  uint32_t add(Node::Kind kind, uint64_t atom = 0, uint32_t next = 0) {
    if (program_->nodes.size() == kMaxNodes && why_.empty()) why_ = "more than " + std::to_string(kMaxNodes) + " nodes";
    if (!why_.empty()) return 0;
    Node n;
    n.kind = kind;
    n.atom = atom;
    n.next = next;
    program_->nodes.push_back(std::move(n));
    return uint32_t(program_->nodes.size() - 1);
  }
  uint32_t fork(std::vector<uint32_t> alts) {
    const uint32_t at = add(Node::kFork);
    if (why_.empty()) program_->nodes[at].alts = std::move(alts);
    return at;
  }

  uint32_t sequence(const Seq& seq, uint32_t next) {
    for (auto it = seq.rbegin(); it != seq.rend(); ++it) next = item(*it, next);
    return next;
  }

  uint32_t item(const Item& it, uint32_t next) {
    switch (it.kind) {
      case Item::kAtom: {
        uint32_t at = next;
        if (it.max == kMany) {
          at = fork({});
          const uint32_t atom = add(Node::kAtom, it.bit, at);
          if (why_.empty()) program_->nodes[at].alts = {atom, next};
        } else {
          for (uint32_t k = it.min; k < it.max && why_.empty(); ++k) at = fork({add(Node::kAtom, it.bit, at), next});
        }
        for (uint32_t k = 0; k < it.min && why_.empty(); ++k) at = add(Node::kAtom, it.bit, at);
        return at;
      }
      case Item::kGroup: {
        std::vector<uint32_t> alts;
        for (const Seq& a : it.alts) alts.push_back(sequence(a, next));
        if (it.min == 0) alts.push_back(next);
        return fork(std::move(alts));
      }
      case Item::kAhead:
      case Item::kNotAhead:
        if (it.bit == 0) {
          why_ = "a lookahead of more than one char";
          return 0;
        }
        return add(it.kind == Item::kAhead ? Node::kAhead : Node::kNotAhead, it.bit, next);
      case Item::kLineStart:
      case Item::kLineEnd: why_ = "anchors"; return 0;
    }
    return 0;
  }

  SplitProgram* program_ = nullptr;
  std::string why_;
};

}  // namespace

bool parse_split_pattern(std::string_view pcre2_pattern, SplitPattern& out, std::string& why) {
  Parser parser(pcre2_pattern);
  if (!parser.parse(out.branches)) {
    why = parser.why();
    return false;
  }
  mark_one_char_lookaheads(out.branches);
  out.atoms = parser.atoms();
  return true;
}

bool lower_split_pattern(const std::vector<SplitSeq>& branches, SplitProgram& program, std::string& why) {
  return Lowering().lower(branches, program, why);
}

}  // namespace tokfeed::text::hf
