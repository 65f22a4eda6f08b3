// The one control protocol (DESIGN.md contract 4): length-prefixed msgpack
// frames over a unix stream socket.
//
//   frame   = length:u32 little-endian | payload
//   payload = msgpack map with "v" (protocol version) and, in requests, "op"
//
// Frames larger than kMaxFrameBytes are refused before any allocation, and
// payloads are unpacked with explicit msgpack limits: the library's defaults
// would let a 5-byte array header ask for gigabytes.
#pragma once

#include <msgpack.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tokfeed::proto {

inline constexpr uint32_t kVersion = 1;
inline constexpr uint32_t kMaxFrameBytes = 1u << 20;
inline constexpr uint32_t kMaxFds = 4;

// Bounds for every unpack: containers, strings and nesting depth.
inline msgpack::unpack_limit unpack_limits() {
  return msgpack::unpack_limit(/*array=*/16384, /*map=*/4096, /*str=*/kMaxFrameBytes,
                               /*bin=*/kMaxFrameBytes, /*ext=*/0, /*depth=*/32);
}

// Unpacks one payload under unpack_limits(). Returns an error message, empty
// on success. The payload must be a map whose "v" is kVersion.
std::string decode_payload(std::string_view payload, msgpack::object_handle& out) noexcept;

// Prefixes a packed payload with its length.
std::string encode_frame(std::string_view payload);

// Incremental frame splitter for a byte stream.
class FrameReader {
 public:
  enum class Next { kNeedMore, kFrame, kError };
  void feed(const char* data, std::size_t n) { buf_.append(data, n); }
  // On kFrame, `payload` holds the next frame's payload. On kError the stream
  // is unusable (oversized frame) and `error` says why.
  Next next(std::string& payload, std::string& error);
  std::size_t buffered() const { return buf_.size(); }

 private:
  std::string buf_;
};

// Map field access on an unpacked payload; nullptr / nullopt when absent or of
// another type.
const msgpack::object* find(const msgpack::object& map, std::string_view key) noexcept;
std::optional<int64_t> get_int(const msgpack::object& map, std::string_view key) noexcept;
std::optional<std::string_view> get_str(const msgpack::object& map, std::string_view key) noexcept;
std::optional<bool> get_bool(const msgpack::object& map, std::string_view key) noexcept;
// Any number (or bool) as a double; 0 for nullptr and other types.
double as_number(const msgpack::object* o) noexcept;

// Renders any msgpack object as JSON (for tokfeedctl --json and tests).
std::string to_json(const msgpack::object& o);

// A request {"v":1,"op":op, key: int...}.
std::string make_request(std::string_view op, std::initializer_list<std::pair<std::string_view, int64_t>> ints = {});

// ----- blocking socket helpers for clients and tools

// Connects to the daemon's socket. Returns the fd, or -1 with `error` set.
int connect_unix(const std::string& path, std::string& error) noexcept;

// Writes a whole frame. false with `error` on failure.
bool send_all(int fd, std::string_view bytes, std::string& error) noexcept;

// Sends a frame with file descriptors attached (SCM_RIGHTS).
bool send_with_fds(int fd, std::string_view bytes, const std::vector<int>& fds, std::string& error) noexcept;

// Reads one frame, collecting any descriptors that arrive with it into
// `fds`. `timeout_ms` < 0 waits forever. false with `error` on failure.
bool recv_frame(int fd, std::string& payload, std::vector<int>* fds, int timeout_ms, std::string& error) noexcept;

// One request, one reply: connect, send, read, decode. Checks "ok" and copies
// a daemon "error" into `error`.
bool call(const std::string& socket, std::string_view request, msgpack::object_handle& reply, std::string& error,
          int timeout_ms = 5000);

}  // namespace tokfeed::proto
