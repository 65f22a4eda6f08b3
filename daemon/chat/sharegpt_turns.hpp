// Messages kept from one record to the next (internal to daemon/chat): the
// {"role", "content"} dicts that ShareGPT turns of from/value pairs, and
// alpaca and query/response records, map to, refilled in place instead of a
// new dict per turn.
#pragma once

#include <cstddef>
#include <vector>

#include "template/value.hpp"

namespace tokfeed::text::detail {

// A list of {"role", "content"} message dicts kept from one record to the
// next: refilled in place where nothing else holds it or its dicts, instead
// of a new dict (its keys and items) per message. Between records it holds
// none of the record's values (release).
class KeptMessages {
 public:
  // The list, resized to `n` messages, each a {"role", "content"} dict held
  // here alone, its values the caller's to set. Dicts a shorter record
  // leaves over are kept for a longer one after it.
  std::vector<tmpl::Value>& refill(std::size_t n);
  // The list refilled: the record's messages, shared (the caller copies it
  // before changing it).
  const tmpl::Value& list() const { return list_; }
  // Drops what the list holds of the last record's values, before the next
  // record is read (so that the reader refills them in place); a list the
  // caller still holds is let go.
  void release();

 private:
  static constexpr std::size_t kSpare = 64;  // dicts kept over
  tmpl::Value list_;
  std::vector<tmpl::Value> spare_;
};

// Where every turn of `items` is a dict of exactly `from` (a string naming no
// tool call or tool response) and `value` (not null): `messages` set to what
// record_to_chat's mapping makes of them under no placeholders, {"role": from
// (human → user, gpt → assistant), "content": value} each, and true. The
// record's values are shared, not copied; the list and its dicts are kept
// for the next record's turns to refill where nothing else holds them then.
// False, nothing changed, for any other list.
bool plain_sharegpt_turns(const std::vector<tmpl::Value>& items, tmpl::Value& messages);

// Drops what the kept list holds of the last record's values (before the
// next record is read, so that the reader refills them in place).
void release_sharegpt_turns();

}  // namespace tokfeed::text::detail
