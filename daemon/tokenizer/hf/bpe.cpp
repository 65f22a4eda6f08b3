#include "tokenizer/hf/bpe.hpp"

#include <algorithm>
#include <cstring>

#include "tokenizer/hf/unicode.hpp"
#include "tokenizer/tokenizer.hpp"

namespace tokfeed::text::hf {

uint64_t hash_bytes(std::string_view s) {
  // A small multiply-xorshift hash over 8-byte chunks; words are short.
  const uint64_t m = 0xff51afd7ed558ccdull;
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (s.size() * m);
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t v;
    std::memcpy(&v, s.data() + i, 8);
    h = (h ^ v) * m;
    h ^= h >> 32;
  }
  // The last 8 bytes (overlapping the chunks) rather than a copy of variable length.
  uint64_t tail = 0;
  if (s.size() >= 8) std::memcpy(&tail, s.data() + s.size() - 8, 8);
  else
    for (size_t k = 0; k < s.size(); ++k) tail |= uint64_t(static_cast<unsigned char>(s[k])) << (8 * k);
  h = (h ^ tail) * m;
  h ^= h >> 29;
  h *= 0xc4ceb9fe1a85ec53ull;
  return h ^ (h >> 32);
}

size_t StringHash::operator()(std::string_view s) const noexcept { return size_t(hash_bytes(s)); }

// ---- MergeTable ----

void MergeTable::build(const std::vector<std::pair<uint64_t, Merge>>& entries) {
  size_t cap = 16;
  shift_ = 60;
  while (cap < entries.size() * 2) cap <<= 1, --shift_;
  slots_.assign(cap, Slot{kEmpty, Merge{0, 0}});
  mask_ = cap - 1;
  size_t bits = 64;
  filter_shift_ = 58;
  while (bits < entries.size() * 16) bits <<= 1, --filter_shift_;
  filter_.assign(bits / 64, 0);
  for (const auto& [key, merge] : entries) {
    const uint64_t bit = filter_bit(key);
    filter_[bit / 64] |= uint64_t(1) << (bit % 64);
    uint64_t i = slot(key);
    while (slots_[i].key != kEmpty && slots_[i].key != key) i = (i + 1) & mask_;
    // A repeated merge keeps its last rank, as HF's map does.
    slots_[i] = Slot{key, merge};
  }
}

// ---- BpeModel ----

namespace {

// The bytes a byte-level token stands for; false if a char is outside the
// alphabet. Every char of the alphabet is below U+0200: one or two bytes of
// UTF-8 (decoded as decode_utf8 does; anything else is outside).
bool byte_level_to_raw(std::string_view token, std::string& raw) {
  raw.clear();
  const auto* s = reinterpret_cast<const unsigned char*>(token.data());
  for (size_t i = 0; i < token.size();) {
    char32_t cp = s[i];
    if (cp >= 0x80) {
      if (cp < 0xC2 || cp > 0xDF || i + 1 == token.size() || (s[i + 1] & 0xC0) != 0x80) return false;
      cp = (cp & 0x1F) << 6 | (s[i + 1] & 0x3F);
      ++i;
    }
    const int b = unicode_to_byte(cp);
    if (b < 0) return false;
    raw.push_back(char(b));
    ++i;
  }
  return true;
}

}  // namespace

BpeModel::BpeModel(BpeConfig config, const std::string& where)
    : byte_level_(config.byte_level),
      byte_fallback_(config.byte_fallback),
      ignore_merges_(config.ignore_merges),
      fuse_unk_(config.fuse_unk) {
  int32_t max_id = -1;
  for (const auto& [token, id] : config.vocab) {
    if (id < 0) throw TokenizerError(where + ": model.vocab has a negative id for '" + token + "'");
    max_id = std::max(max_id, id);
  }
  id_to_token_.resize(size_t(max_id) + 1);  // max_id >= -1: 0 entries for an empty vocabulary
  id_valid_.assign(size_t(max_id) + 1, false);
  std::fill(std::begin(byte_unit_id_), std::end(byte_unit_id_), -1);
  std::fill(std::begin(byte_fallback_id_), std::end(byte_fallback_id_), -1);
  raw_vocab_.reserve(config.vocab.size());
  // Each byte-level token's bytes, by id (empty: none), for the linear BPE.
  std::vector<std::string> raw(byte_level_ ? id_to_token_.size() : 0);
  for (const auto& [token, id] : config.vocab) {
    id_to_token_[size_t(id)] = token;
    id_valid_[size_t(id)] = true;
    if (byte_level_) {
      // Tokens outside the byte-level alphabet can never be produced from bytes.
      if (byte_level_to_raw(token, raw[size_t(id)])) raw_vocab_.emplace(raw[size_t(id)], id);
      else raw[size_t(id)].clear();
    } else {
      raw_vocab_.emplace(token, id);
    }
  }
  for (const auto& [bytes, id] : raw_vocab_) raw_index_.add(bytes, id);
  for (int b = 0; b < 128; ++b) {
    auto it = raw_vocab_.find(std::string_view(reinterpret_cast<const char*>(&b), 1));
    ascii_unit_id_[b] = it != raw_vocab_.end() ? it->second : -1;
  }
  if (byte_level_) {
    for (int b = 0; b < 256; ++b) {
      auto it = raw_vocab_.find(std::string_view(reinterpret_cast<const char*>(&b), 1));
      if (it != raw_vocab_.end()) byte_unit_id_[b] = it->second;
    }
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    auto it = config.vocab.find(std::string_view(name));
    if (it != config.vocab.end()) byte_fallback_id_[b] = it->second;
  }
  if (!config.unk_token.empty()) {
    auto it = config.vocab.find(config.unk_token);
    if (it == config.vocab.end())
      throw TokenizerError(where + ": model.unk_token '" + config.unk_token + "' is not in model.vocab");
    unk_id_ = it->second;
  }

  std::vector<std::pair<uint64_t, Merge>> entries;
  entries.reserve(config.merges.size());
  for (size_t rank = 0; rank < config.merges.size(); ++rank) {
    const auto& [a, b] = config.merges[rank];
    auto ia = config.vocab.find(a), ib = config.vocab.find(b), inew = config.vocab.find(a + b);
    if (ia == config.vocab.end() || ib == config.vocab.end())
      throw TokenizerError(where + ": model.merges[" + std::to_string(rank) + "] '" + a + " " + b +
                           "' uses a token that is not in model.vocab");
    if (inew == config.vocab.end())
      throw TokenizerError(where + ": model.merges[" + std::to_string(rank) + "] makes '" + a + b +
                           "', which is not in model.vocab");
    uint64_t key = uint64_t(uint32_t(ia->second)) << 32 | uint32_t(ib->second);
    entries.push_back(
        {key, Merge{config.merge_ranks.empty() ? int32_t(rank) : config.merge_ranks[rank], inew->second}});
    merge_pairs_.push_back({ia->second, ib->second});
  }
  merges_.build(entries);
  init_linear(raw);

  static const std::string kMetaspace = "\u2581";
  words_end_before_metaspace_ = !byte_level_ && !ignore_merges_ && raw_vocab_.count(kMetaspace) > 0;
  for (const auto& [a, b] : config.merges) {
    if (!words_end_before_metaspace_) break;
    if (b.starts_with(kMetaspace) && !a.ends_with(kMetaspace)) words_end_before_metaspace_ = false;
  }
}

void BpeModel::init_linear(const std::vector<std::string>& raw) {
  std::string why;
  if (!byte_level_) why = "the vocabulary is not byte-level";
  if (why.empty()) {
    std::vector<LinearBpe::MergeSpec> specs(merge_pairs_.size());
    for (size_t rank = 0; rank < merge_pairs_.size() && why.empty(); ++rank) {
      const auto [a, b] = merge_pairs_[rank];
      const Merge* m = merges_.find(a, b);
      // Each pair ranked by its (last) place in the list: no two pairs share
      // a rank (the short merge loop orders merges by rank alone).
      if (m->rank < int32_t(rank) || size_t(m->rank) >= merge_pairs_.size() ||
          merge_pairs_[size_t(m->rank)] != merge_pairs_[rank])
        why = "merge ranks are not the merges' places in the list";
      // A pair listed twice keeps its last rank.
      specs[rank] = m->rank == int32_t(rank) ? LinearBpe::MergeSpec{a, b, m->new_id} : LinearBpe::MergeSpec{-1, -1, -1};
    }
    auto heap = [this](std::string_view bytes, std::vector<WordPiece>& out, int32_t(&last)[2]) {
      merge_word(bytes, out, &last);
    };
    if (why.empty()) linear_ = LinearBpe::build(raw, specs, merges_, byte_unit_id_, heap, why);
    if (linear_) cuts_.build(raw, [&](int32_t id) { return linear_->reachable(id); });
  }
  merge_pairs_.clear();
  merge_pairs_.shrink_to_fit();
  // The words whose BPE is one token, found with no merge: under
  // ignore_merges every token (HF looks the word up first), else each
  // reachable one (BPE of its own bytes is itself) of up to kInlineKey
  // bytes. Nearly half the words the cache misses are one token; few of
  // the longer ones are (runs of Han chars), and their lookup would cost
  // a hash of the word.
  for (const auto& [bytes, id] : raw_vocab_) {
    if (ignore_merges_ || (linear_ && linear_->reachable(id) && bytes.size() <= WordCache::kInlineKey))
      whole_words_.add(bytes, id);
    if (ignore_merges_ && (!linear_ || !linear_->reachable(id))) not_bpe_words_.add(bytes, id);
  }
  whole_words_.finish();
  merge_algorithm_ = !linear_ ? "heap: " + why
                     : linear_->irregular_tokens() == 0
                         ? "linear"
                         : "linear (" + std::to_string(linear_->irregular_tokens()) + " irregular tokens)";
}

int32_t BpeModel::token_to_id(std::string_view token) const {
  std::string raw;
  if (byte_level_) {
    if (!byte_level_to_raw(token, raw)) {
      // Not producible from bytes, but it may still be a vocab entry.
      for (size_t id = 0; id < id_to_token_.size(); ++id)
        if (id_valid_[id] && id_to_token_[id] == token) return int32_t(id);
      return -1;
    }
    token = raw;
  }
  auto it = raw_vocab_.find(token);
  return it == raw_vocab_.end() ? -1 : it->second;
}

const std::vector<WordPiece>& BpeModel::merge_and_keep(std::string_view word, WordCache::Lookup at,
                                                       bool cacheable) const {
  scratch_.clear();
  parts_kept_ = false;
  const bool cut = merge_uncached(word, cacheable ? WordCache::Key{at.lo, at.hi, at.hash} : WordCache::Key{}, scratch_);
  if (cacheable) {
    // Parts kept since the lookup may have taken its slot or grown the table.
    if (parts_kept_ && cache_.find(word, at, [](int32_t, uint32_t) {})) return scratch_;
    // A word cut in parts (a run of Han, kana or Hangul) is kept the second
    // time it misses, as a long word: most occur once, and their parts are
    // in the cache.
    cache_.insert(word, at, scratch_.data(), scratch_.size(), cut);
  }
  return scratch_;
}

bool BpeModel::merge_uncached(std::string_view word, const WordCache::Key& key, std::vector<WordPiece>& out) const {
  if (const int32_t id = whole_words_.find(word, key); id >= 0) {
    out.push_back({id, uint32_t(word.size())});
    return false;
  }
  if (!linear_) {
    merge_word(word, out);
    return false;
  }
  if (word.size() >= 4 && cuts_.for_each_part(word, [&](size_t b, size_t e, int32_t id) {
        // One char that is a reachable token is its own BPE, which
        // ignore_merges leaves as it is.
        if (id >= 0) out.push_back({id, uint32_t(e - b)});
        else merge_part(word.substr(b, e - b), out);
      }))
    return true;
  merge_linear(word, out);
  return false;
}

void BpeModel::merge_linear(std::string_view word, std::vector<WordPiece>& out) const {
  // Short words (most of those the cache misses): the merges one at a time,
  // whose lookups miss the cache less than the search's trie walk does.
  if (word.size() <= LinearBpe::kShortMax) {
    linear_->encode_short(word, [&](int32_t id, uint32_t len) { out.push_back({id, len}); });
    return;
  }
  if (!linear_->encode(word, [&](int32_t id, uint32_t len) { out.push_back({id, len}); })) merge_word(word, out);
}

void BpeModel::merge_part(std::string_view part, std::vector<WordPiece>& out) const {
  // Under ignore_merges a part that is a token is not the word: its BPE is
  // not what the cache holds for it as a word.
  if (part.size() > WordCache::kMaxWordLen || (ignore_merges_ && not_bpe_words_.find(part) >= 0)) {
    merge_linear(part, out);
    return;
  }
  WordCache::Lookup at;
  if (cache_.find(part, at, [&](int32_t id, uint32_t len) { out.push_back({id, len}); })) return;
  const size_t from = out.size();
  merge_linear(part, out);
  cache_.insert(part, at, out.data() + from, out.size() - from);
  parts_kept_ = true;
}

void BpeModel::merge_word(std::string_view word, std::vector<WordPiece>& out, int32_t (*last)[2]) const {
  symbols_.clear();
  auto push = [&](int32_t id, uint32_t len) {
    symbols_.push_back(Symbol{id, int32_t(symbols_.size()) - 1, -1, len});
    if (symbols_.size() > 1) symbols_[symbols_.size() - 2].next = int32_t(symbols_.size()) - 1;
  };
  // Unknown units, as HF: a pending unk is emitted before the next known
  // unit (not before byte-fallback pieces), and fused runs add up.
  int32_t unk_len = -1;
  auto flush_unk = [&] {
    if (unk_len >= 0) push(unk_id_, uint32_t(unk_len));
    unk_len = -1;
  };
  std::string mapped;
  for (size_t i = 0; i < word.size();) {
    uint32_t len;
    int32_t id = -1;
    std::string_view unit;
    if (byte_level_) {
      len = 1;
      id = byte_unit_id_[static_cast<unsigned char>(word[i])];
      if (id < 0) {
        mapped.clear();
        append_utf8(mapped, byte_to_unicode()[static_cast<unsigned char>(word[i])]);
        unit = mapped;
      }
    } else {
      const auto b = static_cast<unsigned char>(word[i]);
      if (b < 0x80) {
        len = 1;
        unit = word.substr(i, 1);
        id = ascii_unit_id_[b];
      } else {
        len = utf8_char_len(word, i);
        unit = word.substr(i, len);
        id = raw_index_.find(unit);
      }
    }
    if (id >= 0) {
      flush_unk();
      push(id, len);
    } else {
      bool done = false;
      if (byte_fallback_) {
        bool all = true;
        for (char c : unit) all &= byte_fallback_id_[static_cast<unsigned char>(c)] >= 0;
        if (all) {
          // One piece per byte, each covering one byte of the word (the
          // byte-level case, where a unit is one byte, gives the byte to the first).
          for (size_t k = 0; k < unit.size(); ++k)
            push(byte_fallback_id_[static_cast<unsigned char>(unit[k])], k < len ? 1 : 0);
          done = true;
        }
      }
      if (!done && unk_id_ >= 0) {
        if (unk_len >= 0 && fuse_unk_) {
          unk_len += int32_t(len);
        } else {
          flush_unk();
          unk_len = int32_t(len);
        }
      }
    }
    i += len;
  }
  flush_unk();

  // Merge the lowest-ranked pair first, the leftmost among equals, as HF's
  // heap does (including its check that an entry is still current).
  auto lower_priority = [](const Candidate& a, const Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  };
  heap_.clear();
  if (last) (*last)[0] = (*last)[1] = -1;
  for (size_t i = 0; i + 1 < symbols_.size(); ++i) {
    if (const Merge* m = merges_.find(symbols_[i].id, symbols_[i + 1].id))
      heap_.push_back({m->rank, int32_t(i), m->new_id});
  }
  std::make_heap(heap_.begin(), heap_.end(), lower_priority);
  while (!heap_.empty()) {
    std::pop_heap(heap_.begin(), heap_.end(), lower_priority);
    Candidate top = heap_.back();
    heap_.pop_back();
    Symbol& s = symbols_[size_t(top.pos)];
    if (s.len == 0 && s.id < 0) continue;
    if (s.next < 0) continue;
    Symbol& right = symbols_[size_t(s.next)];
    const Merge* current = merges_.find(s.id, right.id);
    if (current == nullptr || current->new_id != top.new_id) continue;
    if (last) {
      (*last)[0] = s.id;
      (*last)[1] = right.id;
    }
    s.id = top.new_id;
    s.len += right.len;
    s.next = right.next;
    right.id = -1;
    right.len = 0;
    if (s.next >= 0) symbols_[size_t(s.next)].prev = top.pos;
    if (s.prev >= 0) {
      if (const Merge* m = merges_.find(symbols_[size_t(s.prev)].id, s.id)) {
        heap_.push_back({m->rank, s.prev, m->new_id});
        std::push_heap(heap_.begin(), heap_.end(), lower_priority);
      }
    }
    if (s.next >= 0) {
      if (const Merge* m = merges_.find(s.id, symbols_[size_t(s.next)].id)) {
        heap_.push_back({m->rank, top.pos, m->new_id});
        std::push_heap(heap_.begin(), heap_.end(), lower_priority);
      }
    }
  }
  for (int32_t i = symbols_.empty() ? -1 : 0; i >= 0; i = symbols_[size_t(i)].next)
    out.push_back({symbols_[size_t(i)].id, symbols_[size_t(i)].len});
}

}  // namespace tokfeed::text::hf
