// The six built-in templates (docs/data_model.md section 2), written here
// from their documented formats as Jinja and rendered by the same engine as
// any model's template. Each marks its trained text with one
// {% generation %} block per assistant message, where the prefix rule puts
// it: the assistant's text through the end of its turn.
#include "chat/chat_jinja.hpp"

namespace tokfeed::text {

namespace {

// `sys`: the system message, else the default; `msgs`: the rest.
constexpr const char* kSplitSystem = R"J(
{%- if messages and messages[0].role == 'system' -%}
  {%- set sys = messages[0].content -%}
  {%- set msgs = messages[1:] -%}
{%- else -%}
  {%- set sys = default_system -%}
  {%- set msgs = messages -%}
{%- endif -%}
)J";

constexpr const char* kMistral = R"J(
{{- '<s>' -}}
{%- set ns = namespace(first=true) -%}
{%- for m in msgs -%}
  {%- if m.role == 'user' -%}
    {%- set c = m.content -%}
    {%- if ns.first and sys -%}{%- set c = sys + '\n\n' + c -%}{%- endif -%}
    {%- set ns.first = false -%}
    {{- '[INST] ' + c + ' [/INST]' -}}
  {%- else -%}
    {%- generation -%}{{- m.content + '</s>' -}}{%- endgeneration -%}
  {%- endif -%}
{%- endfor -%}
)J";

constexpr const char* kLlama2 = R"J(
{%- set ns = namespace(first=true) -%}
{%- for m in msgs -%}
  {%- if m.role == 'user' -%}
    {{- '<s>[INST] ' -}}
    {%- if ns.first and sys -%}{{- '<<SYS>>\n' + sys | trim + '\n<</SYS>>\n\n' -}}{%- endif -%}
    {%- set ns.first = false -%}
    {{- m.content | trim + ' [/INST]' -}}
  {%- else -%}
    {%- generation -%}{{- ' ' + m.content | trim + ' </s>' -}}{%- endgeneration -%}
  {%- endif -%}
{%- endfor -%}
)J";

constexpr const char* kChatml = R"J(
{%- if sys is not none -%}{{- '<|im_start|>system\n' + sys + '<|im_end|>\n' -}}{%- endif -%}
{%- for m in msgs -%}
  {{- '<|im_start|>' + m.role + '\n' -}}
  {%- if m.role == 'assistant' -%}
    {%- generation -%}{{- m.content + '<|im_end|>\n' -}}{%- endgeneration -%}
  {%- else -%}
    {{- m.content + '<|im_end|>\n' -}}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}
)J";

// Qwen2.5's own template: chatml, and for a record with tools (docs/data_model.md
// 1.2) the tool list in the system turn, assistant tool calls as
// <tool_call> JSON, and consecutive tool results in one user turn.
constexpr const char* kQwen2_5 = R"J(
{%- if tools -%}
  {{- '<|im_start|>system\n' + (sys if sys is not none else '') -}}
  {{- '\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n' -}}
  {{- 'You are provided with function signatures within <tools></tools> XML tags:\n<tools>' -}}
  {%- for tool in tools -%}{{- '\n' + tool | tojson -}}{%- endfor -%}
  {{- '\n</tools>\n\nFor each function call, return a json object with function name and arguments within ' -}}
  {{- '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}' -}}
  {{- '\n</tool_call><|im_end|>\n' -}}
{%- elif sys is not none -%}
  {{- '<|im_start|>system\n' + sys + '<|im_end|>\n' -}}
{%- endif -%}
{%- for m in msgs -%}
  {%- if m.role == 'assistant' -%}
    {{- '<|im_start|>assistant\n' -}}
    {%- generation -%}
      {%- if m.tool_calls -%}
        {%- if m.content -%}{{- m.content -}}{%- endif -%}
        {%- for tc in m.tool_calls -%}
          {%- if tc.function is defined -%}{%- set tc = tc.function -%}{%- endif -%}
          {%- if not loop.first or m.content -%}{{- '\n' -}}{%- endif -%}
          {{- '<tool_call>\n{"name": "' + tc.name + '", "arguments": ' + tc.arguments | tojson + '}\n</tool_call>' -}}
        {%- endfor -%}
      {%- else -%}
        {{- m.content -}}
      {%- endif -%}
      {{- '<|im_end|>\n' -}}
    {%- endgeneration -%}
  {%- elif m.role == 'tool' -%}
    {%- if loop.first or msgs[loop.index0 - 1].role != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}
    {{- '\n<tool_response>\n' + m.content + '\n</tool_response>' -}}
    {%- if loop.last or msgs[loop.index0 + 1].role != 'tool' -%}{{- '<|im_end|>\n' -}}{%- endif -%}
  {%- else -%}
    {{- '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' -}}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}
)J";

// Qwen3's own template: Qwen2.5's tool format (tool list in the system turn,
// <tool_call> JSON, tool results in one user turn), and the reasoning of
// assistant turns after the last user query kept in <think> blocks.
constexpr const char* kQwen3 = R"J(
{%- if tools -%}
  {{- '<|im_start|>system\n' -}}
  {%- if sys is not none -%}{{- sys + '\n\n' -}}{%- endif -%}
  {{- '# Tools\n\nYou may call one or more functions to assist with the user query.\n\n' -}}
  {{- 'You are provided with function signatures within <tools></tools> XML tags:\n<tools>' -}}
  {%- for tool in tools -%}{{- '\n' + tool | tojson -}}{%- endfor -%}
  {{- '\n</tools>\n\nFor each function call, return a json object with function name and arguments within ' -}}
  {{- '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}' -}}
  {{- '\n</tool_call><|im_end|>\n' -}}
{%- elif sys is not none -%}
  {{- '<|im_start|>system\n' + sys + '<|im_end|>\n' -}}
{%- endif -%}
{%- set ns = namespace(q=-1) -%}
{%- for m in msgs -%}
  {%- if m.role == 'user' and not (m.content.startswith('<tool_response>') and m.content.endswith('</tool_response>')) -%}
    {%- set ns.q = loop.index0 -%}
  {%- endif -%}
{%- endfor -%}
{%- if ns.q < 0 -%}{%- set ns.q = msgs | length - 1 -%}{%- endif -%}
{%- for m in msgs -%}
  {%- if m.role == 'assistant' -%}
    {{- '<|im_start|>assistant\n' -}}
    {%- set reasoning = '' -%}
    {%- set answer = m.content -%}
    {%- if m.reasoning_content is defined and m.reasoning_content is not none -%}
      {%- set reasoning = m.reasoning_content -%}
    {%- elif '</think>' in m.content -%}
      {%- set answer = m.content.split('</think>')[-1].lstrip('\n') -%}
      {%- set reasoning = m.content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') -%}
    {%- endif -%}
    {%- generation -%}
      {%- if loop.index0 > ns.q and (loop.last or reasoning) -%}
        {{- '<think>\n' + reasoning.strip('\n') + '\n</think>\n\n' + answer.lstrip('\n') -}}
      {%- else -%}
        {{- answer -}}
      {%- endif -%}
      {%- for tc in m.tool_calls or [] -%}
        {%- if (loop.first and answer) or not loop.first -%}{{- '\n' -}}{%- endif -%}
        {%- if tc.function -%}{%- set tc = tc.function -%}{%- endif -%}
        {{- '<tool_call>\n{"name": "' + tc.name + '", "arguments": ' -}}
        {{- (tc.arguments if tc.arguments is string else tc.arguments | tojson) + '}\n</tool_call>' -}}
      {%- endfor -%}
      {{- '<|im_end|>\n' -}}
    {%- endgeneration -%}
  {%- elif m.role == 'tool' -%}
    {%- if loop.first or msgs[loop.index0 - 1].role != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}
    {{- '\n<tool_response>\n' + m.content + '\n</tool_response>' -}}
    {%- if loop.last or msgs[loop.index0 + 1].role != 'tool' -%}{{- '<|im_end|>\n' -}}{%- endif -%}
  {%- else -%}
    {{- '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' -}}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}
)J";

constexpr const char* kLlama3 = R"J(
{{- '<|begin_of_text|>' -}}
{%- if sys is not none -%}
  {{- '<|start_header_id|>system<|end_header_id|>\n\n' + sys | trim + '<|eot_id|>' -}}
{%- endif -%}
{%- for m in msgs -%}
  {{- '<|start_header_id|>' + m.role + '<|end_header_id|>\n\n' -}}
  {%- if m.role == 'assistant' -%}
    {%- generation -%}{{- m.content | trim + '<|eot_id|>' -}}{%- endgeneration -%}
  {%- else -%}
    {{- m.content | trim + '<|eot_id|>' -}}
  {%- endif -%}
{%- endfor -%}
{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
)J";

const char* body_of(Template t) {
  switch (t) {
    case Template::kMistral: return kMistral;
    case Template::kLlama2: return kLlama2;
    case Template::kChatml: return kChatml;
    case Template::kQwen2_5: return kQwen2_5;
    case Template::kQwen3: return kQwen3;
    case Template::kLlama3: return kLlama3;
  }
  return kChatml;
}

}  // namespace

std::string builtin_template_source(Template t) { return std::string(kSplitSystem) + body_of(t); }

const tmpl::Template& builtin_template(Template t) {
  static const tmpl::Template parsed[] = {
      tmpl::Template::parse(builtin_template_source(Template::kMistral)),
      tmpl::Template::parse(builtin_template_source(Template::kLlama2)),
      tmpl::Template::parse(builtin_template_source(Template::kChatml)),
      tmpl::Template::parse(builtin_template_source(Template::kQwen2_5)),
      tmpl::Template::parse(builtin_template_source(Template::kQwen3)),
      tmpl::Template::parse(builtin_template_source(Template::kLlama3)),
  };
  return parsed[static_cast<std::size_t>(t)];
}

}  // namespace tokfeed::text
