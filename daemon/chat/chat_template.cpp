#include "chat/chat_template.hpp"

#include <stdexcept>

#include "chat/chat_jinja.hpp"

namespace tokfeed::text {

std::string_view template_name(Template t) noexcept {
  switch (t) {
    case Template::kMistral: return "mistral";
    case Template::kLlama2: return "llama2";
    case Template::kChatml: return "chatml";
    case Template::kQwen2_5: return "qwen2_5";
    case Template::kQwen3: return "qwen3";
    case Template::kLlama3: return "llama3";
  }
  return "?";
}

bool parse_template(std::string_view name, Template& out) noexcept {
  for (Template t : {Template::kMistral, Template::kLlama2, Template::kChatml, Template::kQwen2_5, Template::kQwen3,
                     Template::kLlama3}) {
    if (template_name(t) == name) {
      out = t;
      return true;
    }
  }
  return false;
}

bool template_requires_alternation(Template t) noexcept { return t == Template::kMistral || t == Template::kLlama2; }

namespace {

std::optional<std::string_view> builtin_default_system(Template t) {
  switch (t) {
    case Template::kChatml: return "You are a helpful assistant.";
    case Template::kQwen2_5: return "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
    default: return std::nullopt;
  }
}

}  // namespace

bool builtin_takes_tools(Template t) noexcept { return t == Template::kQwen2_5 || t == Template::kQwen3; }
bool builtin_reads_reasoning(Template t) noexcept { return t == Template::kQwen3; }

std::shared_ptr<const ChatSpec> builtin_chat_spec(Template t, const std::optional<std::string>& default_system) {
  auto spec = std::make_shared<ChatSpec>();
  spec->tmpl = builtin_template(t);
  spec->name = "built-in '" + std::string(template_name(t)) + "'";
  spec->source = spec->name;
  spec->one_block_per_turn = true;
  std::optional<std::string_view> sys =
      default_system ? std::optional<std::string_view>(*default_system) : builtin_default_system(t);
  spec->globals.emplace_back("default_system", sys ? tmpl::Value::str(std::string(*sys)) : tmpl::Value::none());
  spec->key = builtin_template_source(t);
  return spec;
}

void render(const Conversation& conv, const RenderOptions& opts, Rendered& out) {
  // One spec per thread and job: the options do not change within one.
  static thread_local std::shared_ptr<const ChatSpec> spec;
  static thread_local RenderOptions spec_opts;
  if (!spec || spec_opts.tmpl != opts.tmpl || spec_opts.default_system != opts.default_system) {
    spec = builtin_chat_spec(opts.tmpl, opts.default_system);
    spec_opts = opts;
  }
  std::string reason = render_labeled(*spec, conversation_messages(conv), tmpl::Value::none(), opts.loss, out);
  if (!reason.empty()) throw std::runtime_error(reason);  // the built-in templates accept every valid conversation
}

}  // namespace tokfeed::text
