#include "template/json_value.hpp"

#include <algorithm>
#include <tuple>

namespace tokfeed::tmpl {

namespace {
// Up to this many keys a dict from JSON is built in place (DictObj::set
// indexes bigger ones).
constexpr std::size_t kAppended = 16;
}  // namespace

Value from_json(simdjson::dom::element e) {
  using simdjson::dom::element_type;
  switch (e.type()) {
    case element_type::NULL_VALUE: return Value::none();
    case element_type::BOOL: return Value::boolean(e.get_bool().value_unsafe());
    case element_type::INT64: return Value::integer(e.get_int64().value_unsafe());
    case element_type::UINT64:
      // 2^63 and up: Python's int, which no engine value holds exactly (a
      // float would print as another number).
      throw Error("the integer " + std::to_string(e.get_uint64().value_unsafe()) +
                  " is beyond the engine's 64-bit integers (Python's are unbounded)");
    case element_type::DOUBLE: return Value::real(e.get_double().value_unsafe());
    case element_type::STRING: return Value::recycled_str(e.get_string().value_unsafe());
    case element_type::ARRAY: {
      Value l = Value::recycled_list();
      simdjson::dom::array arr = e.get_array().value_unsafe();
      auto& items = l.list->items;
      items.reserve(arr.size());
      for (simdjson::dom::element x : arr) items.push_back(from_json(x));
      return l;
    }
    case element_type::OBJECT: {
      Value d = Value::recycled_dict();
      // Python's json.loads keeps the last of duplicate keys, at the first one's place.
      simdjson::dom::object obj = e.get_object().value_unsafe();
      auto& items = d.dict->items;
      items.reserve(obj.size());
      for (simdjson::dom::key_value_pair kv : obj) {
        if (kv.key.starts_with('\x01') || items.size() >= kAppended) {
          d.dict->set(kv.key.starts_with('\x01') ? str_key(kv.key) : std::string(kv.key), from_json(kv.value));
          continue;
        }
        // A small dict's keys are compared here and a new one appended
        // (DictObj::set's linear case, without its moves of the value).
        auto same = std::find_if(items.begin(), items.end(),
                                 [&](const auto& item) { return DictObj::same_key(item.first, kv.key); });
        if (same != items.end()) same->second = from_json(kv.value);
        else
          items.emplace_back(std::piecewise_construct, std::forward_as_tuple(kv.key),
                             std::forward_as_tuple(from_json(kv.value)));
      }
      return d;
    }
  }
  return Value::none();
}

Value parse_json(std::string_view text) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (auto err = parser.parse(text.data(), text.size()).get(root))
    throw Error(std::string("malformed JSON: ") + simdjson::error_message(err));
  return from_json(root);
}

}  // namespace tokfeed::tmpl
