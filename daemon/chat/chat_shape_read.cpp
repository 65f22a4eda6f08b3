// A record's shape read straight from its JSON text (shape_walk.hpp,
// Walk::read): the key and the holes' strings that record_to_chat's values
// would give Walk::run, for the records whose messages record_to_chat takes
// as they are, without building those values. A record served from its
// shape then costs one pass over its text, its strings decoded into one
// buffer, and the copy of its rendering (docs/chat_templates.md, "Shapes
// read from the text").
//
// It takes a record in the messages format: a JSON object with `messages`,
// a list of messages each of which add_turn (chat_messages.cpp) keeps as it
// is (a string role that names no tool call or response, no null, no
// reasoning under any of its names), `tools` as a list of tool schemas or a
// JSON string of one, and no other field the formats name (section 1.1):
// other columns are read past. Anything else (another format, a repeated
// key, a number simdjson gives otherwise, more than 16 keys in a dict) is
// left to record_to_chat, which reads it or says why not.
#include <deque>
#include <string>

#include "chat/json_lex.hpp"
#include "chat/record_json.hpp"
#include "chat/record_tools.hpp"
#include "chat/shape_walk.hpp"
#include "records/record_fields.hpp"

namespace tokfeed::text::detail {

namespace {

constexpr int kMaxDepth = 48;                             // deeper records are left to record_to_chat
constexpr std::size_t kMaxRecord = std::size_t{1} << 20;  // as read_record's
constexpr std::size_t kSlack = 64;                        // room past the decoded strings (json_lex.hpp)
constexpr std::size_t kMaxDictKeys = 16;  // a bigger dict is left to record_to_chat (read_record's kInPlace)

// A message's reasoning, under each of its names (chat_messages.cpp).
bool names_reasoning(std::string_view k) { return k == "reasoning_content" || k == "thinking" || k == "reasoning"; }

}  // namespace

class ShapeReader : JsonLex {
 public:
  // `arena`: room for the record's strings decoded, plus kSlack. A hole's
  // string stays where it was decoded; the next string is decoded past it.
  ShapeReader(std::string_view json, char* arena, Walk& w) : JsonLex(json, arena), w_(w), paths_(w.paths_) {}

  // The record, its tools (null: none) in `tools`.
  bool record(const Value*& tools) {
    ws();
    if (!eat('{')) return false;
    ws();
    bool messages = false, tools_seen = false;
    tools = &none_;
    if (eat('}')) return false;
    for (;;) {
      if (p_ == end_ || *p_ != '"') return false;
      std::string_view key;
      if (!string(key) || !separator(':')) return false;
      if (key == "messages") {
        if (messages || !message_list()) return false;
        messages = true;
      } else if (key == "tools") {
        if (tools_seen || !read_tools(tools)) return false;
        tools_seen = true;
      } else if (key_of(key) != kKeys || key.starts_with('\x01') || !skip(1)) {
        return false;
      }
      if (separator(',')) continue;
      if (eat('}')) break;
      return false;
    }
    ws();
    return messages && p_ == end_;
  }

 private:
  Walk& w_;
  Paths& paths_;
  Value none_ = Value::none();
  Value parsed_tools_;  // tools given as a JSON string

  // A value the walk does not look at (a column no format names), read
  // as read_record would.
  bool skip(int depth) {
    Value v;
    std::size_t n = 0;
    if (!read_value({p_, static_cast<std::size_t>(end_ - p_)}, depth, v, n)) return false;
    p_ += n;
    return true;
  }

  // `tools`, as record_to_chat reads them: a list (the thread's ToolsCache
  // holds the one read last; another is left to record_to_chat, which
  // keeps it for the next record) or a JSON string of one, each tool a
  // dict; null is none.
  bool read_tools(const Value*& tools) {
    if (p_ == end_) return false;
    if (*p_ == 'n') {
      if (!literal("null")) return false;
      tools = &none_;
      return true;
    }
    ToolsCache& cache = ToolsCache::local();
    if (*p_ == '[') {
      std::size_t n = 0;
      tools = cache.read_match({p_, static_cast<std::size_t>(end_ - p_)}, n);
      if (!tools) return false;
      p_ += n;
    } else if (*p_ == '"') {
      std::string_view text;
      if (!string(text)) return false;
      try {
        parsed_tools_ = cache.parse_json(text);
      } catch (const tmpl::Error&) {
        return false;
      }
      tools = &parsed_tools_;
    } else {
      return false;
    }
    if (!tools->is_list()) return false;
    for (const Value& t : tools->list->items)
      if (!t.is_dict()) return false;
    return true;
  }

  // The messages: a list of one message or more.
  bool message_list() {
    if (!eat('[')) return false;
    ws();
    if (p_ != end_ && *p_ == ']') return false;  // no messages
    const std::size_t at = w_.size_;
    w_.put('l', 0);
    const uint32_t item = paths_.items(Paths::kMessages);
    if (item == Paths::kNone || !paths_.read(item)) return false;
    uint64_t n = 0;
    for (;;) {
      if (p_ == end_ || *p_ != '{' || !dict(item, 3, true)) return false;
      ++n;
      if (separator(',')) continue;
      if (eat(']')) break;
      return false;
    }
    w_.patch(at, n);
    return true;
  }

  // The value at p_, under `path`, in a list or dict `depth` deep; as
  // Walk::walk writes it.
  bool value(uint32_t path, int depth) {
    if (p_ == end_) return false;
    switch (*p_) {
      case '"': return text(path);
      case '{': return dict(path, depth + 1, false);
      case '[': return list(path, depth + 1);
      case 't':
        if (!literal("true")) return false;
        w_.put(static_cast<char>('0' + static_cast<int>(Kind::kBool)), 1);
        return true;
      case 'f':
        if (!literal("false")) return false;
        w_.put(static_cast<char>('0' + static_cast<int>(Kind::kBool)), 0);
        return true;
      case 'n':
        if (!literal("null")) return false;
        w_.tag(static_cast<char>('0' + static_cast<int>(Kind::kNone)));
        return true;
      default: {
        Value v;
        if (!number(v)) return false;
        w_.put(static_cast<char>('0' + static_cast<int>(v.kind)), static_cast<uint64_t>(v.i));
        return true;
      }
    }
  }

  // A string: part of the key where the template reads its path (or it is
  // empty), else a hole, its decoded bytes kept where they are.
  bool text(uint32_t path, std::string_view* out = nullptr) {
    std::string_view s;
    if (!string(s)) return false;
    if (out) *out = s;
    if (s.empty() || paths_.read(path)) {
      w_.bytes_of(s);
      return true;
    }
    if (w_.leaves.size() >= sk::kMaxLeaves) return false;
    w_.tag('o');
    w_.leaves.push_back({s, nullptr});
    w_.bytes += s.size();
    scratch_ += s.size();
    return true;
  }

  bool list(uint32_t path, int depth) {
    if (depth > kMaxDepth) return false;
    ++p_;
    ws();
    const std::size_t at = w_.size_;
    w_.put('l', 0);
    if (eat(']')) return true;
    const uint32_t item = paths_.items(path);
    if (item == Paths::kNone) return false;
    uint64_t n = 0;
    for (;;) {
      if (!value(item, depth)) return false;
      ++n;
      if (separator(',')) continue;
      if (eat(']')) break;
      return false;
    }
    w_.patch(at, n);
    return true;
  }

  // A dict `depth` deep; `message`: one of the messages, which must be one
  // that record_to_chat takes as it is.
  bool dict(uint32_t path, int depth, bool message) {
    if (depth > kMaxDepth) return false;
    const char* open = p_;
    ++p_;
    ws();
    if (eat('}')) {
      w_.put('d', 0);
      return !message;  // a message has a role
    }
    if (!message && path != Paths::kTools && !paths_.read(path)) {
      // A hole for the whole dict (Walk::walk): its value, as read_record
      // builds it, for the answers that ask it.
      if (w_.leaves.size() >= sk::kMaxLeaves) return false;
      Value& v = held_.emplace_back();
      std::size_t n = 0;
      if (!read_value({open, static_cast<std::size_t>(end_ - open)}, depth - 1, v, n)) return false;
      p_ = open + n;
      w_.tag('D');
      w_.leaves.push_back({{}, &v});
      return true;
    }
    const std::size_t at = w_.size_;
    w_.put('d', 0);
    uint32_t nodes[kMaxDictKeys];
    std::size_t n = 0;
    bool role = false;
    for (;;) {
      if (p_ == end_ || *p_ != '"') return false;
      std::string_view key;
      if (!string(key) || key.starts_with('\x01') || !separator(':') || n == kMaxDictKeys) return false;
      const uint32_t node = paths_.key(path, key, n);
      if (node == Paths::kNone) return false;
      for (std::size_t j = 0; j < n; ++j)
        if (nodes[j] == node) return false;  // a repeated key
      nodes[n++] = node;
      if (node == Paths::kTools) w_.bytes_of(key);
      else w_.put('k', node);
      if (message) {
        // add_turn keeps the message as it is (chat_messages.cpp, as_is).
        if (p_ == end_ || *p_ == 'n' || names_reasoning(key)) return false;
        if (key == "role") {
          std::string_view r;
          if (*p_ != '"' || !text(node, &r) || names_tool_turn(r)) return false;
          role = true;
        } else if (!value(node, depth)) {
          return false;
        }
      } else if (!value(node, depth)) {
        return false;
      }
      if (separator(',')) continue;
      if (eat('}')) break;
      return false;
    }
    w_.patch(at, n);
    return !message || role;
  }

 public:
  // The dicts held whole for the record's holes (Walk::read's record).
  static thread_local std::deque<Value> held_;
};

thread_local std::deque<Value> ShapeReader::held_;

bool Walk::read(std::string_view json, Loss loss) {
  if (json.size() > kMaxRecord) return false;
  static thread_local std::string arena;
  if (arena.size() < json.size() + kSlack) arena.resize(json.size() + kSlack);
  ShapeReader::held_.clear();
  begin(loss);
  ShapeReader reader(json, arena.data(), *this);
  const Value* tools = nullptr;
  if (!reader.record(tools)) return false;
  return walk_tools(*tools, nullptr);
}

}  // namespace tokfeed::text::detail
