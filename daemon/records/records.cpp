#include "records/records.hpp"

#include <simdjson.h>

#include "records/record_fields.hpp"

namespace tokfeed::text {

namespace dom = simdjson::dom;

std::string_view role_name(Role r) noexcept {
  switch (r) {
    case Role::kSystem: return "system";
    case Role::kUser: return "user";
    case Role::kAssistant: return "assistant";
  }
  return "?";
}

std::string_view loss_name(Loss l) noexcept {
  switch (l) {
    case Loss::kAllAssistant: return "all_assistant";
    case Loss::kLastAssistant: return "last_assistant";
    case Loss::kAll: return "all";
  }
  return "?";
}

bool parse_loss(std::string_view name, Loss& out) noexcept {
  for (Loss l : {Loss::kAllAssistant, Loss::kLastAssistant, Loss::kAll}) {
    if (loss_name(l) == name) {
      out = l;
      return true;
    }
  }
  return false;
}

std::string_view format_name(Format f) noexcept {
  switch (f) {
    case Format::kAuto: return "auto";
    case Format::kMessages: return "messages";
    case Format::kShareGpt: return "sharegpt";
    case Format::kAlpaca: return "alpaca";
    case Format::kQueryResponse: return "query_response";
    case Format::kPromptCompletion: return "prompt_completion";
    case Format::kText: return "text";
  }
  return "?";
}

bool parse_format(std::string_view name, Format& out) noexcept {
  for (Format f : {Format::kAuto, Format::kMessages, Format::kShareGpt, Format::kAlpaca, Format::kQueryResponse,
                   Format::kPromptCompletion, Format::kText}) {
    if (format_name(f) == name) {
      out = f;
      return true;
    }
  }
  return false;
}

std::string apply_placeholders(std::string_view text,
                               const std::vector<std::pair<std::string, std::string>>& placeholders) {
  std::string out;
  out.reserve(text.size());
  std::size_t i = 0;
  while (i < text.size()) {
    std::size_t open = text.find("{{", i);
    if (open == std::string_view::npos) break;
    std::size_t close = text.find("}}", open + 2);
    if (close == std::string_view::npos) break;
    std::string_view name = text.substr(open + 2, close - open - 2);
    const std::string* value = nullptr;
    for (const auto& [k, v] : placeholders)
      if (k == name) value = &v;
    out.append(text.substr(i, open - i));
    if (value) {
      out += *value;
      i = close + 2;
    } else {
      out += "{{";
      i = open + 2;
    }
  }
  out.append(text.substr(i));
  return out;
}

namespace {

using detail::check_turns;
using detail::idx;
using detail::is;
using detail::Key;
using detail::key_of;
using detail::kKeyNames;
using detail::kKeys;
using detail::Turns;
using detail::TurnView;

// Reads a string field into a view of the parser's buffer; returns the
// reason on failure.
std::string string_field(dom::element e, std::string_view where, std::string_view& out) {
  if (e.get_string().get(out)) return "field '" + std::string(where) + "': expected a string";
  return {};
}

// A record's top-level fields, seen through the `columns` renames
// (docs/data_model.md 1.1): a field renamed to a key wins over the key
// itself, and a field renamed away is absent under its own name. The members
// are read once, keeping the first of each name (the one simdjson's lookup
// by name finds).
class Fields {
 public:
  Fields(dom::object obj, const std::vector<std::pair<std::string, std::string>>& columns) {
    // The first member of each key's name; null counts as absent.
    for (dom::key_value_pair kv : obj) {
      std::size_t k = key_of(kv.key);
      if (k < kKeys && !(seen_ & (1u << k))) {
        seen_ |= 1u << k;
        if (!kv.value.is_null()) value_[k] = kv.value, found_ |= 1u << k;
      }
    }
    if (!columns.empty()) rename(obj, columns);
  }

  bool get(Key key, dom::element& out) const {
    if (!(found_ & (1u << idx(key)))) return false;
    out = value_[idx(key)];
    return true;
  }

 private:
  void rename(dom::object obj, const std::vector<std::pair<std::string, std::string>>& columns) {
    // simdjson's lookup finds the first member of that name.
    dom::element from[kKeys];
    for (std::size_t k = 0; k < kKeys; ++k) {
      std::size_t j = detail::rename_source(columns, k, [&](std::size_t c) {
        auto r = obj.at_key(columns[c].first);
        if (r.error() || r.value_unsafe().is_null()) return false;
        from[k] = r.value_unsafe();
        return true;
      });
      if (j == detail::kNoField) found_ &= ~(1u << k);
      else if (j != detail::kOwnField) value_[k] = from[k], found_ |= 1u << k;
    }
  }

  dom::element value_[kKeys];
  uint32_t seen_ = 0, found_ = 0;
};

// The turns of `messages` (role, content) or, `sharegpt`, of `conversations`
// (from, value).
std::string parse_turn_list(dom::array list, bool sharegpt, Turns& out) {
  const std::string_view list_name = sharegpt ? "conversations" : "messages";
  const std::string_view role_key = sharegpt ? "from" : "role";
  const std::string_view content_key = sharegpt ? "value" : "content";
  std::size_t i = 0;
  // Names the field in a reason; built only when there is one.
  auto where = [&](std::string_view key) {
    std::string w = std::string(list_name) + "[" + std::to_string(i) + "]";
    return key.empty() ? w : w + "." + std::string(key);
  };
  for (dom::element item : list) {
    dom::object obj;
    if (item.get_object().get(obj)) return "field '" + where("") + "': expected an object";
    // One pass over the turn's members; the first of each name counts.
    dom::element role_el, content_el;
    bool role_seen = false, content_seen = false;
    for (dom::key_value_pair kv : obj) {
      if (!role_seen && (sharegpt ? is(kv.key, "from") : is(kv.key, "role"))) {
        role_el = kv.value;
        role_seen = true;
      } else if (!content_seen && (sharegpt ? is(kv.key, "value") : is(kv.key, "content"))) {
        content_el = kv.value;
        content_seen = true;
      }
    }
    // Absent and null read the same.
    if (!role_seen || role_el.is_null()) return "field '" + where(role_key) + "' is missing";
    if (!content_seen || content_el.is_null()) return "field '" + where(content_key) + "' is missing";
    std::string_view role, content;
    if (role_el.get_string().get(role)) return "field '" + where(role_key) + "': expected a string";
    if (content_el.get_string().get(content)) return "field '" + where(content_key) + "': expected a string";
    Role r;
    if (!detail::role_of(role, sharegpt, r)) return "unknown role '" + std::string(role) + "' in '" + where("") + "'";
    out.push_back({r, content, {}});
    ++i;
  }
  return {};
}

std::string optional_system(const Fields& obj, Turns& out) {
  dom::element e;
  if (!obj.get(Key::kSystem, e)) return {};
  std::string_view s;
  if (auto err = string_field(e, "system", s); !err.empty()) return err;
  out.push_back({Role::kSystem, s, {}});
  return {};
}

std::string parse_alpaca(const Fields& obj, Turns& out) {
  if (auto e = optional_system(obj, out); !e.empty()) return e;
  dom::element ins, inp, outp;
  if (!obj.get(Key::kInstruction, ins)) return "field 'instruction' is missing";
  if (!obj.get(Key::kOutput, outp)) return "field 'output' is missing";
  std::string_view user, input, answer;
  if (auto e = string_field(ins, "instruction", user); !e.empty()) return e;
  if (obj.get(Key::kInput, inp)) {
    if (auto e = string_field(inp, "input", input); !e.empty()) return e;
  }
  if (auto e = string_field(outp, "output", answer); !e.empty()) return e;
  out.push_back({Role::kUser, user, input});
  out.push_back({Role::kAssistant, answer, {}});
  return {};
}

std::string parse_query_response(const Fields& obj, Turns& out) {
  if (auto e = optional_system(obj, out); !e.empty()) return e;
  dom::element hist;
  if (obj.get(Key::kHistory, hist)) {
    dom::array pairs;
    if (hist.get_array().get(pairs)) return "field 'history': expected an array of [query, response] pairs";
    std::size_t i = 0;
    auto where = [&](int k) {
      return "history[" + std::to_string(i) + "]" + (k < 0 ? "" : "[" + std::to_string(k) + "]");
    };
    for (dom::element pair : pairs) {
      dom::array qr;
      if (pair.get_array().get(qr) || qr.size() != 2) return "field '" + where(-1) + "': expected [query, response]";
      std::string_view q, r;
      if (qr.at(0).value_unsafe().get_string().get(q)) return "field '" + where(0) + "': expected a string";
      if (qr.at(1).value_unsafe().get_string().get(r)) return "field '" + where(1) + "': expected a string";
      out.push_back({Role::kUser, q, {}});
      out.push_back({Role::kAssistant, r, {}});
      ++i;
    }
  }
  dom::element q_el, r_el;
  if (!obj.get(Key::kQuery, q_el)) return "field 'query' is missing";
  if (!obj.get(Key::kResponse, r_el)) return "field 'response' is missing";
  std::string_view q, r;
  if (auto e = string_field(q_el, "query", q); !e.empty()) return e;
  if (auto e = string_field(r_el, "response", r); !e.empty()) return e;
  out.push_back({Role::kUser, q, {}});
  out.push_back({Role::kAssistant, r, {}});
  return {};
}

Format detect(const Fields& obj) {
  dom::element e;
  if (obj.get(Key::kMessages, e)) return Format::kMessages;
  if (obj.get(Key::kConversations, e)) return Format::kShareGpt;
  dom::element e2;
  if (obj.get(Key::kInstruction, e) && obj.get(Key::kOutput, e2)) return Format::kAlpaca;
  if (obj.get(Key::kQuery, e) && obj.get(Key::kResponse, e2)) return Format::kQueryResponse;
  if (obj.get(Key::kPrompt, e) && obj.get(Key::kCompletion, e2)) return Format::kPromptCompletion;
  if (obj.get(Key::kText, e)) return Format::kText;
  return Format::kAuto;
}

bool is_plain(Format f) { return f == Format::kPromptCompletion || f == Format::kText; }

// A plain-text record's strings, as views into the parser's buffer: the
// prompt (prompt_completion only) and the text or completion.
struct PlainView {
  std::optional<std::string_view> prompt;
  std::string_view text;
  bool lists = false;  // prompt and completion are lists: a conversational record
};

std::string parse_plain(const Fields& obj, Format f, PlainView& out) {
  dom::element e;
  auto required = [&](Key k, std::string_view& s) -> std::string {
    const std::string name(kKeyNames[idx(k)]);
    if (!obj.get(k, e)) return "field '" + name + "' is missing";
    if (e.is_array() && f == Format::kPromptCompletion) {
      out.lists = true;
      return "field '" + name +
             "': a list of messages (a conversational prompt/completion) is rendered by a model's template: set "
             "[tokenizer] template = \"auto\" or \"jinja\", or give the conversation as 'messages'";
    }
    return string_field(e, name, s);
  };
  if (f == Format::kText) {
    if (auto err = required(Key::kText, out.text); !err.empty()) return err;
    if (out.text.empty()) return "field 'text' is empty";
    return {};
  }
  std::string_view prompt;
  if (auto err = required(Key::kPrompt, prompt); !err.empty()) return err;
  out.prompt = prompt;
  if (auto err = required(Key::kCompletion, out.text); !err.empty()) return err;
  if (out.text.empty()) return "field 'completion' is empty";
  return {};
}

std::string parse_list_field(const Fields& obj, bool sharegpt, Turns& out) {
  const Key field = sharegpt ? Key::kConversations : Key::kMessages;
  const std::string_view key = kKeyNames[static_cast<std::size_t>(field)];
  dom::element e;
  if (!obj.get(field, e)) return "field '" + std::string(key) + "' is missing";
  dom::array list;
  if (e.get_array().get(list)) return "field '" + std::string(key) + "': expected an array";
  return parse_turn_list(list, sharegpt, out);
}

// Parses `json` into turns by its format (a plain-text record: its text or
// completion as one assistant turn, `plain` set). The views live until the
// parser's next parse (one parser per thread).
std::string parse_turns(std::string_view json, const RecordRules& rules, bool padded, Turns& out, bool* plain = nullptr,
                        PlainView* view = nullptr) {
  static_assert(kParsePadding >= simdjson::SIMDJSON_PADDING);
  out.clear();
  static thread_local dom::parser parser;
  dom::element root;
  if (auto err = parser.parse(json.data(), json.size(), !padded).get(root)) {
    return std::string("malformed JSON: ") + simdjson::error_message(err);
  }
  dom::object obj;
  if (root.get_object().get(obj)) return "malformed JSON: a record must be a JSON object";
  Fields fields(obj, rules.columns);
  Format f = rules.format == Format::kAuto ? detect(fields) : rules.format;
  switch (f) {
    case Format::kMessages: return parse_list_field(fields, false, out);
    case Format::kShareGpt: return parse_list_field(fields, true, out);
    case Format::kAlpaca: return parse_alpaca(fields, out);
    case Format::kQueryResponse: return parse_query_response(fields, out);
    case Format::kPromptCompletion:
    case Format::kText: {
      if (plain) *plain = true;
      PlainView v;
      std::string e = parse_plain(fields, f, v);
      if (view) *view = v;
      if (!e.empty()) return e;
      out.push_back({Role::kAssistant, v.text, {}});
      return {};
    }
    case Format::kAuto: break;
  }
  return "unrecognized record: expected 'messages', 'conversations', 'instruction'+'output', 'query'+'response', "
         "'prompt'+'completion' or 'text'";
}

// A valid plain-text record's strings, placeholders applied; returns the
// bad-record reason (the text empty once they are).
std::string read_plain(const PlainView& view, const RecordRules& rules, PlainRecord& out) {
  auto text = [&](std::string_view s) {
    return rules.placeholders.empty() ? std::string(s) : apply_placeholders(s, rules.placeholders);
  };
  out.text = text(view.text);
  out.prompt.reset();
  if (view.prompt) out.prompt = text(*view.prompt);
  return out.text.empty() ? "the text is empty once placeholders are applied" : "";
}

void materialize(const Turns& turns, const RecordRules& rules, Conversation& out) {
  out.resize(turns.size());
  for (std::size_t i = 0; i < turns.size(); ++i) {
    out[i].role = turns[i].role;
    std::string& c = out[i].content;
    c.assign(turns[i].text);
    if (!turns[i].suffix.empty()) c.append("\n").append(turns[i].suffix);
    if (!rules.placeholders.empty()) c = apply_placeholders(c, rules.placeholders);
  }
}

std::string check_conversation(const Conversation& c, bool require_alternation) {
  return check_turns(c, require_alternation, [](const Message& m) { return m.content.empty(); });
}

}  // namespace

std::string parse_record(std::string_view json, const RecordRules& rules, Conversation& out, bool padded) {
  static thread_local Turns turns;
  bool plain = false;
  std::string reason = parse_turns(json, rules, padded, turns, &plain);
  if (reason.empty() && plain) reason = "a plain-text record (prompt/completion or text) has no conversation";
  if (!reason.empty()) {
    out.clear();
    return reason;
  }
  materialize(turns, rules, out);  // reuses the strings' capacity
  return check_conversation(out, rules.require_alternation);
}

std::string parse_record(std::string_view json, const RecordRules& rules, Conversation& out, bool padded,
                         PlainFound& found) {
  static thread_local Turns turns;
  bool plain = false;
  PlainView view;
  std::string reason = parse_turns(json, rules, padded, turns, &plain, &view);
  // A plain format's record that does not parse is a bad plain record, as
  // plain_record says; under a model's template a conversational
  // prompt/completion is no plain record.
  found.found = (plain && !(view.lists && rules.chat)) || (!plain && is_plain(rules.format));
  if (found.found) {
    out.clear();
    if (reason.empty()) reason = read_plain(view, rules, found.record);
    return reason;
  }
  if (!reason.empty()) {
    out.clear();
    return reason;
  }
  materialize(turns, rules, out);
  return check_conversation(out, rules.require_alternation);
}

std::string check_record(std::string_view json, const RecordRules& rules, bool padded) {
  // Most records are valid: the scan shows it in place, faster than a full
  // parse (docs/benchmarks.md, "Dataset indexing"). A record it leaves gets the full parse, whose verdict
  // and reason are the ones a worker will see.
  if (padded && detail::scan_accepts(json, rules)) return {};
  static thread_local Turns turns;
  static thread_local Conversation scratch;
  bool plain = false;
  std::string reason = parse_turns(json, rules, padded, turns, &plain);
  if (!reason.empty()) return reason;
  if (plain) {
    // No template reads it: its text only has to stay non-empty.
    if (rules.placeholders.empty()) return {};
    materialize(turns, rules, scratch);
    return scratch[0].content.empty() ? "the text is empty once placeholders are applied" : "";
  }
  if (!rules.placeholders.empty()) {
    // A placeholder can change whether a turn is empty: check the text as
    // it will be rendered.
    materialize(turns, rules, scratch);
    return check_conversation(scratch, rules.require_alternation);
  }
  return check_turns(turns, rules.require_alternation, [](const TurnView& t) { return t.empty(); });
}

bool plain_record(const dom::element& root, const RecordRules& rules, PlainRecord& out, std::string& reason) {
  if (rules.format != Format::kAuto && !is_plain(rules.format)) return false;
  dom::object obj;
  if (root.get_object().get(obj)) {
    if (rules.format == Format::kAuto) return false;  // the conversation path gives its reason
    reason = "malformed JSON: a record must be a JSON object";
    return true;
  }
  Fields fields(obj, rules.columns);
  const Format f = rules.format == Format::kAuto ? detect(fields) : rules.format;
  if (!is_plain(f)) return false;  // a conversation under auto
  PlainView view;
  reason = parse_plain(fields, f, view);
  // A conversational prompt/completion: the model's template renders it.
  if (view.lists && rules.chat) return false;
  if (reason.empty()) reason = read_plain(view, rules, out);
  return true;
}

bool plain_record(std::string_view json, const RecordRules& rules, bool padded, PlainRecord& out, std::string& reason) {
  if (rules.format != Format::kAuto && !is_plain(rules.format)) return false;
  // Under auto most records are conversations: one that cannot name a plain
  // format's key (no renames, no escapes) is not parsed here.
  if (rules.format == Format::kAuto && rules.columns.empty() && json.find("\"text\"") == std::string_view::npos &&
      json.find("\"prompt\"") == std::string_view::npos && json.find("\\u") == std::string_view::npos)
    return false;
  static thread_local dom::parser parser;
  dom::element root;
  if (auto err = parser.parse(json.data(), json.size(), !padded).get(root)) {
    if (rules.format == Format::kAuto) return false;  // the conversation path gives its reason
    reason = std::string("malformed JSON: ") + simdjson::error_message(err);
    return true;
  }
  return plain_record(root, rules, out, reason);
}

}  // namespace tokfeed::text
