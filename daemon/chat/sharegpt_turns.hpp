// ShareGPT turns that are from/value pairs and nothing more, mapped to their
// messages without a new dict per turn (internal to daemon/chat).
#pragma once

#include <vector>

#include "template/value.hpp"

namespace tokfeed::text::detail {

// Where every turn of `items` is a dict of exactly `from` (a string naming no
// tool call or tool response) and `value` (not null): `messages` set to what
// record_to_chat's mapping makes of them under no placeholders, {"role": from
// (human → user, gpt → assistant), "content": value} each, and true. The
// record's values are shared, not copied; the list and its dicts are kept
// for the next record's turns to refill where nothing else holds them then.
// False, nothing changed, for any other list.
bool plain_sharegpt_turns(const std::vector<tmpl::Value>& items, tmpl::Value& messages);

// Makes `m` a {"role", "content"} dict that nothing else holds, unless it is
// one already (a message kept from the record before); its values are the
// caller's to set.
void own_message(tmpl::Value& m);

// Drops what the kept list holds of the last record's values (before the
// next record is read, so that the reader refills them in place).
void release_sharegpt_turns();

}  // namespace tokfeed::text::detail
