// Sleeping on the ring's futex words, across processes
// (docs/ring_format.md, "Sleeping").
//
//   ring_wait wake   futex wake latency: the consumer sleeps in
//                    wait_for_producer, the producer publishes; figures of
//                    publish -> consumer running again with the slot.
//   ring_wait idle   a consumer waiting ~0.5 s for a slot uses no CPU
//                    (getrusage: < 5 ms of user + system time).
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "ring_fixture.hpp"

using namespace tokfeed::shm;
using namespace tokfeed::shm::testing;
using namespace std::chrono_literals;

namespace {

constexpr int kWakes = 300;

// One 8-byte tensor holding the producer's CLOCK_MONOTONIC at publish.
void write_stamp(RingProducer& p, uint64_t seq) {
  SlotWriter w(p.slot(seq), p.slot_bytes());
  auto* t = static_cast<int64_t*>(w.add("t0", Dtype::kInt64, 1, 1, 0));
  *t = static_cast<int64_t>(monotonic_ns());
  w.finish(seq, p.session(), seq, 0, 0, 0, 0, 0);
}

int64_t read_stamp(const RingConsumer& c, uint64_t seq, uint64_t slot_bytes) {
  SlotHeader h;
  std::memcpy(&h, c.slot(seq), sizeof h);
  if (validate_slot_header(h, slot_bytes, seq, c.session()) != SlotFault::kNone || h.tensor_count != 1)
    die("bad stamp slot");
  int64_t t;
  std::memcpy(&t, c.slot(seq) + h.tensors[0].offset, sizeof t);
  return t;
}

pid_t spawn_producer(const TestRing& t, uint64_t count, std::chrono::microseconds after_sleep) {
  pid_t pid = fork();
  if (pid != 0) return pid;
  RingProducer p = t.producer();
  p.start(static_cast<uint32_t>(getpid()));
  p.sync_session();
  for (uint64_t seq = 0; seq < count; ++seq) {
    while (!p.has_space()) p.wait_for_consumer(10ms);
    // Publish only once the consumer is asleep: its flag is up, and it has
    // had time to enter the kernel.
    while (t.line->consumer_waiting.load(std::memory_order_seq_cst) == 0) std::this_thread::sleep_for(20us);
    std::this_thread::sleep_for(after_sleep);
    write_stamp(p, seq);
    p.publish();
  }
  _exit(0);
}

void reap(pid_t pid) {
  int st = 0;
  waitpid(pid, &st, 0);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) die("producer failed");
}

int run_wake() {
  TestRing t;
  if (std::string e = t.create(4, 4096, kWakes); !e.empty()) die(e.c_str());
  RingConsumer c = t.consumer_end();
  c.reposition(1, 0);
  pid_t pid = spawn_producer(t, kWakes, 300us);
  std::vector<double> us;
  for (uint64_t seq = 0; seq < kWakes; ++seq) {
    // Sleep at once: no spinning, so every slot arrives through a wake.
    while (!c.available(seq)) c.wait_for_producer(seq, 1s);
    int64_t now = static_cast<int64_t>(monotonic_ns());
    us.push_back((now - read_stamp(c, seq, t.slot_bytes)) / 1e3);
    c.release_to(seq + 1);
  }
  reap(pid);
  std::sort(us.begin(), us.end());
  double p50 = us[us.size() / 2], p99 = us[us.size() * 99 / 100], mx = us.back();
  std::printf(
      "futex wake latency over %d wakes (publish -> consumer holds the slot): p50 %.1f us, "
      "p99 %.1f us, max %.1f us\n",
      kWakes, p50, p99, mx);
  // Generous bounds: the machine is shared and noisy.
  if (p50 > 1000) die("median futex wake latency above 1 ms");
  if (p99 > 50000) die("p99 futex wake latency above 50 ms");
  return 0;
}

double cpu_ms(const rusage& a, const rusage& b) {
  auto ms = [](const timeval& t) { return t.tv_sec * 1e3 + t.tv_usec / 1e3; };
  return ms(b.ru_utime) - ms(a.ru_utime) + ms(b.ru_stime) - ms(a.ru_stime);
}

int run_idle() {
  TestRing t;
  if (std::string e = t.create(4, 4096, 1); !e.empty()) die(e.c_str());
  RingConsumer c = t.consumer_end();
  c.reposition(1, 0);
  pid_t pid = spawn_producer(t, 1, 500ms);
  rusage before, after;
  getrusage(RUSAGE_SELF, &before);
  auto t0 = std::chrono::steady_clock::now();
  int wakeups = 0;
  while (!c.available(0)) {
    c.wait_for_producer(0, 100ms);
    ++wakeups;
  }
  double wall = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  getrusage(RUSAGE_SELF, &after);
  read_stamp(c, 0, t.slot_bytes);
  c.release_to(1);
  reap(pid);
  double cpu = cpu_ms(before, after);
  std::printf("idle consumer: waited %.0f ms for one slot (%d futex returns), used %.3f ms of CPU\n", wall, wakeups,
              cpu);
  if (wall < 400) die("the slot came too early: the consumer did not really wait");
  if (cpu >= 5.0) die("a sleeping consumer used 5 ms of CPU or more");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "wake") return run_wake();
  if (mode == "idle") return run_idle();
  std::fprintf(stderr, "usage: %s wake | idle\n", argv[0]);
  return 2;
}
