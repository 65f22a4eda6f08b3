// What the two record checkers share (records.cpp: the full parser every
// worker runs; record_scan.cpp: the in-place scan the dataset index tries
// first): the top-level field names, the role names, and the checks of
// docs/data_model.md 1 over a list of turns. Internal to tokfeed_text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "records/records.hpp"

namespace tokfeed::text::detail {

// k == lit, compared inline (lit is a string literal).
template <std::size_t N>
bool is(std::string_view k, const char (&lit)[N]) {
  return k.size() == N - 1 && std::memcmp(k.data(), lit, N - 1) == 0;
}

// A turn as parsed: views into the parser's buffer (or, in the scan, into the
// record's raw JSON text between the quotes, escapes not undone), valid until
// the next parse. Its content is `text`, then "\n" + `suffix` when `suffix`
// is not empty (alpaca's instruction and input).
struct TurnView {
  Role role;
  std::string_view text;
  std::string_view suffix;
  bool empty() const { return text.empty() && suffix.empty(); }
};
using Turns = std::vector<TurnView>;

// The top-level fields the formats read.
enum class Key : uint8_t {
  kMessages,
  kConversations,
  kInstruction,
  kInput,
  kOutput,
  kQuery,
  kResponse,
  kHistory,
  kSystem,
  kPrompt,
  kCompletion,
  kText
};
constexpr std::size_t kKeys = 12;
constexpr std::string_view kKeyNames[kKeys] = {"messages", "conversations", "instruction", "input",
                                               "output",   "query",         "response",    "history",
                                               "system",   "prompt",        "completion",  "text"};

constexpr std::size_t idx(Key k) { return static_cast<std::size_t>(k); }

// The index of the Key named `k`, or kKeys.
inline std::size_t key_of(std::string_view k) {
  switch (k.size()) {
    case 4: return is(k, "text") ? idx(Key::kText) : kKeys;
    case 5: return is(k, "input") ? idx(Key::kInput) : is(k, "query") ? idx(Key::kQuery) : kKeys;
    case 6:
      return is(k, "output")   ? idx(Key::kOutput)
             : is(k, "system") ? idx(Key::kSystem)
             : is(k, "prompt") ? idx(Key::kPrompt)
                               : kKeys;
    case 7: return is(k, "history") ? idx(Key::kHistory) : kKeys;
    case 8: return is(k, "messages") ? idx(Key::kMessages) : is(k, "response") ? idx(Key::kResponse) : kKeys;
    case 10: return is(k, "completion") ? idx(Key::kCompletion) : kKeys;
    case 11: return is(k, "instruction") ? idx(Key::kInstruction) : kKeys;
    case 13: return is(k, "conversations") ? idx(Key::kConversations) : kKeys;
    default: return kKeys;
  }
}

// Where key k's value comes from under the `columns` renames (source name →
// key; docs/data_model.md 1.1): the first column renaming to it whose source
// field is present (`present(j)` for column j; null counts as absent), else
// nothing if a column renames the key's own field away, else that field.
constexpr std::size_t kOwnField = SIZE_MAX, kNoField = SIZE_MAX - 1;
template <class Present>
std::size_t rename_source(const std::vector<std::pair<std::string, std::string>>& columns, std::size_t k,
                          Present present) {
  for (std::size_t j = 0; j < columns.size(); ++j)
    if (columns[j].second == kKeyNames[k] && present(j)) return j;
  for (const auto& [from, to] : columns)
    if (from == kKeyNames[k]) return kNoField;
  return kOwnField;
}

// A turn list's role name → Role; sharegpt also takes "human" and "gpt".
// Returns false for any other name.
inline bool role_of(std::string_view name, bool sharegpt, Role& out) {
  if (is(name, "system")) out = Role::kSystem;
  else if (is(name, "user") || (sharegpt && is(name, "human"))) out = Role::kUser;
  else if (is(name, "assistant") || (sharegpt && is(name, "gpt"))) out = Role::kAssistant;
  else return false;
  return true;
}

// The checks of docs/data_model.md 1 over any list of turns with .role and
// .empty(): the reason, or an empty string.
template <class List, class Empty>
std::string check_turns(const List& c, bool require_alternation, Empty empty) {
  bool any_assistant = false;
  for (std::size_t i = 0; i < c.size(); ++i) {
    Role role = c[i].role;
    if (role == Role::kSystem && i != 0) return "system message must come first";
    if (role == Role::kUser && empty(c[i])) return "empty user turn";
    if (role == Role::kAssistant && empty(c[i])) return "empty assistant turn";
    any_assistant |= role == Role::kAssistant;
  }
  if (!any_assistant) return "no assistant turn";
  if (require_alternation) {
    std::size_t k = 0;
    for (const auto& m : c) {
      if (m.role == Role::kSystem) continue;
      if (m.role != (k % 2 == 0 ? Role::kUser : Role::kAssistant)) return "roles must alternate user/assistant";
      ++k;
    }
  }
  return {};
}

// The in-place scan (record_scan.cpp). Returns true only for a record that
// check_record accepts under `rules`; false means "not shown valid here" (a
// bad record, or one the scan leaves to the full parser: escaped keys or
// roles, numbers beyond the plain ones, placeholders in reach of a turn).
// At least kParsePadding readable bytes must follow `json`.
bool scan_accepts(std::string_view json, const RecordRules& rules);

}  // namespace tokfeed::text::detail
