// The HF tokenizer.json backend: byte-level BPE (Qwen2.5/3, Llama-3,
// DeepSeek-V3) and Metaspace/byte-fallback BPE (Llama-2/Mistral style), with
// ids equal to HF `tokenizers` encoding with add_special_tokens=False.
//
// Supported components (anything else fails to load, naming file and type):
//   normalizer:    NFC, Prepend, Replace, Sequence, null
//   pre_tokenizer: Split, ByteLevel (last), Metaspace, Digits, Sequence, null
//   model:         BPE (byte_fallback, ignore_merges, unk_token, fuse_unk;
//                  empty continuing_subword_prefix / end_of_word_suffix)
//   decoder:       ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace, Sequence
//   added_tokens:  lstrip, rstrip, single_word, normalized
//   post_processor, padding, truncation: ignored (no special tokens are added)
//
// Differences from HF, by design:
// - Input is bytes. A byte that does not start valid UTF-8 is a char of its
//   own: no regex class matches it, NFC keeps it, and BPE sees it as a byte
//   (byte-level) or an unknown char (byte fallback / unk). HF cannot get such
//   input from Python at all.
// - Offsets are byte offsets into the input. Inside a span that a normalizer
//   rewrote (an NFC composition, a Replace) every token covers the whole
//   original span; see text/hf/normalized_text.hpp.
//
// Thread safety: as for every Tokenizer (text/tokenizer.hpp), the loaded
// tokenizer is immutable apart from its word cache and scratch buffers, so
// encode() and decode() must not run on two threads at once; fork after
// loading or load one per thread.
#pragma once

#include <memory>
#include <string>

#include "tokenizer/tokenizer.hpp"

namespace tokfeed::text {

// Loads `tokenizer_json_path` and, when present, tokenizer_config.json beside
// it (for pad_token). Throws TokenizerError naming the file and the component.
std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& tokenizer_json_path);

}  // namespace tokfeed::text
