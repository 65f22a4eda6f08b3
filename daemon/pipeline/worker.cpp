#include "pipeline/worker.hpp"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdlib>

#include "common/fault_hook.hpp"
#include "pipeline/batch_builder.hpp"
#include "pipeline/schedule.hpp"
#include "tokfeed/shm/futex.hpp"
#include "tokfeed/shm/ring.hpp"

namespace tokfeed {

namespace {

// Returns the part files' descriptors as the worker keeps them: 3, 4, ...,
// then its hand-off file's (-1 without one).
std::vector<int> become_worker(const WorkerContext& ctx, int& found_fd) {
  // Die with the supervisor: a worker must never outlive it.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != ctx.supervisor_pid) _exit(0);
  // The supervisor's signal handling (Asio) is not ours: default actions and
  // an empty mask.
  for (int sig : {SIGTERM, SIGINT, SIGCHLD, SIGHUP, SIGPIPE}) signal(sig, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  // Keep stdin/stdout/stderr and the part files of a build under way only:
  // the mappings stay, but the supervisor's sockets and segment descriptors
  // are not ours to hold open.
  const int n = static_cast<int>(ctx.part_fds.size()), kept = n + (ctx.found_fd >= 0);
  std::vector<int> moved, parts;
  for (int fd : ctx.part_fds) moved.push_back(::fcntl(fd, F_DUPFD_CLOEXEC, 3 + kept));
  if (ctx.found_fd >= 0) moved.push_back(::fcntl(ctx.found_fd, F_DUPFD_CLOEXEC, 3 + kept));
  for (int k = 0; k < kept; ++k) {
    if (moved[k] < 0 || ::dup3(moved[k], 3 + k, O_CLOEXEC) < 0) _exit(5);
    if (k < n) parts.push_back(3 + k);
  }
  found_fd = ctx.found_fd >= 0 ? 3 + n : -1;
  close_range(static_cast<unsigned>(3 + kept), ~0U, 0);
  std::string name =
      std::string(ctx.eval ? "tokfeed-e" : "tokfeed-w") + std::to_string(ctx.rank) + "." + std::to_string(ctx.worker);
  prctl(PR_SET_NAME, name.c_str());
  return parts;
}

}  // namespace

void worker_main(const WorkerContext& ctx) {
  int found_fd = -1;
  std::vector<int> part_fds = become_worker(ctx, found_fd);
  const JobConfig& cfg = *ctx.cfg;
  Schedule schedule(cfg, *ctx.mix, ctx.rank, ctx.start, ctx.facts);
  if (ctx.shared_rows) schedule.share_rows(ctx.shared_epoch, ctx.shared_rows);
  BatchBuilder builder(cfg, *ctx.data, *ctx.tok, ctx.store, ctx.facts, schedule, *ctx.poisoned, ctx.building,
                       std::move(part_fds));
  builder.hand_off_to(found_fd, ctx.helper);
  const uint32_t workers = cfg.workers.count;  // eval_job() sets [eval] workers
  shm::RingProducer ring(ctx.ring, ctx.consumer, ctx.slots, ctx.segment->slots_per_ring, ctx.segment->slot_bytes);
  ring.start(static_cast<uint32_t>(getpid()));
  shm::RingHeader& stats = *ctx.ring;
  auto on_record = [&](uint64_t rec) {
    stats.building_record.store(rec + 1, std::memory_order_relaxed);
#ifdef TOKFEED_FAULT_HOOKS
    if (ctx.crash_on_line >= 0 && ctx.data->line(rec) == ctx.crash_on_line) fault_crash();
#endif
  };

  for (;;) {
    ring.sync_session();
    uint64_t seq = ring.head();
    uint64_t index = seq * workers + ctx.worker;
    // A growing plan (the cache still builds) knows its end only once every
    // record is built: until then the ring's end_seq is open and the
    // schedule decides which batches exist.
    // A plan grown to its end knows it there, before end_seq: the worker
    // sleeps until a client repositions rather than spin.
    const bool plan_end = !schedule.growing() && index >= schedule.total_batches();
    const bool past_end = seq >= ring.end_seq() || plan_end;
    if (past_end || !ring.has_space()) {
      ring.wait_for_consumer(std::chrono::milliseconds(200), plan_end);
      if (getppid() != ctx.supervisor_pid) _exit(0);
      continue;
    }
    if (!schedule.decided(index)) {
      // Its rows wait for records the builders have not reached: the worker
      // tokenizes those it is to find, and waits once none is left.
      if (schedule.growing() && ctx.building) {
        const bool found = builder.find_ahead(index, ctx.helper, ctx.helpers, on_record);
        stats.building_record.store(0, std::memory_order_relaxed);
        if (!found) ctx.building->wait(std::chrono::milliseconds(100));
      }
      if (getppid() != ctx.supervisor_pid) _exit(0);
      continue;
    }
    stats.building_index.store(index + 1, std::memory_order_relaxed);
    uint64_t t0 = shm::monotonic_ns();
    BuildStats st = builder.build(index, ring.slot(seq), ring.slot_bytes(), seq, ring.session(), on_record);
    stats.building_record.store(0, std::memory_order_relaxed);
    stats.building_index.store(0, std::memory_order_relaxed);
    // A client that repositioned while we built wants other batches: drop this one.
    if (ring.sync_session()) continue;
    // Counted before it is published, so a client that has consumed a batch
    // never sees a status that lacks it.
    stats.batches.fetch_add(1, std::memory_order_relaxed);
    stats.samples.fetch_add(st.samples, std::memory_order_relaxed);
    stats.tokens.fetch_add(st.tokens, std::memory_order_relaxed);
    stats.real_tokens.fetch_add(st.real_tokens, std::memory_order_relaxed);
    stats.truncated.fetch_add(st.truncated, std::memory_order_relaxed);
    stats.dropped.fetch_add(st.dropped, std::memory_order_relaxed);
    stats.all_masked.fetch_add(st.all_masked, std::memory_order_relaxed);
    stats.build_ns.fetch_add(shm::monotonic_ns() - t0, std::memory_order_relaxed);
    ring.publish();
  }
}

}  // namespace tokfeed
