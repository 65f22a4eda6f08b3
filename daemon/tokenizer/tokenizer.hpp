// Tokenizer interface shared by the SentencePiece and HF tokenizer.json backends.
//
// Thread safety: a loaded Tokenizer is immutable except for internal caches,
// which are per process (workers are forked after loading, so each worker
// gets its own copy-on-write cache). encode() is not safe to call from two
// threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace tokfeed::text {

// One token of an encoding: its id and the byte range [begin, end) of the
// input text it covers.
struct Token {
  int32_t id;
  uint32_t begin;
  uint32_t end;
};

// A tokenizer could not be loaded or used; the message names the file and
// the component at fault.
class TokenizerError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The special tokens tokenizer(text) adds around one sequence, with
// add_special_tokens=True (a tokenizer.json's post_processor): `before`
// the text's tokens and `after` them. Empty for a template's rendering,
// which carries its own.
struct SequenceSpecials {
  std::vector<int32_t> before, after;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Appends the encoding of `text` to `out`, as HF fast tokenizers encode with
  // add_special_tokens=False: the tokenizer's special strings (added tokens)
  // are split out first, leftmost-longest, and become their ids; each text
  // piece between them is encoded on its own. Offsets are relative to `text`.
  virtual void encode(std::string_view text, std::vector<Token>& out) const = 0;

  // The ids encode() gives, appended to `out`, for callers that need no
  // offsets (labels by byte span need them; a whole-text label, a count, a
  // check against other ids do not). Backends with a faster path for it
  // override it; the default encodes with offsets and keeps the ids.
  virtual void encode_ids(std::string_view text, std::vector<int32_t>& out) const;

  // Inverse of encode for tests and tools (special tokens rendered as text).
  virtual std::string decode(std::span<const int32_t> ids) const = 0;

  // What tokenizer(text) adds around a sequence (docs/data_model.md 3.2).
  // Throws TokenizerError where the tokenizer's post-processor is one
  // tokfeed cannot read (only plain-text records need it).
  virtual const SequenceSpecials& sequence_specials() const;

  // The text of the end-of-sequence token, as transformers' eos_token gives
  // it (tokenizer_config.json's eos_token), if the tokenizer has one.
  virtual std::optional<std::string> eos_token() const { return std::nullopt; }

  // The id of an added/special token given by its exact string, if any.
  virtual std::optional<int32_t> special_token_id(std::string_view text) const = 0;

  // Padding id: the tokenizer's pad token, or 0 where it has none.
  virtual int32_t pad_id() const = 0;

  virtual size_t vocab_size() const = 0;

  // Short name of the backend, e.g. "sentencepiece" or "hf".
  virtual std::string_view kind() const = 0;
  // How it encodes, for the load-time log: the backend and, where it has a
  // choice, the algorithm it took and why (e.g. "hf; BPE merges: linear").
  virtual std::string engine() const { return std::string(kind()); }
};

// Loads a tokenizer. `type` is "sentencepiece" (a .model file) or "hf"
// (a tokenizer.json; tokenizer_config.json beside it is read when present).
// Throws TokenizerError naming the path and what is wrong.
std::unique_ptr<Tokenizer> load_tokenizer(std::string_view type, const std::string& path);

}  // namespace tokfeed::text
