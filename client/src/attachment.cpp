#include "attachment.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "tokfeed/proto/frame.hpp"
#include "tokfeed/proto/messages.hpp"
#include "tokfeed/shm/cpu_relax.hpp"
#include "tokfeed/shm/futex.hpp"
#include "tokfeed/shm/slot.hpp"

namespace tokfeed::detail {

// The client hands out shm's tensor descriptions as its own public types:
// the two must not drift apart.
static_assert(static_cast<uint32_t>(Dtype::kInt32) == static_cast<uint32_t>(shm::Dtype::kInt32));
static_assert(static_cast<uint32_t>(Dtype::kInt64) == static_cast<uint32_t>(shm::Dtype::kInt64));
static_assert(kMaxTensors == shm::kMaxTensors, "Batch must hold every tensor a slot may describe");

namespace {

std::string num(uint64_t v) { return std::to_string(v); }

void close_all(std::vector<int>& fds) {
  for (int fd : fds) ::close(fd);
  fds.clear();
}

}  // namespace

Attachment::~Attachment() {
  if (consumer_header_) {
    consumer_header_->attached.store(0, std::memory_order_relaxed);
  }
  if (sock_ >= 0) ::close(sock_);
  if (pagemap_ >= 0) ::close(pagemap_);
}

Status Attachment::open(const ClientOptions& opt) {
  opt_ = opt;
  std::string error;
  std::string payload;
  std::vector<int> fds;
  msgpack::object_handle reply;
  const uint64_t deadline = shm::monotonic_ns() + uint64_t(opt.ready_timeout.count()) * 1'000'000;
  for (;;) {
    sock_ = proto::connect_unix(opt.socket, error);
    if (sock_ < 0) return {Code::kIoError, error};
    proto::AttachRequest attach;
    attach.rank = opt.rank;
    attach.split = opt.split == Split::kEval ? proto::Split::kEval : proto::Split::kTrain;
    attach.epoch = opt.start.epoch;
    attach.step = opt.start.step;
    attach.world_size = opt.start.world_size;
    attach.base = opt.start.base;
    attach.counts_later = true;
    std::string req = proto::encode_frame(attach.encode());
    // A daemon that refuses this peer replies with its reason and closes at
    // once, possibly before the request is sent: read the reason even then.
    std::string send_error;
    bool sent = proto::send_all(sock_, req, send_error);
    if (!proto::recv_frame(sock_, payload, &fds, sent ? 10000 : 1000, error)) {
      close_all(fds);
      return {Code::kIoError, "attach to " + opt.socket + ": " + (sent ? error : send_error)};
    }
    if (std::string e = proto::decode_payload(payload, reply); !e.empty()) {
      close_all(fds);
      return {Code::kIoError, "attach: bad reply: " + e};
    }
    if (proto::reply_ok(reply.get())) break;
    close_all(fds);
    proto::ErrorReply refusal;
    if (std::string e = proto::ErrorReply::decode(reply.get(), refusal); !e.empty())
      return {Code::kCorrupt, "attach: bad reply: " + e};
    // A daemon still indexing its datasets or building its token cache says
    // so: wait and ask again.
    if (refusal.code != proto::ErrorCode::kNotReady || shm::monotonic_ns() > deadline)
      return {refusal.code == proto::ErrorCode::kInvalidArgument ? Code::kInvalidArgument : Code::kRefused,
              refusal.message};
    ::close(sock_);
    sock_ = -1;
    int64_t ms = std::clamp<int64_t>(refusal.retry_ms, 10, 5000);
    ::usleep(static_cast<useconds_t>(ms * 1000));
  }
  proto::AttachReply r;
  if (std::string e = proto::AttachReply::decode(reply.get(), r); !e.empty() || fds.size() != 2 || r.rank != opt.rank) {
    close_all(fds);
    return {Code::kCorrupt, "attach: the daemon's reply lacks segments or fields" + (e.empty() ? "" : ": " + e)};
  }
  if ((r.split == proto::Split::kEval) != (opt.split == Split::kEval)) {
    close_all(fds);
    return {Code::kRefused, "attach: the daemon served the " + std::string(proto::split_name(r.split)) +
                                " split instead of eval: it predates evaluation streams; upgrade tokfeedd"};
  }
  passes_ = r.split == proto::Split::kEval;
  epoch_batches_ = std::move(r.epoch_batches);
  workers_ = r.workers;
  epochs_ = r.epochs;
  first_epoch_ = r.first_epoch;
  start_base_ = r.start_base;
  world_size_ = r.world_size;
  counts_pending_ = r.counts_pending;
  total_ = 0;
  for (uint64_t b : epoch_batches_) total_ += b;
  if (passes_ && total_) total_ = UINT64_MAX;  // passes repeat without end
  if (counts_pending_) total_ = UINT64_MAX;    // until the counts arrive
  rank_ = opt.rank;

  if (auto e = shm::map_segment(fds[0], /*writable=*/false, sizeof(shm::SegmentHeader), data_)) {
    ::close(fds[1]);
    return {Code::kCorrupt, "data segment: " + e.message};
  }
  if (auto e = shm::map_segment(fds[1], /*writable=*/true, sizeof(shm::ConsumerHeader), consumer_))
    return {Code::kCorrupt, "consumer segment: " + e.message};
  if (Status st = validate_segments(r.ring_base); !st.ok()) return st;
  if (opt.copy_on_write) map_copy_on_write(data_.fd());
  data_.close_fd();
  consumer_.close_fd();

  // The daemon placed the position in its plan (and checked it).
  const uint64_t start = r.start_index;
  if (start > total_) return {Code::kCorrupt, "attach: the daemon's start index is past its stream"};
  consumer_header_->client_pid.store(static_cast<uint32_t>(getpid()), std::memory_order_relaxed);
  consumer_header_->attached.store(1, std::memory_order_relaxed);
  return position_at(start, r.replanned);
}

void Attachment::map_copy_on_write(int fd) {
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  // Slots sharing a page would share its private copy: then a released
  // slot's pages could not be dropped without touching a live neighbour.
  if (header_->slots_offset % page || header_->slot_bytes % page) return;
  void* base = mmap(nullptr, data_.size(), PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  if (base == MAP_FAILED) return;
  cow_ = shm::Mapping(-1, base, data_.size());
  // Without it every released slot is dropped, written or not.
  pagemap_ = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
}

void Attachment::drop_private_pages(char* slot) noexcept {
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t pages = header_->slot_bytes / page;
  bool written = true;
  if (pagemap_ >= 0) {
    // One entry per page: bit 63 present, bit 61 file-backed (or shared).
    // A page this process wrote is present and anonymous (its private copy);
    // unwritten ones still map the ring's page, and are kept: dropping them
    // would cost a fault on every page of every batch.
    pagemap_buf_.resize(pages);
    const off_t at = static_cast<off_t>(reinterpret_cast<uintptr_t>(slot) / page * sizeof(uint64_t));
    const ssize_t want = static_cast<ssize_t>(pages * sizeof(uint64_t));
    if (::pread(pagemap_, pagemap_buf_.data(), static_cast<std::size_t>(want), at) == want) {
      written = false;
      for (uint64_t e : pagemap_buf_) written |= (e >> 63 & 1) && !(e >> 61 & 1);
    }
  }
  if (written) ::madvise(slot, header_->slot_bytes, MADV_DONTNEED);
}

char* Attachment::view_of(const char* slot) const {
  const char* base = static_cast<const char*>(data_.base());
  if (!cow_) return const_cast<char*>(slot);  // read-only pages: documented, never written
  return static_cast<char*>(cow_.base()) + (slot - base);
}

bool Attachment::refresh_counts() {
  if (!counts_pending_) return true;
  // SYNC POINT: pairs with the supervisor's counts_state.store(release)
  // after it wrote the counts.
  if (consumer_header_->counts_state.load(std::memory_order_acquire) != shm::kCountsKnown) return false;
  // The segment is writable by clients too: check before trusting.
  const uint64_t at = consumer_header_->counts_offset, n = consumer_header_->counts_entries;
  if (n != epochs_ - first_epoch_ || at % 8 || at > consumer_.size() || n > (consumer_.size() - at) / 8) return false;
  const auto* counts = consumer_.at<const uint64_t>(at);
  epoch_batches_.assign(counts, counts + n);
  total_ = 0;
  for (uint64_t b : epoch_batches_) total_ += b;
  counts_pending_ = false;
  return true;
}

bool Attachment::wait_counts() {
  while (!refresh_counts()) {
    if (!check_liveness(true).ok()) return false;
    ::usleep(10'000);
  }
  return true;
}

uint64_t Attachment::batches_in(uint64_t epoch) {
  if (!wait_counts()) return 0;
  if (passes_) return epoch_batches_.empty() ? 0 : epoch_batches_[0];
  if (epoch < first_epoch_ || epoch - first_epoch_ >= epoch_batches_.size()) return 0;
  return epoch_batches_[epoch - first_epoch_];
}

Position Attachment::position_of(uint64_t index) {
  Position p;
  p.world_size = world_size_;
  if (!refresh_counts()) {
    // Counts still unknown: a growing plan starts at (0, 0) and its batches
    // say where they stand; the one after the last returned is its next step
    // (a step equal to an epoch's count is the next epoch's start, 4.3).
    if (have_last_ && index == last_index_ + 1) {
      p.epoch = last_epoch_;
      p.step = last_step_ + 1;
      p.base = p.epoch == first_epoch_ ? start_base_ : 0;
    } else {
      p.epoch = first_epoch_;
      p.step = index;
      p.base = start_base_;
    }
    return p;
  }
  if (passes_) {
    const uint64_t B = epoch_batches_.empty() ? 0 : epoch_batches_[0];
    if (B) p.epoch = index / B, p.step = index % B;
    return p;
  }
  p.epoch = first_epoch_;
  for (uint64_t b : epoch_batches_) {
    if (index < b) {
      p.step = index;
      p.base = p.epoch == first_epoch_ ? start_base_ : 0;
      return p;
    }
    index -= b;
    ++p.epoch;
  }
  p.epoch = epochs_;  // past the end
  return p;
}

Status Attachment::validate_segments(uint32_t ring_base) {
  const auto* h = data_.at<const shm::SegmentHeader>(0);
  // SYNC POINT: pairs with the supervisor's state.store(release) after it
  // filled the header.
  if (h->state.load(std::memory_order_acquire) != shm::kStateReady)
    return {Code::kCorrupt, "data segment is not initialised"};
  if (h->magic != shm::kDataMagic) return {Code::kCorrupt, "data segment: bad magic"};
  if (h->version_major != shm::kVersionMajor)
    return {Code::kCorrupt, "data segment: layout version " + num(h->version_major) + " (this client speaks " +
                                num(shm::kVersionMajor) + "); upgrade the client or the daemon"};
  uint64_t size = data_.size();
  uint64_t rings_end = 0, slots_end = 0, slot_total = 0;
  bool bad = h->header_bytes != sizeof(shm::SegmentHeader) || h->segment_bytes > size ||
             h->ring_stride != sizeof(shm::RingHeader) || h->slots_per_ring == 0 ||
             h->slot_bytes < sizeof(shm::SlotHeader) || h->slot_bytes % shm::kCacheLine != 0 ||
             h->rings_offset % shm::kCacheLine != 0 || uint64_t{ring_base} + workers_ > h->ring_count ||
             __builtin_mul_overflow(uint64_t{h->ring_count}, h->ring_stride, &rings_end) ||
             __builtin_add_overflow(rings_end, h->rings_offset, &rings_end) || rings_end > size ||
             __builtin_mul_overflow(uint64_t{h->ring_count} * h->slots_per_ring, h->slot_bytes, &slot_total) ||
             __builtin_add_overflow(slot_total, h->slots_offset, &slots_end) || slots_end > size ||
             h->slots_offset < rings_end;
  if (bad) return {Code::kCorrupt, "data segment: header sizes or offsets are out of bounds"};

  auto* c = consumer_.at<shm::ConsumerHeader>(0);
  if (c->state.load(std::memory_order_acquire) != shm::kStateReady || c->magic != shm::kConsumerMagic ||
      c->version_major != shm::kVersionMajor || c->header_bytes != sizeof(shm::ConsumerHeader) ||
      c->ring_count != workers_ || c->line_stride != sizeof(shm::ConsumerLine) || c->rank != rank_ ||
      c->lines_offset < sizeof(shm::ConsumerHeader) ||
      c->lines_offset + uint64_t{workers_} * sizeof(shm::ConsumerLine) > consumer_.size())
    return {Code::kCorrupt, "consumer segment: bad header"};

  header_ = h;
  consumer_header_ = c;
  slots_ = h->slots_per_ring;
  rings_.resize(workers_);
  for (uint32_t w = 0; w < workers_; ++w) {
    uint64_t index = uint64_t{ring_base} + w;
    const auto* rh = data_.at<const shm::RingHeader>(h->rings_offset + index * sizeof(shm::RingHeader));
    auto* line = consumer_.at<shm::ConsumerLine>(c->lines_offset + w * sizeof(shm::ConsumerLine));
    const char* slots = data_.at<const char>(h->slots_offset + index * h->slots_per_ring * h->slot_bytes);
    rings_[w].consumer = shm::RingConsumer(rh, line, slots, h->slots_per_ring, h->slot_bytes);
    rings_[w].released.assign(slots_, 0);
  }
  return {};
}

Status Attachment::position_at(uint64_t index, bool fresh) {
  // Ring w holds stream batches w, w + W, w + 2W, ...: its first seq at or
  // after `index` is ceil((index - w) / W).
  std::vector<uint64_t> first(workers_);
  bool same = true;
  uint64_t newest = 0;
  for (uint32_t w = 0; w < workers_; ++w) {
    first[w] = index > w ? (index - w + workers_ - 1) / workers_ : 0;
    const shm::ConsumerLine* line = rings_[w].consumer.line();
    uint64_t s = line->session.load(std::memory_order_relaxed);
    newest = std::max(newest, s);
    same &= s == rings_[w].consumer.header()->session.load(std::memory_order_acquire) &&
            line->tail.load(std::memory_order_relaxed) == first[w];
  }
  // Continuing exactly where the rings stand keeps what is already built
  // (a warm start); anything else, or a stream the daemon has just planned
  // again, starts a new session at `index`.
  same &= !fresh;
  for (uint32_t w = 0; w < workers_; ++w) {
    if (same) rings_[w].consumer.adopt(rings_[w].consumer.line()->session.load(std::memory_order_relaxed), first[w]);
    else rings_[w].consumer.reposition(newest + 1, first[w]);
    rings_[w].tail = first[w];
  }
  next_index_ = index;
  consumer_header_->next_index.store(index, std::memory_order_relaxed);
  last_return_ns_ = 0;
  return {};
}

Status Attachment::check_liveness(bool force) {
  uint64_t now = shm::monotonic_ns();
  // Workers that still deliver keep the stream alive while the supervisor's
  // heartbeat is late (stopped, or busy): a batch found ready counts as a beat.
  uint64_t beat = std::max(header_->heartbeat_ns.load(std::memory_order_relaxed), last_batch_ns_);
  uint64_t limit = static_cast<uint64_t>(std::chrono::nanoseconds(opt_.liveness_timeout).count());
  if (now > beat && now - beat > limit) {
    return {Code::kDaemonLost, "daemon lost: no heartbeat and no batch for " + num((now - beat) / 1'000'000) +
                                   " ms (stopped or hung); rank " + num(rank_) +
                                   "; nothing is consumed: calling next() again resumes where it stopped once the "
                                   "daemon runs again"};
  }
  if (force || now - last_poll_ns_ > 20'000'000) {
    last_poll_ns_ = now;
    pollfd p{sock_, POLLIN, 0};
    if (::poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLERR | POLLIN))) {
      char c;
      if ((p.revents & (POLLHUP | POLLERR)) || ::recv(sock_, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0)
        return {Code::kDaemonLost, "daemon lost: the control connection closed (daemon exited); rank " + num(rank_)};
    }
  }
  return {};
}

Status Attachment::corrupt(uint32_t w, uint64_t seq, std::string_view what) const {
  return {Code::kCorrupt, "rank " + num(rank_) + " worker " + num(w) + " seq " + num(seq) + ": " + std::string(what)};
}

Status Attachment::next(Batch& out) {
  out.release();
  uint64_t t_enter = shm::monotonic_ns();
  if (last_return_ns_) consumer_header_->busy_ns.fetch_add(t_enter - last_return_ns_, std::memory_order_relaxed);
  if (counts_pending_) refresh_counts();
  if (next_index_ >= total_) return {Code::kEndOfStream, "end of stream: " + num(epochs_) + " epochs delivered"};
  const uint32_t w = static_cast<uint32_t>(next_index_ % workers_);
  const uint64_t seq = next_index_ / workers_;
  Ring& ring = rings_[w];
  {
    std::lock_guard lock(release_mu_);
    if (seq - ring.tail >= slots_)
      return {Code::kInvalidArgument, "rank " + num(rank_) + ": the trainer holds all " + num(slots_) +
                                          " slots of worker " + num(w) +
                                          "'s ring; release (free) old batches before asking for more"};
  }
  if (ring.consumer.available(seq)) {
    last_batch_ns_ = t_enter;
    // A closed control connection still ends the stream at once.
    if (Status st = check_liveness(false); !st.ok()) return st;
  } else {
    // Liveness is judged after a first wait, not before: right after the
    // daemon is continued its heartbeat is stale for one period.
    uint64_t spin_until = t_enter + static_cast<uint64_t>(std::chrono::nanoseconds(opt_.spin).count());
    while (!ring.consumer.available(seq) && shm::monotonic_ns() < spin_until) tokfeed::shm::cpu_relax();
    while (!ring.consumer.available(seq)) {
      ring.consumer.wait_for_producer(seq, std::chrono::milliseconds(100));
      if (ring.consumer.available(seq)) break;
      if (Status st = check_liveness(true); !st.ok()) return st;
      // Counts that arrive while waiting may put this batch past the end.
      if (counts_pending_ && refresh_counts() && next_index_ >= total_)
        return {Code::kEndOfStream, "end of stream: " + num(epochs_) + " epochs delivered"};
    }
    last_batch_ns_ = shm::monotonic_ns();
  }

  // Copy the header out of shared memory before checking it, so the producer
  // cannot change what was checked.
  const char* slot = ring.consumer.slot(seq);
  shm::SlotHeader h;
  std::memcpy(&h, slot, sizeof h);
  shm::SlotFault f = shm::validate_slot_header(h, header_->slot_bytes, seq, ring.consumer.session());
  if (f != shm::SlotFault::kNone) return corrupt(w, seq, shm::slot_fault_name(f));
  if (h.stream_index != next_index_) return corrupt(w, seq, "slot holds batch " + num(h.stream_index));
  if (opt_.verify_checksums && shm::slot_checksum(slot, h) != h.checksum)
    return corrupt(w, seq, shm::slot_fault_name(shm::SlotFault::kBadChecksum));

  out.ring_ = w;
  out.seq_ = seq;
  out.index_ = next_index_;
  out.epoch_ = h.epoch;
  out.step_ = h.step;
  out.rows_ = h.rows;
  out.seq_len_ = h.seq_len;
  out.real_tokens_ = h.real_tokens;
  out.checksum_ = h.checksum;
  out.tensor_count_ = h.tensor_count;
  for (uint32_t i = 0; i < h.tensor_count; ++i) {
    const shm::TensorDesc& t = h.tensors[i];
    TensorView& v = out.tensors_[i];
    // The name lives in the slot (validated NUL-terminated); views stay valid
    // while the batch holds the slot.
    const char* name = slot + offsetof(shm::SlotHeader, tensors) + i * sizeof(shm::TensorDesc);
    v.name = std::string_view(name, strnlen(t.name, shm::kTensorNameBytes));
    v.dtype = static_cast<Dtype>(t.dtype);
    v.ndim = static_cast<int>(t.ndim);
    v.shape[0] = t.shape[0];
    v.shape[1] = t.shape[1];
    v.data = view_of(slot) + t.offset;
    v.nbytes = t.nbytes;
  }
  // The batch keeps the mapping alive, even past the Client.
  out.attachment_ = shared_from_this();
  have_last_ = true;
  last_index_ = next_index_;
  last_epoch_ = h.epoch;
  last_step_ = h.step;

  ++next_index_;
  uint64_t t_exit = shm::monotonic_ns();
  uint64_t waited = t_exit - t_enter;
  consumer_header_->next_index.store(next_index_, std::memory_order_relaxed);
  consumer_header_->consumed.fetch_add(1, std::memory_order_relaxed);
  consumer_header_->wait_ns.fetch_add(waited, std::memory_order_relaxed);
  int bucket = 0;
  for (uint64_t limit = 1000; bucket < 9 && waited >= limit; limit *= 10) ++bucket;
  consumer_header_->wait_hist[bucket].fetch_add(1, std::memory_order_relaxed);
  last_return_ns_ = t_exit;
  return {};
}

void Attachment::release(uint32_t w, uint64_t seq) noexcept {
  std::lock_guard lock(release_mu_);
  Ring& ring = rings_[w];
  if (seq < ring.tail || seq - ring.tail >= slots_) return;
  ring.released[seq % slots_] = 1;
  // Drop the private pages a consumer wrote, before the producer may reuse
  // the slot: the next batch there is read from the ring again.
  if (cow_) drop_private_pages(view_of(ring.consumer.slot(seq)));
  uint64_t tail = ring.tail;
  while (ring.released[tail % slots_] && tail - ring.tail < slots_) {
    ring.released[tail % slots_] = 0;
    ++tail;
  }
  if (tail != ring.tail) {
    ring.tail = tail;
    ring.consumer.release_to(tail);
  }
}

}  // namespace tokfeed::detail
