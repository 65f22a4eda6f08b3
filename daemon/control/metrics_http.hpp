// [server] metrics_listen: a minimal HTTP/1.x endpoint for a Prometheus
// scraper. GET /metrics answers the text `tokfeedctl metrics` prints (the same
// formatter); nothing else is served.
//
// It listens on TCP, so every peer is treated as hostile: one request per
// connection (Connection: close), a bounded request head, a deadline for
// reading the request and one for writing the reply, and a cap on open
// connections. Runs on the supervisor's Asio thread; a handler never throws.
#pragma once

#include <utility>  // Boost 1.74 Asio uses std::exchange without it
#include <boost/asio.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace tokfeed {

struct MetricsHttpLimits {
  std::size_t max_request_bytes = 8192;  // request line + headers
  std::size_t max_connections = 32;      // open at once; more are closed at accept
  std::chrono::milliseconds read_timeout{5000};
  std::chrono::milliseconds write_timeout{5000};
};

class MetricsHttpServer {
 public:
  using Body = std::function<std::string()>;

  // Binds host:port (an IP literal; port 0 picks a free port). Throws
  // std::runtime_error naming the address when it cannot listen.
  MetricsHttpServer(boost::asio::io_context& io, const std::string& host, uint16_t port, Body body,
                    MetricsHttpLimits limits = {});
  ~MetricsHttpServer();
  void close();
  // The bound address as host:port ([v6]:port), with the real port.
  const std::string& endpoint() const { return endpoint_; }

  struct Shared;  // what connections share with the server (may outlive it)

 private:
  void accept();
  boost::asio::ip::tcp::acceptor acceptor_;
  boost::asio::steady_timer retry_;
  std::shared_ptr<Shared> shared_;
  std::string endpoint_;
};

}  // namespace tokfeed
