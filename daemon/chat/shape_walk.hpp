// A record's shape (docs/chat_templates.md, "One render per shape";
// internal to daemon/chat): the paths a template's records are named by,
// and the walk that writes a record's key and finds the strings in its
// holes, from its values (chat_shapes.cpp) or straight from its JSON text
// (chat_shape_read.cpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "chat/chat_jinja.hpp"
#include "template/skeleton.hpp"

namespace tokfeed::text::detail {

using tmpl::Kind;
using tmpl::Value;
namespace sk = tmpl::skeleton;

constexpr std::size_t kMaxPaths = 64;  // paths read per template before the shapes give up
constexpr uint32_t kMaxNodes = 4096;   // paths named per template (a record with more renders directly)
constexpr std::size_t kMaxKeys = 256;  // keys named under one path, likewise

// Keys looked up as views (the walk's buffer).
struct KeyHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view k) const noexcept { return std::hash<std::string_view>()(k); }
};

// The paths of a template's messages, each named once: a node per path (a
// dict key under its parent's path, or a list's items), and whether the
// template reads the strings there (they are then part of the shape). The
// tools are one path: any of their strings read makes all of them part of
// it (templates print their tools whole, as JSON).
class Paths {
 public:
  static constexpr uint32_t kNone = ~0u;
  static constexpr uint32_t kMessages = 0;
  static constexpr uint32_t kTools = 1;  // every path in the tools

  // Dicts every template looks into are part of the shape from the start:
  // the messages, and their tool calls with their functions (a template
  // that reads a tool call's name). What is below them, a function's
  // arguments, is a hole until a template looks into it.
  Paths() : nodes_(2) {
    const uint32_t message = items(kMessages), call = items(key(message, "tool_calls", 0));
    for (uint32_t node : {message, call, key(call, "function", 0)}) nodes_[node].read = true;
  }

  // The node of key `k` of a dict at `parent`, or kNone past the limits.
  // `index` is k's place in its dict: records repeat their dicts' keys in
  // the same order, so the key is looked for first where it was named
  // first, then where the last key at this index was (messages of two
  // kinds, a tool result after a tool call, say, that order keys apart).
  __attribute__((always_inline)) uint32_t key(uint32_t parent, std::string_view k, std::size_t index) {
    if (parent == kTools) return kTools;
    const Node& n = nodes_[parent];
    if (index < n.keys.size() && tmpl::DictObj::same_key(n.keys[index].first, k)) [[likely]]
      return n.keys[index].second;
    if (index < n.last.size() && tmpl::DictObj::same_key(n.keys[n.last[index]].first, k))
      return n.keys[n.last[index]].second;
    return other_key(parent, k, index);
  }
  // The same, where k is at neither place.
  __attribute__((noinline)) uint32_t other_key(uint32_t parent, std::string_view k, std::size_t index) {
    auto& keys = nodes_[parent].keys;
    std::size_t at = 0;
    while (at < keys.size() && !tmpl::DictObj::same_key(keys[at].first, k)) ++at;
    if (at == keys.size()) {
      if (keys.size() >= kMaxKeys || nodes_.size() >= kMaxNodes) return kNone;
      keys.emplace_back(std::string(k), static_cast<uint32_t>(nodes_.size()));
      nodes_.emplace_back();  // (after the last use of `keys`, which it may move)
    }
    auto& last = nodes_[parent].last;
    if (index < kMaxKeys) {
      if (index >= last.size()) last.resize(index + 1, static_cast<uint16_t>(at));
      last[index] = static_cast<uint16_t>(at);
    }
    return nodes_[parent].keys[at].second;
  }
  // The node of a list's items at `parent`, or kNone.
  uint32_t items(uint32_t parent) {
    if (parent == kTools) return kTools;
    if (nodes_[parent].items == kNone) {
      if (nodes_.size() >= kMaxNodes) return kNone;
      const auto node = static_cast<uint32_t>(nodes_.size());
      nodes_[parent].items = node;
      nodes_.emplace_back();
    }
    return nodes_[parent].items;
  }

  // The number of the tools whose walk wrote `part` into a key: equal
  // parts, equal numbers; a number is never given to another part.
  uint64_t tools_id(std::string_view part) {
    auto it = tools_ids_.find(part);
    if (it != tools_ids_.end()) return it->second;
    if (tools_ids_.size() >= kMaxTools) tools_ids_.clear();
    return tools_ids_.emplace(std::string(part), next_tools_id_++).first->second;
  }

  bool read(uint32_t node) const { return nodes_[node].read; }
  uint32_t size() const { return static_cast<uint32_t>(nodes_.size()); }
  // Marks `node` read; false where it was already, or too many are.
  bool add(uint32_t node) {
    if (nodes_[node].read || (node != kTools && reads_ >= kMaxPaths)) return false;
    reads_ += node != kTools;
    return nodes_[node].read = true;
  }

 private:
  struct Node {
    std::vector<std::pair<std::string, uint32_t>> keys;
    std::vector<uint16_t> last;  // by index: the key of keys last met there
    uint32_t items = kNone;
    bool read = false;
  };
  std::vector<Node> nodes_;
  std::size_t reads_ = 0;
  static constexpr std::size_t kMaxTools = 1024;  // tools numbered (then forgotten, and numbered anew)
  std::unordered_map<std::string, uint64_t, KeyHash, std::equal_to<>> tools_ids_;
  uint64_t next_tools_id_ = 0;
};

// A hole's string: a view of the record's value, or of its text decoded.
struct Leaf {
  std::string_view text;  // empty for a dict
  const Value* value;     // the record's value, or null (a string read from the text)
};

// The shape of a record (its key) and the strings in its holes.
class Walk {
 public:
  explicit Walk(Paths& paths) : paths_(paths) {}

  // False: a record the shapes do not take (a value no JSON makes, or too
  // many holes or paths); it renders directly.
  // (Starts afresh, keeping the buffers of a walk before. A function of
  // its own, which bench/template/callgrind_split.sh counts.)
  [[gnu::noinline]] bool run(const Value& messages, const Value& tools, Loss loss, Value* sk_messages,
                             Value* sk_tools) {
    begin(loss);
    if (!(sk_messages ? walk<true>(messages, Paths::kMessages, sk_messages)
                      : walk<false>(messages, Paths::kMessages, nullptr)))
      return false;
    return walk_tools(tools, sk_tools);
  }

  // The same from a record's JSON text under `format` (chat_shape_read.cpp),
  // where record_to_chat's messages are plain to see in it: its messages'
  // part straight from the text, with no values built. False where they
  // are not, or the readers leave the record to simdjson: record_to_chat
  // and run() then say what it is.
  bool read(std::string_view json, Format format, Loss loss);

  std::string_view key() const { return {buf_.data(), size_}; }
  std::vector<Leaf> leaves;     // the holes' strings, in the order of their sentinels
  std::vector<uint32_t> paths;  // (build) each hole's path
  std::size_t bytes = 0;        // the holes' bytes
  std::size_t tools_first = 0;  // the messages' holes: the tools' come after them
  // (read) The dicts held whole as holes, read from the text: cleared when
  // the record is done with, so that nothing outlives it.
  std::deque<Value> held;

 private:
  friend class ShapeReader;

  void begin(Loss loss) {
    size_ = 0;
    leaves.clear();
    paths.clear();
    bytes = 0;
    tag(static_cast<char>(loss));
  }

  // The tools' part, after the messages'.
  bool walk_tools(const Value& tools, Value* sk_tools) {
    tools_first = leaves.size();
    // Tools the template reads are part of the shape whole: the skeleton
    // holds the record's own.
    const bool whole = paths_.read(Paths::kTools);
    Value* out = whole ? nullptr : sk_tools;
    if (!out && tools.kind == Kind::kList && tools_.kind == Kind::kList && tools.list == tools_.list &&
        whole == tools_whole_) {
      // The same tools as the walk that kept them (records with equal
      // tools share one value, which nothing changes): their part of the
      // key again, and their holes' strings, which are the same objects.
      if (leaves.size() + tools_leaves_.size() > sk::kMaxLeaves) return false;
      std::memcpy(room(tools_key_.size()), tools_key_.data(), tools_key_.size());
      leaves.insert(leaves.end(), tools_leaves_.begin(), tools_leaves_.end());
      bytes += tools_bytes_;
    } else {
      const std::size_t from = size_, bytes_from = bytes;
      if (!(out ? walk<true>(tools, Paths::kTools, out) : walk<false>(tools, Paths::kTools, nullptr))) return false;
      if (tools.kind == Kind::kList) {
        // The tools' part of the key by its number: records repeat their
        // tools, whose part (a key or a tag per string) is long.
        const uint64_t id = paths_.tools_id({buf_.data() + from, size_ - from});
        size_ = from;
        put('T', id);
        if (!out) {
          tools_ = tools;
          tools_whole_ = whole;
          tools_key_.assign(buf_.data() + from, size_ - from);
          tools_leaves_.assign(leaves.begin() + static_cast<std::ptrdiff_t>(tools_first), leaves.end());
          tools_bytes_ = bytes - bytes_from;
        }
      }
    }
    if (whole && sk_tools) *sk_tools = tools;
    return true;
  }

  // The key is written into buf_, grown (never shrunk) as needed.
  __attribute__((always_inline)) char* room(std::size_t n) {
    if (size_ + n > buf_.size()) [[unlikely]]
      buf_.resize(std::max(2 * buf_.size(), size_ + n + 256));
    char* at = buf_.data() + size_;
    size_ += n;
    return at;
  }
  void tag(char c) { *room(1) = c; }
  // A tag, then n in 7-bit groups, low first (a set high bit: more follow).
  __attribute__((always_inline)) void put(char c, uint64_t n) {
    if (n < 0x80) [[likely]] {  // most: one byte
      char* at = room(2);
      at[0] = c;
      at[1] = static_cast<char>(n);
      return;
    }
    char* at = room(11);
    *at++ = c;
    for (; n >= 0x80; n >>= 7) *at++ = static_cast<char>(n | 0x80);
    *at++ = static_cast<char>(n);
    size_ = static_cast<std::size_t>(at - buf_.data());
  }
  // The count of a put(c, 0) at `at` set to n: a list's or dict's, put
  // before its items are read from a record's text.
  void patch(std::size_t at, uint64_t n) {
    if (n < 0x80) [[likely]] {
      buf_[at + 1] = static_cast<char>(n);
      return;
    }
    char group[10];
    std::size_t k = 0;
    for (; n >= 0x80; n >>= 7) group[k++] = static_cast<char>(n | 0x80);
    group[k++] = static_cast<char>(n);
    const std::size_t tail = at + 2, moved = size_ - tail;
    room(k - 1);
    std::memmove(buf_.data() + tail + k - 1, buf_.data() + tail, moved);
    std::memcpy(buf_.data() + at + 1, group, k);
  }
  void bytes_of(std::string_view t) {
    put('s', static_cast<uint64_t>(t.size()));
    std::memcpy(room(t.size()), t.data(), t.size());
  }

  // kOut: the skeleton's copy of `v` is made in *out (for a record's
  // first walk of its shape); else only the key and the leaves.
  template <bool kOut>
  bool walk(const Value& v, uint32_t path, Value* out) {
    switch (v.kind) {
      case Kind::kStr: {
        if (v.markup) return false;
        const std::string& t = v.s.unread();
        if (t.empty() || paths_.read(path)) {
          bytes_of(t);
          if constexpr (kOut) *out = v;  // the record's own string (no sentinel in it)
          return true;
        }
        if (leaves.size() >= sk::kMaxLeaves) return false;
        tag('o');
        if constexpr (kOut) {
          *out = Value::str(sk::sentinel(static_cast<uint32_t>(leaves.size())));
          paths.push_back(path);
        }
        leaves.push_back({t, &v});
        bytes += t.size();
        return true;
      }
      case Kind::kList: {
        if (v.tuple || v.gen || v.view || v.list->group) return false;
        const auto& items = v.list->items;
        put('l', static_cast<uint64_t>(items.size()));
        if (items.empty()) {
          if constexpr (kOut) *out = Value::new_list(std::vector<Value>());
          return true;
        }
        const uint32_t at = paths_.items(path);
        if (at == Paths::kNone) return false;
        if constexpr (kOut) {
          std::vector<Value> copy(items.size());
          for (std::size_t k = 0; k < items.size(); ++k)
            if (!walk<true>(items[k], at, &copy[k])) return false;
          *out = Value::new_list(std::move(copy));
        } else {
          for (const Value& x : items)
            if (!walk<false>(x, at, nullptr)) return false;
        }
        return true;
      }
      case Kind::kDict: {
        if (v.ns || v.view || !v.dict->key_objs().empty()) return false;
        if (!v.dict->empty() && path != Paths::kTools && !paths_.read(path)) {
          // A hole for the whole dict (a tool call's arguments that the
          // template only dumps): neither its keys nor its values are part
          // of the shape. The skeleton holds a copy of it that reads as a
          // read of the hole (DictObj::hole).
          if (leaves.size() >= sk::kMaxLeaves) return false;
          tag('D');
          if constexpr (kOut) {
            *out = Value::new_dict();
            out->dict->items() = v.dict->unread_items();
            out->dict->hole = static_cast<uint32_t>(leaves.size());
            paths.push_back(path);
          }
          leaves.push_back({{}, &v});
          return true;
        }
        const auto& items = v.dict->items();
        put('d', static_cast<uint64_t>(items.size()));
        if constexpr (kOut) {
          *out = Value::new_dict();
          out->dict->items().reserve(items.size());
        }
        for (std::size_t i = 0; i < items.size(); ++i) {
          const auto& [k, x] = items[i];
          const uint32_t at = paths_.key(path, k, i);
          if (at == Paths::kNone) return false;
          // A key of the tools is written whole (they have no nodes); any
          // other is its node.
          if (at == Paths::kTools) bytes_of(k);
          else put('k', static_cast<uint64_t>(at));
          if constexpr (kOut) {
            Value copy;
            if (!walk<true>(x, at, &copy)) return false;
            out->dict->items().emplace_back(k, std::move(copy));
          } else if (!walk<false>(x, at, nullptr)) {
            return false;
          }
        }
        return true;
      }
      case Kind::kInt:
      case Kind::kFloat:
      case Kind::kBool:
        put(static_cast<char>('0' + static_cast<int>(v.kind)),
            v.kind == Kind::kBool ? static_cast<uint64_t>(v.b) : static_cast<uint64_t>(v.i));
        if constexpr (kOut) *out = v;
        return true;
      case Kind::kNone:
      case Kind::kUndefined:
        tag(static_cast<char>('0' + static_cast<int>(v.kind)));
        if constexpr (kOut) *out = v;
        return true;
      case Kind::kFunc: return false;
    }
    return false;
  }

  Paths& paths_;
  std::vector<char> buf_;
  std::size_t size_ = 0;
  // The tools of the last walk that walked them (held), and what they
  // added: their part of the key, their holes' strings and bytes.
  Value tools_;
  bool tools_whole_ = false;
  std::string tools_key_;
  std::vector<Leaf> tools_leaves_;
  std::size_t tools_bytes_ = 0;
};

}  // namespace tokfeed::text::detail
