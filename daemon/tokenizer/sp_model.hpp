// The parts of a SentencePiece .model (a serialized ModelProto) that its BPE
// encoder needs, read with a small protobuf wire-format reader (field numbers
// from sentencepiece_model.proto; proto2 defaults where a field is absent).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tokfeed::text {

struct SpModelSpec {
  enum class PieceType { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };
  struct Piece {
    std::string piece;
    float score = 0;
    PieceType type = PieceType::kNormal;
  };
  std::vector<Piece> pieces;  // index = id
  // TrainerSpec
  int model_type = 1;  // 1 unigram, 2 BPE, 3 word, 4 char
  bool byte_fallback = false;
  bool treat_whitespace_as_suffix = false;
  // NormalizerSpec
  std::string normalizer_name;
  std::string precompiled_charsmap;
  bool add_dummy_prefix = true;
  bool remove_extra_whitespaces = true;
  bool escape_whitespaces = true;
};

// Throws TokenizerError naming `path` when the bytes are not a ModelProto.
SpModelSpec read_sp_model(const std::string& path);

}  // namespace tokfeed::text
