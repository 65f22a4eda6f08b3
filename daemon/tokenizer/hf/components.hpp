// Normalizers and pre-tokenizers of the HF tokenizer.json pipeline. Each
// class mirrors the HF component of the same name; only the options listed
// in load_* (json_load.cpp) are supported, anything else is a load error.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/hf/normalized_text.hpp"
#include "tokenizer/hf/regex.hpp"
#include "tokenizer/hf/unicode_forms.hpp"

namespace tokfeed::text::hf {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(NormalizedText& text) const = 0;
  // True when it leaves every text as it is (an empty Sequence).
  virtual bool is_identity() const { return false; }
};

class NfcNormalizer final : public Normalizer {
 public:
  NfcNormalizer();  // builds the NFC tables (before workers fork)
  void normalize(NormalizedText& text) const override;
};

// NFD, NFKD or NFKC (unicode_forms.hpp).
class NormalFormNormalizer final : public Normalizer {
 public:
  explicit NormalFormNormalizer(NormalForm form);  // builds the tables (before workers fork)
  void normalize(NormalizedText& text) const override;

 private:
  NormalForm form_;
};

// Each char by itself to its lowercase (Rust's char::to_lowercase).
class LowercaseNormalizer final : public Normalizer {
 public:
  void normalize(NormalizedText& text) const override;
};

// Removes leading and/or trailing whitespace (char::is_whitespace).
class StripNormalizer final : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void normalize(NormalizedText& text) const override;

 private:
  bool left_, right_;
};

// Removes combining marks (is_hf_combining_mark); each removed mark is
// aligned with the char before it.
class StripAccentsNormalizer final : public Normalizer {
 public:
  StripAccentsNormalizer() { char_classes_prepare(); }
  void normalize(NormalizedText& text) const override;
};

class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prepend) : prepend_(std::move(prepend)) {}
  void normalize(NormalizedText& text) const override;

 private:
  std::string prepend_;
};

class ReplaceNormalizer final : public Normalizer {
 public:
  // Either a literal (regex == nullptr) or a regex pattern.
  ReplaceNormalizer(std::string literal, std::unique_ptr<Regex> regex, std::string content)
      : literal_(std::move(literal)), regex_(std::move(regex)), content_(std::move(content)) {}
  void normalize(NormalizedText& text) const override;

 private:
  std::string literal_;
  std::unique_ptr<Regex> regex_;
  std::string content_;
  mutable std::vector<std::pair<uint32_t, uint32_t>> matches_;
};

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps) : steps_(std::move(steps)) {}
  void normalize(NormalizedText& text) const override {
    for (const auto& s : steps_) s->normalize(text);
  }
  bool is_identity() const override {
    for (const auto& s : steps_)
      if (!s->is_identity()) return false;
    return true;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

// Pre-tokenization state: spans of texts; a pre-tokenizer that rewrites text
// (Metaspace, a ByteLevel prefix space) adds a new text for the span.
struct PreSpan {
  uint32_t text;  // index into PreTokenized::texts
  uint32_t begin, end;
};

struct PreTokenized {
  std::vector<NormalizedText> texts;
  std::vector<PreSpan> spans;
  std::vector<PreSpan> next;                           // scratch for the pre-tokenizer running now
  std::vector<std::pair<uint32_t, uint32_t>> matches;  // scratch
  void reset() {
    texts.clear();
    spans.clear();
  }
};

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

class FastSplit;

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual void pre_tokenize(PreTokenized& pt) const = 0;
  // When this pre-tokenizer amounts to the hand-written split alone, every
  // match and every piece between matches a word of its own, the text
  // untouched: that split (HfTokenizer then splits and tokenizes in one pass).
  virtual const FastSplit* word_split() const { return nullptr; }
  // True when it leaves the spans and their text as they are.
  virtual bool passes_through() const { return false; }
  // When this pre-tokenizer amounts to splits by regexes alone, one after
  // the other, each keeping every match and every piece between matches as
  // a piece of its own, the text untouched: appends those regexes in order
  // and returns true (HfTokenizer then takes the words of the last split and
  // tokenizes them, with no span lists).
  virtual bool word_regexes(std::vector<const Regex*>& /*out*/) const { return false; }
  // For the load log: which path each of its regexes takes ("Split: matcher
  // (7 branches, 10 atoms)"), appended to `out`.
  virtual void describe_regexes(std::vector<std::string>& /*out*/) const {}
};

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(std::unique_ptr<Regex> regex, SplitBehavior behavior, bool invert)
      : regex_(std::move(regex)), behavior_(behavior), invert_(invert) {}
  void pre_tokenize(PreTokenized& pt) const override;
  const FastSplit* word_split() const override {
    return behavior_ == SplitBehavior::kIsolated && !invert_ ? regex_->fast() : nullptr;
  }
  void describe_regexes(std::vector<std::string>& out) const override { out.push_back("Split: " + regex_->path()); }
  bool word_regexes(std::vector<const Regex*>& out) const override {
    if (behavior_ != SplitBehavior::kIsolated || invert_) return false;
    out.push_back(regex_.get());
    return true;
  }

 private:
  std::unique_ptr<Regex> regex_;
  SplitBehavior behavior_;
  bool invert_;
};

class DigitsPreTokenizer final : public PreTokenizer {
 public:
  explicit DigitsPreTokenizer(bool individual) : individual_(individual) {}
  void pre_tokenize(PreTokenized& pt) const override;

 private:
  bool individual_;
};

enum class PrependScheme { kFirst, kAlways, kNever };

class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(split) {}
  void pre_tokenize(PreTokenized& pt) const override;

 private:
  std::string replacement_;  // one char, UTF-8
  PrependScheme scheme_;
  bool split_;
};

// Splits with the GPT-2 regex when asked and prepends a space; the mapping of
// bytes to the byte-level alphabet is left to the model, which then works on
// bytes (BpeModel with byte_level).
class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, std::unique_ptr<Regex> gpt2_regex)
      : add_prefix_space_(add_prefix_space), regex_(std::move(gpt2_regex)) {}
  void pre_tokenize(PreTokenized& pt) const override;
  bool passes_through() const override { return !add_prefix_space_ && !regex_; }
  void describe_regexes(std::vector<std::string>& out) const override {
    if (regex_) out.push_back("ByteLevel split: " + regex_->path());
  }
  bool word_regexes(std::vector<const Regex*>& out) const override {
    if (add_prefix_space_) return false;
    if (regex_) out.push_back(regex_.get());
    return true;
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;  // null when use_regex is false
};

// HF pre-tokenizers that split at single chars, each char a match of its
// own: WhitespaceSplit (whitespace, removed), CharDelimiterSplit (one char,
// removed) and Punctuation (is_hf_punctuation, with its behavior).
class CharSplitPreTokenizer final : public PreTokenizer {
 public:
  enum class Kind { kWhitespace, kDelimiter, kPunctuation };
  CharSplitPreTokenizer(Kind kind, char32_t delimiter, SplitBehavior behavior);
  void pre_tokenize(PreTokenized& pt) const override;

 private:
  bool matches(char32_t cp) const;
  Kind kind_;
  char32_t delimiter_;
  SplitBehavior behavior_;
};

// HF's Whitespace: the matches of \w+|[^\w\s]+ (Oniguruma's classes), the
// rest removed.
class WhitespacePreTokenizer final : public PreTokenizer {
 public:
  WhitespacePreTokenizer() { char_classes_prepare(); }
  void pre_tokenize(PreTokenized& pt) const override;
};

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps) : steps_(std::move(steps)) {}
  void pre_tokenize(PreTokenized& pt) const override {
    for (const auto& s : steps_) s->pre_tokenize(pt);
  }
  const FastSplit* word_split() const override;
  bool passes_through() const override;
  void describe_regexes(std::vector<std::string>& out) const override {
    for (const auto& s : steps_) s->describe_regexes(out);
  }
  bool word_regexes(std::vector<const Regex*>& out) const override {
    for (const auto& s : steps_)
      if (!s->word_regexes(out)) return false;
    return true;
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

// Applies HF's SplitDelimiterBehavior to the matches of one span and appends
// the non-empty pieces to pt.next. `matches` are sorted [begin, end) pairs
// relative to the span.
void split_by_matches(PreTokenized& pt, const PreSpan& span, const std::vector<std::pair<uint32_t, uint32_t>>& matches,
                      SplitBehavior behavior, bool invert);

}  // namespace tokfeed::text::hf
