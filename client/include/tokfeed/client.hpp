// libtokfeed: the trainer's side of tokfeed. One header is all a user needs.
//
//   tokfeed::ClientOptions opt;
//   opt.socket = "/run/tokfeed/job.sock";
//   opt.rank = 0;
//   std::unique_ptr<tokfeed::Client> client;
//   if (auto st = tokfeed::Client::connect(opt, client); !st.ok()) die(st.message());
//   tokfeed::Batch batch;
//   while (client->next(batch).ok()) {
//     const tokfeed::TensorView* ids = batch.find("input_ids");
//     ...                      // zero-copy views into shared memory
//   }                          // a batch's slot is released when it is destroyed or reused
//
// Thread safety: one thread calls next(); Batch objects may be destroyed (and
// so released) from any thread, in any order.
// Errors are values (Status); nothing in this API throws.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace tokfeed {

enum class Code {
  kOk = 0,
  kEndOfStream,  // every configured epoch has been delivered
  kDaemonLost,   // the daemon died, stopped, or closed the connection
  kCorrupt,      // a shared-memory header or slot failed validation
  kRefused,      // the daemon refused the request (bad rank, already attached, ...)
  kIoError,      // cannot reach or talk to the daemon
  kInvalidArgument,
};

class Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}
  bool ok() const noexcept { return code_ == Code::kOk; }
  Code code() const noexcept { return code_; }
  const std::string& message() const noexcept { return message_; }
  std::string_view code_name() const noexcept;

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

enum class Dtype : uint32_t { kInt32 = 1, kInt64 = 2 };

inline constexpr std::size_t kMaxTensors = 8;  // tensors a batch may carry

struct TensorView {
  std::string_view name;
  Dtype dtype;
  int ndim;
  int64_t shape[2];
  const void* data;  // inside the read-only shared mapping
  std::size_t nbytes;
};

// The position of the next batch a client will receive (docs/data_model.md
// 4.3). `world_size` and `base` say which plan the step counts in; a position
// saved at one world size resumes at another (elastic), continuing the epoch
// with every row not yet delivered. 0 for world_size means the daemon's own.
struct Position {
  uint64_t epoch = 0;
  uint64_t step = 0;
  uint64_t world_size = 0;
  uint64_t base = 0;  // first row of the epoch's segment
};

// A rank's two streams (docs/data_model.md section 7): the training stream,
// or the evaluation stream, whose passes repeat without end. Each has its own
// rings: reading one never moves the other. An evaluation position is
// (epoch = pass, step) at the daemon's world size, base 0.
enum class Split : uint8_t { kTrain, kEval };

struct ClientOptions {
  std::string socket;
  uint32_t rank = 0;
  Split split = Split::kTrain;
  Position start;                                        // where to begin (exact resume)
  std::chrono::milliseconds liveness_timeout{1500};      // heartbeat age that means "daemon lost"
  std::chrono::milliseconds ready_timeout{3600 * 1000};  // for a daemon still indexing or building its cache
  std::chrono::microseconds spin{50};                    // spin before sleeping on the futex
  bool verify_checksums = false;                         // hash every payload (tools and tests)
  // Tensor views point into a private copy-on-write mapping of the slots:
  // a consumer that writes into a batch (a trainer's in-place op) changes
  // only its own pages, never the ring, instead of faulting on read-only
  // memory. A released slot's private pages are dropped (MADV_DONTNEED), so
  // the next batch in it is read from the ring. Needs page-sized slots
  // (every daemon of this version); otherwise views stay read-only.
  bool copy_on_write = false;
};

namespace detail {
class Attachment;
}

class Batch {
 public:
  Batch() = default;
  Batch(Batch&&) noexcept;
  Batch& operator=(Batch&&) noexcept;
  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;
  ~Batch();

  explicit operator bool() const noexcept { return attachment_ != nullptr; }
  uint64_t epoch() const noexcept { return epoch_; }
  uint64_t step() const noexcept { return step_; }
  uint64_t index() const noexcept { return index_; }
  uint32_t rows() const noexcept { return rows_; }
  uint32_t seq_len() const noexcept { return seq_len_; }
  uint64_t real_tokens() const noexcept { return real_tokens_; }
  uint64_t checksum() const noexcept { return checksum_; }
  std::size_t tensor_count() const noexcept { return tensor_count_; }
  const TensorView& tensor(std::size_t i) const noexcept { return tensors_[i]; }
  const TensorView* find(std::string_view name) const noexcept;
  // Releases the slot now (also done by the destructor).
  void release() noexcept;

 private:
  friend class detail::Attachment;
  std::shared_ptr<detail::Attachment> attachment_;
  uint32_t ring_ = 0;
  uint64_t seq_ = 0;
  uint64_t epoch_ = 0, step_ = 0, index_ = 0;
  uint32_t rows_ = 0, seq_len_ = 0;
  uint64_t real_tokens_ = 0, checksum_ = 0;
  std::size_t tensor_count_ = 0;
  TensorView tensors_[kMaxTensors]{};
};

class Client {
 public:
  // Attaches to the daemon as `opt.rank`, maps the rings and positions the
  // stream at `opt.start`. Repositioning is O(1): nothing before it is built.
  static Status connect(const ClientOptions& opt, std::unique_ptr<Client>& out) noexcept;
  ~Client();

  // The next batch, in stream order. Waits for it (spinning briefly, then
  // sleeping on a futex). Returns kEndOfStream after the last epoch (never
  // on the eval split, unless this rank has no batch in a pass) and
  // kDaemonLost within about liveness_timeout if the daemon dies or stops.
  Status next(Batch& out) noexcept;

  Position position() const noexcept;                   // of the next batch next() returns
  Position position_of(uint64_t index) const noexcept;  // of stream batch `index`
  // In the current epoch (packing varies it); eval: a pass. On a cold start
  // the daemon serves while its token cache builds and knows the counts only
  // once it is built: this blocks until then (0 if the daemon is lost).
  uint64_t batches_per_epoch() const noexcept;
  uint64_t epochs() const noexcept;  // the job's epochs; eval: 1 (each pass counts as one)
  Split split() const noexcept;
  uint32_t rank() const noexcept;
  uint32_t workers() const noexcept;
  // The data mapping tensor views point into (zero-copy checks, host
  // registration): the read-only shared one, or with copy_on_write the
  // private one.
  const void* mapping_base() const noexcept;
  std::size_t mapping_size() const noexcept;

 private:
  explicit Client(std::shared_ptr<detail::Attachment> a) : a_(std::move(a)) {}
  std::shared_ptr<detail::Attachment> a_;
};

}  // namespace tokfeed
