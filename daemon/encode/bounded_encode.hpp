// Bounded work per record under truncation (docs/data_model.md 3.1): when a
// rendered sample is far longer than what max_length keeps, only the part of
// its text that can reach the kept tokens is tokenized.
//
// The text is cut where the tokenizers in use start a new pre-token (before
// the space between two ASCII letters, or after a newline that a non-space
// byte follows): byte-level BPE's regex splits, Metaspace and SentencePiece
// all begin a pre-token there, and tokens never cross a pre-token, so the
// tokens of the part that lie a margin away from the cut are those of the
// whole text. The result is then checked against a second, longer part: the
// kept tokens must come out the same (ids and offsets) from both. A text
// without such a cut, or a check that disagrees, takes the whole path.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "chat/chat_template.hpp"
#include "chat/sample.hpp"
#include "tokenizer/tokenizer.hpp"

namespace tokfeed {

// Encodes `r` as text::encode_sample would, tokenizing a bounded part of its
// text. Returns false, with `out` unspecified, when it cannot do so exactly
// or when the text is too short for a bound to help: then the caller runs
// text::encode_sample on the whole.
bool encode_bounded(const text::Tokenizer& tok, const text::Rendered& r, uint32_t max_length, text::Truncation trunc,
                    text::EncodedSample& out, std::vector<text::Token>& scratch, std::vector<text::Token>& check);

// The cut positions encode_bounded uses (exposed for tests): the first at or
// after `from`, the last in [lowest, from]; npos when there is none.
std::size_t next_cut(std::string_view t, std::size_t from);
std::size_t prev_cut(std::string_view t, std::size_t from, std::size_t lowest = 0);

}  // namespace tokfeed
