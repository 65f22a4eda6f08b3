#include "tokenizer/hf/word_cache.hpp"

#include <algorithm>

#include "tokenizer/hf/bpe.hpp"

namespace tokfeed::text::hf {

uint64_t WordCache::hash_long(std::string_view word) { return hash_bytes(word); }

void WordCache::grow() {
  constexpr Entry kEmpty{0, 0, {0, 0, 0}, 0, 0, {0, 0}};
  ++generation_;
  if (slots_.empty() || slots_.size() >= kMaxSlots) {
    slots_.assign(slots_.empty() ? kMinSlots : kMaxSlots, kEmpty);
    keys_.clear();
    values_.clear();
    std::fill(seen_.begin(), seen_.end(), 0);
    count_ = 0;
    return;
  }
  // Double, keeping every entry: keys and values stay where they are. An
  // entry's hash is not kept: it is computed again from its key.
  HugeVector<Entry> old(slots_.size() * 2, kEmpty);
  old.swap(slots_);
  const size_t mask = slots_.size() - 1;
  for (const Entry& e : old) {
    if (e.key_len == 0) continue;
    const uint64_t hash = e.key_len > kInlineKey ? e.lo : hash_of(e.lo, e.hi & ~kOutOfLine);
    size_t i = home(hash, mask);
    while (slots_[i].key_len != 0) i = (i + 1) & mask;
    slots_[i] = e;
  }
}

void WordCache::insert(std::string_view word, Lookup& at, const WordPiece* pieces, size_t n, bool second_miss) {
  if (n == 0) return;  // nothing worth keeping (unknown chars without unk)
  if (word.size() > kInlineKey || second_miss) {
    const uint64_t bit = at.hash >> (64 - kSeenBits);
    uint64_t& w = seen_[bit / 64];
    if ((w >> (bit % 64) & 1) == 0) {
      w |= uint64_t(1) << (bit % 64);
      return;
    }
  }
  if (at.slot == SIZE_MAX || count_ + 1 > slots_.size() / 2) {
    grow();
    const size_t mask = slots_.size() - 1;
    at.slot = home(at.hash, mask);
    while (slots_[at.slot].key_len != 0) at.slot = (at.slot + 1) & mask;
  }
  Entry e{at.lo, at.hi, {0, 0, 0}, uint8_t(word.size()), 0, {0, 0}};
  uint32_t covered = 0;
  bool empty_piece = false;
  for (size_t i = 0; i < n; ++i) covered += pieces[i].len, empty_piece |= pieces[i].len == 0;
  if (n <= 3 && word.size() <= kInlineKey && covered == word.size() && !empty_piece) {
    // Inline: the last piece's length is what the others leave.
    e.n = uint8_t(n);
    for (size_t i = 0; i < n; ++i) e.ids[i] = uint32_t(pieces[i].id);
    for (size_t i = 0; i < n && i < 2; ++i) e.lens[i] = uint8_t(pieces[i].len);
  } else {
    e.hi |= kOutOfLine;
    if (word.size() > kInlineKey) {
      e.ids[0] = uint32_t(keys_.size());
      keys_.append(word);
    }
    e.ids[1] = uint32_t(values_.size());
    e.ids[2] = uint32_t(n);
    values_.insert(values_.end(), pieces, pieces + n);
  }
  slots_[at.slot] = e;
  ++count_;
}

}  // namespace tokfeed::text::hf
