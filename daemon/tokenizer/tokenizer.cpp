#include "tokenizer/tokenizer.hpp"

#include "tokenizer/hf_tokenizer.hpp"
#include "tokenizer/special_split.hpp"
#include "tokenizer/sp_tokenizer.hpp"

namespace tokfeed::text {

SpecialSplitter::SpecialSplitter(std::vector<std::pair<std::string, int32_t>> specials)
    : specials_(std::move(specials)) {
  std::erase_if(specials_, [](const auto& s) { return s.first.empty(); });
  for (const auto& s : specials_) first_byte_[static_cast<unsigned char>(s.first[0])] = true;
}

int SpecialSplitter::longest_at(std::string_view text, std::size_t i) const {
  int best = -1;
  std::size_t best_len = 0;
  for (std::size_t k = 0; k < specials_.size(); ++k) {
    const std::string& s = specials_[k].first;
    if (s.size() > best_len && text.compare(i, s.size(), s) == 0) {
      best = static_cast<int>(k);
      best_len = s.size();
    }
  }
  return best;
}

bool SpecialSplitter::find(std::string_view s, int32_t& id) const {
  for (const auto& [text, i] : specials_) {
    if (text == s) {
      id = i;
      return true;
    }
  }
  return false;
}

void Tokenizer::encode_ids(std::string_view text, std::vector<int32_t>& out) const {
  std::vector<Token> tokens;
  encode(text, tokens);
  for (const Token& t : tokens) out.push_back(t.id);
}

const SequenceSpecials& Tokenizer::sequence_specials() const {
  static const SequenceSpecials none;
  return none;
}

std::unique_ptr<Tokenizer> load_tokenizer(std::string_view type, const std::string& path) {
  if (type == "sentencepiece") return load_sentencepiece_tokenizer(path);
  if (type == "hf") return load_hf_tokenizer(path);
  throw TokenizerError("unknown tokenizer type '" + std::string(type) + "': expected \"sentencepiece\" or \"hf\"");
}

}  // namespace tokfeed::text
