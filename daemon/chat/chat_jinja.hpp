// Chat templates as Jinja: the built-in six and any model's own
// chat_template, rendered by daemon/template/, with the one label rule of
// docs/data_model.md section 2.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "template/template.hpp"
#include "chat/chat_template.hpp"
#include "records/records.hpp"

namespace tokfeed::text {

// A template ready to render: parsed once (by the supervisor, before fork).
struct ChatSpec {
  tmpl::Template tmpl;
  std::string name;    // in error messages: the file, and the template's name in it
  std::string source;  // what --check-config reports
  tmpl::Vars globals;  // special tokens and template_kwargs, as apply_chat_template passes them
  tmpl::RenderLimits limits;
  // Built-in templates mark one {% generation %} block per assistant message,
  // so loss = "last_assistant" keeps the last block.
  bool one_block_per_turn = false;
  std::string key;  // what decides the output, for cache keys
  // Which shapes render_labeled keeps for it (chat_shapes.cpp): every spec
  // its own, a copy too (it may be changed before it renders).
  struct Id {
    uint64_t value = next();
    Id() = default;
    Id(const Id&) noexcept {}
    Id& operator=(const Id&) noexcept {
      value = next();
      return *this;
    }
    static uint64_t next() noexcept;
  } id;
};

// Where a model's template comes from ([tokenizer] template = "jinja"/"auto").
struct ChatSource {
  std::string path;         // .jinja file, tokenizer_config.json, or a model folder
  std::string name;         // chat_template_name, for a list of named templates
  std::string kwargs_json;  // template_kwargs as a JSON object ("" for none)
  std::string instant;      // what strftime_now formats
  uint64_t max_steps = 0;   // 0: the default budget
};

// Loads and parses the template; throws std::runtime_error naming the file,
// the field and what to do, or the construct and its line:column.
std::shared_ptr<const ChatSpec> load_chat_template(const ChatSource& src);
// The folder's tokenizer_config.json when it has a chat_template ("auto").
std::optional<std::string> auto_chat_template(const std::string& tokenizer_path);

std::string builtin_template_source(Template t);
const tmpl::Template& builtin_template(Template t);
// The spec a built-in template renders records with: `default_system`
// overrides its own default system prompt.
std::shared_ptr<const ChatSpec> builtin_chat_spec(Template t, const std::optional<std::string>& default_system);
// Whether the built-in template takes tool calls and tool results (qwen2_5, qwen3).
bool builtin_takes_tools(Template t) noexcept;
// Whether it also reads a message's reasoning_content (qwen3): a record with
// one is then read as one with tool content.
bool builtin_reads_reasoning(Template t) noexcept;

// Renders `messages` (and `tools`, None when absent) and marks the trained
// byte spans (docs/data_model.md section 2). Returns the bad-record reason, or
// an empty string.
std::string render_labeled(const ChatSpec& spec, const tmpl::Value& messages, const tmpl::Value& tools, Loss loss,
                           Rendered& out);
// The same, every render run for this record (render_labeled serves a
// record from an earlier one of its shape where it can: chat_shapes.cpp).
std::string render_labeled_direct(const ChatSpec& spec, const tmpl::Value& messages, const tmpl::Value& tools,
                                  Loss loss, Rendered& out);
// Whether render_labeled serves records by their shape (on by default): off,
// every record renders directly (benchmarks and tests compare the two).
void set_render_shapes(bool on) noexcept;
// A record's JSON text (of a dataset of `format`, no columns renamed and
// no placeholders) rendered and labelled from its shape, where it is one
// whose shape's key and strings are read from the text alone
// (chat_shape_read.cpp) and an earlier record of the same shape renders
// it: what render_labeled gives for the messages and tools record_to_chat
// reads from it. False, with nothing changed, where not.
bool serve_record_shape(const ChatSpec& spec, std::string_view json, Format format, Loss loss, Rendered& out);
// render_labeled's counts for `spec` on this thread: records asked for,
// served from a shape (of them, read from their text alone:
// serve_record_shape), and skeletons rendered.
struct ShapeStats {
  uint64_t records = 0, served = 0, learnt = 0, from_text = 0;
};
ShapeStats render_shape_stats(const ChatSpec& spec);

// A record → the template's `messages` and `tools` (docs/data_model.md
// section 1.2): HF/OpenAI messages pass through; ShareGPT and ms-swift agent
// roles are mapped on. Returns the bad-record reason, or an empty string.
// A conversational prompt/completion record (lists of messages in `prompt`
// and `completion`, section 1.3) gives the prompt's messages then the
// completion's, `*prompt_messages` set to how many are the prompt's (else
// 0); without `prompt_messages` such a record is refused. Given `plain`, a
// plain-text record is read into it (the reason is its verdict) instead.
std::string record_to_chat(std::string_view json, const RecordRules& rules, bool padded, tmpl::Value& messages,
                           tmpl::Value& tools, std::size_t* prompt_messages = nullptr, PlainFound* plain = nullptr);
// Renders a conversational prompt/completion record's messages, the first
// `prompt` of them its prompt (section 1.3): the text of all of them, and,
// unless loss = "all", the prompt's with the generation prompt as
// out.prompt (labels by token, past their common prefix).
std::string render_completion(const ChatSpec& spec, const tmpl::Value& messages, const tmpl::Value& tools,
                              std::size_t prompt, Loss loss, Rendered& out);
// The record's render and labels by its kind: render_completion for a
// conversational prompt/completion record, else render_labeled. Returns the
// bad-record reason, or an empty string. Given `plain`, a plain-text record
// is read into it, not rendered (record_to_chat).
std::string render_chat_record(std::string_view json, const RecordRules& rules, bool padded, tmpl::Value& messages,
                               tmpl::Value& tools, Rendered& out, PlainFound* plain = nullptr);
// A validated conversation (the built-in templates' records) as messages.
tmpl::Value conversation_messages(const Conversation& conv);

// Under rules.tool_chat: whether `json` is a record with tool content (a
// non-empty `tools`, a `tool` message or an assistant's tool_calls), read as
// section 1.2 into `messages` and `tools`. False for any other record, and
// for one that section 1.2 cannot read (section 1 then gives the reason).
bool tool_record(std::string_view json, const RecordRules& rules, bool padded, tmpl::Value& messages,
                 tmpl::Value& tools);

// Whether a record is valid under its dataset's model template
// (rules.chat): its messages convert, render and label. The index checks
// records this way when rules.chat is set, check_record otherwise.
std::string check_chat_record(std::string_view json, const RecordRules& rules, bool padded = false);

}  // namespace tokfeed::text
