#include "tokenizer/sp_tokenizer.hpp"

#include <sentencepiece_processor.h>

#include "tokenizer/sp_bpe.hpp"
#include "tokenizer/special_split.hpp"

namespace tokfeed::text {

namespace {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(const std::string& path) {
    if (auto st = sp_.Load(path); !st.ok()) {
      throw TokenizerError("cannot load SentencePiece model " + path + ": " + st.ToString());
    }
    // HF splits out its added tokens; for a SentencePiece model those are the
    // control pieces (<s>, </s>) and the unknown piece. (User-defined pieces
    // need no splitting: SentencePiece already matches them verbatim.)
    std::vector<std::pair<std::string, int32_t>> specials;
    for (int id = 0; id < sp_.GetPieceSize(); ++id) {
      if (sp_.IsControl(id) || sp_.IsUnknown(id)) specials.emplace_back(sp_.IdToPiece(id), id);
    }
    splitter_ = SpecialSplitter(std::move(specials));
    pad_id_ = sp_.pad_id() >= 0 ? sp_.pad_id() : 0;
    // BPE models take tokfeed's own encoder where it gives libsentencepiece's
    // results exactly (sp_bpe.hpp); the rest, and decoding, stay with it.
    bpe_ = SpBpe::build(read_sp_model(path), path, why_not_bpe_);
  }

  void encode(std::string_view text, std::vector<Token>& out) const override {
    splitter_.split(
        text,
        [&](std::size_t b, std::size_t e) {
          if (bpe_) {
            bpe_->encode(text.substr(b, e - b), static_cast<uint32_t>(b), out);
            return;
          }
          sentencepiece::ImmutableSentencePieceText spt;
          sp_.Encode(text.substr(b, e - b), spt.mutable_proto()).IgnoreError();
          for (std::size_t i = 0; i < spt.pieces_size(); ++i) {
            auto p = spt.pieces(static_cast<int>(i));
            out.push_back({static_cast<int32_t>(p.id()), static_cast<uint32_t>(b + p.begin()),
                           static_cast<uint32_t>(b + p.end())});
          }
        },
        [&](int32_t id, std::size_t b, std::size_t e) {
          out.push_back({id, static_cast<uint32_t>(b), static_cast<uint32_t>(e)});
        });
  }

  std::string decode(std::span<const int32_t> ids) const override {
    std::string out;
    std::vector<int> run;
    auto flush = [&] {
      std::string piece;
      sp_.Decode(run, &piece).IgnoreError();
      out += piece;
      run.clear();
    };
    for (int32_t id : ids) {
      if (id >= 0 && id < sp_.GetPieceSize() && sp_.IsControl(id)) {
        flush();
        out += sp_.IdToPiece(id);
      } else {
        run.push_back(id);
      }
    }
    flush();
    return out;
  }

  std::optional<int32_t> special_token_id(std::string_view text) const override {
    int32_t id;
    if (splitter_.find(text, id)) return id;
    return std::nullopt;
  }

  // A .model has no post-processor: tokenizer(text) adds nothing here.
  std::optional<std::string> eos_token() const override {
    if (sp_.eos_id() < 0) return std::nullopt;
    return sp_.IdToPiece(sp_.eos_id());
  }
  int32_t pad_id() const override { return pad_id_; }
  size_t vocab_size() const override { return static_cast<size_t>(sp_.GetPieceSize()); }
  std::string_view kind() const override { return "sentencepiece"; }
  std::string engine() const override {
    return bpe_ ? "sentencepiece; BPE: tokfeed's encoder" : "sentencepiece; libsentencepiece (" + why_not_bpe_ + ")";
  }

 private:
  sentencepiece::SentencePieceProcessor sp_;
  SpecialSplitter splitter_;
  int32_t pad_id_ = 0;
  std::unique_ptr<SpBpe> bpe_;  // null: libsentencepiece encodes
  std::string why_not_bpe_;
};

}  // namespace

std::unique_ptr<Tokenizer> load_sentencepiece_tokenizer(const std::string& model_path) {
  return std::make_unique<SentencePieceTokenizer>(model_path);
}

}  // namespace tokfeed::text
