// The one label rule (docs/data_model.md section 2.2):
// (a) a template with {% generation %} blocks trains their text, as HF's
//     return_assistant_tokens_mask does;
// (b) otherwise assistant message i trains F[len(P):len(Fi)] when
//     P = render(msgs[:i], add_generation_prompt) ⊑ Fi = render(msgs[:i+1]) ⊑ F;
// (c) where (b) fails the record is bad, with a reason that names the template
//     and the message and says what to do;
// a message's own "loss": true/false overrides the rule for that message.
#include <algorithm>

#include "chat/chat_jinja.hpp"

namespace tokfeed::text {

namespace {

using tmpl::Value;

class Renderer {
 public:
  Renderer(const ChatSpec& spec, const Value& messages, const Value& tools) : spec_(spec), messages_(messages) {
    vars_ = spec.globals;
    vars_.emplace_back("messages", Value());
    vars_.emplace_back("tools", tools);
    vars_.emplace_back("documents", Value::none());
    vars_.emplace_back("add_generation_prompt", Value::boolean(false));
  }

  // Renders messages[:n]; throws tmpl::Error.
  std::string render(std::size_t n, bool generation_prompt, tmpl::Spans* spans = nullptr) {
    const auto& all = messages_.list->items;
    vars_[vars_.size() - 4].second =
        n == all.size()
            ? messages_
            : Value::new_list(std::vector<Value>(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n)));
    vars_.back().second = Value::boolean(generation_prompt);
    return spec_.tmpl.render(vars_, spec_.limits, spans);
  }

 private:
  const ChatSpec& spec_;
  const Value& messages_;
  tmpl::Vars vars_;
};

std::string role_of(const Value& m) {
  if (!m.is_dict()) return {};
  const Value* r = m.dict->find("role");
  return r && r->is_str() ? *r->s : std::string();
}

// The message's own "loss" switch, if it has one.
std::optional<bool> loss_of(const Value& m) {
  if (!m.is_dict()) return std::nullopt;
  const Value* l = m.dict->find("loss");
  if (!l || l->kind != tmpl::Kind::kBool) return std::nullopt;
  return l->b;
}

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }

void add_span(std::vector<Span>& spans, std::size_t b, std::size_t e) {
  spans.push_back({static_cast<uint32_t>(b), static_cast<uint32_t>(e)});
}

// Sorts and merges; drops empty spans inside others.
void normalize(std::vector<Span>& spans) {
  std::sort(spans.begin(), spans.end(),
            [](Span a, Span b) { return a.begin < b.begin || (a.begin == b.begin && a.end < b.end); });
  std::vector<Span> out;
  for (Span s : spans) {
    if (!out.empty() && s.begin < out.back().end) {
      out.back().end = std::max(out.back().end, s.end);
    } else if (!out.empty() && s.begin == out.back().end && s.begin != s.end) {
      out.back().end = s.end;
    } else {
      out.push_back(s);
    }
  }
  spans = std::move(out);
}

void subtract(std::vector<Span>& spans, std::size_t b, std::size_t e) {
  std::vector<Span> out;
  for (Span s : spans) {
    if (s.end <= b || s.begin >= e) {
      out.push_back(s);
      continue;
    }
    if (s.begin < b) out.push_back({s.begin, static_cast<uint32_t>(b)});
    if (s.end > e) out.push_back({static_cast<uint32_t>(e), s.end});
  }
  spans = std::move(out);
}

}  // namespace

std::string render_labeled(const ChatSpec& spec, const Value& messages, const Value& tools, bool last_assistant,
                           Rendered& out) {
  out.text.clear();
  out.trained.clear();
  Renderer r(spec, messages, tools);
  const auto& msgs = messages.list->items;
  const std::size_t n = msgs.size();
  const bool generation = spec.tmpl.has_generation();
  tmpl::Spans gen;
  try {
    out.text = r.render(n, false, generation ? &gen : nullptr);
  } catch (const tmpl::Error& e) {
    return "template " + spec.name + ": " + e.what();
  }
  const std::string& full = out.text;

  // Which messages train: assistant messages (the last one only under
  // last_assistant), unless the message says otherwise.
  std::size_t last = n;
  for (std::size_t i = 0; i < n; ++i)
    if (role_of(msgs[i]) == "assistant") last = i;
  std::vector<char> train(n, 0);
  bool overrides = false;
  for (std::size_t i = 0; i < n; ++i) {
    bool assistant = role_of(msgs[i]) == "assistant";
    train[i] = assistant && (!last_assistant || i == last);
    if (auto l = loss_of(msgs[i])) {
      overrides |= *l != static_cast<bool>(train[i]);
      train[i] = *l;
    }
  }

  // The text message i adds: from the end of P (its generation prompt, for
  // an assistant) or of F[i-1], to the end of F[i]. Empty: the prefix rule
  // fails (reason set).
  std::string reason;
  auto region = [&](std::size_t i, std::size_t& b, std::size_t& e) -> bool {
    bool assistant = role_of(msgs[i]) == "assistant";
    std::string p, fi;
    try {
      p = r.render(i, assistant);
      fi = i + 1 == n ? full : r.render(i + 1, false);
    } catch (const tmpl::Error& ex) {
      reason = "template " + spec.name +
               " refuses a prefix of the conversation that the label rule renders for messages[" + std::to_string(i) +
               "]: " + ex.what();
      return false;
    }
    if (!starts_with(fi, p) || !starts_with(full, fi)) {
      reason = "template " + spec.name + ": the prefix label rule fails at messages[" + std::to_string(i) + "] (" +
               role_of(msgs[i]) + "): rendering messages[:" + std::to_string(i) +
               "] is not a prefix of rendering messages[:" + std::to_string(i + 1) +
               "], or that is not a prefix of the whole conversation (the template rewrites earlier turns, e.g. "
               "drops their reasoning); use a template with {% generation %} blocks, or loss = \"last_assistant\"";
      return false;
    }
    b = p.size();
    e = fi.size();
    return true;
  };

  if (generation) {
    for (auto [b, e] : gen) add_span(out.trained, b, e);
    if (spec.one_block_per_turn && last_assistant && !overrides) {
      // Built-in templates: the last block is the last assistant's.
      if (out.trained.size() > 1) out.trained.erase(out.trained.begin(), out.trained.end() - 1);
    } else if (last_assistant || overrides) {
      for (std::size_t i = 0; i < n; ++i) {
        bool assistant = role_of(msgs[i]) == "assistant";
        if (static_cast<bool>(train[i]) == assistant) continue;  // what the blocks already say
        std::size_t b, e;
        if (!region(i, b, e)) return reason;
        if (train[i]) add_span(out.trained, b, e);
        else subtract(out.trained, b, e);
      }
    }
  } else {
    for (std::size_t i = 0; i < n; ++i) {
      if (!train[i]) continue;
      std::size_t b, e;
      if (!region(i, b, e)) return reason;
      add_span(out.trained, b, e);
    }
  }
  normalize(out.trained);
  return {};
}

}  // namespace tokfeed::text
