// The attach request (docs/control_protocol.md): a client takes one served
// rank's training stream or evaluation passes, from a position.
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "supervisor/supervisor.hpp"
#include "tokfeed/shm/segment.hpp"

namespace tokfeed {

namespace {

// A refusal the client reports as kInvalidArgument: the position asked for
// is not in the stream.
std::string bad_position(const std::string& message) {
  return error_reply(message, proto::ErrorCode::kInvalidArgument);
}

}  // namespace

Supervisor::RankSlot* Supervisor::find_slot(uint32_t rank, bool eval, uint32_t& index) {
  for (uint32_t i = 0; i < ranks_.size(); ++i)
    if (ranks_[i].rank == rank && ranks_[i].eval == eval) {
      index = i;
      return &ranks_[i];
    }
  return nullptr;
}

Reply Supervisor::attach(const Peer& peer, const proto::AttachRequest& req) {
  const bool eval = req.split == proto::Split::kEval;
  const std::string what = fmt::format("rank {}{}", req.rank, eval ? " (eval)" : "");
  uint32_t ri = 0;
  RankSlot* rs = find_slot(req.rank, eval, ri);
  if (!rs && eval && find_slot(req.rank, false, ri)) {
    spdlog::warn("attach by pid {} uid {} refused: no evaluation stream", peer.pid, peer.uid);
    return {error_reply(fmt::format("attach: {}: this job has no evaluation data: set [eval] split_ratio or "
                                    "[[eval.datasets]] in {}",
                                    what, cfg_.file)),
            {},
            true};
  }
  if (!rs) {
    spdlog::warn("attach by pid {} uid {} refused: rank {} is not served here", peer.pid, peer.uid, req.rank);
    return {error_reply(fmt::format("attach: rank {} is not served by this daemon (serves [{}] of world_size {})",
                                    req.rank, fmt::join(cfg_.ranks.serve, ","), cfg_.ranks.world_size)),
            {},
            true};
  }
  if (rs->client) {
    spdlog::warn("{}: attach by pid {} uid {} refused: already attached by pid {}", what, peer.pid, peer.uid,
                 rs->client->pid);
    return {error_reply(fmt::format("attach: {} is already attached by pid {}; one client per rank and split", what,
                                    rs->client->pid)),
            {},
            true};
  }
  if (phase_ != Phase::kServing) {
    // The client retries until the token cache is ready.
    proto::ErrorReply not_ready{proto::ErrorCode::kNotReady,
                                "attach: not ready: " + (phase_ == Phase::kIndexing ? index_line() : cache_line()),
                                /*retry_ms=*/200};
    return {not_ready.encode(), {}, false};
  }
  if (eval) return attach_eval(peer, req, ri);
  if (rs->schedule->growing()) {
    // The batch counts come once every record is built. A client that reads
    // them later from its consumer segment starts now at a step of epoch 0
    // whose rows the facts found so far decide (the stream's start at once,
    // a resume once the plan's prefix before it is known); any other
    // position, or an older client, waits for them.
    const bool epoch0 =
        req.epoch == 0 && req.base == 0 && (req.world_size == 0 || req.world_size == cfg_.ranks.world_size);
    if (req.counts_later && epoch0 && (req.step == 0 || rs->schedule->prefix_decides(req.step)))
      return grant(peer, *rs, req.step, false, 0, req.step);
    proto::ErrorReply not_ready{
        proto::ErrorCode::kNotReady,
        fmt::format("attach: not ready: {}: {}",
                    !req.counts_later ? "this client needs the batch counts (it predates counts that arrive after "
                                        "attach), known once the token cache is built"
                    : epoch0          ? fmt::format("epoch 0 step {} waits for the facts of the records before it "
                                                             "in the plan",
                                                    req.step)
                             : fmt::format("a start at epoch {} step {} needs the batch counts, known once the token "
                                           "cache is built",
                                           req.epoch, req.step),
                    cache_line()),
        /*retry_ms=*/200};
    return {not_ready.encode(), {}, false};
  }

  // Where the client wants to be (docs/data_model.md 4.3).
  uint64_t epoch = req.epoch, step = req.step, world = req.world_size, base = req.base;
  if (world == 0) world = cfg_.ranks.world_size;
  if (epoch > cfg_.schedule.epochs || (epoch == cfg_.schedule.epochs && (step || base)))
    return {bad_position(fmt::format("attach: epoch {} is past the job's {} epochs", epoch, cfg_.schedule.epochs)),
            {},
            true};
  bool replanned = false;
  const Schedule* sch = rs->schedule.get();
  bool same_segment = world == cfg_.ranks.world_size && epoch >= sch->start().epoch && base == sch->base(epoch);
  if (!same_segment && epoch < cfg_.schedule.epochs) {
    StreamStart start{epoch, base};
    if (world != cfg_.ranks.world_size) {
      // Elastic: the rows dealt before this position, over the old world
      // size, are a prefix of the epoch; the new world continues after it.
      start.base = base + step * world * cfg_.batch.rows();
      step = 0;
    }
    replan_rank(ri, start);
    replanned = true;
    sch = rs->schedule.get();
    spdlog::info(
        "rank {}: stream planned again from epoch {} row {} (client position: epoch {} step {}, world "
        "size {}, base {})",
        rs->rank, start.epoch, start.base, epoch, step, world, base);
  }
  if (epoch < cfg_.schedule.epochs && step > sch->epoch_batches()[epoch - sch->start().epoch])
    return {bad_position(fmt::format("attach: step {} is past epoch {}'s {} batches", step, epoch,
                                     sch->epoch_batches()[epoch - sch->start().epoch])),
            {},
            true};
  uint64_t start_index = sch->index_of(epoch, step);

  return grant(peer, *rs, start_index, replanned, epoch, step);
}

// Evaluation passes (docs/data_model.md section 7): a position is (pass,
// step) at the daemon's world size; every pass is the same, so nothing is
// planned again.
Reply Supervisor::attach_eval(const Peer& peer, const proto::AttachRequest& req, uint32_t ri) {
  RankSlot& rs = ranks_[ri];
  if (!rs.schedule) {
    // Planned once the token cache is built (the training streams serve
    // meanwhile); the client retries until then.
    proto::ErrorReply not_ready{proto::ErrorCode::kNotReady,
                                "attach: not ready: evaluation passes need every record's facts, known once the "
                                "token cache is built: " +
                                    cache_line(),
                                /*retry_ms=*/200};
    return {not_ready.encode(), {}, false};
  }
  const Schedule& sch = *rs.schedule;
  const uint64_t B = sch.epoch_batches()[0];
  if (req.world_size != 0 && req.world_size != cfg_.ranks.world_size)
    return {bad_position(fmt::format("attach: evaluation passes are dealt over the daemon's world_size {}, not {}; "
                                     "an evaluation position does not carry across world sizes",
                                     cfg_.ranks.world_size, req.world_size)),
            {},
            true};
  if (req.base != 0 || req.step > B)
    return {bad_position(fmt::format("attach: step {} (base {}) is outside an evaluation pass of {} batches", req.step,
                                     req.base, B)),
            {},
            true};
  return grant(peer, rs, sch.index_of(req.epoch, req.step), false, req.epoch, req.step);
}

Reply Supervisor::grant(const Peer& peer, RankSlot& rs, uint64_t start_index, bool replanned, uint64_t epoch,
                        uint64_t step) {
  const Schedule* sch = rs.schedule.get();
  int data_ro = shm::reopen_read_only(data_seg_.fd());
  int consumer_rw = ::fcntl(rs.consumer.fd(), F_DUPFD_CLOEXEC, 0);
  if (data_ro < 0 || consumer_rw < 0) {
    if (data_ro >= 0) ::close(data_ro);
    if (consumer_rw >= 0) ::close(consumer_rw);
    return {error_reply(std::string("attach: cannot share the segments: ") + std::strerror(errno)), {}, true};
  }
  rs.client = peer;
  spdlog::info("rank {}{}: client pid {} uid {} attached at {} {} step {}", rs.rank, rs.eval ? " eval" : "", peer.pid,
               peer.uid, rs.eval ? "pass" : "epoch", epoch, step);

  proto::AttachReply reply;
  reply.rank = rs.rank;
  reply.split = rs.eval ? proto::Split::kEval : proto::Split::kTrain;
  reply.ring_base = rs.ring_base;
  reply.workers = rs.workers;
  reply.first_epoch = sch->start().epoch;
  reply.start_base = sch->start().base;
  reply.epochs = sch->epochs();
  reply.world_size = cfg_.ranks.world_size;
  reply.start_index = start_index;
  reply.replanned = replanned;
  reply.epoch_batches = sch->epoch_batches();
  reply.counts_pending = sch->growing();
  return {reply.encode(), {data_ro, consumer_rw}, false, /*persistent=*/true};
}

}  // namespace tokfeed
