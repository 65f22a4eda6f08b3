// template_render TEMPLATE_FILE CONTEXTS.jsonl: renders the template once per
// line of CONTEXTS (a JSON object of template variables) and prints one JSON
// line per render: {"text": ...} or {"error": ...}, with "generation" spans
// when the template has {% generation %} blocks. The engine's side of
// tests/template/compare_jinja2.py.
#include <fstream>
#include <iostream>
#include <sstream>

#include "template/json_value.hpp"
#include "template/pystr.hpp"
#include "template/template.hpp"

using namespace tokfeed::tmpl;

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: template_render TEMPLATE_FILE CONTEXTS.jsonl\n";
    return 2;
  }
  std::ifstream tf(argv[1]);
  std::stringstream ss;
  ss << tf.rdbuf();
  Template t;
  try {
    t = Template::parse(ss.str());
  } catch (const Error& e) {
    std::string out = "{\"load_error\": ";
    json_quote(e.what(), out);
    std::cout << out << "}\n";
    return 0;
  }
  RenderLimits limits;
  parse_instant("2024-07-26", limits.now);
  std::ifstream cf(argv[2]);
  std::string line;
  while (std::getline(cf, line)) {
    if (line.empty()) continue;
    Value ctx = parse_json(line);
    Vars vars(ctx.dict->items.begin(), ctx.dict->items.end());
    std::string out;
    Spans spans;
    try {
      std::string text = t.render(vars, limits, &spans);
      out = "{\"text\": ";
      json_quote(text, out);
      if (t.has_generation()) {
        out += ", \"generation\": [";
        for (std::size_t k = 0; k < spans.size(); ++k)
          out += (k ? ", [" : "[") + std::to_string(spans[k].first) + ", " + std::to_string(spans[k].second) + "]";
        out += "]";
      }
    } catch (const Error& e) {
      out = "{\"error\": ";
      json_quote(e.what(), out);
    }
    std::cout << out << "}\n";
  }
  return 0;
}
