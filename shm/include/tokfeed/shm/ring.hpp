// The two ends of one SPSC ring. Each end keeps a process-local cached copy
// of the other end's index, so in steady state neither touches the other's
// cache line except to publish.
//
// Protocol (docs/ring_format.md):
//   * The producer writes slot `head % slots` completely, then stores
//     head + 1 with release. The consumer loads head with acquire before it
//     reads the slot.
//   * The consumer stores `tail` with release once every seq below it is
//     released; the producer loads it with acquire before it overwrites a
//     slot, and writes seq n only while n - tail < slots.
//   * Sessions: a client that (re)positions the stream writes its new tail,
//     then its new session (release). The producer adopts it: head = tail,
//     then its own session (release). A consumer trusts `head` only when the
//     ring's session is its own, and a slot only when the slot's seq and
//     session match.
//   * Sleeping: a side sets its `*_waiting` flag, re-reads the futex word and
//     its condition, then sleeps; the other side bumps the futex word and
//     then reads the flag. All four accesses are seq_cst (a Dekker pair), so
//     either the sleeper sees the bump or the waker sees the flag.
#pragma once

#include <chrono>
#include <cstdint>

#include "tokfeed/shm/layout.hpp"

namespace tokfeed::shm {

class RingProducer {
 public:
  RingProducer() = default;
  RingProducer(RingHeader* ring, const ConsumerLine* consumer, char* slots, uint32_t slots_per_ring,
               uint64_t slot_bytes) noexcept
      : ring_(ring), consumer_(consumer), slots_(slots), slots_per_ring_(slots_per_ring), slot_bytes_(slot_bytes) {}

  // Marks a new producer incarnation: bumps the generation, so stale state is
  // never mistaken for new, and reloads the cached tail.
  void start(uint32_t pid) noexcept;

  // Adopts a new consumer session, if the client has switched to one: head
  // jumps to the consumer's tail. Returns true when it switched.
  bool sync_session() noexcept;

  uint64_t head() const noexcept { return ring_->head.load(std::memory_order_relaxed); }
  uint64_t session() const noexcept { return ring_->session.load(std::memory_order_relaxed); }
  uint64_t end_seq() const noexcept { return ring_->end_seq; }

  // True when the slot at head may be written (its previous use is released).
  bool has_space() noexcept;

  char* slot(uint64_t seq) const noexcept { return slots_ + (seq % slots_per_ring_) * slot_bytes_; }
  uint64_t slot_bytes() const noexcept { return slot_bytes_; }

  // Publishes the slot at head, whose header and payload are written.
  void publish() noexcept;

  // Sleeps until the consumer releases a slot or switches session.
  // `at_end`: the producer's plan has no batch at head, though end_seq
  // (open while the plan grew) does not say so: only a new session wakes it.
  void wait_for_consumer(std::chrono::nanoseconds timeout, bool at_end = false) noexcept;

  RingHeader* header() const noexcept { return ring_; }

 private:
  RingHeader* ring_ = nullptr;
  const ConsumerLine* consumer_ = nullptr;
  char* slots_ = nullptr;
  uint32_t slots_per_ring_ = 0;
  uint64_t slot_bytes_ = 0;
  uint64_t cached_tail_ = 0;
};

class RingConsumer {
 public:
  RingConsumer() = default;
  RingConsumer(const RingHeader* ring, ConsumerLine* consumer, const char* slots, uint32_t slots_per_ring,
               uint64_t slot_bytes) noexcept
      : ring_(ring), consumer_(consumer), slots_(slots), slots_per_ring_(slots_per_ring), slot_bytes_(slot_bytes) {}

  // Starts a new session at `tail`: the producer drops what it built for any
  // earlier session and continues from `tail`.
  void reposition(uint64_t session, uint64_t tail) noexcept;

  // Continues the producer's current session (nothing is dropped).
  void adopt(uint64_t session, uint64_t tail) noexcept {
    session_ = session;
    cached_head_ = tail;
  }

  // True when seq `n` is published in this consumer's session.
  bool available(uint64_t n) noexcept;

  const char* slot(uint64_t seq) const noexcept { return slots_ + (seq % slots_per_ring_) * slot_bytes_; }

  // Every seq below `tail` is released.
  void release_to(uint64_t tail) noexcept;

  // Sleeps until seq `n` may be available.
  void wait_for_producer(uint64_t n, std::chrono::nanoseconds timeout) noexcept;

  uint64_t session() const noexcept { return session_; }
  const RingHeader* header() const noexcept { return ring_; }
  ConsumerLine* line() const noexcept { return consumer_; }

 private:
  const RingHeader* ring_ = nullptr;
  ConsumerLine* consumer_ = nullptr;
  const char* slots_ = nullptr;
  uint32_t slots_per_ring_ = 0;
  uint64_t slot_bytes_ = 0;
  uint64_t session_ = 0;
  uint64_t cached_head_ = 0;
};

}  // namespace tokfeed::shm
