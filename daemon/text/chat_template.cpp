#include "text/chat_template.hpp"

#include "text/pystrip.hpp"

namespace tokfeed::text {

std::string_view template_name(Template t) noexcept {
  switch (t) {
    case Template::kMistral: return "mistral";
    case Template::kLlama2: return "llama2";
    case Template::kChatml: return "chatml";
    case Template::kQwen2_5: return "qwen2_5";
  }
  return "?";
}

bool parse_template(std::string_view name, Template& out) noexcept {
  for (Template t : {Template::kMistral, Template::kLlama2, Template::kChatml, Template::kQwen2_5}) {
    if (template_name(t) == name) {
      out = t;
      return true;
    }
  }
  return false;
}

bool template_requires_alternation(Template t) noexcept {
  return t == Template::kMistral || t == Template::kLlama2;
}

namespace {

std::optional<std::string_view> builtin_default_system(Template t) {
  switch (t) {
    case Template::kChatml: return "You are a helpful assistant.";
    case Template::kQwen2_5: return "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
    default: return std::nullopt;
  }
}

// Appends text; when `trained`, records its bytes as a trained span.
class Writer {
 public:
  explicit Writer(Rendered& out) : out_(out) {
    out_.text.clear();
    out_.trained.clear();
  }
  void text(std::string_view s) { out_.text.append(s); }
  void trained(std::string_view s) {
    if (s.empty()) return;
    uint32_t begin = static_cast<uint32_t>(out_.text.size());
    out_.text.append(s);
    uint32_t end = static_cast<uint32_t>(out_.text.size());
    if (!out_.trained.empty() && out_.trained.back().end == begin) out_.trained.back().end = end;
    else out_.trained.push_back({begin, end});
  }
  // A turn that is not trained under last_assistant (its text still renders).
  void maybe_trained(std::string_view s, bool train) { train ? trained(s) : text(s); }

 private:
  Rendered& out_;
};

void render_mistral(const Conversation& c, std::string_view system, std::size_t last, Writer& w) {
  w.text("<s>");
  bool first_user = true;
  for (std::size_t i = 0; i < c.size(); ++i) {
    const Message& m = c[i];
    if (m.role == Role::kSystem) continue;
    if (m.role == Role::kUser) {
      w.text("[INST] ");
      if (first_user && !system.empty()) {
        w.text(system);
        w.text("\n\n");
      }
      w.text(m.content);
      w.text(" [/INST]");
      first_user = false;
    } else {
      bool train = last == SIZE_MAX || i == last;
      w.maybe_trained(m.content, train);
      w.maybe_trained("</s>", train);
    }
  }
}

void render_llama2(const Conversation& c, std::string_view system, std::size_t last, Writer& w) {
  bool first_user = true;
  for (std::size_t i = 0; i < c.size(); ++i) {
    const Message& m = c[i];
    if (m.role == Role::kSystem) continue;
    if (m.role == Role::kUser) {
      w.text("<s>[INST] ");
      if (first_user && !system.empty()) {
        w.text("<<SYS>>\n");
        w.text(py_strip(system));
        w.text("\n<</SYS>>\n\n");
      }
      w.text(py_strip(m.content));
      w.text(" [/INST] ");
      first_user = false;
    } else {
      bool train = last == SIZE_MAX || i == last;
      w.maybe_trained(py_strip(m.content), train);
      w.text(" ");
      w.maybe_trained("</s>", train);
    }
  }
}

void render_chatml(const Conversation& c, std::string_view system, bool has_system, std::size_t last,
                   Writer& w) {
  if (has_system) {
    w.text("<|im_start|>system\n");
    w.text(system);
    w.text("<|im_end|>\n");
  }
  for (std::size_t i = 0; i < c.size(); ++i) {
    const Message& m = c[i];
    if (m.role == Role::kSystem) continue;
    w.text("<|im_start|>");
    w.text(role_name(m.role));
    w.text("\n");
    if (m.role == Role::kAssistant) {
      bool train = last == SIZE_MAX || i == last;
      w.maybe_trained(m.content, train);
      w.maybe_trained("<|im_end|>", train);
    } else {
      w.text(m.content);
      w.text("<|im_end|>");
    }
    w.text("\n");
  }
}

}  // namespace

void render(const Conversation& conv, const RenderOptions& opts, Rendered& out) {
  Writer w(out);
  std::string_view system;
  bool has_system = false;
  if (!conv.empty() && conv.front().role == Role::kSystem) {
    system = conv.front().content;
    has_system = true;
  } else if (opts.default_system) {
    system = *opts.default_system;
    has_system = true;
  } else if (auto d = builtin_default_system(opts.tmpl)) {
    system = *d;
    has_system = true;
  }
  std::size_t last = SIZE_MAX;
  if (opts.last_assistant_only) {
    for (std::size_t i = 0; i < conv.size(); ++i)
      if (conv[i].role == Role::kAssistant) last = i;
  }
  switch (opts.tmpl) {
    case Template::kMistral: render_mistral(conv, system, last, w); break;
    case Template::kLlama2: render_llama2(conv, system, last, w); break;
    case Template::kChatml:
    case Template::kQwen2_5: render_chatml(conv, system, has_system, last, w); break;
  }
}

}  // namespace tokfeed::text
