// Reads tokenizer.json (and tokenizer_config.json beside it) into HfParts.
// Every unsupported component or option is a TokenizerError naming the file
// and the component: nothing is approximated silently.
#include <simdjson.h>

#include <filesystem>

#include "tokenizer/hf/hf_model.hpp"
#include "tokenizer/hf/unicode.hpp"

namespace tokfeed::text::hf {

namespace {

using simdjson::dom::array;
using simdjson::dom::element;
using simdjson::dom::object;

// The GPT-2 split that ByteLevel applies when use_regex is true.
constexpr const char* kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

class Loader {
 public:
  explicit Loader(std::string path) : path_(std::move(path)) {}

  [[noreturn]] void fail(const std::string& what) const { throw TokenizerError(path_ + ": " + what); }

  // The member `key`, or nullopt where it is missing or null.
  std::optional<element> field(element obj, std::string_view key) const {
    element v;
    if (obj.at_key(key).get(v) != simdjson::SUCCESS || v.is_null()) return std::nullopt;
    return v;
  }
  std::string string_field(element obj, std::string_view key, const std::string& where) const {
    auto v = field(obj, key);
    std::string_view s;
    if (!v || v->get(s) != simdjson::SUCCESS) fail(where + "." + std::string(key) + " must be a string");
    return std::string(s);
  }
  std::optional<std::string> optional_string(element obj, std::string_view key, const std::string& where) const {
    if (!field(obj, key)) return std::nullopt;
    return string_field(obj, key, where);
  }
  bool bool_field(element obj, std::string_view key, bool fallback, const std::string& where) const {
    auto v = field(obj, key);
    if (!v) return fallback;
    bool b;
    if (v->get(b) != simdjson::SUCCESS) fail(where + "." + std::string(key) + " must be true or false");
    return b;
  }
  int64_t int_field(element obj, std::string_view key, const std::string& where) const {
    auto v = field(obj, key);
    int64_t i;
    if (!v || v->get(i) != simdjson::SUCCESS) fail(where + "." + std::string(key) + " must be an integer");
    return i;
  }
  array array_field(element obj, std::string_view key, const std::string& where) const {
    auto v = field(obj, key);
    array a;
    if (!v || v->get(a) != simdjson::SUCCESS) fail(where + "." + std::string(key) + " must be an array");
    return a;
  }
  std::string type_of(element obj, const std::string& where) const { return string_field(obj, "type", where); }

  // A {"String": s} or {"Regex": r} pattern, as a regex.
  std::unique_ptr<Regex> pattern(element obj, const std::string& where, std::string* literal = nullptr) const {
    auto p = field(obj, "pattern");
    if (!p) fail(where + ".pattern is missing");
    if (auto s = optional_string(*p, "String", where + ".pattern")) {
      if (literal) {
        *literal = *s;
        return nullptr;
      }
      return std::make_unique<Regex>(regex_escape(*s), path_ + ": " + where);
    }
    if (auto r = optional_string(*p, "Regex", where + ".pattern"))
      return std::make_unique<Regex>(*r, path_ + ": " + where);
    fail(where + ".pattern must be {\"String\": ...} or {\"Regex\": ...}");
  }

  std::unique_ptr<Normalizer> normalizer(element n, const std::string& where) const {
    const std::string type = type_of(n, where);
    if (type == "NFC") return std::make_unique<NfcNormalizer>();
    if (type == "NFD") return std::make_unique<NormalFormNormalizer>(NormalForm::kNfd);
    if (type == "NFKD") return std::make_unique<NormalFormNormalizer>(NormalForm::kNfkd);
    if (type == "NFKC") return std::make_unique<NormalFormNormalizer>(NormalForm::kNfkc);
    if (type == "Lowercase") return std::make_unique<LowercaseNormalizer>();
    if (type == "StripAccents") return std::make_unique<StripAccentsNormalizer>();
    if (type == "Strip")
      return std::make_unique<StripNormalizer>(bool_field(n, "strip_left", true, where),
                                               bool_field(n, "strip_right", true, where));
    if (type == "Prepend") return std::make_unique<PrependNormalizer>(string_field(n, "prepend", where));
    if (type == "Replace") {
      std::string literal;
      auto regex = pattern(n, where, &literal);
      return std::make_unique<ReplaceNormalizer>(literal, std::move(regex), string_field(n, "content", where));
    }
    if (type == "Sequence") {
      std::vector<std::unique_ptr<Normalizer>> steps;
      size_t i = 0;
      for (element e : array_field(n, "normalizers", where))
        steps.push_back(normalizer(e, where + ".normalizers[" + std::to_string(i++) + "]"));
      return std::make_unique<SequenceNormalizer>(std::move(steps));
    }
    fail("normalizer type '" + type + "' is not supported");
  }

  SplitBehavior behavior(element p, const std::string& where, const char* fallback = nullptr) const {
    const std::string b = fallback && !field(p, "behavior") ? fallback : string_field(p, "behavior", where);
    if (b == "Removed") return SplitBehavior::kRemoved;
    if (b == "Isolated") return SplitBehavior::kIsolated;
    if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
    if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
    if (b == "Contiguous") return SplitBehavior::kContiguous;
    fail(where + ".behavior '" + b + "' is not supported");
  }

  PrependScheme prepend_scheme(element p, const std::string& where) const {
    if (auto s = optional_string(p, "prepend_scheme", where)) {
      if (*s == "first") return PrependScheme::kFirst;
      if (*s == "always") return PrependScheme::kAlways;
      if (*s == "never") return PrependScheme::kNever;
      fail(where + ".prepend_scheme '" + *s + "' is not supported");
    }
    // Older files: add_prefix_space true meant "always".
    return bool_field(p, "add_prefix_space", true, where) ? PrependScheme::kAlways : PrependScheme::kNever;
  }

  std::string one_char(element p, std::string_view key, const std::string& where) const {
    std::string s = string_field(p, key, where);
    if (s.empty() || decode_utf8(s, 0).len != s.size()) fail(where + "." + std::string(key) + " must be one char");
    return s;
  }

  // `byte_level` is set when a ByteLevel pre-tokenizer is seen; it must be
  // the last step, since the model (not the pre-tokenizer) maps the bytes.
  std::unique_ptr<PreTokenizer> pre_tokenizer(element p, const std::string& where, bool& byte_level) const {
    const std::string type = type_of(p, where);
    if (byte_level) fail(where + ": pre_tokenizer '" + type + "' after ByteLevel is not supported");
    if (type == "Split")
      return std::make_unique<SplitPreTokenizer>(pattern(p, where), behavior(p, where),
                                                 bool_field(p, "invert", false, where));
    if (type == "ByteLevel") {
      byte_level = true;
      std::unique_ptr<Regex> regex;
      if (bool_field(p, "use_regex", true, where)) regex = std::make_unique<Regex>(kGpt2Pattern, path_ + ": " + where);
      return std::make_unique<ByteLevelPreTokenizer>(bool_field(p, "add_prefix_space", true, where), std::move(regex));
    }
    if (type == "Metaspace")
      return std::make_unique<MetaspacePreTokenizer>(one_char(p, "replacement", where), prepend_scheme(p, where),
                                                     bool_field(p, "split", true, where));
    if (type == "WhitespaceSplit")
      return std::make_unique<CharSplitPreTokenizer>(CharSplitPreTokenizer::Kind::kWhitespace, 0,
                                                     SplitBehavior::kRemoved);
    if (type == "CharDelimiterSplit") {
      const std::string delimiter = one_char(p, "delimiter", where);
      return std::make_unique<CharSplitPreTokenizer>(CharSplitPreTokenizer::Kind::kDelimiter,
                                                     decode_utf8(delimiter, 0).cp, SplitBehavior::kRemoved);
    }
    if (type == "Punctuation")
      return std::make_unique<CharSplitPreTokenizer>(CharSplitPreTokenizer::Kind::kPunctuation, 0,
                                                     behavior(p, where, "Isolated"));
    if (type == "Whitespace") return std::make_unique<WhitespacePreTokenizer>();
    if (type == "Digits") return std::make_unique<DigitsPreTokenizer>(bool_field(p, "individual_digits", false, where));
    if (type == "Sequence") {
      std::vector<std::unique_ptr<PreTokenizer>> steps;
      size_t i = 0;
      for (element e : array_field(p, "pretokenizers", where))
        steps.push_back(pre_tokenizer(e, where + ".pretokenizers[" + std::to_string(i++) + "]", byte_level));
      return std::make_unique<SequencePreTokenizer>(std::move(steps));
    }
    fail("pre_tokenizer type '" + type + "' is not supported");
  }

  std::unique_ptr<Decoder> decoder(element d, const std::string& where) const {
    const std::string type = type_of(d, where);
    if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
    if (type == "Metaspace")
      return std::make_unique<MetaspaceDecoder>(one_char(d, "replacement", where),
                                                prepend_scheme(d, where) != PrependScheme::kNever);
    if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
    if (type == "Fuse") return std::make_unique<FuseDecoder>();
    if (type == "Strip")
      return std::make_unique<StripDecoder>(one_char(d, "content", where), size_t(int_field(d, "start", where)),
                                            size_t(int_field(d, "stop", where)));
    if (type == "Replace") {
      std::string literal;
      if (pattern(d, where, &literal) != nullptr)
        fail(where + ": decoder 'Replace' with a Regex pattern is not supported");
      return std::make_unique<ReplaceDecoder>(literal, string_field(d, "content", where));
    }
    if (type == "Sequence") {
      std::vector<std::unique_ptr<Decoder>> steps;
      size_t i = 0;
      for (element e : array_field(d, "decoders", where))
        steps.push_back(decoder(e, where + ".decoders[" + std::to_string(i++) + "]"));
      return std::make_unique<SequenceDecoder>(std::move(steps));
    }
    fail("decoder type '" + type + "' is not supported");
  }

  BpeConfig model_config(element m, bool byte_level) const {
    const std::string where = "model";
    if (auto type = optional_string(m, "type", where); type && *type != "BPE")
      fail("model type '" + *type + "' is not supported");
    if (auto dropout = field(m, "dropout")) {
      double d = 0;
      if (dropout->get(d) != simdjson::SUCCESS || d != 0.0)
        fail("model.dropout is not supported (encoding would not be deterministic)");
    }
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      if (auto s = optional_string(m, key, where); s && !s->empty())
        fail(std::string("model.") + key + " '" + *s + "' is not supported (only empty or null)");
    }
    BpeConfig c;
    c.byte_level = byte_level;
    c.byte_fallback = bool_field(m, "byte_fallback", false, where);
    c.ignore_merges = bool_field(m, "ignore_merges", false, where);
    c.fuse_unk = bool_field(m, "fuse_unk", false, where);
    c.unk_token = optional_string(m, "unk_token", where).value_or("");
    auto vocab = field(m, "vocab");
    object vocab_obj;
    if (!vocab || vocab->get(vocab_obj) != simdjson::SUCCESS) fail("model.vocab must be an object");
    c.vocab.reserve(vocab_obj.size());
    for (auto [key, value] : vocab_obj) {
      int64_t id;
      if (value.get(id) != simdjson::SUCCESS || id < 0 || id > INT32_MAX)
        fail("model.vocab['" + std::string(key) + "'] must be a non-negative integer");
      c.vocab.emplace(std::string(key), int32_t(id));
    }
    size_t i = 0;
    for (element e : array_field(m, "merges", where)) {
      std::string_view line;
      array pair;
      if (e.get(line) == simdjson::SUCCESS) {
        // "a b": split at the first space, as HF does.
        size_t sp = line.find(' ');
        if (sp == std::string_view::npos)
          fail("model.merges[" + std::to_string(i) + "] '" + std::string(line) + "' has no space");
        c.merges.emplace_back(std::string(line.substr(0, sp)), std::string(line.substr(sp + 1)));
      } else if (e.get(pair) == simdjson::SUCCESS && pair.size() == 2) {
        std::string_view a, b;
        if (pair.at(0).get(a) != simdjson::SUCCESS || pair.at(1).get(b) != simdjson::SUCCESS)
          fail("model.merges[" + std::to_string(i) + "] must hold two strings");
        c.merges.emplace_back(std::string(a), std::string(b));
      } else {
        fail("model.merges[" + std::to_string(i) + "] must be \"a b\" or [\"a\", \"b\"]");
      }
      ++i;
    }
    return c;
  }

  void added_tokens(element root, HfParts& parts) const {
    auto list = field(root, "added_tokens");
    if (!list) return;
    array a;
    if (list->get(a) != simdjson::SUCCESS) fail("added_tokens must be an array");
    std::vector<AddedToken> raw, normalized;
    std::vector<std::string> raw_patterns, normalized_patterns;
    size_t i = 0;
    for (element e : a) {
      const std::string where = "added_tokens[" + std::to_string(i++) + "]";
      AddedToken t;
      t.content = string_field(e, "content", where);
      int64_t id = int_field(e, "id", where);
      if (id < 0 || id > INT32_MAX) fail(where + ".id is out of range");
      t.id = int32_t(id);
      t.single_word = bool_field(e, "single_word", false, where);
      t.lstrip = bool_field(e, "lstrip", false, where);
      t.rstrip = bool_field(e, "rstrip", false, where);
      t.normalized = bool_field(e, "normalized", true, where);
      t.special = bool_field(e, "special", false, where);
      parts.added_by_content.emplace(t.content, t.id);
      parts.added_by_id.emplace(t.id, t.content);
      parts.vocab_size = std::max(parts.vocab_size, size_t(t.id) + 1);
      if (t.normalized) {
        // Matched against normalized text, so the pattern is normalized too.
        NormalizedText n(t.content, 0, uint32_t(t.content.size()));
        if (parts.normalizer) parts.normalizer->normalize(n);
        normalized_patterns.emplace_back(n.text());
        normalized.push_back(std::move(t));
      } else {
        raw_patterns.push_back(t.content);
        raw.push_back(std::move(t));
      }
    }
    parts.raw_added.build(std::move(raw), raw_patterns);
    parts.normalized_added.build(std::move(normalized), normalized_patterns);
  }

  // tokenizer_config.json is read on demand: it may hold integers too big for
  // the DOM parser (model_max_length 1e30), and we only need two tokens.
  static std::optional<std::string> read_config_token(const std::string& config_path, std::string_view key) {
    simdjson::padded_string json;
    if (auto err = simdjson::padded_string::load(config_path).get(json))
      throw TokenizerError(config_path + ": cannot be read: " + simdjson::error_message(err));
    simdjson::ondemand::parser parser;
    simdjson::ondemand::document doc;
    simdjson::ondemand::object obj;
    if (parser.iterate(json).get(doc) || doc.get_object().get(obj))
      throw TokenizerError(config_path + ": is not a JSON object");
    const std::string k(key);
    simdjson::ondemand::value token;
    auto err = obj.find_field_unordered(key).get(token);
    if (err == simdjson::NO_SUCH_FIELD) return std::nullopt;
    bool is_null = false;
    if (err || token.is_null().get(is_null)) throw TokenizerError(config_path + ": cannot be parsed near " + k);
    if (is_null) return std::nullopt;
    std::string_view s;
    if (token.get_string().get(s) == simdjson::SUCCESS) return std::string(s);
    simdjson::ondemand::object added;
    if (token.get_object().get(added) == simdjson::SUCCESS &&
        added.find_field_unordered("content").get_string().get(s) == simdjson::SUCCESS)
      return std::string(s);
    throw TokenizerError(config_path + ": " + k + " must be a string or {\"content\": ...}");
  }

  // The special tokens a post_processor adds around one sequence, as
  // tokenizers' processors do for add_special_tokens=True; "" or why not.
  std::string post_processor(element p, const std::string& where, SequenceSpecials& out) const {
    const std::string type = string_field(p, "type", where);
    // [token, id] of BertProcessing's and RobertaProcessing's cls and sep.
    auto pair_id = [&](std::string_view key) {
      array a = array_field(p, key, where);
      int64_t id;
      if (a.size() != 2 || a.at(1).get(id) != simdjson::SUCCESS)
        fail(where + "." + std::string(key) + " must be [token, id]");
      return static_cast<int32_t>(id);
    };
    if (type == "ByteLevel") return {};  // offsets only
    if (type == "BertProcessing" || type == "RobertaProcessing") {
      out.before.push_back(pair_id("cls"));
      out.after.push_back(pair_id("sep"));
      return {};
    }
    if (type == "Sequence") {
      std::size_t i = 0;
      for (element q : array_field(p, "processors", where)) {
        SequenceSpecials inner;
        std::string why = post_processor(q, where + ".processors[" + std::to_string(i++) + "]", inner);
        if (!why.empty()) return why;
        // Each processor wraps what the one before gave.
        out.before.insert(out.before.begin(), inner.before.begin(), inner.before.end());
        out.after.insert(out.after.end(), inner.after.begin(), inner.after.end());
      }
      return {};
    }
    if (type == "TemplateProcessing") {
      auto specials = field(p, "special_tokens");
      bool seen_sequence = false;
      std::size_t i = 0;
      for (element piece : array_field(p, "single", where)) {
        const std::string at = where + ".single[" + std::to_string(i++) + "]";
        if (field(piece, "Sequence")) {
          if (seen_sequence) fail(at + ": a second sequence in a single-sequence template");
          seen_sequence = true;
          continue;
        }
        auto special = field(piece, "SpecialToken");
        if (!special) fail(at + " must be a SpecialToken or the Sequence");
        const std::string name = string_field(*special, "id", at + ".SpecialToken");
        auto entry = specials ? field(*specials, name) : std::nullopt;
        if (!entry) fail(at + ": special token '" + name + "' is not in " + where + ".special_tokens");
        for (element id : array_field(*entry, "ids", where + ".special_tokens." + name)) {
          int64_t v;
          if (id.get(v) != simdjson::SUCCESS) fail(where + ".special_tokens." + name + ".ids must hold integers");
          (seen_sequence ? out.after : out.before).push_back(static_cast<int32_t>(v));
        }
      }
      if (!seen_sequence) fail(where + ".single has no Sequence");
      return {};
    }
    return path_ + ": " + where + ": post-processor '" + type +
           "' is not supported: records read as plain text (formats text and prompt_completion) need the tokens "
           "it adds; use a conversation format, or a tokenizer.json with a TemplateProcessing post_processor";
  }

  // tokenizer.json's padding.pad_id, read while the DOM is alive.
  std::optional<int32_t> padding_pad_id(element root) const {
    if (auto padding = field(root, "padding")) {
      if (auto id = field(*padding, "pad_id")) {
        int64_t v;
        if (id->get(v) == simdjson::SUCCESS && v >= 0 && v <= INT32_MAX) return int32_t(v);
      }
    }
    return std::nullopt;
  }

  // From tokenizer_config.json and special_tokens_map.json: eos_token, and
  // the pad id: their pad_token (a string or {"content": ...}), else
  // tokenizer.json's padding.pad_id, else 0.
  void config_tokens(std::optional<int32_t> padding_id, HfParts& parts) const {
    namespace fs = std::filesystem;
    const std::string config_path = (fs::path(path_).parent_path() / "tokenizer_config.json").string();
    std::optional<std::string> pad_token;
    if (fs::exists(config_path)) {
      pad_token = read_config_token(config_path, "pad_token");
      parts.eos_token = read_config_token(config_path, "eos_token");
    }
    // special_tokens_map.json beside them: its tokens win, as transformers
    // reads the two files.
    const std::string map_path = (fs::path(path_).parent_path() / "special_tokens_map.json").string();
    if (fs::exists(map_path)) {
      if (auto pad = read_config_token(map_path, "pad_token")) pad_token = pad;
      if (auto eos = read_config_token(map_path, "eos_token")) parts.eos_token = eos;
    }
    if (pad_token) {
      if (auto it = parts.added_by_content.find(*pad_token); it != parts.added_by_content.end()) {
        parts.pad_id = it->second;
      } else if (int32_t id = parts.model->token_to_id(*pad_token); id >= 0) {
        parts.pad_id = id;
      } else {
        throw TokenizerError(config_path + ": pad_token '" + *pad_token + "' is not a token of " + path_);
      }
      return;
    }
    if (padding_id) parts.pad_id = *padding_id;
  }

  HfParts load() const {
    HfParts parts;
    BpeConfig bpe;
    std::optional<int32_t> padding_id;
    {
      // The DOM takes several times the file (an 11 MB tokenizer.json needs
      // about 50 MB): it is freed before the BPE tables are built, so the
      // two never coexist.
      simdjson::dom::parser parser;
      element root;
      if (auto err = parser.load(path_).get(root))
        throw TokenizerError(path_ + ": cannot be read as JSON: " + simdjson::error_message(err));
      if (auto n = field(root, "normalizer")) parts.normalizer = normalizer(*n, "normalizer");
      bool byte_level = false;
      if (auto p = field(root, "pre_tokenizer")) parts.pre_tokenizer = pre_tokenizer(*p, "pre_tokenizer", byte_level);
      auto m = field(root, "model");
      if (!m) fail("model is missing");
      bpe = model_config(*m, byte_level);
      if (auto d = field(root, "decoder")) parts.decoder = decoder(*d, "decoder");
      added_tokens(root, parts);
      if (auto p = field(root, "post_processor"))
        parts.specials_error = post_processor(*p, "post_processor", parts.specials);
      padding_id = padding_pad_id(root);
    }
    parts.model = std::make_unique<BpeModel>(std::move(bpe), path_);
    parts.vocab_size = std::max(parts.vocab_size, parts.model->max_id_plus_one());
    config_tokens(padding_id, parts);
    return parts;
  }

 private:
  std::string path_;
};

}  // namespace

HfParts load_hf_parts(const std::string& path) { return Loader(path).load(); }

}  // namespace tokfeed::text::hf
