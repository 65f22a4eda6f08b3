#include "tokfeed/proto/frame.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace tokfeed::proto {

std::string decode_payload(std::string_view payload, msgpack::object_handle& out) noexcept {
  try {
    std::size_t off = 0;
    out = msgpack::unpack(payload.data(), payload.size(), off, nullptr, nullptr, unpack_limits());
    if (off != payload.size()) return "trailing bytes after the msgpack payload";
    const msgpack::object& o = out.get();
    if (o.type != msgpack::type::MAP) return "payload is not a msgpack map";
    auto v = get_int(o, "v");
    if (!v) return "payload has no protocol version \"v\"";
    if (*v != kVersion)
      return "protocol version " + std::to_string(*v) + " is not supported (want " + std::to_string(kVersion) + ")";
    return {};
  } catch (const msgpack::unpack_error& e) {
    return std::string("malformed msgpack: ") + e.what();
  } catch (const std::exception& e) {
    return std::string("malformed msgpack: ") + e.what();
  }
}

std::string encode_frame(std::string_view payload) {
  std::string frame(4 + payload.size(), '\0');
  uint32_t n = static_cast<uint32_t>(payload.size());
  for (int i = 0; i < 4; ++i) frame[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  std::memcpy(frame.data() + 4, payload.data(), payload.size());
  return frame;
}

FrameReader::Next FrameReader::next(std::string& payload, std::string& error) {
  if (buf_.size() < 4) return Next::kNeedMore;
  uint32_t n = 0;
  for (int i = 0; i < 4; ++i) n |= uint32_t(static_cast<unsigned char>(buf_[i])) << (8 * i);
  if (n > kMaxFrameBytes) {
    error = "frame of " + std::to_string(n) + " bytes exceeds the limit of " + std::to_string(kMaxFrameBytes);
    return Next::kError;
  }
  if (buf_.size() < 4 + std::size_t{n}) return Next::kNeedMore;
  payload.assign(buf_, 4, n);
  buf_.erase(0, 4 + std::size_t{n});
  return Next::kFrame;
}

const msgpack::object* find(const msgpack::object& map, std::string_view key) noexcept {
  if (map.type != msgpack::type::MAP) return nullptr;
  for (uint32_t i = 0; i < map.via.map.size; ++i) {
    const auto& kv = map.via.map.ptr[i];
    if (kv.key.type == msgpack::type::STR && std::string_view(kv.key.via.str.ptr, kv.key.via.str.size) == key)
      return &kv.val;
  }
  return nullptr;
}

double as_number(const msgpack::object* o) noexcept {
  if (!o) return 0;
  switch (o->type) {
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64: return o->via.f64;
    case msgpack::type::POSITIVE_INTEGER: return static_cast<double>(o->via.u64);
    case msgpack::type::NEGATIVE_INTEGER: return static_cast<double>(o->via.i64);
    case msgpack::type::BOOLEAN: return o->via.boolean;
    default: return 0;
  }
}

std::optional<int64_t> get_int(const msgpack::object& map, std::string_view key) noexcept {
  const msgpack::object* o = find(map, key);
  if (!o) return std::nullopt;
  if (o->type == msgpack::type::POSITIVE_INTEGER) {
    if (o->via.u64 > uint64_t(INT64_MAX)) return std::nullopt;
    return static_cast<int64_t>(o->via.u64);
  }
  if (o->type == msgpack::type::NEGATIVE_INTEGER) return o->via.i64;
  return std::nullopt;
}

std::optional<std::string_view> get_str(const msgpack::object& map, std::string_view key) noexcept {
  const msgpack::object* o = find(map, key);
  if (!o || o->type != msgpack::type::STR) return std::nullopt;
  return std::string_view(o->via.str.ptr, o->via.str.size);
}

std::optional<bool> get_bool(const msgpack::object& map, std::string_view key) noexcept {
  const msgpack::object* o = find(map, key);
  if (!o || o->type != msgpack::type::BOOLEAN) return std::nullopt;
  return o->via.boolean;
}

namespace {

void json_string(std::string& out, std::string_view s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

void json_value(std::string& out, const msgpack::object& o, int depth) {
  if (depth > 64) {
    out += "null";
    return;
  }
  switch (o.type) {
    case msgpack::type::NIL: out += "null"; break;
    case msgpack::type::BOOLEAN: out += o.via.boolean ? "true" : "false"; break;
    case msgpack::type::POSITIVE_INTEGER: out += std::to_string(o.via.u64); break;
    case msgpack::type::NEGATIVE_INTEGER: out += std::to_string(o.via.i64); break;
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64: {
      char buf[32];
      snprintf(buf, sizeof buf, "%.6g", o.via.f64);
      out += buf;
      break;
    }
    case msgpack::type::STR: json_string(out, std::string_view(o.via.str.ptr, o.via.str.size)); break;
    case msgpack::type::BIN: json_string(out, std::string_view(o.via.bin.ptr, o.via.bin.size)); break;
    case msgpack::type::ARRAY:
      out += '[';
      for (uint32_t i = 0; i < o.via.array.size; ++i) {
        if (i) out += ',';
        json_value(out, o.via.array.ptr[i], depth + 1);
      }
      out += ']';
      break;
    case msgpack::type::MAP:
      out += '{';
      for (uint32_t i = 0; i < o.via.map.size; ++i) {
        if (i) out += ',';
        const auto& kv = o.via.map.ptr[i];
        if (kv.key.type == msgpack::type::STR)
          json_string(out, std::string_view(kv.key.via.str.ptr, kv.key.via.str.size));
        else {
          std::string k;
          json_value(k, kv.key, depth + 1);
          json_string(out, k);
        }
        out += ':';
        json_value(out, kv.val, depth + 1);
      }
      out += '}';
      break;
    default: out += "null"; break;
  }
}

}  // namespace

std::string to_json(const msgpack::object& o) {
  std::string out;
  json_value(out, o, 0);
  return out;
}

std::string make_request(std::string_view op, std::initializer_list<std::pair<std::string_view, int64_t>> ints) {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_map(static_cast<uint32_t>(2 + ints.size()));
  pk.pack("v");
  pk.pack(kVersion);
  pk.pack("op");
  pk.pack(op);
  for (const auto& [k, v] : ints) {
    pk.pack(k);
    pk.pack(v);
  }
  return encode_frame(std::string_view(buf.data(), buf.size()));
}

int connect_unix(const std::string& path, std::string& error) noexcept {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    error = "socket path too long: " + path;
    return -1;
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    error = std::string("socket: ") + std::strerror(errno);
    return -1;
  }
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    const int e = errno;
    error = "cannot connect to the tokfeed daemon at " + path + ": " + std::strerror(e);
    if (e == EACCES || e == EPERM)
      error += " (no access: this user, uid " + std::to_string(::geteuid()) +
               ", may not open the socket or a folder above it; the daemon's user or group may, and [server] "
               "allow_uids / allow_gids name who else may talk to it)";
    else error += " (is tokfeedd running with this [server] socket?)";
    ::close(fd);
    return -1;
  }
  return fd;
}

bool send_all(int fd, std::string_view bytes, std::string& error) noexcept {
  while (!bytes.empty()) {
    ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      error = std::string("send: ") + std::strerror(errno);
      return false;
    }
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

bool send_with_fds(int fd, std::string_view bytes, const std::vector<int>& fds, std::string& error) noexcept {
  if (fds.empty() || fds.size() > kMaxFds) return send_all(fd, bytes, error);
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)] = {};
  iovec iov{const_cast<char*>(bytes.data()), bytes.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
  std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  ssize_t n;
  do n = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  if (n < 0) {
    error = std::string("sendmsg: ") + std::strerror(errno);
    return false;
  }
  return send_all(fd, bytes.substr(static_cast<std::size_t>(n)), error);
}

bool recv_frame(int fd, std::string& payload, std::vector<int>* fds, int timeout_ms, std::string& error) noexcept {
  FrameReader reader;
  char buf[65536];
  for (;;) {
    switch (reader.next(payload, error)) {
      case FrameReader::Next::kFrame: return true;
      case FrameReader::Next::kError: return false;
      case FrameReader::Next::kNeedMore: break;
    }
    pollfd p{fd, POLLIN, 0};
    int pr = ::poll(&p, 1, timeout_ms);
    if (pr < 0 && errno == EINTR) continue;
    if (pr == 0) {
      error = "timed out waiting for the daemon's reply";
      return false;
    }
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
    iovec iov{buf, sizeof buf};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    ssize_t n = ::recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0) {
      if (errno == EINTR) continue;
      error = std::string("recv: ") + std::strerror(errno);
      return false;
    }
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (std::size_t i = 0; i < count; ++i) {
        int received;
        std::memcpy(&received, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        if (fds) fds->push_back(received);
        else ::close(received);
      }
    }
    if (n == 0) {
      error = "the daemon closed the connection";
      return false;
    }
    reader.feed(buf, static_cast<std::size_t>(n));
  }
}

bool call(const std::string& socket, std::string_view request, msgpack::object_handle& reply, std::string& error,
          int timeout_ms) {
  int fd = connect_unix(socket, error);
  if (fd < 0) return false;
  std::string payload;
  bool ok = send_all(fd, request, error) && recv_frame(fd, payload, nullptr, timeout_ms, error);
  ::close(fd);
  if (!ok) return false;
  if (std::string e = decode_payload(payload, reply); !e.empty()) {
    error = "bad reply from the daemon: " + e;
    return false;
  }
  if (get_bool(reply.get(), "ok") != true) {
    error = std::string(get_str(reply.get(), "error").value_or("the daemon refused the request"));
    return false;
  }
  return true;
}

}  // namespace tokfeed::proto
