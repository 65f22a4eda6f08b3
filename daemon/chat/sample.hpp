// A rendered conversation → input ids and labels (docs/data_model.md section 3).
#pragma once

#include <cstdint>
#include <vector>

#include "chat/chat_template.hpp"
#include "tokenizer/tokenizer.hpp"

namespace tokfeed::text {

inline constexpr int32_t kIgnoreIndex = -100;

enum class Truncation : uint8_t { kRight, kLeft, kDrop };

struct EncodedSample {
  std::vector<int32_t> ids;
  std::vector<int32_t> labels;
  bool truncated = false;   // cut to max_length
  bool dropped = false;     // longer than max_length under kDrop; ids are empty
  bool all_masked = false;  // no label survives truncation
};

// Tokenizes `r` and labels every token that overlaps a trained span (a
// record with a prompt, or a plain-text one: every token past the prompt's
// common prefix).
// `scratch` is reused across calls to avoid allocation.
void encode_sample(const Tokenizer& tok, const Rendered& r, uint32_t max_length, Truncation trunc, EncodedSample& out,
                   std::vector<Token>& scratch);

// Writes tokens[first, first + count) into out.ids and out.labels (a token
// is trained where it overlaps a span of `trained`) and sets all_masked.
// Tokens must be in text order, as encode() gives them.
void emit_tokens(const std::vector<Token>& tokens, std::size_t first, std::size_t count,
                 const std::vector<Span>& trained, EncodedSample& out);

// The bytes of r.text that train, as spans: r.trained, or for a record
// labelled past its prompt, from the first token the prompt does not share
// (what --check-config shows).
std::vector<Span> trained_text(const Tokenizer& tok, const Rendered& r);

// The same as emit_tokens, labelled by index (a plain-text record, a record
// with a prompt): tokens[i] trains when i >= untrained.
void emit_plain_tokens(const std::vector<Token>& tokens, std::size_t first, std::size_t count, std::size_t untrained,
                       EncodedSample& out);

}  // namespace tokfeed::text
