// The shared-memory layout: the one place that defines every byte the daemon's
// workers and the trainer's client share. docs/ring_format.md draws it.
//
// Two kinds of segment exist per job:
//   * the data segment (one per job): a SegmentHeader, one RingHeader per
//     (rank, worker) ring, then the slots. Workers write it; clients map it
//     read-only.
//   * the consumer segment (one per served rank): a ConsumerHeader and one
//     ConsumerLine per ring of that rank. Only that rank's client writes it;
//     workers read it.
//
// Rules (docs/ring_format.md, DESIGN.md contract 3):
//   * Data, not objects: every type here is trivially copyable, standard
//     layout, and holds offsets, never pointers.
//   * A header's `state` word is written last with release ordering; 0 means
//     "still initialising" and readers refuse it.
//   * A different major version is refused; a newer minor is accepted.
//   * No mutex or condition variable lives here. Waiting is a futex on a
//     32-bit word of a MAP_SHARED mapping, without FUTEX_PRIVATE_FLAG.
//   * The producer's hot line and the consumer's hot line are separate cache
//     lines, in separate segments.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace tokfeed::shm {

inline constexpr std::size_t kCacheLine = 64;

inline constexpr uint64_t kDataMagic = 0x0044454546'4b4f54ULL;      // "TOKFEED\0" little-endian
inline constexpr uint64_t kConsumerMagic = 0x004c544346'4b4f54ULL;  // "TOKFCTL\0"
inline constexpr uint32_t kSlotMagic = 0x544f4c53U;                 // "SLOT"
inline constexpr uint16_t kVersionMajor = 1;
inline constexpr uint16_t kVersionMinor = 1;
inline constexpr uint32_t kStateReady = 0x52454459U;  // "YDER": written last, with release
inline constexpr uint32_t kCountsKnown = 1;           // ConsumerHeader::counts_state

inline constexpr uint32_t kMaxTensors = 8;
inline constexpr uint32_t kTensorNameBytes = 32;

// ---------------------------------------------------------------- data segment

struct SegmentHeader {
  // line 0: immutable after `state` is kStateReady
  uint64_t magic;           // kDataMagic
  uint16_t version_major;   // kVersionMajor
  uint16_t version_minor;   // kVersionMinor
  uint32_t header_bytes;    // sizeof(SegmentHeader)
  uint64_t segment_bytes;   // total size of the segment
  uint32_t ring_count;      // ranks served x workers per rank
  uint32_t slots_per_ring;  // ring depth
  uint64_t slot_bytes;      // bytes per slot, a multiple of kCacheLine
  uint64_t rings_offset;    // offset of RingHeader[0]
  uint64_t ring_stride;     // sizeof(RingHeader)
  uint64_t slots_offset;    // offset of ring 0, slot 0; ring r slot s at
                            // slots_offset + (r * slots_per_ring + s) * slot_bytes
  // line 1
  std::atomic<uint32_t> state;  // 0 while initialising, then kStateReady (release)
  uint32_t daemon_pid;
  uint64_t instance_id;  // random per daemon start
  uint8_t reserved1[kCacheLine - 16];
  // line 2: written by the supervisor only
  std::atomic<uint64_t> heartbeat_ns;  // CLOCK_MONOTONIC of the last beat
  uint8_t reserved2[kCacheLine - 8];
};

// One SPSC ring, as the producing worker sees it. The consumer's side lives in
// the consumer segment (ConsumerLine).
struct alignas(kCacheLine) RingHeader {
  // line 0: producer hot line
  std::atomic<uint64_t> head;              // absolute seq of the next slot to publish
  std::atomic<uint64_t> session;           // the consumer session `head` counts in
  std::atomic<uint32_t> head_futex;        // bumped on every publish and session switch
  std::atomic<uint32_t> producer_waiting;  // 1 while the producer sleeps on tail_futex
  std::atomic<uint32_t> generation;        // bumped by every (re)started worker
  std::atomic<uint32_t> producer_pid;
  uint8_t reserved0[kCacheLine - 32];
  // line 1: written by the supervisor only. rank and worker are set before
  // the segment is marked ready. end_seq is set by plan_rank after that, and
  // again on a replan, always while none of the ring's workers runs: a worker
  // reads it after its fork, which orders the write before its reads. The
  // client never reads it.
  uint32_t rank;
  uint32_t worker;
  uint64_t end_seq;  // seqs [0, end_seq) make up the whole stream
  uint8_t reserved1[kCacheLine - 16];
  // line 2..3: producer statistics (relaxed; read by the supervisor for status)
  std::atomic<uint64_t> batches;
  std::atomic<uint64_t> samples;
  std::atomic<uint64_t> tokens;       // rows x L, padding included
  std::atomic<uint64_t> real_tokens;  // attention_mask ones
  std::atomic<uint64_t> truncated;
  std::atomic<uint64_t> dropped;
  std::atomic<uint64_t> all_masked;
  std::atomic<uint64_t> build_ns;
  std::atomic<uint64_t> building_index;   // stream index being built + 1, 0 when idle
  std::atomic<uint64_t> building_record;  // valid record being encoded + 1, 0 when none
  uint8_t reserved2[2 * kCacheLine - 80];
};

enum class Dtype : uint32_t { kInt32 = 1, kInt64 = 2 };

inline constexpr uint32_t dtype_bytes(Dtype d) { return d == Dtype::kInt64 ? 8 : 4; }

struct TensorDesc {
  char name[kTensorNameBytes];  // NUL-padded
  Dtype dtype;
  uint32_t ndim;  // 0, 1 or 2
  int64_t shape[2];
  uint64_t offset;  // from the start of the slot, 64-byte aligned
  uint64_t nbytes;  // == product(shape) * dtype_bytes(dtype)
};

// Written by the producer before it publishes the slot (head release).
struct alignas(kCacheLine) SlotHeader {
  uint32_t magic;         // kSlotMagic
  uint32_t header_bytes;  // sizeof(SlotHeader)
  uint64_t seq;           // absolute ring seq
  uint64_t session;       // consumer session it was built for
  uint64_t stream_index;  // i = epoch * batches_per_epoch + step
  uint32_t epoch;
  uint32_t step;
  uint32_t rows;
  uint32_t seq_len;  // L
  uint32_t tensor_count;
  uint32_t flags;
  uint64_t payload_bytes;  // bytes after the header that the tensors use
  uint64_t checksum;       // XXH3-64 of those payload bytes
  uint64_t real_tokens;
  uint8_t reserved[8];
  TensorDesc tensors[kMaxTensors];
};

// ------------------------------------------------------------ consumer segment

struct ConsumerHeader {
  // line 0
  uint64_t magic;  // kConsumerMagic
  uint16_t version_major;
  uint16_t version_minor;
  uint32_t header_bytes;  // sizeof(ConsumerHeader)
  uint64_t segment_bytes;
  uint32_t rank;
  uint32_t ring_count;          // workers of this rank
  uint64_t lines_offset;        // offset of ConsumerLine[0]
  uint64_t line_stride;         // sizeof(ConsumerLine)
  std::atomic<uint32_t> state;  // 0, then kStateReady
  // Batch counts that arrive after attach (docs/ring_format.md): the
  // supervisor writes counts_entries uint64 counts at counts_offset, then
  // sets counts_state to kCountsKnown (release). 0 while unknown.
  std::atomic<uint32_t> counts_state;
  uint32_t counts_offset;
  uint32_t counts_entries;
  // line 1..2: written by the client (relaxed), read for status and metrics
  std::atomic<uint64_t> next_index;  // stream index of the next batch the client returns
  std::atomic<uint64_t> consumed;    // batches returned by next()
  std::atomic<uint64_t> wait_ns;     // total time next() waited for data
  std::atomic<uint64_t> busy_ns;     // total time between next() calls
  std::atomic<uint32_t> client_pid;
  std::atomic<uint32_t> attached;       // 1 while a client is attached
  std::atomic<uint64_t> wait_hist[10];  // next() wait: <1us <10us <100us <1ms <10ms <100ms <1s <10s <100s more
  uint8_t reserved1[2 * kCacheLine - 120];
};

// The consumer's side of one ring.
struct alignas(kCacheLine) ConsumerLine {
  std::atomic<uint64_t> tail;              // every seq below `tail` is released
  std::atomic<uint64_t> session;           // set by the client when it (re)positions the stream
  std::atomic<uint32_t> tail_futex;        // bumped on every tail advance and session switch
  std::atomic<uint32_t> consumer_waiting;  // 1 while the consumer sleeps on head_futex
  uint8_t reserved[kCacheLine - 24];
};

// ------------------------------------------------------------ compile-time checks

static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(sizeof(std::atomic<uint64_t>) == 8 && sizeof(std::atomic<uint32_t>) == 4);

template <class T>
inline constexpr bool kSharedSafe = std::is_standard_layout_v<T>&& std::is_trivially_destructible_v<T>;
static_assert(kSharedSafe<SegmentHeader> && kSharedSafe<RingHeader> && kSharedSafe<ConsumerHeader> &&
              kSharedSafe<ConsumerLine>);
static_assert(std::is_trivially_copyable_v<SlotHeader> && std::is_trivially_copyable_v<TensorDesc>);

static_assert(sizeof(SegmentHeader) == 3 * kCacheLine);
static_assert(offsetof(SegmentHeader, state) == kCacheLine);
static_assert(offsetof(SegmentHeader, heartbeat_ns) == 2 * kCacheLine);
static_assert(sizeof(RingHeader) == 4 * kCacheLine);
static_assert(offsetof(RingHeader, rank) == kCacheLine);
static_assert(offsetof(RingHeader, batches) == 2 * kCacheLine);
static_assert(sizeof(TensorDesc) == 72);
static_assert(sizeof(SlotHeader) == 704);
static_assert(offsetof(SlotHeader, tensors) == 88);
static_assert(sizeof(ConsumerHeader) == 3 * kCacheLine);
static_assert(offsetof(ConsumerHeader, next_index) == kCacheLine);
static_assert(sizeof(ConsumerLine) == kCacheLine);

// Every offset docs/ring_format.md draws, field by field. Changing one is a
// major-version change of the layout.
static_assert(offsetof(SegmentHeader, magic) == 0 && offsetof(SegmentHeader, version_major) == 8 &&
              offsetof(SegmentHeader, version_minor) == 10 && offsetof(SegmentHeader, header_bytes) == 12 &&
              offsetof(SegmentHeader, segment_bytes) == 16 && offsetof(SegmentHeader, ring_count) == 24 &&
              offsetof(SegmentHeader, slots_per_ring) == 28 && offsetof(SegmentHeader, slot_bytes) == 32 &&
              offsetof(SegmentHeader, rings_offset) == 40 && offsetof(SegmentHeader, ring_stride) == 48 &&
              offsetof(SegmentHeader, slots_offset) == 56 && offsetof(SegmentHeader, daemon_pid) == 68 &&
              offsetof(SegmentHeader, instance_id) == 72 && offsetof(SegmentHeader, reserved1) == 80 &&
              offsetof(SegmentHeader, reserved2) == 136);
static_assert(alignof(RingHeader) == kCacheLine && offsetof(RingHeader, head) == 0 &&
              offsetof(RingHeader, session) == 8 && offsetof(RingHeader, head_futex) == 16 &&
              offsetof(RingHeader, producer_waiting) == 20 && offsetof(RingHeader, generation) == 24 &&
              offsetof(RingHeader, producer_pid) == 28 && offsetof(RingHeader, reserved0) == 32 &&
              offsetof(RingHeader, worker) == 68 && offsetof(RingHeader, end_seq) == 72 &&
              offsetof(RingHeader, reserved1) == 80 && offsetof(RingHeader, samples) == 136 &&
              offsetof(RingHeader, tokens) == 144 && offsetof(RingHeader, real_tokens) == 152 &&
              offsetof(RingHeader, truncated) == 160 && offsetof(RingHeader, dropped) == 168 &&
              offsetof(RingHeader, all_masked) == 176 && offsetof(RingHeader, build_ns) == 184 &&
              offsetof(RingHeader, building_index) == 192 && offsetof(RingHeader, building_record) == 200 &&
              offsetof(RingHeader, reserved2) == 208);
static_assert(offsetof(TensorDesc, name) == 0 && offsetof(TensorDesc, dtype) == 32 &&
              offsetof(TensorDesc, ndim) == 36 && offsetof(TensorDesc, shape) == 40 &&
              offsetof(TensorDesc, offset) == 56 && offsetof(TensorDesc, nbytes) == 64 && sizeof(Dtype) == 4);
static_assert(alignof(SlotHeader) == kCacheLine && offsetof(SlotHeader, magic) == 0 &&
              offsetof(SlotHeader, header_bytes) == 4 && offsetof(SlotHeader, seq) == 8 &&
              offsetof(SlotHeader, session) == 16 && offsetof(SlotHeader, stream_index) == 24 &&
              offsetof(SlotHeader, epoch) == 32 && offsetof(SlotHeader, step) == 36 &&
              offsetof(SlotHeader, rows) == 40 && offsetof(SlotHeader, seq_len) == 44 &&
              offsetof(SlotHeader, tensor_count) == 48 && offsetof(SlotHeader, flags) == 52 &&
              offsetof(SlotHeader, payload_bytes) == 56 && offsetof(SlotHeader, checksum) == 64 &&
              offsetof(SlotHeader, real_tokens) == 72 && offsetof(SlotHeader, reserved) == 80 &&
              88 + kMaxTensors * sizeof(TensorDesc) == 664);  // 40 bytes of tail padding to 704
static_assert(offsetof(ConsumerHeader, magic) == 0 && offsetof(ConsumerHeader, version_major) == 8 &&
              offsetof(ConsumerHeader, version_minor) == 10 && offsetof(ConsumerHeader, header_bytes) == 12 &&
              offsetof(ConsumerHeader, segment_bytes) == 16 && offsetof(ConsumerHeader, rank) == 24 &&
              offsetof(ConsumerHeader, ring_count) == 28 && offsetof(ConsumerHeader, lines_offset) == 32 &&
              offsetof(ConsumerHeader, line_stride) == 40 && offsetof(ConsumerHeader, state) == 48 &&
              offsetof(ConsumerHeader, counts_state) == 52 && offsetof(ConsumerHeader, counts_entries) == 60 &&
              offsetof(ConsumerHeader, consumed) == 72 && offsetof(ConsumerHeader, wait_ns) == 80 &&
              offsetof(ConsumerHeader, busy_ns) == 88 && offsetof(ConsumerHeader, client_pid) == 96 &&
              offsetof(ConsumerHeader, attached) == 100 && offsetof(ConsumerHeader, wait_hist) == 104 &&
              offsetof(ConsumerHeader, reserved1) == 184);
static_assert(alignof(ConsumerLine) == kCacheLine && offsetof(ConsumerLine, tail) == 0 &&
              offsetof(ConsumerLine, session) == 8 && offsetof(ConsumerLine, tail_futex) == 16 &&
              offsetof(ConsumerLine, consumer_waiting) == 20 && offsetof(ConsumerLine, reserved) == 24);
// The futex words are naturally aligned 32-bit words, as FUTEX_WAIT requires.
static_assert(offsetof(RingHeader, head_futex) % 4 == 0 && offsetof(ConsumerLine, tail_futex) % 4 == 0);

// The sizes a job's segments need.
struct SegmentGeometry {
  uint32_t ring_count;
  uint32_t slots_per_ring;
  uint64_t slot_bytes;  // rounded up to kCacheLine

  constexpr uint64_t rings_offset() const { return sizeof(SegmentHeader); }
  constexpr uint64_t slots_offset() const {
    uint64_t end = rings_offset() + uint64_t{ring_count} * sizeof(RingHeader);
    return (end + 4095) / 4096 * 4096;
  }
  constexpr uint64_t data_bytes() const {
    uint64_t end = slots_offset() + uint64_t{ring_count} * slots_per_ring * slot_bytes;
    return (end + 4095) / 4096 * 4096;
  }
  // Where a consumer segment of `rings` lines keeps its batch counts.
  static constexpr uint64_t counts_offset(uint32_t rings) {
    return sizeof(ConsumerHeader) + uint64_t{rings} * sizeof(ConsumerLine);
  }
  static constexpr uint64_t consumer_bytes(uint32_t rings, uint64_t epochs = 1) {
    uint64_t end = counts_offset(rings) + epochs * 8;
    return (end + 4095) / 4096 * 4096;
  }
};

inline constexpr uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

}  // namespace tokfeed::shm
