// Decoders of tokenizer.json: each turns a list of token strings into another
// (HF's decode_chain); decode() joins the final list.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace tokfeed::text::hf {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

class ByteLevelDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override;
};

class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool strip_first)
      : replacement_(std::move(replacement)), strip_first_(strip_first) {}
  void decode_chain(std::vector<std::string>& tokens) const override;

 private:
  std::string replacement_;
  bool strip_first_;  // prepend_scheme is not "never"
};

class ByteFallbackDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override;
};

class FuseDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override;
};

class StripDecoder final : public Decoder {
 public:
  StripDecoder(std::string content, size_t start, size_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override;

 private:
  std::string content_;  // one char, UTF-8
  size_t start_, stop_;
};

class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(std::string pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void decode_chain(std::vector<std::string>& tokens) const override;

 private:
  std::string pattern_, content_;
};

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps) : steps_(std::move(steps)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& s : steps_) s->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

// Replaces invalid UTF-8 with U+FFFD, as Rust's String::from_utf8_lossy.
std::string utf8_lossy(std::string_view bytes);

}  // namespace tokfeed::text::hf
