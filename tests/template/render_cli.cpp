// template_render TEMPLATE_FILE CONTEXTS.jsonl: renders the template once per
// line of CONTEXTS (a JSON object of template variables) and prints one JSON
// line per render: {"text": ...} or {"error": ...}, with "generation" spans
// when the template has {% generation %} blocks. The engine's side of
// tests/template/compare_jinja2.py.
//
// template_render --cases CASES.jsonl: each line is {"template": ...,
// "context": {...}}; prints one line per case: {"text": ...}, {"error": ...}
// or {"load_error": ...}. The engine's side of tests/template/diff_jinja2.py.
//
// template_render --replay CORPUS.jsonl: each line is a case with "expect":
// {"text": ...} or {"error": true}, as jinja2 rendered it; prints each case
// that differs and exits 1 when any does.
#include <fstream>
#include <iostream>
#include <sstream>

#include "template/json_value.hpp"
#include "template/pystr.hpp"
#include "template/template.hpp"

using namespace tokfeed::tmpl;

namespace {

RenderLimits test_limits() {
  RenderLimits limits;
  parse_instant("2024-07-26", limits.now);
  return limits;
}

// One render: sets `text` or `error` (load errors prefixed "load: ").
bool render_case(const std::string& source, const Value& ctx, std::string& text, std::string& error) {
  static const RenderLimits limits = test_limits();
  Template t;
  try {
    t = Template::parse(source);
  } catch (const Error& e) {
    error = std::string("load: ") + e.what();
    return false;
  }
  Vars vars;
  if (ctx.is_dict()) vars.assign(ctx.dict->items().begin(), ctx.dict->items().end());
  try {
    text = t.render(vars, limits);
    return true;
  } catch (const Error& e) {
    error = e.what();
    return false;
  }
}

const Value& field(const Value& obj, std::string_view name) {
  static const Value missing;
  const Value* v = obj.is_dict() ? obj.dict->find(name) : nullptr;
  return v ? *v : missing;
}

int run_cases(const char* path, bool replay) {
  std::ifstream in(path);
  if (!in) {
    std::cerr << "cannot open " << path << "\n";
    return 2;
  }
  std::string line;
  int lineno = 0, bad = 0, total = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty()) continue;
    Value c = parse_json(line);
    const Value& src = field(c, "template");
    if (!src.is_str()) {
      std::cerr << path << ":" << lineno << ": the case has no \"template\" string\n";
      return 2;
    }
    std::string text, error;
    bool ok = render_case(src.text(), field(c, "context"), text, error);
    std::string out;
    if (!replay) {
      out = ok ? "{\"text\": " : error.rfind("load: ", 0) == 0 ? "{\"load_error\": " : "{\"error\": ";
      json_quote(ok ? text : error, out);
      std::cout << out << "}" << std::endl;  // flushed: a crash leaves the cases before it
      continue;
    }
    ++total;
    const Value& expect = field(c, "expect");
    const Value& want = field(expect, "text");
    bool same = want.is_str() ? ok && text == want.text() : !ok;
    if (same) continue;
    ++bad;
    out = "template ";
    json_quote(src.text(), out);
    out += "\n  jinja2:  ";
    if (want.is_str()) json_quote(want.text(), out);
    else out += "an error";
    out += "\n  tokfeed: ";
    if (ok) json_quote(text, out);
    else out += "error: " + error;
    std::cout << path << ":" << lineno << ": differs from jinja2\n  " << out << "\n";
  }
  if (replay) std::cout << total - bad << "/" << total << " cases equal to jinja2\n";
  return bad ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && (std::string_view(argv[1]) == "--cases" || std::string_view(argv[1]) == "--replay"))
    return run_cases(argv[2], std::string_view(argv[1]) == "--replay");
  if (argc != 3) {
    std::cerr << "usage: template_render TEMPLATE_FILE CONTEXTS.jsonl | --cases CASES.jsonl | --replay CORPUS.jsonl\n";
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
  RenderLimits limits = test_limits();
  std::ifstream cf(argv[2]);
  std::string line;
  while (std::getline(cf, line)) {
    if (line.empty()) continue;
    Value ctx = parse_json(line);
    Vars vars(ctx.dict->items().begin(), ctx.dict->items().end());
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
