// Fuzz target: the chat-template engine (daemon/template/) on arbitrary
// template sources and contexts: the lexer and parser, then a render under a
// small step budget, output cap and memory budget, as the supervisor and
// workers run them. The corpus holds the known attacks (string growth, a
// namespace holding itself, keys starting with U+0001).
//
// Input: the template source, a NUL byte, then a JSON object of variables
// (when it does not parse, a fixed two-turn `messages` is used). Beyond "no
// crash and no hang", it checks that a load error names a line:column, and
// that generation spans lie ordered inside the rendered text.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "fuzz_check.hpp"
#include "template/json_value.hpp"
#include "template/template.hpp"

using namespace tokfeed::tmpl;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  std::size_t nul = in.find('\0');
  std::string_view source = in.substr(0, nul);
  std::string_view context = nul == std::string_view::npos ? std::string_view() : in.substr(nul + 1);
  Template t;
  try {
    t = Template::parse(source);
  } catch (const Error& e) {
    std::string what = e.what();
    fuzz_check(what.find(':') != std::string::npos, "a load error names its line:column");
    return 0;
  }
  Value ctx;
  try {
    ctx = parse_json(context);
  } catch (const Error&) {
  }
  if (!ctx.is_dict()) {
    ctx = parse_json(R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
                         "bos_token": "<s>", "add_generation_prompt": false})");
  }
  Vars vars(ctx.dict->items().begin(), ctx.dict->items().end());
  RenderLimits limits;
  limits.max_steps = 20000;
  limits.max_output = 1 << 20;
  limits.max_bytes = 16 << 20;  // the memory budget, checked before each allocation (not in sanitizer builds)
  parse_instant("2024-07-26", limits.now);
  Spans spans;
  try {
    std::string out = t.render(vars, limits, &spans);
    for (auto [b, e] : spans) fuzz_check(b <= e && e <= out.size(), "generation spans lie inside the text");
  } catch (const Error&) {
    // A template error is a bad record, not a crash.
  }
  return 0;
}
