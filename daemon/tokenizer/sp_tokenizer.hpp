// SentencePiece backend (a .model file), through libsentencepiece.
#pragma once

#include <memory>
#include <string>

#include "tokenizer/tokenizer.hpp"

namespace tokfeed::text {

std::unique_ptr<Tokenizer> load_sentencepiece_tokenizer(const std::string& model_path);

}  // namespace tokfeed::text
