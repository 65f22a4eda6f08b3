// Records → the `messages` and `tools` a Jinja chat template reads
// (docs/data_model.md section 1.2).
#include <simdjson.h>

#include <algorithm>
#include <cstring>
#include <tuple>

#include "template/budget.hpp"
#include "template/json_value.hpp"
#include "chat/chat_jinja.hpp"
#include "chat/record_json.hpp"
#include "chat/record_tools.hpp"
#include "chat/sharegpt_turns.hpp"
#include "records/record_fields.hpp"

namespace tokfeed::text {

namespace {

using detail::Key;
using tmpl::Value;
namespace dom = simdjson::dom;

Value str(std::string_view s) { return Value::recycled_str(s); }

using detail::kReasoningNames;

// transformers' _alias_reasoning_fields: reasoning under any of its names is
// also `thinking` (first) and `reasoning_content` (last). Appends the
// message to `out`.
void add_aliased(const Value& m, std::vector<Value>& out) {
  // What find() gives for each name, in one pass; the first of them set.
  const Value* found[3] = {nullptr, nullptr, nullptr};
  for (const auto& [k, v] : m.dict->items())
    for (int n = 0; n < 3; ++n)
      if (!found[n] && tmpl::DictObj::same_key(k, kReasoningNames[n])) found[n] = &v;
  const Value* r = nullptr;
  for (const Value* v : found)
    if (v && !v->is_none()) {
      r = v;
      break;
    }
  if (!r) {
    out.push_back(m);
    return;
  }
  Value a = Value::recycled_dict();
  a.dict->items().reserve(m.dict->items().size() + 2);
  const Value reasoning = *r;
  a.dict->set("thinking", reasoning);
  for (const auto& [k, v] : m.dict->items()) a.dict->set(k, v);
  a.dict->set("reasoning_content", reasoning);
  out.push_back(std::move(a));
}

void placeholders(const Value& m, const RecordRules& rules) {
  if (rules.placeholders.empty()) return;
  const Value* c = m.dict->find("content");
  if (c && c->is_str()) m.dict->set("content", Value::str(apply_placeholders(*c->s, rules.placeholders)));
}

// A tool call given as {"name", "arguments"} (ms-swift's tool_call content,
// ShareGPT's function_call value) in the HF form.
std::string tool_call_of(const Value& content, const std::string& where, Value& out) {
  Value call = content;
  if (content.is_str()) {
    try {
      call = tmpl::parse_json(*content.s);
    } catch (const tmpl::Error& e) {
      return "field '" + where + "': a tool call must be a JSON object {\"name\", \"arguments\"}: " + e.what();
    }
  }
  if (!call.is_dict() || !call.dict->find("name"))
    return "field '" + where + "': a tool call must be a JSON object {\"name\", \"arguments\"}";
  if (const Value* f = call.dict->find("function"); f && f->is_dict()) {
    out = call;  // already {"type": "function", "function": {...}}
    return {};
  }
  Value fn = Value::new_dict();
  fn.dict->set("name", *call.dict->find("name"));
  const Value* args = call.dict->find("arguments");
  fn.dict->set("arguments", args ? *args : Value::new_dict());
  out = Value::new_dict();
  out.dict->set("type", str("function"));
  out.dict->set("function", fn);
  return {};
}

// Names turn i of list `name` in a reason ("messages[3]").
std::string where_of(std::string_view name, std::size_t i) { return std::string(name) + "[" + std::to_string(i) + "]"; }

// Maps turn i of list `name`, a dict of the record's own (changed in
// place); `role` already read. Appends to `out`; `mapped` says a tool call
// was mapped.
std::string add_turn(const Value& m, std::string_view role, std::string_view name, std::size_t i,
                     const RecordRules& rules, std::vector<Value>& out, bool& mapped) {
  const Value& turn = m;
  if (role == "tool_call" || role == "function_call") {
    mapped = true;
    Value call;
    const Value* c = turn.dict->find("content");
    if (!c) c = turn.dict->find("value");
    if (auto e = tool_call_of(c ? *c : Value::none(), where_of(name, i), call); !e.empty()) return e;
    // Consecutive calls join one assistant message.
    if (!out.empty()) {
      Value& prev = out.back();
      const Value* calls = prev.dict->find("tool_calls");
      const Value* pr = prev.dict->find("role");
      if (pr && pr->is_str() && *pr->s == "assistant" && calls && calls->is_list() && prev.dict->find("\x01mapped")) {
        calls->list->items.push_back(call);
        return {};
      }
    }
    Value a = Value::new_dict();
    a.dict->set("role", str("assistant"));
    a.dict->set("content", str(""));
    a.dict->set("tool_calls", Value::new_list({call}));
    if (const Value* l = turn.dict->find("loss")) a.dict->set("loss", *l);
    a.dict->set("\x01mapped", Value::boolean(true));
    out.push_back(a);
    return {};
  }
  if (role == "tool_response" || role == "observation") role = "tool";
  // (`role` is mostly a view of the message's own role: the same bytes.)
  if (const Value* r = m.dict->find("role");
      !(r && r->is_str() && ((r->s->data() == role.data() && r->s->size() == role.size()) || *r->s == role)))
    m.dict->set("role", str(role));
  // transformers' _normalize_chat_messages: a key whose value is null is no
  // key (`"content": null` beside tool calls is an undefined content).
  auto& items = m.dict->items();
  items.erase(std::remove_if(items.begin(), items.end(), [](const auto& kv) { return kv.second.is_none(); }),
              items.end());
  placeholders(m, rules);
  add_aliased(m, out);
  return {};
}

// Whether add_turn would append message `t` as it is: a dict with a string
// role that names no tool call or response, no null value, no reasoning
// under any of its names, and no placeholders to apply. One pass over its
// keys.
bool as_is(const Value& t, const RecordRules& rules) {
  if (!t.is_dict() || !rules.placeholders.empty()) return false;
  const Value* role = nullptr;
  for (const auto& [k, v] : t.dict->items()) {
    if (v.is_none()) return false;
    // (Told by the key's size first: most keys are of none of these sizes.)
    switch (k.size()) {
      case 4:
        if (!role && detail::is(k, "role")) role = &v;
        break;
      case kReasoningNames[0].size():
      case kReasoningNames[1].size():
      case kReasoningNames[2].size():
        for (std::string_view name : kReasoningNames)
          if (k == name) return false;
        break;
      default: break;
    }
  }
  if (!role || !role->is_str()) return false;
  return !detail::names_tool_turn(*role->s);
}

// `messages` (role/content) or ShareGPT's `conversations` (from/value).
// `name`: the field, in reasons ("messages", "conversations" by default).
// Where every message of `messages` maps to itself, the result is `list`
// itself; where every turn of `conversations` is `from` and `value` alone,
// a list kept for the next record (sharegpt_turns.hpp). Either is shared
// (`shared` set): the caller copies it before changing it.
std::string turns(const Value& list, bool sharegpt, const RecordRules& rules, Value& messages,
                  std::string_view name = {}, bool* shared = nullptr) {
  if (name.empty()) name = sharegpt ? "conversations" : "messages";
  if (!list.is_list()) return "field '" + std::string(name) + "': expected an array";
  const auto& items = list.list->items;
  std::size_t plain = 0;  // items[:plain] map to themselves
  if (!sharegpt) {
    while (plain < items.size() && as_is(items[plain], rules)) ++plain;
  } else if (shared && rules.placeholders.empty() && detail::plain_sharegpt_turns(items, messages)) {
    *shared = true;
    return {};
  }
  if (shared && plain == items.size() && plain > 0 && !list.tuple && !list.gen && !list.view) {
    messages = list;
    *shared = true;
    return {};
  }
  Value result = Value::recycled_list();
  std::vector<Value>& out = result.list->items;
  out.reserve(items.size());
  out.insert(out.end(), items.begin(), items.begin() + static_cast<std::ptrdiff_t>(plain));
  bool mapped = false;
  for (std::size_t i = plain; i < items.size(); ++i) {
    const Value& t = items[i];
    if (!t.is_dict()) return "field '" + where_of(name, i) + "': expected an object";
    const Value* role = t.dict->find(sharegpt ? "from" : "role");
    if (!role || role->is_none())
      return "field '" + where_of(name, i) + (sharegpt ? ".from" : ".role") + "' is missing";
    if (!role->is_str()) return "field '" + where_of(name, i) + (sharegpt ? ".from" : ".role") + "': expected a string";
    std::string_view r = *role->s;
    if (sharegpt) {
      if (r == "human") r = "user";
      else if (r == "gpt") r = "assistant";
      Value m = Value::recycled_dict();
      m.dict->set("role", str(r));
      for (const auto& [k, v] : t.dict->items()) {
        if (k == "from") continue;
        m.dict->set(k == "value" ? "content" : k, v);
      }
      if (auto e = add_turn(m, r, name, i, rules, out, mapped); !e.empty()) return e;
    } else if (auto e = add_turn(t, r, name, i, rules, out, mapped); !e.empty()) {
      return e;
    }
  }
  for (Value& m : out) {
    if (!mapped) break;
    auto& items = m.dict->items();
    items.erase(std::remove_if(items.begin(), items.end(), [](const auto& kv) { return kv.first == "\x01mapped"; }),
                items.end());
  }
  if (out.empty()) return "field '" + std::string(name) + "': no messages";
  messages = std::move(result);
  return {};
}

// A top-level field through the `columns` renames (docs/data_model.md 1.1).
const Value* field(const Value& rec, const RecordRules& rules, std::string_view key) {
  for (const auto& [from, to] : rules.columns)
    if (to == key) {
      if (const Value* v = rec.dict->find(from); v && !v->is_none()) return v;
    }
  for (const auto& [from, to] : rules.columns)
    if (from == key) return nullptr;  // renamed away
  const Value* v = rec.dict->find(key);
  return v && !v->is_none() ? v : nullptr;
}

// The record's top-level fields that record_to_chat reads (the formats' and
// `tools`), as field() finds them: where no column renames a field, found
// in one pass over the record's keys instead of a search per question.
class Fields {
 public:
  static constexpr std::size_t kTools = detail::kKeys;  // past the formats' keys
  Fields(const Value& rec, const RecordRules& rules) : rec_(rec), rules_(rules), direct_(rules.columns.empty()) {
    if (!direct_) return;
    for (const auto& [k, v] : rec.dict->items()) {
      const std::size_t i = detail::key_of(k);
      if (i < detail::kKeys ? !at_[i] : (!at_[kTools] && detail::is(k, "tools"))) at_[i] = &v;
    }
  }
  // field(rec, rules, key), the key by its index (or kTools).
  const Value* operator()(std::size_t i) const {
    if (!direct_) return field(rec_, rules_, i == kTools ? "tools" : detail::kKeyNames[i]);
    const Value* v = at_[i];
    return v && !v->is_none() ? v : nullptr;
  }
  const Value* operator()(detail::Key k) const { return (*this)(detail::idx(k)); }

 private:
  const Value& rec_;
  const RecordRules& rules_;
  bool direct_;
  const Value* at_[kTools + 1] = {};  // the first of each key
};

// A turn of an alpaca or query/response record: its content is `text`,
// then "\n" + `suffix` where that is not empty (alpaca's input).
struct FieldTurn {
  Role role;
  const Value* text;
  const Value* suffix;
};

// Field `name` of the record, a string, into `out`; the reason where it is
// no string.
std::string string_field(const Value& v, std::string_view name, const Value*& out) {
  if (!v.is_str()) return "field '" + std::string(name) + "': expected a string";
  out = &v;
  return {};
}

// An alpaca (`alpaca`) or query/response record's turns from its values, as
// parse_record reads them from simdjson's tree (records.cpp parse_alpaca,
// parse_query_response): the same turns and reasons, in the same order,
// for a record with no renamed column and no repeated top-level key (there
// parse_record's first value of a key and from_json's last one agree).
std::string field_turns(const Fields& get, bool alpaca, std::vector<FieldTurn>& out) {
  out.clear();
  if (const Value* sys = get(Key::kSystem)) {
    const Value* t;
    if (auto e = string_field(*sys, "system", t); !e.empty()) return e;
    out.push_back({Role::kSystem, t, nullptr});
  }
  if (alpaca) {
    const Value* ins = get(Key::kInstruction);
    if (!ins) return "field 'instruction' is missing";
    const Value* outp = get(Key::kOutput);
    if (!outp) return "field 'output' is missing";
    const Value *user, *input = nullptr, *answer;
    if (auto e = string_field(*ins, "instruction", user); !e.empty()) return e;
    if (const Value* inp = get(Key::kInput)) {
      if (auto e = string_field(*inp, "input", input); !e.empty()) return e;
    }
    if (auto e = string_field(*outp, "output", answer); !e.empty()) return e;
    out.push_back({Role::kUser, user, input});
    out.push_back({Role::kAssistant, answer, nullptr});
    return {};
  }
  if (const Value* hist = get(Key::kHistory)) {
    if (!hist->is_list()) return "field 'history': expected an array of [query, response] pairs";
    const auto& pairs = hist->list->items;
    for (std::size_t i = 0; i < pairs.size(); ++i) {
      auto where = [&](std::string_view k) { return "field 'history[" + std::to_string(i) + "]" + std::string(k); };
      if (!pairs[i].is_list() || pairs[i].list->items.size() != 2) return where("': expected [query, response]");
      const Value& q = pairs[i].list->items[0];
      const Value& r = pairs[i].list->items[1];
      if (!q.is_str()) return where("[0]': expected a string");
      if (!r.is_str()) return where("[1]': expected a string");
      out.push_back({Role::kUser, &q, nullptr});
      out.push_back({Role::kAssistant, &r, nullptr});
    }
  }
  const Value* q_el = get(Key::kQuery);
  if (!q_el) return "field 'query' is missing";
  const Value* r_el = get(Key::kResponse);
  if (!r_el) return "field 'response' is missing";
  const Value *q, *r;
  if (auto e = string_field(*q_el, "query", q); !e.empty()) return e;
  if (auto e = string_field(*r_el, "response", r); !e.empty()) return e;
  out.push_back({Role::kUser, q, nullptr});
  out.push_back({Role::kAssistant, r, nullptr});
  return {};
}

// The last alpaca or query/response record's messages, kept for the next
// record's.
detail::KeptMessages& kept_field_messages() {
  static thread_local detail::KeptMessages messages;
  return messages;
}

// A role's name as a value: one string for each role, which every message
// shares.
const Value& role_value(Role r) {
  static thread_local const Value names[] = {str(role_name(Role::kSystem)), str(role_name(Role::kUser)),
                                             str(role_name(Role::kAssistant))};
  return names[static_cast<std::size_t>(r)];
}

// The turns' messages, as conversation_messages builds them from the
// conversation parse_record makes of them (contents joined, placeholders
// applied, then checked as data_model.md 1 says). A content that is a
// field's string unchanged is that string, shared.
std::string field_messages(const std::vector<FieldTurn>& turns, const RecordRules& rules, Value& messages) {
  std::vector<Value>& out = kept_field_messages().refill(turns.size());
  for (std::size_t i = 0; i < turns.size(); ++i) {
    const FieldTurn& t = turns[i];
    Value content;
    if ((t.suffix && !t.suffix->s->empty()) || !rules.placeholders.empty()) {
      std::string c = *t.text->s;
      if (t.suffix && !t.suffix->s->empty()) c.append("\n").append(*t.suffix->s);
      if (!rules.placeholders.empty()) c = apply_placeholders(c, rules.placeholders);
      content = Value::str(std::move(c));
    } else {
      content = *t.text;
    }
    if (t.role == Role::kSystem && i != 0) return "system message must come first";
    if (t.role == Role::kUser && content.s->empty()) return "empty user turn";
    if (t.role == Role::kAssistant && content.s->empty()) return "empty assistant turn";
    auto& message = out[i].dict->items();
    message[0].second = role_value(t.role);
    message[1].second = std::move(content);
  }
  messages = kept_field_messages().list();
  return {};
}

using detail::kInPlace;
using detail::kReusedBytes;
using detail::only_here;

void fields_over(dom::object obj, tmpl::DictObj& d, const RecordRules* top);

// tmpl::from_json(e), refilling `old`'s object where it may.
Value json_over(dom::element e, Value&& old) {
  using simdjson::dom::element_type;
  Value v;
  switch (e.type()) {
    case element_type::STRING:
      if (old.kind == tmpl::Kind::kStr && only_here(old)) {
        auto* o = static_cast<tmpl::StrObj*>(const_cast<tmpl::RefCounted*>(old.s.raw()));
        if (o->text.capacity() > kReusedBytes) break;
        const std::string_view s = e.get_string().value_unsafe();
        o->text.clear();
        o->text.append(s.data(), s.size());
        v.kind = tmpl::Kind::kStr;
        v.s = std::move(old.s);
        return v;
      }
      break;
    case element_type::ARRAY:
      if (old.kind == tmpl::Kind::kList && !old.tuple && !old.gen && !old.view && only_here(old) &&
          old.list->items.capacity() * sizeof(Value) <= kReusedBytes) {
        tmpl::ListObj& l = *old.list;
        l.group = false;
        auto& items = l.items;
        std::size_t n = 0;
        const dom::array arr = e.get_array().value_unsafe();
        for (dom::element x : arr) {
          if (n < items.size()) items[n] = json_over(x, std::move(items[n]));
          else items.push_back(tmpl::from_json(x));
          ++n;
        }
        items.erase(items.begin() + static_cast<std::ptrdiff_t>(n), items.end());
        v.kind = tmpl::Kind::kList;
        v.list = std::move(old.list);
        return v;
      }
      break;
    case element_type::OBJECT:
      if (old.kind == tmpl::Kind::kDict && !old.ns && !old.view && only_here(old) &&
          old.dict->items().size() <= kInPlace &&
          old.dict->items().capacity() * sizeof(old.dict->items()[0]) <= kReusedBytes) {
        const dom::object obj = e.get_object().value_unsafe();
        if (obj.size() > kInPlace) break;
        fields_over(obj, *old.dict, nullptr);
        v.kind = tmpl::Kind::kDict;
        v.dict = std::move(old.dict);
        return v;
      }
      break;
    default: break;
  }
  old = Value();  // freed first: the recycler has its objects for the new value
  return tmpl::from_json(e);
}

// `obj`'s members into `d` (at most kInPlace of them), as tmpl::from_json
// builds them: the last of duplicate keys at the first one's place. `top`:
// the record's top level, whose tools come from the cache (record_tools.hpp)
// where no column renames a field (so that the tools value goes nowhere but
// to `tools`, unchanged).
void fields_over(dom::object obj, tmpl::DictObj& d, const RecordRules* top) {
  d.reindex();
  auto& items = d.items();
  std::size_t n = 0;  // items[:n] are obj's
  std::string stored;
  for (dom::key_value_pair kv : obj) {
    std::string_view key = kv.key;
    if (key.starts_with('\x01')) key = stored = tmpl::str_key(key);
    std::size_t at = 0;
    while (at < n && !tmpl::DictObj::same_key(items[at].first, key)) ++at;
    const bool tools = top && top->columns.empty() && kv.key == "tools";
    if (at < n) {
      items[at].second = tools ? detail::ToolsCache::local().from_json(kv.value) : tmpl::from_json(kv.value);
      continue;
    }
    if (n == items.size()) items.emplace_back();
    auto& [k, x] = items[n++];
    if (!tmpl::DictObj::same_key(k, key)) k.assign(key);
    if (tools) x = detail::ToolsCache::local().from_json(kv.value);
    else x = json_over(kv.value, std::move(x));
  }
  items.erase(items.begin() + static_cast<std::ptrdiff_t>(n), items.end());
}

// The record's top-level fields, as tmpl::from_json builds them (the
// tools from the cache), refilling the previous record's `prev`.
Value record_fields(dom::object obj, const RecordRules& rules, Value&& prev) {
  const bool refill = prev.kind == tmpl::Kind::kDict && only_here(prev) && prev.dict->items().size() <= kInPlace &&
                      obj.size() <= kInPlace;
  Value rec;
  if (refill) {
    rec.kind = tmpl::Kind::kDict;
    rec.dict = std::move(prev.dict);
    prev = Value();
  } else {
    prev = Value();
    rec = Value::recycled_dict();
  }
  if (refill || obj.size() <= kInPlace) {
    fields_over(obj, *rec.dict, &rules);
    return rec;
  }
  rec.dict->items().reserve(obj.size());
  for (dom::key_value_pair kv : obj) {
    Value v = rules.columns.empty() && kv.key == "tools" ? detail::ToolsCache::local().from_json(kv.value)
                                                         : tmpl::from_json(kv.value);
    if (kv.key.starts_with('\x01')) rec.dict->set(tmpl::str_key(kv.key), std::move(v));
    else rec.dict->set(kv.key, std::move(v));
  }
  return rec;
}

}  // namespace

bool detail::same_json(dom::element e, const Value& v) {
  using simdjson::dom::element_type;
  auto same_bits = [](double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; };
  auto same_text = [](const std::string& a, std::string_view b) {
    return a.size() == b.size() && tmpl::bytes_equal(a.data(), b.data(), b.size());
  };
  switch (e.type()) {
    case element_type::NULL_VALUE: return v.kind == tmpl::Kind::kNone;
    case element_type::BOOL: return v.kind == tmpl::Kind::kBool && v.b == e.get_bool().value_unsafe();
    case element_type::INT64: return v.kind == tmpl::Kind::kInt && v.i == e.get_int64().value_unsafe();
    case element_type::UINT64: return false;  // from_json refuses it
    case element_type::DOUBLE: return v.kind == tmpl::Kind::kFloat && same_bits(v.f, e.get_double().value_unsafe());
    case element_type::STRING: return v.kind == tmpl::Kind::kStr && same_text(*v.s, e.get_string().value_unsafe());
    case element_type::ARRAY: {
      if (v.kind != tmpl::Kind::kList || v.tuple || v.gen || v.view) return false;
      dom::array arr = e.get_array().value_unsafe();
      const auto& items = v.list->items;
      if (arr.size() != items.size()) return false;
      std::size_t i = 0;
      for (dom::element x : arr)
        if (!same_json(x, items[i++])) return false;
      return true;
    }
    case element_type::OBJECT: {
      if (v.kind != tmpl::Kind::kDict || v.ns) return false;
      dom::object obj = e.get_object().value_unsafe();
      const auto& items = v.dict->items();
      if (obj.size() != items.size()) return false;  // duplicate keys build fewer
      std::size_t i = 0;
      for (dom::key_value_pair kv : obj) {
        const auto& [key, x] = items[i++];
        if (kv.key.starts_with('\x01') ? key != tmpl::str_key(kv.key) : !same_text(key, kv.key)) return false;
        if (!same_json(kv.value, x)) return false;
      }
      return true;
    }
  }
  return false;
}

Value detail::ToolsCache::from_json(dom::element e) {
  if (!e.is_array()) return tmpl::from_json(e);
  if (tree_.is_list() && same_json(e, tree_)) return tree_;
  tree_ = tmpl::from_json(e);
  read_text_.clear();
  return tree_;
}

const Value* detail::ToolsCache::read_match(std::string_view text, std::size_t& n) const {
  if (read_text_.empty() || !tree_.is_list() || text.size() < read_text_.size() ||
      std::memcmp(text.data(), read_text_.data(), read_text_.size()) != 0)
    return nullptr;
  n = read_text_.size();
  return &tree_;
}

void detail::ToolsCache::keep_read(const Value& v, std::string_view text) {
  tree_ = v;
  read_text_.assign(text);
}

Value detail::ToolsCache::parse_json(std::string_view text) {
  if (parsed_.is_list() && text == text_) return parsed_;
  Value v = tmpl::parse_json(text);
  if (v.is_list()) parsed_ = v, text_.assign(text);
  return v;
}

void detail::ToolsCache::clear() { *this = ToolsCache(); }

detail::ToolsCache& detail::ToolsCache::local() {
  static thread_local ToolsCache cache;
  return cache;
}

Value conversation_messages(const Conversation& conv) {
  std::vector<Value> out;
  out.reserve(conv.size());
  for (const Message& m : conv) {
    Value d = Value::new_dict();
    d.dict->items().reserve(2);
    d.dict->items().emplace_back("role", str(role_name(m.role)));
    d.dict->items().emplace_back("content", Value::str(m.content));
    out.push_back(std::move(d));
  }
  return Value::new_list(std::move(out));
}

std::string record_to_chat(std::string_view json, const RecordRules& rules, bool padded, Value& messages, Value& tools,
                           std::size_t* prompt_messages, PlainFound* plain) {
  if (prompt_messages) *prompt_messages = 0;
  if (plain) plain->found = false;
  // The previous record's values are freed first: their objects are kept
  // for this record's (Value::recycled_*), their other blocks for what the
  // record allocates here and in its renders (tmpl::ReuseScope).
  tmpl::ReuseScope reuse;
  messages = Value();
  tools = Value();
  detail::release_sharegpt_turns();
  kept_field_messages().release();
  // The record's fields, kept for the next record to refill (record_fields).
  static thread_local Value prev;
  Value rec;
  struct Keep {
    Value& from;
    Value& to;
    ~Keep() { to = std::move(from); }
  } keep{rec, prev};
  const bool plain_format = rules.format == Format::kText || rules.format == Format::kPromptCompletion;
  // Most records are read without simdjson's tree (record_json.hpp). One
  // that may be a plain-text record is told apart on the tree (plain_record):
  // under a plain format, with renamed columns, or with a top-level `text`
  // or `prompt`.
  const bool read = !plain || (!plain_format && (rules.format != Format::kAuto || rules.columns.empty()));
  // Whether `rec` holds simdjson's values, as parse_record would find them
  // by name (field_turns).
  bool top_repeats = true;
  if (!read || !detail::read_record(json, rules.columns.empty(), std::move(prev), rec, &top_repeats) ||
      (plain && rules.format == Format::kAuto && (rec.dict->find("text") || rec.dict->find("prompt")))) {
    top_repeats = true;
    if (read) prev = std::move(rec);  // what was read, refilled by the tree's values
    static thread_local dom::parser parser;
    dom::element root;
    if (auto err = parser.parse(json.data(), json.size(), !padded).get(root)) {
      // A bad record of a plain format's dataset, as plain_record says.
      if (plain) plain->found = plain_format;
      // What json.loads reads beyond JSON (NaN, Infinity, 1e400 as inf) reaches
      // a template as it does in Python; the rest is a bad record saying why.
      try {
        rec = tmpl::parse_python_json(json, simdjson::error_message(err));
      } catch (const tmpl::Error& e) {
        return e.what();
      }
      if (!rec.is_dict()) return "malformed JSON: a record must be a JSON object";
      // Plain-text records are read from simdjson's tree alone.
      if (plain_format ||
          (rules.format == Format::kAuto && !field(rec, rules, "messages") && !field(rec, rules, "conversations") &&
           (field(rec, rules, "text") || field(rec, rules, "prompt")))) {
        if (plain) plain->found = true;
        return std::string("malformed JSON: ") + simdjson::error_message(err);
      }
    } else {
      if (plain) {
        std::string reason;
        if (plain_record(root, rules, plain->record, reason)) {
          plain->found = true;
          return reason;
        }
      }
      if (!root.is_object()) return "malformed JSON: a record must be a JSON object";
      try {
        rec = record_fields(root.get_object().value_unsafe(), rules, std::move(prev));
      } catch (const tmpl::Error& e) {
        return e.what();
      }
    }
  }
  const Fields fields(rec, rules);
  tools = Value::none();
  if (const Value* t = fields(Fields::kTools)) {
    if (t->is_str()) {
      try {
        tools = rules.columns.empty() ? detail::ToolsCache::local().parse_json(*t->s) : tmpl::parse_json(*t->s);
      } catch (const tmpl::Error& e) {
        return std::string("field 'tools': a JSON string that does not parse: ") + e.what();
      }
    } else {
      tools = *t;
    }
    if (!tools.is_list()) return "field 'tools': expected a list of tools (or a JSON string of one)";
    // apply_chat_template takes a tool as a JSON schema (a dict) or a Python function, nothing else.
    const auto& items = tools.list->items;
    for (std::size_t i = 0; i < items.size(); ++i)
      if (!items[i].is_dict()) return "field '" + where_of("tools", i) + "': expected an object (a tool's JSON schema)";
  }
  Format f = rules.format;
  const Value* list = nullptr;  // the turns, where auto found them
  if (f == Format::kAuto) {
    if ((list = fields(Key::kMessages))) f = Format::kMessages;
    else if ((list = fields(Key::kConversations))) f = Format::kShareGpt;
    else if (!(fields(Key::kInstruction) && fields(Key::kOutput)) && !(fields(Key::kQuery) && fields(Key::kResponse)) &&
             fields(Key::kPrompt) && fields(Key::kCompletion))
      f = Format::kPromptCompletion;
  }
  if (f == Format::kPromptCompletion) {
    // Conversational prompt/completion (section 1.3): the prompt's messages,
    // then the completion's.
    const Value* prompt = fields(Key::kPrompt);
    const Value* completion = fields(Key::kCompletion);
    if (!prompt) return "field 'prompt' is missing";
    if (!completion) return "field 'completion' is missing";
    if (!prompt->is_list() || !completion->is_list())
      return "field '" + std::string(prompt->is_list() ? "completion" : "prompt") +
             "': expected a list of messages, as the other one is (or both strings)";
    Value tail;
    if (auto e = turns(*prompt, false, rules, messages, "prompt"); !e.empty()) return e;
    if (auto e = turns(*completion, false, rules, tail, "completion"); !e.empty()) return e;
    const std::size_t n = messages.list->items.size();
    for (Value& m : tail.list->items) messages.list->items.push_back(std::move(m));
    if (prompt_messages) *prompt_messages = n;
    else return "a conversational prompt/completion record is read by its own rule (section 1.3)";
    return {};
  }
  if (f == Format::kMessages || f == Format::kShareGpt) {
    const Key key = f == Format::kMessages ? Key::kMessages : Key::kConversations;
    if (!list) list = fields(key);
    if (!list) return "field '" + std::string(detail::kKeyNames[detail::idx(key)]) + "' is missing";
    bool shared = false;  // messages is the record's own list, or the kept ShareGPT one
    if (auto e = turns(*list, f == Format::kShareGpt, rules, messages, {}, &shared); !e.empty()) return e;
    if (const Value* sys = fields(Key::kSystem); sys && sys->is_str()) {
      // A top-level system prompt (ShareGPT, ms-swift) becomes the first message.
      const Value& first = messages.list->items[0];
      const Value* r = first.dict->find("role");
      if (!(r && r->is_str() && *r->s == "system")) {
        Value m = Value::new_dict();
        m.dict->set("role", str("system"));
        m.dict->set("content", *sys);
        if (shared) {  // the record's list stays as it is
          Value copy = Value::recycled_list();
          copy.list->items.reserve(messages.list->items.size() + 1);
          copy.list->items.push_back(std::move(m));
          for (const Value& x : messages.list->items) copy.list->items.push_back(x);
          messages = std::move(copy);
        } else {
          messages.list->items.insert(messages.list->items.begin(), m);
        }
      }
    }
    return {};
  }
  // alpaca and query/response: the validated conversation.
  if (f == Format::kAuto) {
    if (fields(Key::kInstruction) && fields(Key::kOutput)) f = Format::kAlpaca;
    else if (fields(Key::kQuery) && fields(Key::kResponse)) f = Format::kQueryResponse;
  }
  if (!top_repeats && rules.columns.empty() && (f == Format::kAlpaca || f == Format::kQueryResponse)) {
    static thread_local std::vector<FieldTurn> turns;
    if (auto e = field_turns(fields, f == Format::kAlpaca, turns); !e.empty()) return e;
    return field_messages(turns, rules, messages);
  }
  static thread_local Conversation conv;
  RecordRules unchecked = rules;
  unchecked.require_alternation = false;
  std::string reason = parse_record(json, unchecked, conv, padded);
  if (!reason.empty()) return reason;
  messages = conversation_messages(conv);
  return {};
}

}  // namespace tokfeed::text
