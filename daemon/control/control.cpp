#include "control/control.hpp"

#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "tokfeed/proto/frame.hpp"
#include "tokfeed/proto/messages.hpp"

namespace tokfeed {

namespace asio = boost::asio;
using stream = asio::local::stream_protocol;

std::string error_reply(const std::string& message, proto::ErrorCode code) {
  return proto::ErrorReply{code, message}.encode();
}

bool Access::allows(uid_t uid, const std::vector<gid_t>& groups) const {
  if (uid == 0 || uid == getuid()) return true;
  for (uint32_t u : uids)
    if (u == uid) return true;
  for (uint32_t g : gids)
    for (gid_t have : groups)
      if (g == have) return true;
  return false;
}

namespace {

// The peer's primary and supplementary groups, as they were at connect().
std::vector<gid_t> peer_groups(int fd, gid_t primary) {
  std::vector<gid_t> groups(64);
  socklen_t len = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
  int rc = getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &len);
  if (rc != 0 && errno == ERANGE) {  // len now holds the size needed
    groups.resize(len / sizeof(gid_t));
    rc = getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &len);
  }
  groups.resize(rc == 0 ? len / sizeof(gid_t) : 0);
  groups.push_back(primary);
  return groups;
}

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(stream::socket sock, Peer peer, ControlHandler& handler, std::shared_ptr<std::size_t> live)
      : sock_(std::move(sock)), idle_(sock_.get_executor()), peer_(peer), handler_(handler), live_(std::move(live)) {
    ++*live_;
  }
  ~Connection() {
    if (reply_failures_ > 1)
      spdlog::warn("control: pid {}: {} more replies failed on that connection (not logged)", peer_.pid,
                   reply_failures_ - 1);
    --*live_;
    handler_.closed(peer_);
  }

  void start() {
    arm_idle();
    read();
  }

 private:
  // A connection that sends no request for kIdleTimeoutMs is closed, unless
  // it holds an attachment (a client's connection is idle by design).
  void arm_idle() {
    if (persistent_) return;
    idle_.expires_after(std::chrono::milliseconds(kIdleTimeoutMs));
    std::weak_ptr<Connection> weak = shared_from_this();
    idle_.async_wait([weak](boost::system::error_code ec) {
      auto self = weak.lock();
      if (ec || !self || self->persistent_) return;
      spdlog::info("control: client pid {} uid {} sent no request for {} ms; disconnecting", self->peer_.pid,
                   self->peer_.uid, kIdleTimeoutMs);
      boost::system::error_code ignored;
      self->sock_.close(ignored);
    });
  }

  void read() {
    auto self = shared_from_this();
    sock_.async_read_some(asio::buffer(buf_), [self](boost::system::error_code ec, std::size_t n) {
      if (ec) return;  // closed or failed: dropping the last reference detaches
      self->reader_.feed(self->buf_.data(), n);
      self->drain();
    });
  }

  void drain() {
    std::string payload, error;
    for (;;) {
      switch (reader_.next(payload, error)) {
        case proto::FrameReader::Next::kNeedMore: read(); return;
        case proto::FrameReader::Next::kError:
          spdlog::warn("control: client pid {} uid {}: {}; disconnecting", peer_.pid, peer_.uid, error);
          send({error_reply(error, proto::ErrorCode::kBadRequest), {}, true});
          return;
        case proto::FrameReader::Next::kFrame: break;
      }
      msgpack::object_handle req;
      if (std::string e = proto::decode_payload(payload, req); !e.empty()) {
        send({error_reply("bad request: " + e, proto::ErrorCode::kBadRequest), {}, true});
        return;
      }
      Reply reply;
      try {
        reply = handler_.handle(peer_, req.get());
      } catch (const std::exception& ex) {
        reply = {error_reply(std::string("internal error: ") + ex.what(), proto::ErrorCode::kInternal), {}, false};
      }
      bool close = reply.close_after;
      persistent_ |= reply.persistent;
      if (persistent_) idle_.cancel();
      else arm_idle();
      send(reply);
      // A reply that failed closed the socket: the rest of what the client
      // sent is not answered (nor logged once per request).
      if (close || !sock_.is_open()) return;
    }
  }

  // Replies are small; a client that does not read them gets disconnected
  // rather than holding the daemon.
  void send(const Reply& reply) {
    if (!sock_.is_open()) {
      for (int f : reply.fds) ::close(f);
      ++reply_failures_;
      return;
    }
    std::string frame = proto::encode_frame(reply.payload);
    std::string error;
    int fd = sock_.native_handle();
    bool ok = proto::send_with_fds(fd, frame, reply.fds, error);
    for (int f : reply.fds) ::close(f);
    if (!ok) {
      // Logged once per connection; the destructor counts the rest.
      if (reply_failures_++ == 0) spdlog::warn("control: cannot reply to pid {}: {}; disconnecting", peer_.pid, error);
      sock_.close();
      return;
    }
    if (reply.close_after) {
      boost::system::error_code ec;
      sock_.shutdown(stream::socket::shutdown_both, ec);
    }
  }

  stream::socket sock_;
  asio::steady_timer idle_;
  bool persistent_ = false;
  uint32_t reply_failures_ = 0;
  Peer peer_;
  ControlHandler& handler_;
  std::shared_ptr<std::size_t> live_;
  proto::FrameReader reader_;
  std::array<char, 16384> buf_;
};

}  // namespace

ControlServer::ControlServer(asio::io_context& io, const std::string& path, ControlHandler& handler, Access access)
    : path_(path), owner_(::getpid()), handler_(handler), access_(std::move(access)), acceptor_(io) {
  // The socket is bound and listening under a temporary name, then renamed
  // into place: a client that finds the path can always connect (a socket
  // bound but not yet listening would refuse it).
  std::string tmp = path + "." + std::to_string(owner_) + "~";
  if (tmp.size() >= sizeof(sockaddr_un::sun_path)) tmp = path;  // no room: bind in place
  ::unlink(tmp.c_str());
  stream::endpoint ep(tmp);
  acceptor_.open(ep.protocol());
  acceptor_.bind(ep);
  ::chmod(tmp.c_str(), 0660);
  acceptor_.listen(128);
  if (tmp != path && ::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    throw std::runtime_error(path + ": cannot put the control socket in place: " + std::strerror(e));
  }
  accept();
}

ControlServer::~ControlServer() { close(); }

void ControlServer::close() {
  if (acceptor_.is_open()) {
    boost::system::error_code ec;
    acceptor_.close(ec);
    if (::getpid() == owner_) ::unlink(path_.c_str());
  }
}

void ControlServer::accept() {
  acceptor_.async_accept([this](boost::system::error_code ec, stream::socket sock) {
    if (ec) {
      if (ec != asio::error::operation_aborted) {
        spdlog::warn("control: accept failed: {}", ec.message());
        accept();
      }
      return;
    }
    ucred cred{};
    socklen_t len = sizeof cred;
    getsockopt(sock.native_handle(), SOL_SOCKET, SO_PEERCRED, &cred, &len);
    // Only the daemon's own user, root, and [server] allow_uids / allow_gids
    // may talk to it.
    if (!access_.allows(cred.uid, peer_groups(sock.native_handle(), cred.gid))) {
      spdlog::warn("control: refused connection from uid {} gid {} pid {} (not in [server] allow_uids / allow_gids)",
                   cred.uid, cred.gid, cred.pid);
      std::string frame = proto::encode_frame(error_reply(
          "uid " + std::to_string(cred.uid) + " is not allowed by this daemon's [server] allow_uids / allow_gids"));
      std::string error;
      proto::send_all(sock.native_handle(), frame, error);
    } else if (*live_ >= kMaxConnections) {
      spdlog::warn("control: refused connection from uid {} pid {}: {} connections open (the limit)", cred.uid,
                   cred.pid, kMaxConnections);
      std::string frame = proto::encode_frame(error_reply("too many connections to the daemon; try again later"));
      std::string error;
      proto::send_all(sock.native_handle(), frame, error);
    } else {
      Peer peer{next_id_++, cred.pid, cred.uid, cred.gid};
      std::make_shared<Connection>(std::move(sock), peer, handler_, live_)->start();
    }
    accept();
  });
}

}  // namespace tokfeed
