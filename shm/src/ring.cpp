#include "tokfeed/shm/ring.hpp"

#include "tokfeed/shm/futex.hpp"

namespace tokfeed::shm {

namespace mo = std;  // memory orders read as mo::memory_order_*

void RingProducer::start(uint32_t pid) noexcept {
  ring_->producer_pid.store(pid, mo::memory_order_relaxed);
  ring_->generation.fetch_add(1, mo::memory_order_release);
  // SYNC POINT: pairs with RingConsumer::release_to's tail.store(release).
  cached_tail_ = consumer_->tail.load(mo::memory_order_acquire);
}

bool RingProducer::sync_session() noexcept {
  // SYNC POINT: pairs with RingConsumer::reposition's session.store(release),
  // which makes the consumer's new tail visible before its new session.
  uint64_t wanted = consumer_->session.load(mo::memory_order_acquire);
  if (wanted == ring_->session.load(mo::memory_order_relaxed)) return false;
  uint64_t tail = consumer_->tail.load(mo::memory_order_relaxed);
  ring_->head.store(tail, mo::memory_order_relaxed);
  cached_tail_ = tail;
  // SYNC POINT: pairs with RingConsumer::available's session.load(acquire):
  // a consumer that sees its session also sees the head set above.
  ring_->session.store(wanted, mo::memory_order_release);
  ring_->head_futex.fetch_add(1, mo::memory_order_seq_cst);
  if (consumer_->consumer_waiting.load(mo::memory_order_seq_cst)) futex_wake_all(ring_->head_futex);
  return true;
}

bool RingProducer::has_space() noexcept {
  uint64_t head = ring_->head.load(mo::memory_order_relaxed);
  if (head - cached_tail_ < slots_per_ring_) return true;
  // SYNC POINT: pairs with RingConsumer::release_to's tail.store(release): the
  // consumer is done reading the slot before we overwrite it.
  cached_tail_ = consumer_->tail.load(mo::memory_order_acquire);
  return head - cached_tail_ < slots_per_ring_;
}

void RingProducer::publish() noexcept {
  uint64_t head = ring_->head.load(mo::memory_order_relaxed);
  // SYNC POINT: pairs with RingConsumer::available's head.load(acquire): the
  // slot's header and payload are visible before the new head.
  ring_->head.store(head + 1, mo::memory_order_release);
  ring_->head_futex.fetch_add(1, mo::memory_order_seq_cst);
  if (consumer_->consumer_waiting.load(mo::memory_order_seq_cst)) futex_wake_all(ring_->head_futex);
}

void RingProducer::wait_for_consumer(std::chrono::nanoseconds timeout, bool at_end) noexcept {
  ring_->producer_waiting.store(1, mo::memory_order_seq_cst);
  uint32_t seen = consumer_->tail_futex.load(mo::memory_order_seq_cst);
  bool session_changed =
      consumer_->session.load(mo::memory_order_acquire) != ring_->session.load(mo::memory_order_relaxed);
  bool finished = at_end || ring_->head.load(mo::memory_order_relaxed) >= ring_->end_seq;
  if (!session_changed && (finished || !has_space())) futex_wait(consumer_->tail_futex, seen, timeout);
  ring_->producer_waiting.store(0, mo::memory_order_relaxed);
}

void RingConsumer::reposition(uint64_t session, uint64_t tail) noexcept {
  session_ = session;
  cached_head_ = tail;
  // Release, not relaxed: a producer still in the old session may see this
  // tail in has_space() (acquire) and reuse slots, so our earlier reads of
  // them must happen before. SYNC POINT: pairs with RingProducer::has_space.
  consumer_->tail.store(tail, mo::memory_order_release);
  // SYNC POINT: pairs with RingProducer::sync_session's session.load(acquire).
  consumer_->session.store(session, mo::memory_order_release);
  consumer_->tail_futex.fetch_add(1, mo::memory_order_seq_cst);
  if (ring_->producer_waiting.load(mo::memory_order_seq_cst)) futex_wake_all(consumer_->tail_futex);
}

bool RingConsumer::available(uint64_t n) noexcept {
  if (n < cached_head_) return true;
  // SYNC POINT: pairs with RingProducer::sync_session's session.store(release).
  if (ring_->session.load(mo::memory_order_acquire) != session_) return false;
  // SYNC POINT: pairs with RingProducer::publish's head.store(release).
  cached_head_ = ring_->head.load(mo::memory_order_acquire);
  return n < cached_head_;
}

void RingConsumer::release_to(uint64_t tail) noexcept {
  // SYNC POINT: pairs with RingProducer::has_space's tail.load(acquire).
  consumer_->tail.store(tail, mo::memory_order_release);
  consumer_->tail_futex.fetch_add(1, mo::memory_order_seq_cst);
  if (ring_->producer_waiting.load(mo::memory_order_seq_cst)) futex_wake_all(consumer_->tail_futex);
}

void RingConsumer::wait_for_producer(uint64_t n, std::chrono::nanoseconds timeout) noexcept {
  consumer_->consumer_waiting.store(1, mo::memory_order_seq_cst);
  uint32_t seen = ring_->head_futex.load(mo::memory_order_seq_cst);
  if (!available(n)) futex_wait(ring_->head_futex, seen, timeout);
  consumer_->consumer_waiting.store(0, mo::memory_order_relaxed);
}

}  // namespace tokfeed::shm
