// The control protocol's messages (docs/control_protocol.md draws each one).
// Every request and reply is a msgpack map with "v" = kVersion; requests add
// "op", replies add "ok". Daemon, client and tokfeedctl build and read them
// only through these types: no map is packed or picked apart by hand
// elsewhere.
//
// encode() returns a payload (frame it with encode_frame). decode() takes a
// payload already unpacked by decode_payload (so the version is checked) and
// returns an error message, empty on success; a decoded message has every
// field present, of its type and in range.
#pragma once

#include <msgpack.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tokfeed::proto {

enum class Op { kStatus, kAttach, kPing, kShutdown };

std::string_view op_name(Op op) noexcept;

// The "op" of a request. Error for a missing or unknown op.
std::string decode_op(const msgpack::object& request, Op& out);

// status, ping and shutdown: the op alone.
std::string encode_request(Op op);

// Which of a rank's two streams: the training stream, or the evaluation
// stream's passes (docs/data_model.md section 7).
enum class Split : uint8_t { kTrain, kEval };

std::string_view split_name(Split s) noexcept;
// "train" or "eval"; false for anything else.
bool parse_split(std::string_view name, Split& out) noexcept;

// attach: a client asks for rank `rank`'s stream from a position
// (docs/data_model.md 4.3; of the eval split: pass `epoch`, batch `step`).
// world_size 0 means the daemon's own. A request without "split" is train.
struct AttachRequest {
  uint32_t rank = 0;
  uint64_t epoch = 0;
  uint64_t step = 0;
  uint64_t world_size = 0;
  uint64_t base = 0;
  Split split = Split::kTrain;
  // The client reads batch counts that arrive after attach from its consumer
  // segment (docs/control_protocol.md); absent (older clients): false, and
  // such a client is attached only once the counts are known.
  bool counts_later = false;

  std::string encode() const;
  static std::string decode(const msgpack::object& request, AttachRequest& out);
};

// The reply to a successful attach. Two descriptors travel with it
// (SCM_RIGHTS): the data segment read-only, then the rank's consumer segment.
struct AttachReply {
  uint32_t rank = 0;
  uint32_t ring_base = 0;               // index of the rank's first ring in the data segment
  uint32_t workers = 0;                 // rings of the rank, one per worker
  uint64_t first_epoch = 0;             // the plan's first epoch ...
  uint64_t start_base = 0;              // ... and the row of that epoch it starts at
  uint64_t epochs = 0;                  // the job's epochs
  uint64_t world_size = 0;              // the world size the plan deals rows over
  uint64_t start_index = 0;             // stream index of the client's position
  bool replanned = false;               // the stream was planned again for this position
  std::vector<uint64_t> epoch_batches;  // batches of each epoch from first_epoch on
  // The stream served. Eval: passes repeat without end, each of
  // epoch_batches[0] batches (epochs 1); a daemon that predates splits
  // sends no "split", read as train.
  Split split = Split::kTrain;
  // The counts are not known yet (the token cache still builds):
  // epoch_batches is empty, and the counts arrive in the consumer segment.
  bool counts_pending = false;

  std::string encode() const;
  static std::string decode(const msgpack::object& reply, AttachReply& out);
};

// What kind of failure an error reply reports.
enum class ErrorCode {
  kRefused,          // not allowed or not possible (rank not served, already attached, ...)
  kInvalidArgument,  // the request names a position or field outside what the daemon serves
  kNotReady,         // still indexing or building the cache: ask again after retry_ms
  kBadRequest,       // malformed frame, msgpack or fields
  kInternal,         // the daemon failed
};

std::string_view error_code_name(ErrorCode code) noexcept;

// {"ok": false}: every refusal and failure.
struct ErrorReply {
  ErrorCode code = ErrorCode::kRefused;
  std::string message;    // what failed and what to do
  uint32_t retry_ms = 0;  // kNotReady: when to ask again

  std::string encode() const;
  static std::string decode(const msgpack::object& reply, ErrorReply& out);
};

// {"ok": true} with nothing else: ping and shutdown.
std::string encode_ok();

// Whether a decoded reply says "ok": true. Read it first, then decode the
// reply as the op's reply type or as an ErrorReply.
bool reply_ok(const msgpack::object& reply) noexcept;

}  // namespace tokfeed::proto
