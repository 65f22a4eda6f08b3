// A record's shape read straight from its JSON text (shape_walk.hpp,
// Walk::read): the key and the holes' strings that record_to_chat's values
// would give Walk::run, without building those values. A record served
// from its shape then costs one pass over its text, its strings decoded
// into one buffer, and the copy of its rendering (docs/chat_templates.md,
// "Shapes read from the text").
//
// It takes the records whose messages are plain to see in their text:
// messages that add_turn (chat_messages.cpp) keeps as they are or only
// aliases the reasoning of, ShareGPT turns of `from` and `value` alone,
// alpaca and query/response records, each with a system prompt or not;
// `tools` as a list of tool schemas or a JSON string of one; other columns
// that no format names are read past. Anything else (another format, a
// repeated key, a number simdjson gives otherwise, more than 16 keys in a
// dict) is left to record_to_chat, which reads it or says why not.
#include <optional>
#include <string>

#include "chat/json_lex.hpp"
#include "chat/record_json.hpp"
#include "chat/record_tools.hpp"
#include "chat/shape_walk.hpp"
#include "records/record_fields.hpp"

namespace tokfeed::text::detail {

namespace {

constexpr int kMaxDepth = 48;             // deeper records are left to record_to_chat
constexpr std::size_t kMaxDictKeys = 16;  // a bigger dict is left to record_to_chat (read_record's kInPlace)

constexpr std::string_view kSystemRole = "system", kUserRole = "user", kAssistantRole = "assistant";

// Which of a message's reasoning's names a key is (-1: none).
constexpr int kThinking = 1;  // kReasoningNames[kThinking]
int reasoning_name(std::string_view k) {
  for (int n = 0; n < 3; ++n)
    if (k == kReasoningNames[n]) return n;
  return -1;
}

}  // namespace

class ShapeReader : JsonLex {
 public:
  // `arena`: room for the record's strings decoded, plus kSlack. A hole's
  // string stays where it was decoded; the next string is decoded past it.
  ShapeReader(std::string_view json, char* arena, Walk& w) : JsonLex(json, arena), w_(w), paths_(w.paths_) {}

  // The record under `format` (kAuto, or the dataset's), its tools
  // (null: none) in `tools`.
  bool record(Format format, const Value*& tools) {
    ws();
    if (!eat('{')) return false;
    ws();
    tools = &none_;
    if (eat('}')) return false;
    uint32_t seen = 0;              // the fields read, by key_of (kKeys: the tools)
    bool listed = false;            // a list of messages or turns read
    std::string_view field[kKeys];  // the string fields (alpaca, query/response)
    bool has[kKeys] = {};           // ... given, not null
    history_.clear();
    for (;;) {
      if (p_ == end_ || *p_ != '"') return false;
      std::string_view key;
      if (!string(key) || key.starts_with('\x01') || !separator(':')) return false;
      const std::size_t k = key_of(key) < kKeys ? key_of(key) : key == "tools" ? kKeys : kKeys + 1;
      if (k <= kKeys) {
        if ((seen >> k) & 1) return false;  // a repeated field
        seen |= 1u << k;
      }
      bool ok = true;
      switch (k) {
        case idx(Key::kMessages):
        case idx(Key::kConversations): {
          const bool sharegpt = k == idx(Key::kConversations);
          if (listed || (format != Format::kAuto && format != (sharegpt ? Format::kShareGpt : Format::kMessages)))
            return false;
          ok = message_list(sharegpt);
          listed = true;
          break;
        }
        case idx(Key::kSystem):
        case idx(Key::kInstruction):
        case idx(Key::kInput):
        case idx(Key::kOutput):
        case idx(Key::kQuery):
        case idx(Key::kResponse): ok = field_string(field[k], has[k]); break;
        case idx(Key::kHistory): ok = read_history(); break;
        case kKeys: ok = read_tools(tools); break;
        case kKeys + 1: ok = skip(1); break;  // a column no format names
        default: return false;                // prompt, completion, text
      }
      if (!ok) return false;
      if (separator(',')) continue;
      if (eat('}')) break;
      return false;
    }
    ws();
    if (p_ != end_) return false;
    if (listed) return !has[idx(Key::kSystem)] || system_first(field[idx(Key::kSystem)]);
    bool alpaca;
    if (format == Format::kAuto && has[idx(Key::kInstruction)] && has[idx(Key::kOutput)]) alpaca = true;
    else if (format == Format::kAuto && has[idx(Key::kQuery)] && has[idx(Key::kResponse)]) alpaca = false;
    else if (format == Format::kAlpaca || format == Format::kQueryResponse) alpaca = format == Format::kAlpaca;
    else return false;
    return field_messages(alpaca, field, has);
  }

 private:
  Walk& w_;
  Paths& paths_;
  Value none_ = Value::none();
  Value parsed_tools_;                                                // tools given as a JSON string
  std::vector<std::string_view> history_;                             // a query/response record's: query, response, ...
  std::vector<std::pair<std::string_view, std::string_view>> turns_;  // (role, content)
  // The list of messages (or turns) read: where its key starts, its first
  // hole, and its first message's role.
  std::size_t list_at_ = 0, list_leaves_ = 0;
  std::optional<std::string> first_role_;

  // A string field (or null: none), its decoded bytes kept.
  bool field_string(std::string_view& out, bool& has) {
    if (p_ == end_) return false;
    if (*p_ == 'n') return literal("null");
    if (*p_ != '"' || !string(out)) return false;
    scratch_ += out.size();
    has = true;
    return true;
  }

  // A query/response record's `history`: [query, response] pairs of
  // strings (or null: none).
  bool read_history() {
    if (p_ == end_) return false;
    if (*p_ == 'n') return literal("null");
    if (!eat('[')) return false;
    ws();
    if (eat(']')) return true;
    for (;;) {
      if (!eat('[')) return false;
      ws();
      for (int k = 0; k < 2; ++k) {
        std::string_view s;
        bool has = false;
        if (p_ == end_ || *p_ != '"' || !field_string(s, has)) return false;
        history_.push_back(s);
        if (k == 0 && !separator(',')) return false;
      }
      ws();
      if (!eat(']')) return false;
      if (separator(',')) continue;
      if (eat(']')) break;
      return false;
    }
    return true;
  }

  // An alpaca or query/response record's messages, as record_to_chat
  // builds them (chat_messages.cpp: field_turns, field_messages): the
  // system prompt, then user and assistant turns, the user's of an
  // alpaca record its instruction and "\n" + its input where that is not
  // empty. A record record_to_chat refuses (a field missing, a turn
  // empty) is left to it.
  bool field_messages(bool alpaca, const std::string_view* field, const bool* has) {
    turns_.clear();
    if (has[idx(Key::kSystem)]) turns_.emplace_back(kSystemRole, field[idx(Key::kSystem)]);
    if (alpaca) {
      if (!has[idx(Key::kInstruction)] || !has[idx(Key::kOutput)]) return false;
      std::string_view user = field[idx(Key::kInstruction)];
      const std::string_view input = has[idx(Key::kInput)] ? field[idx(Key::kInput)] : std::string_view();
      if (!input.empty()) {  // joined where the strings are decoded (the arena has room for it)
        char* at = scratch_;
        std::memcpy(at, user.data(), user.size());
        at[user.size()] = '\n';
        std::memcpy(at + user.size() + 1, input.data(), input.size());
        user = {scratch_, user.size() + 1 + input.size()};
        scratch_ += user.size();
      }
      turns_.emplace_back(kUserRole, user);
      turns_.emplace_back(kAssistantRole, field[idx(Key::kOutput)]);
    } else {
      if (!has[idx(Key::kQuery)] || !has[idx(Key::kResponse)]) return false;
      for (std::size_t k = 0; k + 1 < history_.size(); k += 2) {
        turns_.emplace_back(kUserRole, history_[k]);
        turns_.emplace_back(kAssistantRole, history_[k + 1]);
      }
      turns_.emplace_back(kUserRole, field[idx(Key::kQuery)]);
      turns_.emplace_back(kAssistantRole, field[idx(Key::kResponse)]);
    }
    const uint32_t item = paths_.items(Paths::kMessages);
    if (item == Paths::kNone || !paths_.read(item)) return false;
    w_.put('l', turns_.size());
    for (const auto& [role, content] : turns_) {
      if (content.empty() && role != kSystemRole) return false;  // an empty turn
      const uint32_t r = paths_.key(item, "role", 0), c = paths_.key(item, "content", 1);
      if (r == Paths::kNone || c == Paths::kNone) return false;
      w_.put('d', 2);
      w_.put('k', r);
      if (!put_text(r, role)) return false;
      w_.put('k', c);
      if (!put_text(c, content)) return false;
    }
    return true;
  }

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

  // The messages (or ShareGPT's turns): a list of one or more.
  bool message_list(bool sharegpt) {
    if (!eat('[')) return false;
    ws();
    if (p_ != end_ && *p_ == ']') return false;  // no messages
    list_at_ = w_.size_;
    list_leaves_ = w_.leaves.size();
    w_.put('l', 0);
    const uint32_t item = paths_.items(Paths::kMessages);
    if (item == Paths::kNone || !paths_.read(item)) return false;
    first_role_.reset();
    return items(list_at_, [&] {
      return p_ != end_ && *p_ == '{' && (sharegpt ? turn(item) : dict(item, 3, true)) && first_role_;
    });
  }

  // A system prompt given beside the messages (or turns): record_to_chat
  // puts it first as a message of its own, unless the first message is
  // the system's.
  bool system_first(std::string_view system) {
    if (*first_role_ == kSystemRole) return true;
    if (w_.buf_[list_at_ + 1] & 0x80) return false;  // 128 messages or more (their count is longer)
    const uint32_t item = paths_.items(Paths::kMessages);
    const uint32_t r = paths_.key(item, "role", 0), c = paths_.key(item, "content", 1);
    if (r == Paths::kNone || c == Paths::kNone) return false;
    const std::size_t end = w_.size_, leaves_end = w_.leaves.size();
    w_.put('d', 2);
    w_.put('k', r);
    if (!put_text(r, kSystemRole)) return false;
    w_.put('k', c);
    if (!put_text(c, system)) return false;
    std::rotate(w_.buf_.data() + list_at_ + 2, w_.buf_.data() + end, w_.buf_.data() + w_.size_);
    std::rotate(w_.leaves.begin() + static_cast<std::ptrdiff_t>(list_leaves_),
                w_.leaves.begin() + static_cast<std::ptrdiff_t>(leaves_end), w_.leaves.end());
    w_.patch(list_at_, static_cast<uint8_t>(w_.buf_[list_at_ + 1]) + 1u);
    return true;
  }

  // A list's items, each read by `item`, up to its closing bracket; their
  // count put at `at` (a put('l', 0)).
  template <class Item>
  bool items(std::size_t at, Item&& item) {
    uint64_t n = 0;
    for (;;) {
      if (!item()) return false;
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

  // A string under `path`: part of the key where the template reads its
  // path (or it is empty), else a hole. A string just decoded (at
  // scratch_) that is a hole stays where it is.
  bool put_text(uint32_t path, std::string_view s) {
    if (s.empty() || paths_.read(path)) {
      w_.bytes_of(s);
      return true;
    }
    if (w_.leaves.size() >= sk::kMaxLeaves) return false;
    w_.tag('o');
    w_.leaves.push_back({s, nullptr});
    w_.bytes += s.size();
    if (s.data() == scratch_) scratch_ += s.size();
    return true;
  }

  // The string at p_ under `path`, decoded, in `out` where given.
  bool text(uint32_t path, std::string_view* out = nullptr) {
    std::string_view s;
    if (!string(s)) return false;
    if (out) *out = s;
    return put_text(path, s);
  }

  // A ShareGPT turn that record_to_chat maps to {"role", "content"}
  // (sharegpt_turns.cpp): `from` (a string naming no tool call or
  // response; "human" is the user, "gpt" the assistant), then `value` (not
  // null), and nothing else. A turn that gives `value` first is left to
  // record_to_chat.
  bool turn(uint32_t item) {
    ++p_;
    ws();
    std::string_view key, from;
    if (p_ == end_ || *p_ != '"' || !string(key) || key != "from" || !separator(':')) return false;
    if (p_ == end_ || *p_ != '"' || !string(from) || names_tool_turn(from)) return false;
    const std::string_view role = from == "human" ? kUserRole : from == "gpt" ? kAssistantRole : from;
    if (!first_role_) first_role_.emplace(role);
    const uint32_t r = paths_.key(item, "role", 0);
    if (r == Paths::kNone) return false;
    w_.put('d', 2);
    w_.put('k', r);
    if (!put_text(r, role) || !separator(',')) return false;
    if (p_ == end_ || *p_ != '"' || !string(key) || key != "value" || !separator(':')) return false;
    if (p_ == end_ || *p_ == 'n') return false;
    const uint32_t c = paths_.key(item, "content", 1);
    if (c == Paths::kNone) return false;
    w_.put('k', c);
    if (!value(c, 3)) return false;
    ws();
    return eat('}');
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
    return items(at, [&] { return value(item, depth); });
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
      Value& v = w_.held.emplace_back();
      std::size_t n = 0;
      if (!read_value({open, static_cast<std::size_t>(end_ - open)}, depth - 1, v, n)) return false;
      p_ = open + n;
      w_.tag('D');
      w_.leaves.push_back({{}, &v});
      return true;
    }
    const std::size_t at = w_.size_, leaves_at = w_.leaves.size();
    w_.put('d', 0);
    uint32_t nodes[kMaxDictKeys];
    std::size_t n = 0;
    bool role = false;
    // A message's reasoning under each of its names (kReasoningNames'
    // order), where given.
    std::string_view reasoning[3];
    bool has_reasoning[3] = {};
    for (;;) {
      if (p_ == end_ || *p_ != '"') return false;
      std::string_view key;
      if (!string(key) || key.starts_with('\x01') || !separator(':') || n == kMaxDictKeys) return false;
      const uint32_t node = paths_.key(path, key, n);
      if (node == Paths::kNone) return false;
      for (std::size_t j = 0; j < n; ++j)
        if (nodes[j] == node) return false;  // a repeated key
      nodes[n++] = node;
      if (!message) {
        if (node == Paths::kTools) w_.bytes_of(key);
        else w_.put('k', node);
        if (!value(node, depth)) return false;
      } else if (const int name = reasoning_name(key); name >= 0) {
        // add_turn's aliases (chat_messages.cpp, add_aliased), of a
        // reasoning given as a string: `thinking` goes first, the others
        // stay where they are.
        if (p_ == end_ || *p_ != '"' || !string(reasoning[name])) return false;
        if (reasoning[name].data() == scratch_) scratch_ += reasoning[name].size();
        has_reasoning[name] = true;
        if (name != kThinking) {
          w_.put('k', node);
          if (!put_text(node, reasoning[name])) return false;
        }
      } else {
        // add_turn keeps the rest of the message as it is: no null, a role
        // that names no tool call or response.
        w_.put('k', node);
        if (p_ == end_ || *p_ == 'n') return false;
        if (key == "role") {
          std::string_view r;
          if (*p_ != '"' || !text(node, &r) || names_tool_turn(r)) return false;
          if (!first_role_) first_role_.emplace(r);
          role = true;
        } else if (!value(node, depth)) {
          return false;
        }
      }
      if (separator(',')) continue;
      if (eat('}')) break;
      return false;
    }
    if (has_reasoning[0] || has_reasoning[1] || has_reasoning[2]) {
      // The first given of reasoning_content, thinking, reasoning: as
      // `thinking` first (where the message has none of its own), and as
      // `reasoning_content` last (where it has none).
      const int first = has_reasoning[0] ? 0 : has_reasoning[1] ? 1 : 2;
      const std::size_t end = w_.size_, leaves_end = w_.leaves.size();
      const uint32_t thinking = paths_.key(path, kReasoningNames[kThinking], 0);
      if (thinking == Paths::kNone) return false;
      w_.put('k', thinking);
      if (!put_text(thinking, reasoning[has_reasoning[kThinking] ? kThinking : first])) return false;
      std::rotate(w_.buf_.data() + at + 2, w_.buf_.data() + end, w_.buf_.data() + w_.size_);
      std::rotate(w_.leaves.begin() + static_cast<std::ptrdiff_t>(leaves_at),
                  w_.leaves.begin() + static_cast<std::ptrdiff_t>(leaves_end), w_.leaves.end());
      n += !has_reasoning[kThinking];
      if (!has_reasoning[0]) {
        const uint32_t content = paths_.key(path, kReasoningNames[0], n);
        if (content == Paths::kNone) return false;
        w_.put('k', content);
        if (!put_text(content, reasoning[first])) return false;
        ++n;
      }
    }
    w_.patch(at, n);
    return !message || role;
  }
};

bool Walk::read(std::string_view json, Format format, Loss loss) {
  if (json.size() > kMaxRecord) return false;
  static thread_local std::string arena;
  // Each string decoded once, no longer than its text; an alpaca record's
  // user turn joined once more.
  if (arena.size() < 2 * json.size() + kSlack) arena.resize(2 * json.size() + kSlack);
  held.clear();
  begin(loss);
  ShapeReader reader(json, arena.data(), *this);
  const Value* tools = nullptr;
  if (!reader.record(format, tools)) return false;
  return walk_tools(*tools, nullptr);
}

}  // namespace tokfeed::text::detail
