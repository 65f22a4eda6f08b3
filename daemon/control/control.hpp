// The control plane: a unix stream socket speaking proto/ frames, served by
// Boost.Asio on the supervisor's single thread. Exceptions may be thrown in
// here, but never leave a handler: a bad client gets an error reply or is
// disconnected, and the daemon carries on.
#pragma once

#include <sys/types.h>

#include <utility>  // Boost 1.74 Asio uses std::exchange without it
#include <boost/asio.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <msgpack.hpp>
#include <string>
#include <vector>

#include "tokfeed/proto/messages.hpp"

namespace tokfeed {

struct Peer {
  uint64_t id;  // connection number
  pid_t pid;
  uid_t uid;
  gid_t gid;
};

// A reply: a packed msgpack map, plus descriptors to pass with it.
struct Reply {
  std::string payload;
  std::vector<int> fds;  // sent with SCM_RIGHTS, then closed
  bool close_after = false;
  bool persistent = false;  // the connection now holds an attachment: no idle timeout
};

// Who may connect, checked with SO_PEERCRED / SO_PEERGROUPS after accept:
// root, the daemon's own uid, the uids listed, and peers with a listed gid
// as their primary or a supplementary group.
struct Access {
  std::vector<uint32_t> uids;
  std::vector<uint32_t> gids;
  bool allows(uid_t uid, const std::vector<gid_t>& groups) const;
};

// Bounds that keep idle or hostile clients from starving the control plane.
inline constexpr std::size_t kMaxConnections = 256;  // beyond this, new connections are refused
inline constexpr int kIdleTimeoutMs = 5000;          // a connection with no request for this long is closed

class ControlHandler {
 public:
  virtual ~ControlHandler() = default;
  // Handles one decoded request (a map with "op").
  virtual Reply handle(const Peer& peer, const msgpack::object& request) = 0;
  // The connection closed (a detach, for an attached client).
  virtual void closed(const Peer& peer) = 0;
};

class ControlServer {
 public:
  ControlServer(boost::asio::io_context& io, const std::string& path, ControlHandler& handler, Access access);
  ~ControlServer();
  void close();
  std::size_t connections() const { return *live_; }

 private:
  void accept();
  std::string path_;
  pid_t owner_;  // the process that bound the socket: the only one that removes it
  ControlHandler& handler_;
  Access access_;
  boost::asio::local::stream_protocol::acceptor acceptor_;
  uint64_t next_id_ = 1;
  std::shared_ptr<std::size_t> live_ = std::make_shared<std::size_t>(0);
};

// An ErrorReply (proto/messages.hpp) as a payload.
std::string error_reply(const std::string& message, proto::ErrorCode code = proto::ErrorCode::kRefused);

}  // namespace tokfeed
