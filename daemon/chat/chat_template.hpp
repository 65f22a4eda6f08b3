// Chat templates: a conversation → the text the model's own template renders,
// plus the byte spans that are trained (docs/data_model.md section 2).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "records/records.hpp"

namespace tokfeed::text {

enum class Template : uint8_t { kMistral, kLlama2, kChatml, kQwen2_5, kQwen3, kLlama3 };
std::string_view template_name(Template t) noexcept;
bool parse_template(std::string_view name, Template& out) noexcept;
// mistral and llama2 reject conversations that do not alternate user/assistant.
bool template_requires_alternation(Template t) noexcept;

struct Span {
  uint32_t begin;
  uint32_t end;
};

struct Rendered {
  std::string text;
  std::vector<Span> trained;  // ascending, non-overlapping
  // A plain-text record (docs/data_model.md 1.3): `text` is tokenized as
  // tokenizer(text) is, between the special tokens the tokenizer adds
  // around a sequence.
  bool plain = false;
  // A prompt/completion record (1.3): labels by token, not by span: every
  // token trains but those it shares from the start with the tokenization
  // of `prompt` (TRL's common prefix); a plain record without a prompt
  // trains every token.
  std::optional<std::string> prompt;
};

struct RenderOptions {
  Template tmpl = Template::kChatml;
  std::optional<std::string> default_system;  // overrides the template's own default
  Loss loss = Loss::kAllAssistant;
};

// Renders `conv` (already validated by parse_record) into `out`.
void render(const Conversation& conv, const RenderOptions& opts, Rendered& out);

}  // namespace tokfeed::text
