// Ring handoff between two processes, against two copying baselines, in one
// run (docs/benchmarks.md, "Ring").
//
// For each payload size:
//   * ring latency: the producer stamps CLOCK_MONOTONIC and publishes a slot
//     whose payload is already in place (a worker builds batches in the slot
//     itself); the consumer, in another process, sees it, copies the header
//     out and validates it: it then holds a valid view of the whole batch.
//     Measured with the consumer spinning on `head`, and with it asleep on
//     the futex (the producer waits until the consumer's waiting flag is up,
//     plus 50 us, before it publishes). One slot in flight at a time.
//   * ring batches/s: the same handoff back to back, the consumer releasing
//     each slot at once (the payload is not read: zero copy).
//   * Boost.Interprocess message_queue and a unix socketpair (write the
//     payload, read it fully): the same latency (send -> whole payload
//     received) and messages/s.
//
//   bench_ring [--quick]
#include <sched.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/interprocess/ipc/message_queue.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tokfeed/shm/cpu_relax.hpp"
#include "tokfeed/shm/futex.hpp"
#include "tokfeed/shm/layout.hpp"
#include "tokfeed/shm/ring.hpp"
#include "tokfeed/shm/segment.hpp"
#include "tokfeed/shm/slot.hpp"

namespace bip = boost::interprocess;
using namespace tokfeed::shm;
using namespace std::chrono_literals;

namespace {

constexpr uint32_t kDepth = 4;
constexpr size_t kMaxSamples = 1 << 14;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "bench_ring: %s\n", what.c_str());
  std::_Exit(1);
}

// Results the child process hands back: latencies and a rate.
struct Shared {
  std::atomic<uint64_t> stamp[kMaxSamples];  // producer's t0 per sample
  uint64_t lat_ns[kMaxSamples];
  uint64_t count;
  double rate;
};

Shared* shared_block() {
  void* p = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) die("mmap");
  return static_cast<Shared*>(p);
}

void pin(int cpu) {
  if (std::thread::hardware_concurrency() < 2) return;
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  sched_setaffinity(0, sizeof s, &s);
}

struct Figures {
  double p50_us = 0, p99_us = 0;
};

Figures percentiles(Shared* sh) {
  std::vector<uint64_t> v(sh->lat_ns, sh->lat_ns + sh->count);
  // The first tenth warms caches and page tables.
  v.erase(v.begin(), v.begin() + static_cast<long>(v.size() / 10));
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2] / 1e3, v[std::min(v.size() - 1, v.size() * 99 / 100)] / 1e3};
}

template <class Child>
void run_child(Child&& child) {
  pid_t pid = fork();
  if (pid < 0) die("fork");
  if (pid == 0) {
    pin(1);
    child();
    _exit(0);
  }
}

void reap() {
  int st = 0;
  wait(&st);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) die("child failed");
}

// ---------------------------------------------------------------- the ring

struct Ring {
  Mapping data, consumer;
  RingHeader* ring;
  ConsumerLine* line;
  char* slots;
  uint64_t slot_bytes;
  SlotHeader tmpl;  // the header a worker would write, but for seq and session

  explicit Ring(uint64_t payload) {
    slot_bytes = align_up(sizeof(SlotHeader) + payload, kCacheLine);
    SegmentGeometry g{1, kDepth, slot_bytes};
    if (auto e = create_segment("/dev/shm", g.data_bytes(), "bench data", data)) die(e.message);
    if (auto e = create_segment("/dev/shm", SegmentGeometry::consumer_bytes(1), "bench consumer", consumer))
      die(e.message);
    ring = data.at<RingHeader>(g.rings_offset());
    ring->end_seq = ~uint64_t{0};
    line = consumer.at<ConsumerLine>(sizeof(ConsumerHeader));
    slots = data.at<char>(g.slots_offset());
    for (uint32_t s = 0; s < kDepth; ++s) {
      char* slot = slots + s * slot_bytes;
      SlotWriter w(slot, slot_bytes);
      void* t = w.add("input_ids", Dtype::kInt64, 1, static_cast<int64_t>(payload / 8), 0);
      std::memset(t, 0x5a, payload / 8 * 8);
      w.finish(0, 0, 0, 0, 0, 1, static_cast<uint32_t>(payload / 8), 0);
      std::memcpy(&tmpl, slot, sizeof tmpl);
    }
  }
  RingProducer producer() { return RingProducer(ring, line, slots, kDepth, slot_bytes); }
  RingConsumer consumer_end() { return RingConsumer(ring, line, slots, kDepth, slot_bytes); }
  // What a worker's SlotWriter::finish leaves, for this seq (payload unchanged).
  void stamp_header(RingProducer& p, uint64_t seq) {
    tmpl.seq = seq;
    tmpl.session = p.session();
    tmpl.stream_index = seq;
    std::memcpy(p.slot(seq), &tmpl, sizeof tmpl);
  }
};

bool consumer_sees(RingConsumer& c, uint64_t seq, uint64_t slot_bytes) {
  SlotHeader h;
  std::memcpy(&h, c.slot(seq), sizeof h);
  return validate_slot_header(h, slot_bytes, seq, c.session()) == SlotFault::kNone;
}

Figures ring_latency(uint64_t payload, bool spin, uint64_t n, Shared* sh) {
  Ring r(payload);
  r.consumer_end().reposition(1, 0);
  run_child([&] {
    RingConsumer c = r.consumer_end();
    c.adopt(1, 0);
    for (uint64_t seq = 0; seq < n; ++seq) {
      if (spin) {
        while (!c.available(seq)) tokfeed::shm::cpu_relax();
      } else {
        while (!c.available(seq)) c.wait_for_producer(seq, 1s);
      }
      if (!consumer_sees(c, seq, r.slot_bytes)) die("invalid slot");
      uint64_t t1 = monotonic_ns();
      sh->lat_ns[seq] = t1 - sh->stamp[seq].load(std::memory_order_relaxed);
      c.release_to(seq + 1);
    }
    sh->count = n;
  });
  RingProducer p = r.producer();
  p.start(static_cast<uint32_t>(getpid()));
  p.sync_session();
  for (uint64_t seq = 0; seq < n; ++seq) {
    // One in flight: wait for the previous slot's release.
    while (r.line->tail.load(std::memory_order_acquire) != seq) tokfeed::shm::cpu_relax();
    r.stamp_header(p, seq);
    if (!spin) {
      while (r.line->consumer_waiting.load(std::memory_order_seq_cst) == 0) tokfeed::shm::cpu_relax();
      std::this_thread::sleep_for(50us);
    } else {
      // A gap, so the consumer is spinning on a line it already holds.
      for (uint64_t until = monotonic_ns() + 2000; monotonic_ns() < until;) tokfeed::shm::cpu_relax();
    }
    // The header is in place before t0 (as a worker's is before publish);
    // SYNC POINT: publish's head.store(release) carries the stamp too.
    sh->stamp[seq].store(monotonic_ns(), std::memory_order_relaxed);
    p.publish();
  }
  reap();
  return percentiles(sh);
}

double ring_rate(uint64_t payload, uint64_t n, Shared* sh) {
  Ring r(payload);
  r.consumer_end().reposition(1, 0);
  run_child([&] {
    RingConsumer c = r.consumer_end();
    c.adopt(1, 0);
    uint64_t t0 = 0;
    for (uint64_t seq = 0; seq < n; ++seq) {
      while (!c.available(seq)) tokfeed::shm::cpu_relax();
      if (!consumer_sees(c, seq, r.slot_bytes)) die("invalid slot");
      if (seq == 0) t0 = monotonic_ns();
      c.release_to(seq + 1);
    }
    sh->rate = (n - 1) / ((monotonic_ns() - t0) / 1e9);
  });
  RingProducer p = r.producer();
  p.start(static_cast<uint32_t>(getpid()));
  p.sync_session();
  for (uint64_t seq = 0; seq < n; ++seq) {
    while (!p.has_space()) tokfeed::shm::cpu_relax();
    r.stamp_header(p, seq);
    p.publish();
  }
  reap();
  return sh->rate;
}

// ------------------------------------------------------------- the baselines

bool write_all(int fd, const char* p, size_t n) {
  while (n) {
    ssize_t k = ::write(fd, p, n);
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

bool read_all(int fd, char* p, size_t n) {
  while (n) {
    ssize_t k = ::read(fd, p, n);
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

// A copying transport: send(buf) in the parent, recv(buf) in the child.
struct Transport {
  virtual ~Transport() = default;
  virtual void send(const char* buf, size_t n) = 0;
  virtual void recv(char* buf, size_t n) = 0;
};

struct SocketTransport : Transport {
  int fd[2];
  SocketTransport() {
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, fd) != 0) die("socketpair");
  }
  ~SocketTransport() override {
    ::close(fd[0]);
    ::close(fd[1]);
  }
  void send(const char* buf, size_t n) override {
    if (!write_all(fd[0], buf, n)) die("socket write");
  }
  void recv(char* buf, size_t n) override {
    if (!read_all(fd[1], buf, n)) die("socket read");
  }
};

struct MqTransport : Transport {
  std::string name = "tokfeed_bench_" + std::to_string(getpid());
  std::unique_ptr<bip::message_queue> q;
  explicit MqTransport(size_t n) {
    bip::message_queue::remove(name.c_str());
    q = std::make_unique<bip::message_queue>(bip::create_only, name.c_str(), 2, n);
  }
  ~MqTransport() override { bip::message_queue::remove(name.c_str()); }
  void send(const char* buf, size_t n) override { q->send(buf, n, 0); }
  void recv(char* buf, size_t n) override {
    bip::message_queue::size_type got = 0;
    unsigned prio = 0;
    q->receive(buf, n, got, prio);
    if (got != n) die("short message");
  }
};

Figures copy_latency(Transport& tr, uint64_t payload, uint64_t n, Shared* sh) {
  int ack[2];
  if (pipe(ack) != 0) die("pipe");
  std::vector<char> buf(payload, 0x5a);
  run_child([&] {
    std::vector<char> in(payload);
    for (uint64_t i = 0; i < n; ++i) {
      tr.recv(in.data(), payload);
      uint64_t t1 = monotonic_ns(), t0;
      std::memcpy(&t0, in.data(), sizeof t0);
      sh->lat_ns[i] = t1 - t0;
      if (::write(ack[1], "k", 1) != 1) die("ack");
    }
    sh->count = n;
  });
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t t0 = monotonic_ns();
    std::memcpy(buf.data(), &t0, sizeof t0);
    tr.send(buf.data(), payload);
    char c;
    if (::read(ack[0], &c, 1) != 1) die("ack");
  }
  reap();
  ::close(ack[0]);
  ::close(ack[1]);
  return percentiles(sh);
}

double copy_rate(Transport& tr, uint64_t payload, uint64_t n, Shared* sh) {
  std::vector<char> buf(payload, 0x5a);
  run_child([&] {
    std::vector<char> in(payload);
    uint64_t t0 = 0;
    for (uint64_t i = 0; i < n; ++i) {
      tr.recv(in.data(), payload);
      if (i == 0) t0 = monotonic_ns();
    }
    sh->rate = (n - 1) / ((monotonic_ns() - t0) / 1e9);
  });
  for (uint64_t i = 0; i < n; ++i) tr.send(buf.data(), payload);
  reap();
  return sh->rate;
}

// ------------------------------------------------------------------- report

std::string size_name(uint64_t b) {
  return b >= (1u << 20) ? std::to_string(b >> 20) + " MiB" : std::to_string(b >> 10) + " KiB";
}

std::string rate_name(double r) {
  char buf[32];
  if (r >= 1e6) std::snprintf(buf, sizeof buf, "%.2f M", r / 1e6);
  else if (r >= 1e3) std::snprintf(buf, sizeof buf, "%.1f k", r / 1e3);
  else std::snprintf(buf, sizeof buf, "%.0f", r);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  pin(0);
  Shared* sh = shared_block();
  const uint64_t sizes[] = {1u << 10, 64u << 10, 1u << 20, 16u << 20};
  std::printf(
      "| payload | ring p50 / p99, spinning (µs) | ring p50 / p99, futex sleep (µs) | ring batches/s "
      "| message_queue p50 / p99 (µs) | message_queue msgs/s | socket p50 / p99 (µs) | socket msgs/s "
      "| ring vs best baseline, p50 (spin / sleep) |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  for (uint64_t size : sizes) {
    const uint64_t spin_n = quick ? 500 : 4000, sleep_n = quick ? 100 : 600;
    const uint64_t rate_n = quick ? 20000 : 300000;
    const uint64_t copy_n = std::clamp<uint64_t>((quick ? 32ull << 20 : 256ull << 20) / size, 30, quick ? 500 : 4000);
    Figures spin = ring_latency(size, true, spin_n, sh);
    Figures sleep = ring_latency(size, false, sleep_n, sh);
    double rate = ring_rate(size, rate_n, sh);
    Figures mq, sock;
    double mq_rate, sock_rate;
    {
      MqTransport mt(size);
      mq = copy_latency(mt, size, copy_n, sh);
      mq_rate = copy_rate(mt, size, copy_n, sh);
    }
    {
      SocketTransport st;
      sock = copy_latency(st, size, copy_n, sh);
      sock_rate = copy_rate(st, size, copy_n, sh);
    }
    double best = std::min(mq.p50_us, sock.p50_us);
    std::printf("| %s | %.2f / %.2f | %.1f / %.1f | %s | %.1f / %.1f | %s | %.1f / %.1f | %s | %.0fx / %.0fx |\n",
                size_name(size).c_str(), spin.p50_us, spin.p99_us, sleep.p50_us, sleep.p99_us, rate_name(rate).c_str(),
                mq.p50_us, mq.p99_us, rate_name(mq_rate).c_str(), sock.p50_us, sock.p99_us,
                rate_name(sock_rate).c_str(), best / spin.p50_us, best / sleep.p50_us);
    std::fflush(stdout);
  }
  return 0;
}
