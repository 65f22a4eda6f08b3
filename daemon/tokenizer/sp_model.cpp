#include "tokenizer/sp_model.hpp"

#include <cstring>
#include <fstream>
#include <iterator>
#include <string_view>

#include "tokenizer/tokenizer.hpp"

namespace tokfeed::text {

namespace {

// One message's fields in order: (field number, wire type, varint or bytes).
class WireReader {
 public:
  WireReader(std::string_view bytes, const std::string& where) : s_(bytes), where_(where) {}

  struct Field {
    uint32_t number;
    uint32_t wire;
    uint64_t varint;        // wire 0
    std::string_view data;  // wire 1, 2, 5
  };
  bool next(Field& f) {
    if (i_ >= s_.size()) return false;
    const uint64_t key = varint();
    f.number = uint32_t(key >> 3);
    f.wire = uint32_t(key & 7);
    f.varint = 0;
    f.data = {};
    switch (f.wire) {
      case 0: f.varint = varint(); break;
      case 1: f.data = take(8); break;
      case 5: f.data = take(4); break;
      case 2: f.data = take(varint()); break;
      default: fail("wire type " + std::to_string(f.wire) + " of field " + std::to_string(f.number));
    }
    return true;
  }

 private:
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (i_ >= s_.size()) fail("a varint runs past the end");
      const auto b = uint8_t(s_[i_++]);
      v |= uint64_t(b & 0x7F) << shift;
      if (b < 0x80) return v;
    }
    fail("a varint is longer than 10 bytes");
  }
  std::string_view take(uint64_t n) {
    if (n > s_.size() - i_) fail("a field runs past the end");
    std::string_view d = s_.substr(i_, n);
    i_ += n;
    return d;
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw TokenizerError(where_ + ": not a SentencePiece model (" + what + ")");
  }
  std::string_view s_;
  size_t i_ = 0;
  const std::string& where_;
};

float as_float(std::string_view d) {
  float f;
  std::memcpy(&f, d.data(), 4);
  return f;
}

}  // namespace

SpModelSpec read_sp_model(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw TokenizerError("cannot read SentencePiece model " + path);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  SpModelSpec spec;
  WireReader model(bytes, path);
  WireReader::Field f;
  while (model.next(f)) {
    if (f.number == 1 && f.wire == 2) {  // pieces
      SpModelSpec::Piece p;
      WireReader r(f.data, path);
      WireReader::Field g;
      while (r.next(g)) {
        if (g.number == 1 && g.wire == 2) p.piece = std::string(g.data);
        else if (g.number == 2 && g.wire == 5) p.score = as_float(g.data);
        else if (g.number == 3 && g.wire == 0) p.type = SpModelSpec::PieceType(g.varint);
      }
      spec.pieces.push_back(std::move(p));
    } else if (f.number == 2 && f.wire == 2) {  // trainer_spec
      WireReader r(f.data, path);
      WireReader::Field g;
      while (r.next(g)) {
        if (g.wire != 0) continue;
        if (g.number == 3) spec.model_type = int(g.varint);
        else if (g.number == 24) spec.treat_whitespace_as_suffix = g.varint != 0;
        else if (g.number == 35) spec.byte_fallback = g.varint != 0;
      }
    } else if (f.number == 3 && f.wire == 2) {  // normalizer_spec
      WireReader r(f.data, path);
      WireReader::Field g;
      while (r.next(g)) {
        if (g.number == 1 && g.wire == 2) spec.normalizer_name = std::string(g.data);
        else if (g.number == 2 && g.wire == 2) spec.precompiled_charsmap = std::string(g.data);
        else if (g.number == 3 && g.wire == 0) spec.add_dummy_prefix = g.varint != 0;
        else if (g.number == 4 && g.wire == 0) spec.remove_extra_whitespaces = g.varint != 0;
        else if (g.number == 5 && g.wire == 0) spec.escape_whitespaces = g.varint != 0;
      }
    }
  }
  return spec;
}

}  // namespace tokfeed::text
