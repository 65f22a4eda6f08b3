// Two-process stress and crash tests of the SPSC ring over real MAP_SHARED
// memory (specification: docs/ring_format.md, "Protocol").
//
//   ring_stress stress [SLOTS] [--threads]
//       A producer (RingProducer + SlotWriter) moves SLOTS slots (default
//       10^7, or $TOKFEED_STRESS_SLOTS) of random sizes to a consumer
//       (RingConsumer + validate_slot_header) that holds a random number of
//       views and releases them in random order. The consumer checks every
//       seq exactly once, in order, intact, and re-checks each view just
//       before releasing it (a held slot is never overwritten). Every 2^20
//       slots it starts a new session at its current position, and the
//       producer must drop what it built for the old one. --threads runs the
//       two ends as threads of one process (what ThreadSanitizer can see).
//   ring_stress crash
//       kill -9 of the producer (a) while it is writing a slot it has not
//       published, its header already written, and (b) at random moments of
//       a fast stream. The consumer sees only published, intact slots, then
//       sees the producer die (HUP on its pipe) and nothing more.
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "ring_fixture.hpp"
#include "tokfeed/shm/cpu_relax.hpp"

using namespace tokfeed::shm;
using namespace tokfeed::shm::testing;
using namespace std::chrono_literals;

namespace {

constexpr uint32_t kDepth = 64;
constexpr int kSpins = 2048;          // pause loops (with a yield every 64) before a side sleeps
constexpr uint64_t kMaxWords = 2048;  // up to 16 KiB of "data" per slot
// A new session every 2^20 slots, or 8 per run for shorter runs.
uint64_t session_every(uint64_t count) { return std::clamp<uint64_t>(count / 8, 1024, uint64_t{1} << 20); }

// How one end learns that the other is gone: a pipe whose write end only the
// producer holds (the data plane's equivalent of the control socket's HUP),
// or, between threads, a flag.
struct Peer {
  int hup_fd = -1;
  const std::atomic<bool>* done = nullptr;
  bool alive() const {
    if (done) return !done->load(std::memory_order_acquire);
    pollfd p{hup_fd, POLLIN, 0};
    return !(::poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLERR)));
  }
};

// Spin politely: on a loaded machine the other end may be off-CPU, and
// yielding now and then lets it run instead of burning our slice.
inline void relax(int spins) {
  if (spins % 64 == 0) sched_yield();
  else tokfeed::shm::cpu_relax();
}

struct Rng {
  uint64_t s;
  uint64_t next() { return s = mix64(s); }
  uint64_t below(uint64_t n) { return n ? next() % n : 0; }
};

// ------------------------------------------------------------------ producer

void produce(const TestRing& t, uint64_t count, uint64_t max_words) {
  RingProducer p = t.producer();
  p.start(static_cast<uint32_t>(getpid()));
  while (p.session() == 0) {  // the consumer opened session 1 before we started
    p.sync_session();
    if (p.session() == 0) p.wait_for_consumer(10ms);
  }
  for (;;) {
    p.sync_session();
    if (p.head() >= count) {
      if (t.line->tail.load(std::memory_order_acquire) >= count) return;
      p.wait_for_consumer(10ms);
      continue;
    }
    int spins = 0;
    while (!p.has_space() && ++spins < kSpins) relax(spins);
    if (!p.has_space()) {
      p.wait_for_consumer(10ms);
      continue;
    }
    uint64_t seq = p.head();
    // Now and then a slow batch, so the consumer runs dry and sleeps.
    if (mix64(seq ^ 0x51ee9ULL) % 4096 == 0) std::this_thread::sleep_for(300us);
    write_payload(p.slot(seq), p.slot_bytes(), seq, p.session(), max_words);
    // As the worker does: a client that repositioned meanwhile wants other batches.
    if (p.sync_session()) continue;
    p.publish();
  }
}

// ------------------------------------------------------------------ consumer

struct ConsumeResult {
  uint64_t slots = 0;
  uint64_t bytes = 0;
  uint64_t sessions = 1;
  uint64_t out_of_order = 0;  // releases that were not of the oldest held slot
  uint64_t sleeps = 0;        // futex waits of the consumer
  bool peer_died = false;
  const char* error = nullptr;
  uint64_t error_seq = 0;
};

// Consumes seqs 0..count-1 (or until the producer dies), holding up to
// depth - 1 views and releasing them in random order.
ConsumeResult consume(const TestRing& t, uint64_t count, uint64_t max_words, const Peer& peer, uint64_t seed,
                      bool sessions) {
  ConsumeResult res;
  const uint64_t every = session_every(count);
  RingConsumer c = t.consumer_end();
  c.adopt(1, 0);  // the parent opened session 1 at seq 0 (reposition) before forking
  const uint32_t depth = t.slots_per_ring;
  ReleaseWindow window(depth);
  std::vector<uint64_t> held;
  Rng rng{seed};
  auto fail = [&](const char* what, uint64_t seq) {
    res.error = what;
    res.error_seq = seq;
    return res;
  };
  auto release_one = [&](size_t i) -> const char* {
    uint64_t seq = held[i];
    // The view is still intact when freed: the producer never overwrote it.
    if (const char* e = check_payload(c.slot(seq), t.slot_bytes, seq, c.session(), max_words, false)) return e;
    if (seq != window.tail()) ++res.out_of_order;
    held[i] = held.back();
    held.pop_back();
    if (window.release(seq)) c.release_to(window.tail());
    return nullptr;
  };

  for (uint64_t seq = 0; seq < count; ++seq) {
    if (sessions && seq && seq % every == 0) {
      // A client that (re)positions: everything held is released, a new
      // session starts here, and the producer must rebuild from here.
      for (uint64_t s : held)
        if (const char* e = check_payload(c.slot(s), t.slot_bytes, s, c.session(), max_words, false)) return fail(e, s);
      held.clear();
      c.reposition(c.session() + 1, seq);
      window.reset(seq);
      ++res.sessions;
    }
    // Never wait for a seq the producer may not write: keep seq - tail < depth.
    while (seq - window.tail() >= depth) {
      size_t oldest = 0;
      for (size_t i = 0; i < held.size(); ++i)
        if (held[i] == window.tail()) oldest = i;
      if (const char* e = release_one(oldest)) return fail(e, held[oldest]);
    }
    int spins = 0;
    while (!c.available(seq)) {
      if (++spins < kSpins) {
        relax(spins);
        continue;
      }
      c.wait_for_producer(seq, 10ms);
      ++res.sleeps;
      if (c.available(seq)) break;
      if (!peer.alive()) {
        // Whatever it published before dying is still ours to read.
        if (c.available(seq)) break;
        res.peer_died = true;
        return res;
      }
    }
    if (const char* e = check_payload(c.slot(seq), t.slot_bytes, seq, c.session(), max_words)) return fail(e, seq);
    PayloadShape ps = payload_shape(seq, max_words);
    res.bytes += static_cast<uint64_t>(ps.words) * 8 + static_cast<uint64_t>(ps.rows * ps.cols) * 4;
    ++res.slots;
    held.push_back(seq);
    // Now and then a slow trainer step, so the producer fills the ring and sleeps.
    if (rng.below(4096) == 0) std::this_thread::sleep_for(300us);
    // Hold a random number of views (0 .. min(depth-1, 15)), free random ones.
    uint64_t keep = rng.below(std::min<uint32_t>(depth, 16));
    while (held.size() > keep)
      if (const char* e = release_one(rng.below(held.size()))) return fail(e, held[0]);
  }
  while (!held.empty())
    if (const char* e = release_one(held.size() - 1)) return fail(e, held[0]);
  return res;
}

uint64_t slot_count(int argc, char** argv) {
  for (int i = 2; i < argc; ++i)
    if (argv[i][0] != '-') return std::strtoull(argv[i], nullptr, 10);
  if (const char* e = std::getenv("TOKFEED_STRESS_SLOTS")) return std::strtoull(e, nullptr, 10);
  return 10'000'000;
}

bool has_flag(int argc, char** argv, const char* f) {
  for (int i = 2; i < argc; ++i)
    if (std::strcmp(argv[i], f) == 0) return true;
  return false;
}

void report(const char* what, const ConsumeResult& r) {
  if (r.error) {
    std::fprintf(stderr, "FAIL %s: seq %llu: %s\n", what, static_cast<unsigned long long>(r.error_seq), r.error);
    std::exit(1);
  }
}

int run_stress(int argc, char** argv) {
  const uint64_t count = slot_count(argc, argv);
  const bool threads = has_flag(argc, argv, "--threads");
  TestRing t;
  if (std::string e = t.create(kDepth, payload_slot_bytes(kMaxWords), count); !e.empty()) die(e.c_str());
  t.consumer_end().reposition(1, 0);
  auto t0 = std::chrono::steady_clock::now();
  ConsumeResult r;
  if (threads) {
    std::atomic<bool> done{false};
    std::thread prod([&] {
      produce(t, count, kMaxWords);
      done.store(true, std::memory_order_release);
    });
    Peer peer;
    peer.done = &done;
    r = consume(t, count, kMaxWords, peer, 42, true);
    prod.join();
  } else {
    int hup[2];
    if (::pipe(hup) != 0) die("pipe");
    pid_t pid = fork();
    if (pid == 0) {
      ::close(hup[0]);
      produce(t, count, kMaxWords);
      _exit(0);
    }
    ::close(hup[1]);
    Peer peer;
    peer.hup_fd = hup[0];
    r = consume(t, count, kMaxWords, peer, 42, true);
    int st = 0;
    if (r.error) kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    report("stress", r);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) die("producer failed");
  }
  report("stress", r);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (r.peer_died || r.slots != count) die("consumer stopped before the end of the stream");
  std::printf(
      "stress (%s): %llu slots, %.1f MiB of tensors, %llu sessions, %llu out-of-order releases, %llu consumer sleeps, "
      "%.2f s, %.2f M slots/s, %.0f ns/slot\n",
      threads ? "threads" : "2 processes", static_cast<unsigned long long>(r.slots), r.bytes / 1048576.0,
      static_cast<unsigned long long>(r.sessions), static_cast<unsigned long long>(r.out_of_order),
      static_cast<unsigned long long>(r.sleeps), s, r.slots / s / 1e6, s * 1e9 / r.slots);
  return 0;
}

// --------------------------------------------------------------------- crash

// (a) The producer publishes kBefore slots, then writes slot kBefore -- its
// header included, so the slot looks valid -- tears its payload, and is
// killed mid-write, before it publishes.
void crash_unpublished() {
  constexpr uint64_t kBefore = 1000;
  constexpr uint64_t kWords = 4096;  // 32 KiB, so the torn slot is a large one
  TestRing t;
  if (std::string e = t.create(8, payload_slot_bytes(kWords), ~uint64_t{0}); !e.empty()) die(e.c_str());
  t.consumer_end().reposition(1, 0);
  int hup[2], ready[2];
  if (::pipe(hup) != 0 || ::pipe(ready) != 0) die("pipe");
  pid_t prod = fork();
  if (prod == 0) {
    ::close(hup[0]);
    ::close(ready[0]);
    RingProducer p = t.producer();
    p.start(static_cast<uint32_t>(getpid()));
    p.sync_session();
    for (uint64_t seq = 0; seq <= kBefore; ++seq) {
      while (!p.has_space()) p.wait_for_consumer(10ms);
      write_payload(p.slot(seq), p.slot_bytes(), seq, p.session(), kWords);
      if (seq == kBefore) {
        // Tear it: the header (written last by finish) says one thing, the
        // bytes another, and head never moves. Then freeze mid-write.
        char* slot = p.slot(seq);
        SlotHeader h;
        std::memcpy(&h, slot, sizeof h);
        if (h.tensors[0].nbytes)
          std::memset(slot + h.tensors[0].offset + h.tensors[0].nbytes / 2, 0xEE, h.tensors[0].nbytes / 2);
        if (::write(ready[1], "x", 1) != 1) _exit(2);
        for (;;) std::memset(slot + h.tensors[0].offset, 0xAB, h.tensors[0].nbytes);
      }
      p.publish();
    }
    _exit(3);
  }
  ::close(ready[1]);
  pid_t cons = fork();
  if (cons == 0) {
    ::close(hup[1]);
    Peer peer;
    peer.hup_fd = hup[0];
    ConsumeResult r = consume(t, ~uint64_t{0}, kWords, peer, 7, false);
    report("crash (unpublished slot)", r);
    if (!r.peer_died) die("consumer never saw the producer die");
    if (r.slots != kBefore) die("consumer saw a slot that was never published");
    _exit(0);
  }
  ::close(hup[0]);
  ::close(hup[1]);
  char c;
  if (::read(ready[0], &c, 1) != 1) die("producer never reached the torn slot");
  std::this_thread::sleep_for(5ms);
  kill(prod, SIGKILL);
  int st = 0;
  waitpid(prod, &st, 0);
  if (!WIFSIGNALED(st)) die("producer was not killed");
  waitpid(cons, &st, 0);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) die("consumer failed after the producer's crash");
  uint64_t head = t.ring->head.load(std::memory_order_acquire);
  if (head != kBefore) die("head moved past the published slots");
  std::printf(
      "crash (a): producer killed while writing unpublished seq %llu; consumer read %llu intact "
      "slots, never the torn one, then saw the HUP\n",
      static_cast<unsigned long long>(kBefore), static_cast<unsigned long long>(kBefore));
}

// (b) kill -9 at a random moment of a fast stream of large slots.
void crash_random(int round, uint64_t delay_us) {
  constexpr uint64_t kWords = 8192;  // up to 64 KiB: the kill usually lands mid-payload
  TestRing t;
  if (std::string e = t.create(8, payload_slot_bytes(kWords), ~uint64_t{0}); !e.empty()) die(e.c_str());
  t.consumer_end().reposition(1, 0);
  int hup[2];
  if (::pipe(hup) != 0) die("pipe");
  pid_t prod = fork();
  if (prod == 0) {
    ::close(hup[0]);
    produce(t, ~uint64_t{0} >> 1, kWords);
    _exit(3);
  }
  int res[2];
  if (::pipe(res) != 0) die("pipe");
  pid_t cons = fork();
  if (cons == 0) {
    ::close(hup[1]);
    ::close(res[0]);
    Peer peer;
    peer.hup_fd = hup[0];
    ConsumeResult r = consume(t, ~uint64_t{0}, kWords, peer, 100 + round, false);
    report("crash (random)", r);
    if (!r.peer_died) die("consumer never saw the producer die");
    if (::write(res[1], &r.slots, sizeof r.slots) != sizeof r.slots) _exit(2);
    _exit(0);
  }
  ::close(hup[0]);
  ::close(hup[1]);
  ::close(res[1]);
  std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
  kill(prod, SIGKILL);
  int st = 0;
  waitpid(prod, &st, 0);
  waitpid(cons, &st, 0);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) die("consumer failed after the producer's crash");
  uint64_t seen = 0;
  if (::read(res[0], &seen, sizeof seen) != sizeof seen) die("no result from the consumer");
  ::close(res[0]);
  uint64_t head = t.ring->head.load(std::memory_order_acquire);
  if (seen != head) die("consumer did not read exactly the published slots");
  std::printf("crash (b) round %d: killed after %llu us; %llu slots published, all read intact, none more\n", round,
              static_cast<unsigned long long>(delay_us), static_cast<unsigned long long>(seen));
}

int run_crash() {
  crash_unpublished();
  Rng rng{static_cast<uint64_t>(getpid())};
  for (int round = 0; round < 6; ++round) crash_random(round, 2000 + rng.below(60000));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::string mode = argc > 1 ? argv[1] : "stress";
  if (mode == "stress") return run_stress(argc, argv);
  if (mode == "crash") return run_crash();
  std::fprintf(stderr, "usage: %s stress [SLOTS] [--threads] | crash\n", argv[0]);
  return 2;
}
