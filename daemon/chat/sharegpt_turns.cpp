// ShareGPT turns → messages, and the messages kept from record to record
// (sharegpt_turns.hpp).
//
// A turn's mapping in record_to_chat builds a dict per turn: the role, then
// each of the turn's keys but `from`, `value` renamed `content`, then drops
// null values, aliases reasoning and applies placeholders. For a turn of
// `from` and `value` alone that is {"role", "content"}; here those dicts are
// kept from one record to the next with their keys, and only their two
// values are set.
#include "chat/sharegpt_turns.hpp"

#include "chat/record_json.hpp"
#include "records/record_fields.hpp"

namespace tokfeed::text::detail {
namespace {

using tmpl::Value;

// Whether turn `t` is a dict of exactly `from` (a string naming no tool
// call or tool response) and `value` (not null).
bool plain(const Value& t) {
  if (!t.is_dict()) return false;
  const auto& items = t.dict->items();
  if (items.size() != 2) return false;
  const bool from_first = is(items[0].first, "from");
  const auto& [from_key, from] = items[from_first ? 0 : 1];
  const auto& [value_key, value] = items[from_first ? 1 : 0];
  if (!is(from_key, "from") || !is(value_key, "value") || !from.is_str() || value.is_none()) return false;
  return !names_tool_turn(*from.s);
}

// A dict {"role", "content"} held here alone, unless `m` is one already (a
// message kept from the record before).
void own_message(Value& m) {
  if (m.is_dict() && only_here(m) && m.dict->items().size() == 2 && m.dict->key_objs().empty() &&
      is(m.dict->items()[0].first, "role") && is(m.dict->items()[1].first, "content"))
    return;
  m = Value::recycled_dict();
  m.dict->items().reserve(2);
  m.dict->items().emplace_back("role", Value());
  m.dict->items().emplace_back("content", Value());
}

// The last record's ShareGPT messages, kept for the next record's.
KeptMessages& kept() {
  static thread_local KeptMessages messages;
  return messages;
}

}  // namespace

std::vector<Value>& KeptMessages::refill(std::size_t n) {
  if (!(list_.is_list() && only_here(list_) && !list_.tuple && !list_.gen && !list_.view))
    list_ = Value::recycled_list();
  auto& out = list_.list->items;
  while (out.size() > n) {
    if (spare_.size() < kSpare) spare_.push_back(std::move(out.back()));
    out.pop_back();
  }
  while (out.size() < n) {
    if (spare_.empty()) {
      out.emplace_back();
    } else {
      out.push_back(std::move(spare_.back()));
      spare_.pop_back();
    }
  }
  for (Value& m : out) own_message(m);
  return out;
}

void KeptMessages::release() {
  if (!list_.is_list()) return;
  if (!only_here(list_)) {  // the caller still holds the last messages
    list_ = Value();
    return;
  }
  for (Value& m : list_.list->items)
    if (m.is_dict() && only_here(m))
      for (auto& [k, v] : m.dict->items()) v = Value();
}

bool plain_sharegpt_turns(const std::vector<Value>& items, Value& messages) {
  if (items.empty()) return false;
  for (const Value& t : items)
    if (!plain(t)) return false;
  // One string each for the roles renamed, which every message shares.
  static thread_local const Value user = Value::str("user");
  static thread_local const Value assistant = Value::str("assistant");
  std::vector<Value>& out = kept().refill(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) {
    const auto& turn = items[i].dict->items();
    const bool from_first = is(turn[0].first, "from");
    const Value& from = turn[from_first ? 0 : 1].second;
    auto& msg = out[i].dict->items();
    const std::string_view r = *from.s;
    msg[0].second = is(r, "human") ? user : is(r, "gpt") ? assistant : from;
    msg[1].second = turn[from_first ? 1 : 0].second;
  }
  messages = kept().list();
  return true;
}

void release_sharegpt_turns() { kept().release(); }

}  // namespace tokfeed::text::detail
