// A record's `tools`, reused from the records before it (internal to
// daemon/chat). Agent datasets repeat one tool set on every record;
// building its values and freeing them again is a third of mapping such a
// record to messages (docs/benchmarks.md, "Chat templates"). A record's tools
// are taken from the last ones kept when simdjson's tree of them is the same
// JSON in every respect that tmpl::from_json reads (types, numbers to the
// bit, strings, key order, no duplicate keys), or, read without the tree
// (record_json.hpp), when their text is the text the kept ones were read
// from, or, given as a JSON string, when the string is the same. Sharing the values between records is safe:
// templates cannot change a list or dict (their mutating methods are
// refused), and nothing after record_to_chat does.
#pragma once

#include <simdjson.h>

#include <string>
#include <string_view>

#include "template/value.hpp"

namespace tokfeed::text::detail {

// Whether tmpl::from_json(e) builds a value equal to `v` in every respect.
bool same_json(simdjson::dom::element e, const tmpl::Value& v);

// The tools kept on this thread.
class ToolsCache {
 public:
  // tmpl::from_json(e), or the kept value that equals it.
  tmpl::Value from_json(simdjson::dom::element e);
  // tmpl::parse_json(text) (throws as it does), or the kept value of the same text.
  tmpl::Value parse_json(std::string_view text);
  // The kept list where `text` starts with the JSON text it was read from
  // (read_record), `n` set to that text's length; else null.
  const tmpl::Value* read_match(std::string_view text, std::size_t& n) const;
  // Keeps the list `v`, read from the JSON text `text`.
  void keep_read(const tmpl::Value& v, std::string_view text);
  void clear();

  static ToolsCache& local();

 private:
  tmpl::Value tree_;       // a list from a record's tree or text
  std::string read_text_;  // the text tree_ was read from; empty where it came from a tree
  tmpl::Value parsed_;
  std::string text_;  // what parsed_ was parsed from
};

}  // namespace tokfeed::text::detail
