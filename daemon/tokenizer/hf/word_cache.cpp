#include "tokenizer/hf/word_cache.hpp"

#include "tokenizer/hf/bpe.hpp"

namespace tokfeed::text::hf {

namespace {

uint64_t load8(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

uint32_t load4(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// s (1..16 bytes) as two little-endian integers, zero-padded, with
// overlapping fixed-size loads instead of a copy of variable length.
void load_short(std::string_view s, uint64_t& lo, uint64_t& hi) {
  const char* p = s.data();
  const size_t n = s.size();
  if (n >= 8) {
    lo = load8(p);
    hi = n == 8 ? 0 : load8(p + n - 8) >> (8 * (16 - n));
  } else if (n >= 4) {
    lo = load4(p) | uint64_t(load4(p + n - 4)) << (8 * (n - 4));
    hi = 0;
  } else {
    const auto b = [&](size_t i) { return uint64_t(static_cast<unsigned char>(p[i])) << (8 * i); };
    lo = b(0) | b(n / 2) | b(n - 1);
    hi = 0;
  }
}

uint64_t mix(uint64_t lo, uint64_t hi, size_t n) {
  uint64_t h = (lo ^ 0x9E3779B97F4A7C15ull) * 0xff51afd7ed558ccdull;
  h ^= (hi + n) * 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 29;
  h *= 0xff51afd7ed558ccdull;
  return h ^ (h >> 32);
}

}  // namespace

bool WordCache::find(std::string_view word, Lookup& at, std::vector<WordPiece>& out) const {
  if (word.size() <= kInlineKey) {
    load_short(word, at.lo, at.hi);
    at.hash = mix(at.lo, at.hi, word.size());
  } else {
    at.lo = at.hi = 0;
    at.hash = hash_bytes(word);
  }
  at.slot = SIZE_MAX;
  if (slots_.empty()) return false;
  const size_t mask = slots_.size() - 1;
  for (size_t i = at.hash & mask;; i = (i + 1) & mask) {
    const Entry& e = slots_[i];
    if (e.key_len == kFree) {
      at.slot = i;
      return false;
    }
    if (!matches(e, word, at)) continue;
    if (e.n == 1) {
      out.push_back({int32_t(e.val), uint32_t(word.size())});
    } else {
      const WordPiece* v = values_.data() + e.val;
      out.insert(out.end(), v, v + e.n);
    }
    return true;
  }
}

void WordCache::grow() {
  constexpr Entry kEmpty{0, kFree, 0, 0, 0, 0};
  if (slots_.empty() || slots_.size() >= kMaxSlots) {
    slots_.assign(slots_.empty() ? kMinSlots : kMaxSlots, kEmpty);
    keys_.clear();
    values_.clear();
    count_ = 0;
    return;
  }
  // Double, keeping every entry: keys and values stay where they are.
  std::vector<Entry> old(slots_.size() * 2, kEmpty);
  old.swap(slots_);
  const size_t mask = slots_.size() - 1;
  for (const Entry& e : old) {
    if (e.key_len == kFree) continue;
    size_t i = e.hash & mask;
    while (slots_[i].key_len != kFree) i = (i + 1) & mask;
    slots_[i] = e;
  }
}

void WordCache::insert(std::string_view word, Lookup& at, const WordPiece* pieces, size_t n) {
  if (n == 0 || n > UINT16_MAX) return;                // nothing worth keeping (unknown chars without unk)
  if (n == 1 && pieces[0].len != word.size()) return;  // see below
  if (at.slot == SIZE_MAX || count_ + 1 > slots_.size() / 2) {
    grow();
    const size_t mask = slots_.size() - 1;
    at.slot = at.hash & mask;
    while (slots_[at.slot].key_len != kFree) at.slot = (at.slot + 1) & mask;
  }
  // A one-piece entry keeps the piece inline, its length being the word's
  // (a single piece shorter than its word, unknown chars dropped, is rare
  // and left out above).
  Entry e{at.hash, uint16_t(word.size()), uint16_t(n), 0, at.lo, at.hi};
  if (word.size() > kInlineKey) {
    e.lo = keys_.size();
    keys_.append(word);
  }
  if (n == 1) {
    e.val = uint32_t(pieces[0].id);
  } else {
    e.val = uint32_t(values_.size());
    values_.insert(values_.end(), pieces, pieces + n);
  }
  slots_[at.slot] = e;
  ++count_;
}

}  // namespace tokfeed::text::hf
