// Dataset records → conversations (docs/data_model.md section 1).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace simdjson::dom {
class element;
}

namespace tokfeed::text {

struct ChatSpec;

enum class Role : uint8_t { kSystem, kUser, kAssistant };
std::string_view role_name(Role r) noexcept;

struct Message {
  Role role;
  std::string content;
};
using Conversation = std::vector<Message>;

// Which tokens train ([batch] loss, docs/data_model.md 2.2): every
// assistant turn, the last one only, or the whole rendering.
enum class Loss : uint8_t { kAllAssistant, kLastAssistant, kAll };
std::string_view loss_name(Loss l) noexcept;
// Returns false for an unknown name.
bool parse_loss(std::string_view name, Loss& out) noexcept;

enum class Format : uint8_t { kAuto, kMessages, kShareGpt, kAlpaca, kQueryResponse, kPromptCompletion, kText };
std::string_view format_name(Format f) noexcept;
// Returns false for an unknown name.
bool parse_format(std::string_view name, Format& out) noexcept;

struct RecordRules {
  Format format = Format::kAuto;
  bool require_alternation = false;                               // mistral and llama2 templates
  std::vector<std::pair<std::string, std::string>> placeholders;  // {{NAME}} → value
  // Top-level fields renamed before format detection: source → target.
  std::vector<std::pair<std::string, std::string>> columns;
  // A record longer than this is bad before it is parsed ([dataset]
  // max_record_bytes; the dataset index checks it). 0: no bound.
  uint64_t max_bytes = 0;
  // A model's chat template (template = "jinja"/"auto"): a record is valid
  // when its messages render and label under it (docs/data_model.md 1.2).
  std::shared_ptr<const ChatSpec> chat;
  // A built-in template that takes tool calls (qwen2_5, qwen3): a record with tools,
  // a tool message or a tool call is read as section 1.2 and rendered by it;
  // any other record as section 1.
  std::shared_ptr<const ChatSpec> tool_chat;
  // tool_chat also takes a record whose message has reasoning (qwen3).
  bool tool_reasoning = false;
  Loss loss = Loss::kAllAssistant;
  // The supervisor's index (docs/reliability.md): records that `chat` or
  // `tool_chat` would render are only read (their messages converted), and
  // rendered later in a forked child; the rest are checked as usual.
  bool defer_render = false;
  // Whether a record may need rendering to be judged.
  bool renders() const { return chat || tool_chat; }
};

// Parses one record's JSON text into a conversation and checks it against
// the rules. Returns the bad-record reason, or an empty string when the
// record is valid. Never throws. `padded`: at least kParsePadding readable
// bytes follow `json` (in a larger mapping), so it is parsed in place.
inline constexpr std::size_t kParsePadding = 64;
std::string parse_record(std::string_view json, const RecordRules& rules, Conversation& out, bool padded = false);

// The same verdict as parse_record, without building the conversation: what
// the dataset index runs on every record.
std::string check_record(std::string_view json, const RecordRules& rules, bool padded = false);

// A record read as plain text (formats prompt_completion and text,
// docs/data_model.md 1.3): no chat template; tokenized as tokenizer(text)
// is, and trained from where its prompt ends (TRL's standard datasets).
struct PlainRecord {
  std::string text;                   // `text`, or the completion
  std::optional<std::string> prompt;  // prompt_completion's prompt
};

// Whether `json` is a plain-text record under `rules`: its dataset's format
// is prompt_completion or text, or auto finds `prompt` and `completion`, or
// `text`, and no conversation format's keys. If so, reads it into `out`
// and sets `reason` (the bad-record reason; empty: valid). Never throws.
bool plain_record(std::string_view json, const RecordRules& rules, bool padded, PlainRecord& out, std::string& reason);
// The same on a record already parsed (its root element, a JSON object or
// not): what a reader that parses the record for its conversation anyway
// asks first.
bool plain_record(const simdjson::dom::element& root, const RecordRules& rules, PlainRecord& out, std::string& reason);

// A plain-text record as a reader of conversations finds it in the same
// parse: `found` says it was one, read into `record` as plain_record() reads
// it (the reader's reason is then its verdict).
struct PlainFound {
  PlainRecord record;
  bool found = false;
};

// parse_record(), which reads a plain-text record into `plain` instead of
// refusing it.
std::string parse_record(std::string_view json, const RecordRules& rules, Conversation& out, bool padded,
                         PlainFound& plain);

// Replaces each {{NAME}} with its value in one left-to-right pass; unknown
// names stay as they are and replacements are not rescanned.
std::string apply_placeholders(std::string_view text,
                               const std::vector<std::pair<std::string, std::string>>& placeholders);

}  // namespace tokfeed::text
