#include "template/json_value.hpp"

namespace tokfeed::tmpl {

Value from_json(simdjson::dom::element e) {
  using simdjson::dom::element_type;
  switch (e.type()) {
    case element_type::NULL_VALUE: return Value::none();
    case element_type::BOOL: return Value::boolean(e.get_bool().value_unsafe());
    case element_type::INT64: return Value::integer(e.get_int64().value_unsafe());
    case element_type::UINT64:  // past INT64_MAX: Python's int, past the engine's (loud, not a float)
      throw Error("integer " + std::to_string(e.get_uint64().value_unsafe()) + " is past 64 bits");
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
      d.dict->items.reserve(obj.size());
      for (simdjson::dom::key_value_pair kv : obj) {
        if (kv.key.starts_with('\x01')) d.dict->set(str_key(kv.key), from_json(kv.value));
        else d.dict->set(kv.key, from_json(kv.value));
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
