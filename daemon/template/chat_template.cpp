#include "template/chat_template.hpp"

#include "records/pystrip.hpp"

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

void system_turn(std::string_view system, bool has_system, Writer& w) {
  if (!has_system) return;
  w.text("<|im_start|>system\n");
  w.text(system);
  w.text("<|im_end|>\n");
}

// "<|im_start|>{role}\n", which opens every ChatML turn.
void open_chatml_turn(Role role, Writer& w) {
  w.text("<|im_start|>");
  w.text(role_name(role));
  w.text("\n");
}

void render_chatml(const Conversation& c, std::string_view system, bool has_system, std::size_t last, Writer& w) {
  system_turn(system, has_system, w);
  for (std::size_t i = 0; i < c.size(); ++i) {
    const Message& m = c[i];
    if (m.role == Role::kSystem) continue;
    open_chatml_turn(m.role, w);
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

std::string_view strip_nl_left(std::string_view s) {
  while (!s.empty() && s.front() == '\n') s.remove_prefix(1);
  return s;
}

std::string_view strip_nl_right(std::string_view s) {
  while (!s.empty() && s.back() == '\n') s.remove_suffix(1);
  return s;
}

// Qwen3's ns.last_query_index: the last user message that is not a tool
// response (<tool_response>...</tool_response>); c.size() - 1 when none.
std::size_t qwen3_last_query(const Conversation& c) {
  for (std::size_t i = c.size(); i-- > 0;) {
    std::string_view s = c[i].content;
    bool tool = s.starts_with("<tool_response>") && s.ends_with("</tool_response>");
    if (c[i].role == Role::kUser && !tool) return i;
  }
  return c.size() - 1;
}

// Qwen3's split of an assistant content at </think> into reasoning and answer.
struct Qwen3Content {
  std::string_view reasoning;
  std::string_view answer;
};

Qwen3Content qwen3_split(std::string_view s) {
  std::size_t first = s.find("</think>");
  if (first == std::string_view::npos) return {{}, s};
  std::size_t last = s.rfind("</think>");
  std::string_view answer = strip_nl_left(s.substr(last + 8));
  std::string_view before = strip_nl_right(s.substr(0, first));
  std::size_t open = before.rfind("<think>");
  if (open != std::string_view::npos) before.remove_prefix(open + 7);
  return {strip_nl_left(before), answer};
}

// The assistant body after "<|im_start|>assistant\n", through "<|im_end|>".
// A turn after the last query keeps its think block when it has reasoning or
// is the final message; any other turn renders its answer only.
void qwen3_assistant(std::string_view content, bool after_query, bool final, bool train, Writer& w) {
  Qwen3Content q = qwen3_split(content);
  if (after_query && (final || !q.reasoning.empty())) {
    w.maybe_trained("<think>\n", train);
    w.maybe_trained(strip_nl_right(strip_nl_left(q.reasoning)), train);
    w.maybe_trained("\n</think>\n\n", train);
    w.maybe_trained(strip_nl_left(q.answer), train);
  } else {
    w.maybe_trained(q.answer, train);
  }
  w.maybe_trained("<|im_end|>", train);
}

// Qwen3's chat_template on a conversation without tools (docs/data_model.md
// section 2): no default system; <think> reasoning is kept only after the
// last user query, and the final message gets a (possibly empty) think block.
void render_qwen3(const Conversation& c, std::string_view system, bool has_system, std::size_t last, Writer& w) {
  system_turn(system, has_system, w);
  std::size_t query = qwen3_last_query(c);
  for (std::size_t i = 0; i < c.size(); ++i) {
    const Message& m = c[i];
    if (m.role == Role::kSystem) continue;
    open_chatml_turn(m.role, w);
    if (m.role == Role::kAssistant) {
      qwen3_assistant(m.content, i > query, i + 1 == c.size(), last == SIZE_MAX || i == last, w);
    } else {
      w.text(m.content);
      w.text("<|im_end|>");
    }
    w.text("\n");
  }
}

void llama3_turn(std::string_view role, std::string_view content, bool train, Writer& w) {
  w.text("<|start_header_id|>");
  w.text(role);
  w.text("<|end_header_id|>\n\n");
  w.maybe_trained(py_strip(content), train);
  w.maybe_trained("<|eot_id|>", train);
}

// Llama-3's chat_template: contents trimmed; it always ends with the
// assistant header (it has no add_generation_prompt test).
void render_llama3(const Conversation& c, std::string_view system, bool has_system, std::size_t last, Writer& w) {
  w.text("<|begin_of_text|>");
  if (has_system) llama3_turn("system", system, false, w);
  for (std::size_t i = 0; i < c.size(); ++i) {
    const Message& m = c[i];
    if (m.role == Role::kSystem) continue;
    bool train = m.role == Role::kAssistant && (last == SIZE_MAX || i == last);
    llama3_turn(role_name(m.role), m.content, train, w);
  }
  w.text("<|start_header_id|>assistant<|end_header_id|>\n\n");
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
    case Template::kQwen3: render_qwen3(conv, system, has_system, last, w); break;
    case Template::kLlama3: render_llama3(conv, system, has_system, last, w); break;
  }
}

}  // namespace tokfeed::text
