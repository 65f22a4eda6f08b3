// One ring in real shared memory, laid out as the daemon lays it out: a data
// segment (SegmentHeader, one RingHeader, the slots) and a consumer segment
// (ConsumerHeader, one ConsumerLine), both anonymous O_TMPFILE files in
// /dev/shm (shm::create_segment), mapped MAP_SHARED so a fork()ed child
// shares them.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tokfeed/shm/slot.hpp"

#include "tokfeed/shm/futex.hpp"
#include "tokfeed/shm/layout.hpp"
#include "tokfeed/shm/ring.hpp"
#include "tokfeed/shm/segment.hpp"

namespace tokfeed::shm::testing {

[[noreturn]] inline void die(const char* what) {
  std::fprintf(stderr, "FAIL: %s\n", what);
  std::fflush(stderr);
  std::_Exit(1);
}

struct TestRing {
  Mapping data;
  Mapping consumer;
  SegmentHeader* segment = nullptr;
  RingHeader* ring = nullptr;
  ConsumerLine* line = nullptr;
  char* slots = nullptr;
  uint32_t slots_per_ring = 0;
  uint64_t slot_bytes = 0;

  // Returns an error message, empty on success.
  std::string create(uint32_t depth, uint64_t bytes_per_slot, uint64_t end_seq, const std::string& dir = "/dev/shm") {
    slots_per_ring = depth;
    slot_bytes = align_up(bytes_per_slot, kCacheLine);
    SegmentGeometry g{1, depth, slot_bytes};
    if (auto e = create_segment(dir, g.data_bytes(), "test data", data)) return e.message;
    uint64_t cbytes = SegmentGeometry::consumer_bytes(1);
    if (auto e = create_segment(dir, cbytes, "test consumer", consumer)) return e.message;

    segment = data.at<SegmentHeader>(0);
    segment->magic = kDataMagic;
    segment->version_major = kVersionMajor;
    segment->version_minor = kVersionMinor;
    segment->header_bytes = sizeof(SegmentHeader);
    segment->segment_bytes = g.data_bytes();
    segment->ring_count = 1;
    segment->slots_per_ring = depth;
    segment->slot_bytes = slot_bytes;
    segment->rings_offset = g.rings_offset();
    segment->ring_stride = sizeof(RingHeader);
    segment->slots_offset = g.slots_offset();
    segment->heartbeat_ns.store(monotonic_ns(), std::memory_order_relaxed);
    ring = data.at<RingHeader>(g.rings_offset());
    ring->end_seq = end_seq;
    slots = data.at<char>(g.slots_offset());

    auto* c = consumer.at<ConsumerHeader>(0);
    c->magic = kConsumerMagic;
    c->version_major = kVersionMajor;
    c->version_minor = kVersionMinor;
    c->header_bytes = sizeof(ConsumerHeader);
    c->segment_bytes = cbytes;
    c->ring_count = 1;
    c->lines_offset = sizeof(ConsumerHeader);
    c->line_stride = sizeof(ConsumerLine);
    line = consumer.at<ConsumerLine>(sizeof(ConsumerHeader));
    // SYNC POINT: a reader's state.load(acquire) sees every field above.
    c->state.store(kStateReady, std::memory_order_release);
    segment->state.store(kStateReady, std::memory_order_release);
    return {};
  }

  RingProducer producer() const { return RingProducer(ring, line, slots, slots_per_ring, slot_bytes); }
  RingConsumer consumer_end() const { return RingConsumer(ring, line, slots, slots_per_ring, slot_bytes); }
};

// splitmix64: the stream every test payload is generated from, so a reader
// can recompute what a slot must hold from its seq alone.
inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// ------------------------------------------------------------ test payloads
//
// Slot `seq` of every test stream holds two tensors whose shapes and values
// are a pure function of (seq, max_data_words):
//   "data" int64 [n]      word i = mix64(seq) + i * kGolden
//   "ids"  int32 [r, c]   element j = uint32(mix64(~seq) ^ (j * kGolden >> 32))
// so the reader checks content against its own recomputation, never against
// anything the writer put in the header.
inline constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;

inline int64_t data_word(uint64_t base, int64_t i) { return static_cast<int64_t>(base + uint64_t(i) * kGolden); }
inline int32_t ids_elem(uint64_t base, int64_t j) {
  return static_cast<int32_t>(static_cast<uint32_t>(base ^ ((uint64_t(j) * kGolden) >> 32)));
}

struct PayloadShape {
  int64_t words;       // "data" elements
  int64_t rows, cols;  // "ids" shape
};

inline PayloadShape payload_shape(uint64_t seq, uint64_t max_data_words) {
  uint64_t r = mix64(seq ^ 0x5eedULL);
  PayloadShape p;
  // Mostly small (0..127 words), one slot in 64 anything up to the maximum.
  p.words = static_cast<int64_t>((r & 63) == 0 ? (r >> 8) % (max_data_words + 1) : (r >> 8) % 128);
  p.rows = static_cast<int64_t>((r >> 40) % 4);
  p.cols = static_cast<int64_t>((r >> 48) % 48);
  return p;
}

// Bytes a slot needs for the largest test payload.
inline uint64_t payload_slot_bytes(uint64_t max_data_words) {
  return align_up(sizeof(SlotHeader), kCacheLine) + align_up(max_data_words * 8, kCacheLine) +
         align_up(3 * 47 * 4, kCacheLine);
}

// Writes slot `seq` completely, header last; returns the tensor bytes.
inline uint64_t write_payload(char* slot, uint64_t slot_bytes, uint64_t seq, uint64_t session,
                              uint64_t max_data_words) {
  PayloadShape p = payload_shape(seq, max_data_words);
  SlotWriter w(slot, slot_bytes);
  auto* data = static_cast<int64_t*>(w.add("data", Dtype::kInt64, 1, p.words, 0));
  auto* ids = static_cast<int32_t*>(w.add("ids", Dtype::kInt32, 2, p.rows, p.cols));
  if (!data || !ids) die("slot too small for the test payload");
  const uint64_t db = mix64(seq), ib = mix64(~seq);
  for (int64_t i = 0; i < p.words; ++i) data[i] = data_word(db, i);
  for (int64_t j = 0; j < p.rows * p.cols; ++j) ids[j] = ids_elem(ib, j);
  w.finish(seq, session, seq, 0, static_cast<uint32_t>(seq), static_cast<uint32_t>(p.rows),
           static_cast<uint32_t>(p.cols), 0);
  return static_cast<uint64_t>(p.words) * 8 + static_cast<uint64_t>(p.rows * p.cols) * 4;
}

// Checks slot `seq` as a client would: copy the header out, validate it,
// check the header checksum, then the content against the recomputation.
// Returns nullptr when intact, else what is wrong.
inline const char* check_payload(const char* slot, uint64_t slot_bytes, uint64_t seq, uint64_t session,
                                 uint64_t max_data_words, bool verify_header_checksum = true) {
  SlotHeader h;
  std::memcpy(&h, slot, sizeof h);
  if (validate_slot_header(h, slot_bytes, seq, session) != SlotFault::kNone) return "header invalid";
  if (verify_header_checksum && slot_checksum(slot, h) != h.checksum) return "header checksum mismatch";
  PayloadShape p = payload_shape(seq, max_data_words);
  if (h.tensor_count != 2 || std::strcmp(h.tensors[0].name, "data") != 0 ||
      std::strcmp(h.tensors[1].name, "ids") != 0 || h.tensors[0].shape[0] != p.words ||
      h.tensors[1].shape[0] != p.rows || h.tensors[1].shape[1] != p.cols || h.stream_index != seq)
    return "tensor table differs from the expected one";
  const auto* data = reinterpret_cast<const int64_t*>(slot + h.tensors[0].offset);
  const auto* ids = reinterpret_cast<const int32_t*>(slot + h.tensors[1].offset);
  uint64_t diff = 0;  // content checksum: zero only when every word matches
  const uint64_t db = mix64(seq), ib = mix64(~seq);
  for (int64_t i = 0; i < p.words; ++i) diff |= static_cast<uint64_t>(data[i] ^ data_word(db, i));
  for (int64_t j = 0; j < p.rows * p.cols; ++j) diff |= static_cast<uint32_t>(ids[j] ^ ids_elem(ib, j));
  return diff == 0 ? nullptr : "content differs from what seq must hold";
}

// The client's out-of-order release: a batch may be freed in any order;
// the ring's tail advances over the released prefix only.
class ReleaseWindow {
 public:
  explicit ReleaseWindow(uint32_t slots, uint64_t tail = 0) : released_(slots, 0), tail_(tail) {}
  uint64_t tail() const { return tail_; }
  void reset(uint64_t tail) {
    std::fill(released_.begin(), released_.end(), 0);
    tail_ = tail;
  }
  // Returns true when the tail moved (the caller publishes it).
  bool release(uint64_t seq) {
    const uint64_t n = released_.size();
    if (seq < tail_ || seq - tail_ >= n) die("release outside the window");
    if (released_[seq % n]) die("slot released twice");
    released_[seq % n] = 1;
    uint64_t t = tail_;
    while (t - tail_ < n && released_[t % n]) released_[t++ % n] = 0;
    bool moved = t != tail_;
    tail_ = t;
    return moved;
  }

 private:
  std::vector<uint8_t> released_;
  uint64_t tail_;
};

}  // namespace tokfeed::shm::testing
