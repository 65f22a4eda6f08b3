#include "control/metrics_http.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <array>
#include <string_view>

namespace tokfeed {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;

struct MetricsHttpServer::Shared {
  Body body;
  MetricsHttpLimits limits;
  std::size_t live = 0;  // open connections
};

namespace {

struct Response {
  int code;
  std::string_view reason;
  std::string body;
  std::string_view extra_headers = {};
};

// The request line of a complete request head -> the response. Headers are
// read (to find the end of the head) but not needed: nothing depends on them.
Response route(std::string_view head, const MetricsHttpServer::Body& body, bool& head_only) {
  std::string_view line = head.substr(0, head.find('\n'));
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  // METHOD SP TARGET SP VERSION, nothing more.
  std::size_t sp1 = line.find(' ');
  std::size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || sp1 == 0 || sp2 == sp1 + 1 || line.find(' ', sp2 + 1) != std::string_view::npos)
    return {400, "Bad Request", "expected a request line: GET /metrics HTTP/1.1\n"};
  std::string_view part[3] = {line.substr(0, sp1), line.substr(sp1 + 1, sp2 - sp1 - 1), line.substr(sp2 + 1)};
  if (part[2] != "HTTP/1.0" && part[2] != "HTTP/1.1") {
    if (part[2].starts_with("HTTP/")) return {505, "HTTP Version Not Supported", "only HTTP/1.0 and HTTP/1.1\n"};
    return {400, "Bad Request", "expected a request line: GET /metrics HTTP/1.1\n"};
  }
  head_only = part[0] == "HEAD";
  if (part[0] != "GET" && !head_only) return {405, "Method Not Allowed", "only GET and HEAD\n", "Allow: GET, HEAD\r\n"};
  std::string_view path = part[1].substr(0, part[1].find('?'));
  if (path != "/metrics") return {404, "Not Found", "tokfeedd serves /metrics only\n"};
  try {
    return {200, "OK", body(), "Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"};
  } catch (const std::exception& e) {
    spdlog::error("metrics http: cannot build the metrics: {}", e.what());
    return {500, "Internal Server Error", "cannot build the metrics; see the daemon's log\n"};
  }
}

class HttpConnection : public std::enable_shared_from_this<HttpConnection> {
 public:
  HttpConnection(tcp::socket sock, std::string peer, std::shared_ptr<MetricsHttpServer::Shared> shared)
      : peer_(std::move(peer)), sock_(std::move(sock)), timer_(sock_.get_executor()), shared_(std::move(shared)) {
    ++shared_->live;
  }
  ~HttpConnection() { --shared_->live; }

  void start() {
    arm(shared_->limits.read_timeout);
    read();
  }

 private:
  // One deadline per phase: a peer that sends or reads too slowly is cut off.
  void arm(std::chrono::milliseconds limit) {
    timer_.expires_after(limit);
    timer_.async_wait([self = shared_from_this()](error_code ec) {
      if (ec) return;  // cancelled: the phase finished in time
      spdlog::debug("metrics http: {}: timed out; closing", self->peer_);
      error_code ignored;
      self->sock_.close(ignored);  // fails the pending read or write
    });
  }

  void read() {
    sock_.async_read_some(asio::buffer(buf_), [self = shared_from_this()](error_code ec, std::size_t n) {
      if (ec) {
        self->timer_.cancel();
        return;
      }
      self->on_data(n);
    });
  }

  void on_data(std::size_t n) {
    const std::size_t limit = shared_->limits.max_request_bytes;
    head_.append(buf_.data(), n);
    std::size_t end = head_.find("\r\n\r\n");
    if (end == std::string::npos) end = head_.find("\n\n");
    if (end == std::string::npos || end > limit) {
      if (head_.size() < limit) return read();
      return reply({431, "Request Header Fields Too Large", fmt::format("the request head exceeds {} bytes\n", limit)},
                   false);
    }
    bool head_only = false;
    Response r = route(std::string_view(head_).substr(0, end), shared_->body, head_only);
    reply(std::move(r), head_only);
  }

  void reply(Response r, bool head_only) {
    if (r.code != 200) spdlog::debug("metrics http: {}: {} {}", peer_, r.code, r.reason);
    out_ =
        fmt::format("HTTP/1.1 {} {}\r\n{}{}Content-Length: {}\r\nConnection: close\r\n\r\n", r.code, r.reason,
                    r.code == 200 ? "" : "Content-Type: text/plain; charset=utf-8\r\n", r.extra_headers, r.body.size());
    if (!head_only) out_ += r.body;
    timer_.cancel();
    arm(shared_->limits.write_timeout);
    asio::async_write(sock_, asio::buffer(out_), [self = shared_from_this()](error_code ec, std::size_t) {
      self->timer_.cancel();
      error_code ignored;
      if (!ec) self->sock_.shutdown(tcp::socket::shutdown_both, ignored);
      self->sock_.close(ignored);
    });
  }

 private:
  std::string peer_;  // for the debug log
  tcp::socket sock_;
  asio::steady_timer timer_;
  std::shared_ptr<MetricsHttpServer::Shared> shared_;
  std::array<char, 2048> buf_;
  std::string head_;
  std::string out_;
};

std::string format_endpoint(const tcp::endpoint& ep) {
  const asio::ip::address a = ep.address();
  return a.is_v6() ? fmt::format("[{}]:{}", a.to_string(), ep.port()) : fmt::format("{}:{}", a.to_string(), ep.port());
}

}  // namespace

MetricsHttpServer::MetricsHttpServer(asio::io_context& io, const std::string& host, uint16_t port, Body body,
                                     MetricsHttpLimits limits)
    : acceptor_(io), retry_(io), shared_(std::make_shared<Shared>(Shared{std::move(body), limits, 0})) {
  error_code ec;
  asio::ip::address addr = asio::ip::make_address(host, ec);
  if (ec) throw std::runtime_error(fmt::format("[server] metrics_listen: '{}' is not an IP address", host));
  tcp::endpoint ep(addr, port);
  std::string where = format_endpoint(ep);
  acceptor_.open(ep.protocol(), ec);
  if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor_.bind(ep, ec);
  if (!ec) acceptor_.listen(64, ec);
  if (ec) {
    throw std::runtime_error(fmt::format(
        "[server] metrics_listen: cannot listen on {}: {}; choose a free port or remove the key", where, ec.message()));
  }
  endpoint_ = format_endpoint(acceptor_.local_endpoint());
  accept();
}

MetricsHttpServer::~MetricsHttpServer() {
  try {
    close();
  } catch (const std::exception&) {  // a timer that cannot be cancelled dies with the io_context anyway
  }
}

void MetricsHttpServer::close() {
  error_code ec;
  retry_.cancel();
  if (acceptor_.is_open()) acceptor_.close(ec);
}

void MetricsHttpServer::accept() {
  acceptor_.async_accept([this](error_code ec, tcp::socket sock) {
    if (ec == asio::error::operation_aborted) return;  // closed
    if (ec) {
      // Out of descriptors and the like: say so, and try again shortly
      // rather than spin on a listening socket that stays readable.
      spdlog::warn("metrics http: accept failed: {}; retrying in 100 ms", ec.message());
      retry_.expires_after(std::chrono::milliseconds(100));
      retry_.async_wait([this](error_code e) {
        if (!e && acceptor_.is_open()) accept();
      });
      return;
    }
    error_code e2;
    tcp::endpoint peer = sock.remote_endpoint(e2);
    if (shared_->live >= shared_->limits.max_connections) {
      spdlog::debug("metrics http: {} connections open; refusing {}", shared_->live, format_endpoint(peer));
      sock.close(e2);
      return accept();
    }
    auto c = std::make_shared<HttpConnection>(std::move(sock), format_endpoint(peer), shared_);
    c->start();
    accept();
  });
}

}  // namespace tokfeed
