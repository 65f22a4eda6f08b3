#include "tokenizer/hf/bpe_linear.hpp"

#include <algorithm>
#include <cstdio>

namespace tokfeed::text::hf {

namespace {

std::string quoted(std::string_view raw) {
  std::string s = "'";
  for (unsigned char c : raw) {
    if (c >= 0x20 && c < 0x7f) {
      s.push_back(char(c));
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      s += hex;
    }
  }
  return s + "'";
}

}  // namespace

std::unique_ptr<LinearBpe> LinearBpe::build(const std::vector<std::string>& raw, const std::vector<MergeSpec>& merges,
                                            const MergeTable& table, const int32_t (&byte_unit_id)[256], Heap heap,
                                            std::string& why) {
  auto lin = std::unique_ptr<LinearBpe>(new LinearBpe());
  lin->merges_ = &table;
  auto& tok = lin->trees_;
  tok.assign(raw.size(), Tree{INT32_MAX, -1, -1});
  std::vector<uint8_t> irregular(raw.size(), 0);
  std::vector<bool> reachable(raw.size(), false);
  for (int b = 0; b < 256; ++b) {
    const int32_t id = byte_unit_id[b];
    if (id < 0) {
      why = "byte " + std::to_string(b) + " has no token";
      return nullptr;
    }
    tok[size_t(id)].birth = -1;
    reachable[size_t(id)] = true;
  }
  // The merges that make each token: makers[at[id], at[id + 1]).
  std::vector<uint32_t> at(raw.size() + 1, 0), makers;
  for (const MergeSpec& m : merges)
    if (m.left >= 0) ++at[size_t(m.new_id) + 1];
  for (size_t id = 0; id < raw.size(); ++id) at[id + 1] += at[id];
  makers.resize(at[raw.size()]);
  {
    std::vector<uint32_t> fill(at.begin(), at.end() - 1);
    for (size_t rank = 0; rank < merges.size(); ++rank)
      if (merges[rank].left >= 0) makers[fill[size_t(merges[rank].new_id)]++] = uint32_t(rank);
  }
  // Shorter tokens first, in id order within a length (a counting sort): a
  // split's parts are known before the token.
  std::vector<int32_t> made;
  {
    std::vector<uint32_t> first;  // per length: where its tokens start in `made`
    for (size_t id = 0; id < raw.size(); ++id)
      if (at[id + 1] > at[id] && raw[id].size() >= 2 && tok[id].birth != -1) {
        if (first.size() < raw[id].size() + 2) first.resize(raw[id].size() + 2, 0);
        ++first[raw[id].size() + 1];
      }
    for (size_t len = 1; len < first.size(); ++len) first[len] += first[len - 1];
    made.resize(first.empty() ? 0 : first.back());
    for (size_t id = 0; id < raw.size(); ++id)
      if (at[id + 1] > at[id] && raw[id].size() >= 2 && tok[id].birth != -1)
        made[first[raw[id].size()]++] = int32_t(id);
  }
  std::vector<WordPiece> pieces;
  for (int32_t id : made) {
    Tree& t = tok[size_t(id)];
    // A merge whose parts are regular and made before it is the canonical
    // split iff nothing joins the parts across their boundary first, which
    // the walk says; at most one merge can be. Where some merge is out of
    // the walk's reach and none passes, the heap loop decides.
    bool undecided = false;
    for (uint32_t k = at[size_t(id)]; k < at[size_t(id) + 1] && !reachable[size_t(id)]; ++k) {
      const int32_t rank = int32_t(makers[k]);
      const MergeSpec& m = merges[size_t(rank)];
      if (!reachable[size_t(m.left)] || !reachable[size_t(m.right)]) continue;
      if (irregular[size_t(m.left)] || irregular[size_t(m.right)] || rank <= tok[size_t(m.left)].birth ||
          rank <= tok[size_t(m.right)].birth) {
        undecided = true;
        continue;
      }
      if (lin->walk(m.left, m.right, rank, false)) {
        t = Tree{rank, m.left, m.right};
        reachable[size_t(id)] = true;
      }
    }
    if (reachable[size_t(id)] || !undecided) continue;
    // The heap loop on the token's own bytes says whether it is reachable,
    // and by which split.
    int32_t last[2];
    pieces.clear();
    heap(raw[size_t(id)], pieces, last);
    if (pieces.size() != 1) continue;
    const int32_t left = last[0], right = last[1];
    const Merge* m = left >= 0 ? table.find(left, right) : nullptr;
    if (m == nullptr || m->new_id != id || !reachable[size_t(left)] || !reachable[size_t(right)]) {
      why = "token " + quoted(raw[size_t(id)]) + ": its last merge does not make it from reachable tokens";
      return nullptr;
    }
    t = Tree{m->rank, left, right};
    reachable[size_t(id)] = true;
    if (irregular[size_t(left)] || irregular[size_t(right)] || m->rank <= tok[size_t(left)].birth ||
        m->rank <= tok[size_t(right)].birth) {
      irregular[size_t(id)] = 1;
      ++lin->irregular_count_;
    }
  }
  lin->irregular_.assign(raw.size() / 64 + 1, 0);
  for (size_t id = 0; id < raw.size(); ++id) lin->irregular_[id / 64] |= uint64_t(irregular[id]) << (id % 64);
  lin->heap_ = std::move(heap);
  lin->offsets_.assign(raw.size() + 1, 0);
  for (size_t id = 0; id < raw.size(); ++id) {
    lin->offsets_[id] = uint32_t(lin->bytes_.size());
    lin->bytes_ += raw[id];
  }
  lin->offsets_[raw.size()] = uint32_t(lin->bytes_.size());
  {
    std::vector<std::pair<uint64_t, Merge>> canonical;
    for (size_t id = 0; id < raw.size(); ++id)
      if (reachable[id] && tok[id].birth >= 0)
        canonical.push_back({MergeTable::key(tok[id].left, tok[id].right), Merge{tok[id].birth, int32_t(id)}});
    lin->canonical_.build(canonical);
  }
  if (!lin->build_trie(raw, reachable, why)) return nullptr;
  return lin;
}

bool LinearBpe::build_trie(const std::vector<std::string>& raw, const std::vector<bool>& reachable, std::string& why) {
  // The tokens in byte order, sorted by their first 8 bytes read as one
  // big-endian number (zeros past the end), the whole strings compared only
  // where those are equal: the same order as comparing the strings.
  std::vector<std::pair<uint64_t, int32_t>> keyed;
  for (size_t id = 0; id < raw.size(); ++id) {
    if (!reachable[id]) continue;
    uint64_t key = 0;
    const std::string& t = raw[id];
    for (size_t i = 0; i < 8; ++i) key = key << 8 | (i < t.size() ? uint8_t(t[i]) : 0);
    keyed.emplace_back(key, int32_t(id));
  }
  {
    // An LSD radix sort of the keys, a byte a pass (stable: ids ascending
    // within a key), then each run of equal keys by the whole strings.
    std::vector<std::pair<uint64_t, int32_t>> tmp(keyed.size());
    for (int shift = 0; shift < 64; shift += 8) {
      size_t count[257] = {};
      for (const auto& k : keyed) ++count[(k.first >> shift & 0xFF) + 1];
      if (count[(keyed.empty() ? 0 : keyed[0].first >> shift & 0xFF) + 1] == keyed.size()) continue;  // one bucket
      for (int b = 0; b < 256; ++b) count[b + 1] += count[b];
      for (const auto& k : keyed) tmp[count[k.first >> shift & 0xFF]++] = k;
      keyed.swap(tmp);
    }
  }
  for (size_t i = 0; i < keyed.size();) {
    size_t j = i + 1;
    while (j < keyed.size() && keyed[j].first == keyed[i].first) ++j;
    if (j - i > 1)
      std::sort(keyed.begin() + ptrdiff_t(i), keyed.begin() + ptrdiff_t(j), [&](const auto& a, const auto& b) {
        const int c = raw[size_t(a.second)].compare(raw[size_t(b.second)]);
        return c != 0 ? c < 0 : a.second < b.second;
      });
    i = j;
  }
  std::vector<int32_t> order(keyed.size());
  for (size_t i = 0; i < keyed.size(); ++i) order[i] = keyed[i].second;
  // Inserting sorted strings creates nodes in preorder; each token adds the
  // nodes past its common prefix with the previous one.
  std::vector<uint32_t> parent = {0};
  std::vector<uint8_t> label = {0};
  std::vector<int32_t> token = {-1};
  std::vector<uint32_t> path = {0};  // the previous token's nodes by depth
  std::string_view prev;
  size_t longest = 0;
  for (int32_t id : order) {
    const std::string_view s = raw[size_t(id)];
    size_t lcp = 0;
    while (lcp < s.size() && lcp < prev.size() && s[lcp] == prev[lcp]) ++lcp;
    path.resize(lcp + 1);
    for (size_t d = lcp; d < s.size(); ++d) {
      path.push_back(uint32_t(token.size()));
      parent.push_back(path[d]);
      label.push_back(uint8_t(s[d]));
      token.push_back(-1);
    }
    token[path[s.size()]] = id;
    prev = s;
    longest = std::max(longest, s.size());
  }
  // Records in node order; children sorted by byte (a node's children were
  // created in increasing byte order).
  const size_t nodes = token.size();
  std::vector<uint32_t> count(nodes, 0), at(nodes, 0), fill(nodes, 0);
  for (size_t n = 1; n < nodes; ++n) ++count[parent[n]];
  size_t words = 0;
  uint32_t tables = 0;
  for (size_t n = 0; n < nodes; ++n) {
    at[n] = uint32_t(words);
    words += 2 + (count[n] > kSparse ? 0 : (count[n] + 3) / 4 + count[n]);
  }
  if (words >= kDenseBit) {
    why = "the vocabulary's trie has " + std::to_string(nodes) + " nodes, too many";
    return false;
  }
  trie_.assign(words + kPadding, 0);
  for (size_t n = 0; n < nodes; ++n) {
    trie_[at[n]] = uint32_t(token[n]);
    trie_[at[n] + 1] = count[n] > kSparse ? kDenseBit | tables++ : count[n];
  }
  dense_.assign(size_t(tables) * 256, kNone);
  for (size_t n = 1; n < nodes; ++n) {
    const uint32_t p = parent[n], kids = trie_[at[p] + 1];
    if (kids & kDenseBit) {
      dense_[size_t(kids & ~kDenseBit) * 256 + label[n]] = at[n];
      continue;
    }
    const uint32_t i = fill[p]++;
    trie_[at[p] + 2 + i / 4] |= uint32_t(label[n]) << (8 * (i % 4));
    trie_[at[p] + 2 + (kids + 3) / 4 + i] = at[n];
  }
  top2_.assign(size_t(1) << 16, kNone);
  for (int b = 0; b < 256; ++b) {
    const uint32_t* first = trie_.data() + child(trie_.data(), uint8_t(b));  // every byte is a token
    unit_[b] = int32_t(first[0]);
    for (int c = 0; c < 256; ++c) top2_[size_t(b) << 8 | size_t(c)] = child(first, uint8_t(c));
  }
  byte_pairs_.assign(size_t(1) << 16, kNoMerge);
  for (int b = 0; b < 256; ++b)
    for (int c = 0; c < 256; ++c) byte_pairs_[size_t(b) << 8 | size_t(c)] = merge_of(unit_[b], unit_[c]);
  cands_.resize(longest + 1);
  return true;
}

size_t LinearBpe::matches(std::string_view word, size_t pos, size_t max_len) const {
  const size_t limit = std::min(word.size() - pos, max_len - 1);
  if (limit == 0) return 0;
  const auto* w = reinterpret_cast<const uint8_t*>(word.data()) + pos;
  cands_[0] = Piece{unit_[w[0]], 1};
  if (limit == 1) return 1;
  size_t n = 1;
  for (size_t len = 2, node = top2_[size_t(w[0]) << 8 | w[1]]; node != kNone; ++len) {
    const uint32_t* record = trie_.data() + node;
    // Written whether or not the node is a token, kept if it is: no branch.
    cands_[n] = Piece{int32_t(record[0]), uint32_t(len)};
    n += record[0] != kNone;
    if (len == limit) break;
    node = child(record, w[len]);
  }
  return n;
}

bool LinearBpe::walk(int32_t x, int32_t y, int32_t limit, bool inclusive) const {
  // (x, y) is the pair at the boundary until rank `limit` (inclusive: also at
  // that rank, being then left of the pair that merges). BPE merges it across
  // the boundary iff its own rank comes before that.
  int64_t before = int64_t(limit) + inclusive;
  for (;;) {
    if (const Merge* m = merges_->find(x, y); m != nullptr && m->rank < before) return false;
    const Tree &tx = trees_[size_t(x)], &ty = trees_[size_t(y)];
    if ((tx.birth & ty.birth) < 0) return true;  // both units
    // If x was made last, its right part faced y before x's birth, where the
    // merge making x (further left) wins a tie; else y's left part faced x
    // until y's birth (or both were made together, y after x), and wins a
    // tie, being further left. Selected with no branch: which side goes on
    // depends on the word.
    const bool x_last = tx.birth > ty.birth;
    before = x_last ? int64_t(tx.birth) : int64_t(ty.birth) + 1;
    x = x_last ? tx.right : x;
    y = x_last ? y : ty.left;
  }
}

bool LinearBpe::heap_pair(int32_t a, int32_t b) const {
  const auto bytes = [&](int32_t id) {
    return std::string_view(bytes_).substr(offsets_[size_t(id)], offsets_[size_t(id) + 1] - offsets_[size_t(id)]);
  };
  pair_bytes_.assign(bytes(a));
  pair_bytes_ += bytes(b);
  pair_pieces_.clear();
  int32_t last[2];
  heap_(pair_bytes_, pair_pieces_, last);
  return pair_pieces_.size() == 2 && pair_pieces_[0].id == a && pair_pieces_[1].id == b;
}

bool LinearBpe::search(std::string_view word) const {
  const size_t n = word.size();
  stack_.clear();
  dead_.assign(n / 64 + 1, 0);
  size_t pos = 0, max_len = n + 1;
  for (;;) {
    // Longest first: the first token that can be followed is the BPE's.
    const int32_t last = stack_.empty() ? -1 : stack_.back().id;
    bool pushed = false;
    for (size_t k = matches(word, pos, max_len); k > 0 && !pushed;) {
      const Piece c = cands_[--k];
      const size_t end = pos + c.len;
      if (dead_[end / 64] >> (end % 64) & 1) continue;
      if (last >= 0 && !compatible(last, c.id)) continue;
      stack_.push_back(c);
      pos = end;
      pushed = true;
    }
    if (pushed) {
      if (pos == n) return true;
      max_len = n + 1;
      continue;
    }
    // No tokenization of the rest starts here, given the unique BPE of the
    // prefix: step back and try the previous token's shorter prefixes.
    dead_[pos / 64] |= uint64_t(1) << (pos % 64);
    if (stack_.empty()) return false;
    pos -= stack_.back().len;
    max_len = stack_.back().len;
    stack_.pop_back();
  }
}

}  // namespace tokfeed::text::hf
