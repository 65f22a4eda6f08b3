// Loading a model's chat template: a .jinja file, a tokenizer_config.json
// (a string or a list of named templates), or a model folder; its special
// tokens; template_kwargs; the fixed instant strftime_now formats.
#include "chat/chat_jinja.hpp"

#include <simdjson.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "template/json_value.hpp"

namespace tokfeed::text {

namespace fs = std::filesystem;
using tmpl::Value;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("chat_template: cannot read " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A special token: a string, or AddedToken's {"content": ...}.
std::optional<std::string> token_text(const Value* v) {
  if (!v) return std::nullopt;
  if (v->is_str()) return *v->s;
  if (v->is_dict())
    if (const Value* c = v->dict->find("content"); c && c->is_str()) return *c->s;
  return std::nullopt;
}

constexpr std::string_view kSpecialTokens[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                               "pad_token", "cls_token", "mask_token"};

void add_special_tokens(const Value& cfg, tmpl::Vars& out) {
  for (std::string_view k : kSpecialTokens) {
    if (auto t = token_text(cfg.dict->find(k))) out.emplace_back(k, Value::str(*t));
  }
  if (const Value* a = cfg.dict->find("additional_special_tokens"); a && a->is_list() && !a->list->items.empty()) {
    std::vector<Value> items;
    for (const Value& x : a->list->items)
      if (auto t = token_text(&x)) items.push_back(Value::str(*t));
    out.emplace_back("additional_special_tokens", Value::new_list(std::move(items)));
  }
}

// The chat_template field of a tokenizer_config.json.
std::string template_in_config(const Value& cfg, const std::string& path, const std::string& name,
                               std::string& chosen) {
  const Value* t = cfg.dict->find("chat_template");
  if (!t || t->is_none())
    throw std::runtime_error(path +
                             ": no 'chat_template' field; name a .jinja file or a tokenizer_config.json that has one");
  if (t->is_str()) {
    if (!name.empty())
      throw std::runtime_error(path + ": chat_template_name = \"" + name +
                               "\", but its chat_template is a single template");
    return *t->s;
  }
  if (!t->is_list())
    throw std::runtime_error(path + ": field 'chat_template': expected a string or a list of {name, template}");
  std::string want = name.empty() ? "default" : name, names;
  for (const Value& e : t->list->items) {
    const Value* n = e.is_dict() ? e.dict->find("name") : nullptr;
    const Value* body = e.is_dict() ? e.dict->find("template") : nullptr;
    if (!n || !n->is_str() || !body || !body->is_str())
      throw std::runtime_error(path + ": field 'chat_template': each entry needs a string 'name' and 'template'");
    if (*n->s == want) {
      chosen = want;
      return *body->s;
    }
    names += (names.empty() ? "" : ", ") + *n->s;
  }
  throw std::runtime_error(path + ": no chat template named '" + want + "' (it has: " + names +
                           "); set [tokenizer] chat_template_name");
}

// A value's JSON text (this simdjson has raw_json for objects and arrays only).
simdjson::simdjson_result<std::string_view> raw_json(simdjson::ondemand::value v) {
  simdjson::ondemand::json_type type;
  if (auto err = v.type().get(type)) return err;
  if (type == simdjson::ondemand::json_type::object) {
    simdjson::ondemand::object o;
    if (auto err = v.get_object().get(o)) return err;
    return o.raw_json();
  }
  if (type == simdjson::ondemand::json_type::array) {
    simdjson::ondemand::array a;
    if (auto err = v.get_array().get(a)) return err;
    return a.raw_json();
  }
  return v.raw_json_token();
}

// tokenizer_config.json's fields that the template gets: chat_template and
// the special tokens. The others are skipped unread, as transformers gives
// none of them to the template: HF writes model_max_length as the integer
// 10^30, past what the DOM parser and the engine's 64-bit ints hold.
Value load_config_json(const std::string& path) {
  simdjson::padded_string json(read_file(path));
  simdjson::ondemand::parser parser;
  simdjson::ondemand::document doc;
  simdjson::ondemand::object obj;
  auto malformed = [&](simdjson::error_code err) {
    return std::runtime_error(path + ": malformed JSON: " + simdjson::error_message(err));
  };
  if (auto err = parser.iterate(json).get(doc)) throw malformed(err);
  if (auto err = doc.get_object().get(obj))
    throw err == simdjson::INCORRECT_TYPE ? std::runtime_error(path + ": expected a JSON object") : malformed(err);
  Value cfg = Value::new_dict();
  for (auto member : obj) {
    simdjson::ondemand::field f;
    std::string_view key, raw;
    if (auto err = std::move(member).get(f)) throw malformed(err);
    if (auto err = f.unescaped_key().get(key)) throw malformed(err);
    if (key != "chat_template" && key != "additional_special_tokens" &&
        std::find(std::begin(kSpecialTokens), std::end(kSpecialTokens), key) == std::end(kSpecialTokens))
      continue;
    std::string name(key);
    if (auto err = raw_json(f.value()).get(raw)) throw malformed(err);
    try {
      cfg.dict->set(name, tmpl::parse_json(raw));  // the last of duplicate keys, as json.loads
    } catch (const tmpl::Error& e) {
      throw std::runtime_error(path + ": field '" + name + "': " + e.what());
    }
  }
  return cfg;
}

}  // namespace

std::optional<std::string> auto_chat_template(const std::string& tokenizer_path) {
  std::error_code ec;
  fs::path p(tokenizer_path);
  fs::path dir = fs::is_directory(p, ec) ? p : p.parent_path();
  if (fs::exists(dir / "chat_template.jinja", ec)) return dir.string();
  fs::path cfg = dir / "tokenizer_config.json";
  if (!fs::exists(cfg, ec)) return std::nullopt;
  try {
    Value v = load_config_json(cfg.string());
    const Value* t = v.dict->find("chat_template");
    if (t && (t->is_str() || t->is_list())) return dir.string();
  } catch (const std::runtime_error&) {
  }
  return std::nullopt;
}

std::shared_ptr<const ChatSpec> load_chat_template(const ChatSource& src) {
  auto spec = std::make_shared<ChatSpec>();
  std::error_code ec;
  fs::path p(src.path);
  std::string source, config_path, jinja_path, chosen;
  if (fs::is_directory(p, ec)) {
    if (fs::exists(p / "chat_template.jinja", ec)) jinja_path = (p / "chat_template.jinja").string();
    if (fs::exists(p / "tokenizer_config.json", ec)) config_path = (p / "tokenizer_config.json").string();
    if (jinja_path.empty() && config_path.empty())
      throw std::runtime_error("chat_template = " + src.path +
                               ": the folder has neither chat_template.jinja nor tokenizer_config.json");
  } else if (p.extension() == ".json") {
    config_path = src.path;
  } else {
    jinja_path = src.path;
    if (fs::exists(p.parent_path() / "tokenizer_config.json", ec))
      config_path = (p.parent_path() / "tokenizer_config.json").string();
  }
  Value cfg = Value::new_dict();
  if (!config_path.empty()) cfg = load_config_json(config_path);
  // special_tokens_map.json beside them: its tokens win, as transformers
  // reads the two files.
  const fs::path map =
      fs::path(config_path.empty() ? jinja_path : config_path).parent_path() / "special_tokens_map.json";
  if (fs::exists(map, ec)) {
    Value m = load_config_json(map.string());
    for (const auto& [k, v] : m.dict->items())
      if (k != "chat_template" && !v.is_none()) cfg.dict->set(k, v);
  }
  if (!jinja_path.empty()) {
    source = read_file(jinja_path);
    spec->name = jinja_path;
  } else {
    source = template_in_config(cfg, config_path, src.name, chosen);
    spec->name = config_path + (chosen.empty() ? "" : " [" + chosen + "]");
  }
  add_special_tokens(cfg, spec->globals);
  if (!src.kwargs_json.empty()) {
    Value kw = tmpl::parse_json(src.kwargs_json);
    for (const auto& [k, v] : kw.dict->items()) {
      if (k == "messages" || k == "tools" || k == "documents" || k == "add_generation_prompt")
        throw std::runtime_error("[tokenizer] template_kwargs: '" + k + "' is set by tokfeed itself; remove it");
      bool replaced = false;
      for (auto& [gk, gv] : spec->globals)
        if (gk == k) gv = v, replaced = true;
      if (!replaced) spec->globals.emplace_back(k, v);
    }
  }
  if (!tmpl::parse_instant(src.instant, spec->limits.now))
    throw std::runtime_error("[tokenizer] template_time = \"" + src.instant +
                             "\": expected an instant \"YYYY-MM-DD\" or \"YYYY-MM-DDTHH:MM:SS\" (UTC)");
  if (src.max_steps) spec->limits.max_steps = src.max_steps;
  try {
    spec->tmpl = tmpl::Template::parse(source);
  } catch (const tmpl::Error& e) {
    throw std::runtime_error("chat template " + spec->name + ": " + e.what());
  }
  spec->source = spec->name;
  spec->key = source;
  for (const auto& [k, v] : spec->globals) spec->key += "\n" + k.str() + "=" + tmpl::to_str(v);
  spec->key += "\ntime=" + src.instant + "\nsteps=" + std::to_string(spec->limits.max_steps);
  // The label rule's version: what it serves and trains (docs/data_model.md 2.2).
  spec->key += "\nlabels=generation|prefix|provenance";
  return spec;
}

bool tool_record(std::string_view json, const RecordRules& rules, bool padded, tmpl::Value& messages,
                 tmpl::Value& tools) {
  if (!rules.tool_chat || !record_to_chat(json, rules, padded, messages, tools).empty()) return false;
  if (tools.is_list() && !tools.list->items.empty()) return true;
  for (const Value& m : messages.list->items) {
    if (!m.is_dict()) continue;
    const Value* role = m.dict->find("role");
    const Value* calls = m.dict->find("tool_calls");
    if ((role && role->is_str() && *role->s == "tool") || (calls && calls->is_list() && !calls->list->items.empty()))
      return true;
    const Value* reasoning = m.dict->find("reasoning_content");  // set under any of its names
    if (rules.tool_reasoning && reasoning && !reasoning->is_none()) return true;
  }
  return false;
}

std::string render_chat_record(std::string_view json, const RecordRules& rules, bool padded, tmpl::Value& messages,
                               tmpl::Value& tools, Rendered& out, PlainFound* plain) {
  // A record of a shape seen before, read from its text alone: its
  // messages' values are not built.
  if (rules.columns.empty() && rules.placeholders.empty() &&
      serve_record_shape(*rules.chat, json, rules.format, rules.loss, out)) {
    if (plain) plain->found = false;
    messages = tmpl::Value();
    tools = tmpl::Value();
    return {};
  }
  std::size_t prompt = 0;
  std::string reason = record_to_chat(json, rules, padded, messages, tools, &prompt, plain);
  if (!reason.empty() || (plain && plain->found)) return reason;
  if (prompt) return render_completion(*rules.chat, messages, tools, prompt, rules.loss, out);
  return render_labeled(*rules.chat, messages, tools, rules.loss, out);
}

std::string check_chat_record(std::string_view json, const RecordRules& rules, bool padded) {
  static thread_local tmpl::Value messages, tools;
  static thread_local Rendered rendered;
  static thread_local PlainFound plain;  // a plain-text record: its own verdict, no render
  return render_chat_record(json, rules, padded, messages, tools, rendered, &plain);
}

}  // namespace tokfeed::text
