#include "text/records.hpp"

#include <simdjson.h>

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

std::string_view format_name(Format f) noexcept {
  switch (f) {
    case Format::kAuto: return "auto";
    case Format::kMessages: return "messages";
    case Format::kShareGpt: return "sharegpt";
    case Format::kAlpaca: return "alpaca";
    case Format::kQueryResponse: return "query_response";
  }
  return "?";
}

bool parse_format(std::string_view name, Format& out) noexcept {
  for (Format f : {Format::kAuto, Format::kMessages, Format::kShareGpt, Format::kAlpaca, Format::kQueryResponse}) {
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

// A field lookup that tells "absent" (or null) from "present".
bool field(dom::object obj, std::string_view key, dom::element& out) {
  auto r = obj[key];
  if (r.error()) return false;
  out = r.value_unsafe();
  return !out.is_null();
}

// Reads a string field; returns the reason on failure.
std::string string_field(dom::element e, const std::string& where, std::string& out) {
  std::string_view s;
  if (e.get_string().get(s)) return "field '" + where + "': expected a string";
  out.assign(s);
  return {};
}

// A record's top-level fields, seen through the `columns` renames
// (docs/data_model.md 1.1): a field renamed to `key` wins over `key` itself,
// and a field renamed away is absent under its own name.
class Fields {
 public:
  Fields(dom::object obj, const std::vector<std::pair<std::string, std::string>>& columns)
      : obj_(obj), columns_(columns) {}

  bool get(std::string_view key, dom::element& out) const {
    for (const auto& [from, to] : columns_)
      if (to == key && field(obj_, from, out)) return true;
    for (const auto& [from, to] : columns_)
      if (from == key) return false;
    return field(obj_, key, out);
  }

 private:
  dom::object obj_;
  const std::vector<std::pair<std::string, std::string>>& columns_;
};

std::string parse_turn_list(dom::array list, std::string_view list_name, std::string_view role_key,
                            std::string_view content_key, bool sharegpt, Conversation& out) {
  std::size_t i = 0;
  for (dom::element item : list) {
    std::string where = std::string(list_name) + "[" + std::to_string(i) + "]";
    dom::object obj;
    if (item.get_object().get(obj)) return "field '" + where + "': expected an object";
    dom::element role_el, content_el;
    if (!field(obj, role_key, role_el)) return "field '" + where + "." + std::string(role_key) + "' is missing";
    if (!field(obj, content_key, content_el))
      return "field '" + where + "." + std::string(content_key) + "' is missing";
    std::string role, content;
    if (auto e = string_field(role_el, where + "." + std::string(role_key), role); !e.empty()) return e;
    if (auto e = string_field(content_el, where + "." + std::string(content_key), content); !e.empty()) return e;
    Role r;
    if (role == "system") r = Role::kSystem;
    else if (role == "user" || (sharegpt && role == "human")) r = Role::kUser;
    else if (role == "assistant" || (sharegpt && role == "gpt")) r = Role::kAssistant;
    else return "unknown role '" + role + "' in '" + where + "'";
    out.push_back({r, std::move(content)});
    ++i;
  }
  return {};
}

std::string optional_system(const Fields& obj, Conversation& out) {
  dom::element e;
  if (!obj.get("system", e)) return {};
  std::string s;
  if (auto err = string_field(e, "system", s); !err.empty()) return err;
  out.push_back({Role::kSystem, std::move(s)});
  return {};
}

std::string parse_alpaca(const Fields& obj, Conversation& out) {
  if (auto e = optional_system(obj, out); !e.empty()) return e;
  dom::element ins, inp, outp;
  if (!obj.get("instruction", ins)) return "field 'instruction' is missing";
  if (!obj.get("output", outp)) return "field 'output' is missing";
  std::string user, input, answer;
  if (auto e = string_field(ins, "instruction", user); !e.empty()) return e;
  if (obj.get("input", inp)) {
    if (auto e = string_field(inp, "input", input); !e.empty()) return e;
  }
  if (auto e = string_field(outp, "output", answer); !e.empty()) return e;
  if (!input.empty()) user += "\n" + input;
  out.push_back({Role::kUser, std::move(user)});
  out.push_back({Role::kAssistant, std::move(answer)});
  return {};
}

std::string parse_query_response(const Fields& obj, Conversation& out) {
  if (auto e = optional_system(obj, out); !e.empty()) return e;
  dom::element hist;
  if (obj.get("history", hist)) {
    dom::array pairs;
    if (hist.get_array().get(pairs)) return "field 'history': expected an array of [query, response] pairs";
    std::size_t i = 0;
    for (dom::element pair : pairs) {
      dom::array qr;
      std::string where = "history[" + std::to_string(i) + "]";
      if (pair.get_array().get(qr) || qr.size() != 2) return "field '" + where + "': expected [query, response]";
      std::string q, r;
      if (auto e = string_field(qr.at(0).value_unsafe(), where + "[0]", q); !e.empty()) return e;
      if (auto e = string_field(qr.at(1).value_unsafe(), where + "[1]", r); !e.empty()) return e;
      out.push_back({Role::kUser, std::move(q)});
      out.push_back({Role::kAssistant, std::move(r)});
      ++i;
    }
  }
  dom::element q_el, r_el;
  if (!obj.get("query", q_el)) return "field 'query' is missing";
  if (!obj.get("response", r_el)) return "field 'response' is missing";
  std::string q, r;
  if (auto e = string_field(q_el, "query", q); !e.empty()) return e;
  if (auto e = string_field(r_el, "response", r); !e.empty()) return e;
  out.push_back({Role::kUser, std::move(q)});
  out.push_back({Role::kAssistant, std::move(r)});
  return {};
}

Format detect(const Fields& obj) {
  dom::element e;
  if (obj.get("messages", e)) return Format::kMessages;
  if (obj.get("conversations", e)) return Format::kShareGpt;
  dom::element e2;
  if (obj.get("instruction", e) && obj.get("output", e2)) return Format::kAlpaca;
  if (obj.get("query", e) && obj.get("response", e2)) return Format::kQueryResponse;
  return Format::kAuto;
}

std::string parse_list_field(const Fields& obj, std::string_view key, bool sharegpt, Conversation& out) {
  dom::element e;
  if (!obj.get(key, e)) return "field '" + std::string(key) + "' is missing";
  dom::array list;
  if (e.get_array().get(list)) return "field '" + std::string(key) + "': expected an array";
  return sharegpt ? parse_turn_list(list, key, "from", "value", true, out)
                  : parse_turn_list(list, key, "role", "content", false, out);
}

std::string check_conversation(const Conversation& c, bool require_alternation) {
  bool any_assistant = false;
  for (std::size_t i = 0; i < c.size(); ++i) {
    const Message& m = c[i];
    if (m.role == Role::kSystem && i != 0) return "system message must come first";
    if (m.role == Role::kUser && m.content.empty()) return "empty user turn";
    if (m.role == Role::kAssistant && m.content.empty()) return "empty assistant turn";
    any_assistant |= m.role == Role::kAssistant;
  }
  if (!any_assistant) return "no assistant turn";
  if (require_alternation) {
    std::size_t k = 0;
    for (const Message& m : c) {
      if (m.role == Role::kSystem) continue;
      if (m.role != (k % 2 == 0 ? Role::kUser : Role::kAssistant)) return "roles must alternate user/assistant";
      ++k;
    }
  }
  return {};
}

}  // namespace

std::string parse_record(std::string_view json, const RecordRules& rules, Conversation& out, bool padded) {
  static_assert(kParsePadding >= simdjson::SIMDJSON_PADDING);
  out.clear();
  // One parser per process: workers are single-threaded, and forked workers
  // each get their own copy.
  static thread_local dom::parser parser;
  dom::element root;
  if (auto err = parser.parse(json.data(), json.size(), !padded).get(root)) {
    return std::string("malformed JSON: ") + simdjson::error_message(err);
  }
  dom::object obj;
  if (root.get_object().get(obj)) return "malformed JSON: a record must be a JSON object";

  Fields fields(obj, rules.columns);
  Format f = rules.format == Format::kAuto ? detect(fields) : rules.format;
  std::string reason;
  switch (f) {
    case Format::kMessages: reason = parse_list_field(fields, "messages", false, out); break;
    case Format::kShareGpt: reason = parse_list_field(fields, "conversations", true, out); break;
    case Format::kAlpaca: reason = parse_alpaca(fields, out); break;
    case Format::kQueryResponse: reason = parse_query_response(fields, out); break;
    case Format::kAuto:
      reason = "unrecognized record: expected 'messages', 'conversations', 'instruction'+'output' or "
               "'query'+'response'";
      break;
  }
  if (!reason.empty()) return reason;
  if (!rules.placeholders.empty()) {
    for (Message& m : out) m.content = apply_placeholders(m.content, rules.placeholders);
  }
  return check_conversation(out, rules.require_alternation);
}

}  // namespace tokfeed::text
