// tokfeedd tokenize: the tokenizer, checked from outside. One JSON string per line in,
// one JSON array of ids per line out (no special tokens added; the ids-only
// path, failing where the path with offsets gives other ids); --decode
// reverses it.
#include <simdjson.h>

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "dev.hpp"
#include "tokenizer/tokenizer.hpp"

namespace tokfeed::dev {

int tokenize(const std::string& path, const std::string& type, bool decode) {
  std::unique_ptr<text::Tokenizer> tok;
  try {
    tok = text::load_tokenizer(type, path);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tokfeedd: %s\n", e.what());
    return 1;
  }
  simdjson::dom::parser parser;
  std::string line, out;
  std::vector<text::Token> tokens;
  std::vector<int32_t> ids;
  uint64_t lineno = 0;
  while (std::getline(std::cin, line)) {
    ++lineno;
    out.clear();
    simdjson::dom::element el;
    if (parser.parse(line).get(el)) {
      std::fprintf(stderr, "tokfeedd: stdin line %llu: not valid JSON\n", static_cast<unsigned long long>(lineno));
      return 1;
    }
    if (decode) {
      simdjson::dom::array arr;
      if (el.get_array().get(arr)) {
        std::fprintf(stderr, "tokfeedd: stdin line %llu: expected a JSON array of ids\n",
                     static_cast<unsigned long long>(lineno));
        return 1;
      }
      ids.clear();
      for (auto v : arr) {
        int64_t id;
        if (v.get_int64().get(id)) {
          std::fprintf(stderr, "tokfeedd: stdin line %llu: ids must be integers\n",
                       static_cast<unsigned long long>(lineno));
          return 1;
        }
        ids.push_back(static_cast<int32_t>(id));
      }
      append_json_string(out, tok->decode(ids));
    } else {
      std::string_view text;
      if (el.get_string().get(text)) {
        std::fprintf(stderr, "tokfeedd: stdin line %llu: expected a JSON string\n",
                     static_cast<unsigned long long>(lineno));
        return 1;
      }
      // The ids-only path, checked against the ids of the path with offsets:
      // a test comparing this tool's output with a reference covers both.
      ids.clear();
      tok->encode_ids(text, ids);
      tokens.clear();
      tok->encode(text, tokens);
      bool same = ids.size() == tokens.size();
      for (std::size_t i = 0; same && i < ids.size(); ++i) same = ids[i] == tokens[i].id;
      if (!same) {
        std::fprintf(stderr, "tokfeedd: stdin line %llu: encode_ids and encode give different ids\n",
                     static_cast<unsigned long long>(lineno));
        return 1;
      }
      out += '[';
      for (std::size_t i = 0; i < ids.size(); ++i) {
        if (i) out += ',';
        out += std::to_string(ids[i]);
      }
      out += ']';
    }
    out += '\n';
    std::fwrite(out.data(), 1, out.size(), stdout);
  }
  return 0;
}

}  // namespace tokfeed::dev
