// The operator's view: status and Prometheus metrics agree with what a client
// consumed.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>
#include <vector>

#include "harness.hpp"

using namespace tokfeed::testing;

TEST_CASE("metrics: counters, gauges and the client wait histogram match a drained epoch") {
  TempDir dir;
  std::string body = "[dataset]\npath = \"" + data_path("sft/mixed-300.jsonl") +
                     "\"\n[tokenizer]\ntype = \"sentencepiece\"\npath = \"" +
                     data_path("tokenizers/sp32k/tokenizer.model") +
                     "\"\ntemplate = \"mistral\"\n"
                     // Every one of the 300 samples, the untrained one included: totals known by heart.
                     "[batch]\nkeep_untrained = true\n";
  Daemon d(write_job(dir, body), socket_of(dir));
  Output drain = run(bin("tokfeedctl") + " -s '" + d.socket() + "' drain");
  REQUIRE(drain.status == 0);
  CHECK(drain.out.find("\"batches\":75,\"samples\":300") != std::string::npos);
  Output m = run(bin("tokfeedctl") + " -s '" + d.socket() + "' metrics");
  REQUIRE(m.status == 0);
  for (const char* line : {"tokfeed_batches_total 75\n", "tokfeed_samples_total 300\n", "tokfeed_workers_alive 2\n",
                           "tokfeed_worker_restarts_total 0\n", "tokfeed_bad_records_total 0\n",
                           "tokfeed_client_wait_seconds_count{rank=\"0\"} 75\n",
                           "tokfeed_client_wait_seconds_bucket{rank=\"0\",le=\"+Inf\"} 75\n",
                           "# TYPE tokfeed_client_wait_seconds histogram\n"}) {
    CHECK_MESSAGE(m.out.find(line) != std::string::npos, line);
  }
  // tokens = real + padding, as status reports them.
  Output st = run(bin("tokfeedctl") + " -s '" + d.socket() + "' status --json");
  CHECK(st.out.find("\"real_tokens\":147289") != std::string::npos);
  CHECK(m.out.find("tokfeed_tokens_total 321128\n") != std::string::npos);
  CHECK(m.out.find("tokfeed_padding_tokens_total 173839\n") != std::string::npos);
  CHECK(d.stop(SIGTERM) == 0);
}

namespace {

std::string sp_job_body() {
  return "[dataset]\npath = \"" + data_path("sft/mixed-300.jsonl") +
         "\"\n[tokenizer]\ntype = \"sentencepiece\"\npath = \"" + data_path("tokenizers/sp32k/tokenizer.model") +
         "\"\ntemplate = \"mistral\"\n[batch]\nkeep_untrained = true\n";
}

// write_job ends in the [server] table: keys appended here land in it.
std::string job_with_server_key(const TempDir& dir, const std::string& line) {
  std::string path = write_job(dir, sp_job_body());
  // The line goes into the [server] table write_job wrote.
  std::string text = slurp(path);
  std::size_t at = text.find("[server]\n");
  REQUIRE(at != std::string::npos);
  text.insert(at + 9, line + "\n");
  std::ofstream(path, std::ios::trunc) << text;
  return path;
}

int tcp_connect(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  timeval tv{15, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

// Everything the server sends until it closes (or 15 s pass).
std::string read_all(int fd) {
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

std::string http(uint16_t port, const std::string& request) {
  int fd = tcp_connect(port);
  std::size_t sent = 0;
  while (sent < request.size()) {
    ssize_t n = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<std::size_t>(n);
  }
  std::string out = read_all(fd);
  ::close(fd);
  return out;
}

std::string body_of(const std::string& response) {
  std::size_t at = response.find("\r\n\r\n");
  return at == std::string::npos ? "" : response.substr(at + 4);
}

uint16_t bound_port(const std::string& socket) {
  Output st = run(bin("tokfeedctl") + " -s '" + socket + "' status --json");
  const std::string key = "\"metrics_listen\":\"127.0.0.1:";
  std::size_t at = st.out.find(key);
  REQUIRE_MESSAGE(at != std::string::npos, st.out);
  return static_cast<uint16_t>(std::stoul(st.out.substr(at + key.size())));
}

}  // namespace

TEST_CASE("metrics over HTTP: a scraper gets exactly the text of tokfeedctl metrics") {
  TempDir dir;
  Daemon d(job_with_server_key(dir, "metrics_listen = \"127.0.0.1:0\""), socket_of(dir));
  uint16_t port = bound_port(d.socket());
  CHECK(d.log().find("metrics: serving http://127.0.0.1:" + std::to_string(port) + "/metrics") != std::string::npos);
  REQUIRE(run(bin("tokfeedctl") + " -s '" + d.socket() + "' drain").status == 0);

  std::string r = http(port, "GET /metrics HTTP/1.1\r\nHost: localhost\r\nUser-Agent: test\r\n\r\n");
  REQUIRE(r.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(r.find("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n") != std::string::npos);
  std::string body = body_of(r);
  CHECK(r.find("Content-Length: " + std::to_string(body.size()) + "\r\n") != std::string::npos);
  for (const char* line : {"tokfeed_batches_total 75\n", "tokfeed_samples_total 300\n", "tokfeed_tokens_total 321128\n",
                           "tokfeed_padding_tokens_total 173839\n", "tokfeed_workers_alive 2\n",
                           "tokfeed_client_wait_seconds_count{rank=\"0\"} 75\n"})
    CHECK_MESSAGE(body.find(line) != std::string::npos, line);
  // Nothing moves once the epoch is drained: the two texts are identical.
  Output m = run(bin("tokfeedctl") + " -s '" + d.socket() + "' metrics");
  REQUIRE(m.status == 0);
  CHECK(body == m.out);
  // A query string is fine (scrapers add them); HEAD has the headers only.
  CHECK(body_of(http(port, "GET /metrics?x=1 HTTP/1.0\r\n\r\n")) == m.out);
  std::string head = http(port, "HEAD /metrics HTTP/1.1\r\n\r\n");
  CHECK(head.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(body_of(head).empty());
  CHECK(d.stop(SIGTERM) == 0);
}

TEST_CASE("metrics over HTTP: bad requests, slow and greedy peers do not hold the daemon") {
  TempDir dir;
  Daemon d(job_with_server_key(dir, "metrics_listen = \"127.0.0.1:0\""), socket_of(dir));
  uint16_t port = bound_port(d.socket());
  struct Case {
    std::string request, status;
  } cases[] = {
      {"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n", "HTTP/1.1 405 Method Not Allowed\r\n"},
      {"GET /secret HTTP/1.1\r\n\r\n", "HTTP/1.1 404 Not Found\r\n"},
      {"GET /../metrics HTTP/1.1\r\n\r\n", "HTTP/1.1 404 Not Found\r\n"},
      {"hello\r\n\r\n", "HTTP/1.1 400 Bad Request\r\n"},
      {"GET  /metrics HTTP/1.1\r\n\r\n", "HTTP/1.1 400 Bad Request\r\n"},
      {"GET /metrics HTTP/2.0\r\n\r\n", "HTTP/1.1 505 HTTP Version Not Supported\r\n"},
      {"GET /metrics HTTP/1.1\r\nX: " + std::string(20000, 'a') + "\r\n\r\n",
       "HTTP/1.1 431 Request Header Fields Too Large\r\n"},
  };
  for (const Case& c : cases) {
    INFO(c.request.substr(0, 40));
    CHECK(http(port, c.request).rfind(c.status, 0) == 0);
  }
  std::string not_allowed = http(port, "DELETE /metrics HTTP/1.1\r\n\r\n");
  CHECK(not_allowed.find("\r\nAllow: GET, HEAD\r\n") != std::string::npos);
  CHECK(not_allowed.find("\r\nContent-Type: text/plain; charset=utf-8\r\n") != std::string::npos);
  // A peer that never finishes its request is cut off, and meanwhile others
  // are served.
  int slow = tcp_connect(port);
  REQUIRE(::send(slow, "GET /met", 8, MSG_NOSIGNAL) == 8);
  auto t0 = std::chrono::steady_clock::now();
  CHECK(http(port, "GET /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(read_all(slow).empty());
  double held = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(held >= 4.0);
  CHECK(held < 14.0);
  ::close(slow);
  // Connections beyond the cap are closed at once; the cap frees up again.
  std::vector<int> idle;
  for (int i = 0; i < 40; ++i) idle.push_back(tcp_connect(port));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  int refused = 0;
  for (int fd : idle) {
    char c;
    refused += ::recv(fd, &c, 1, MSG_DONTWAIT) == 0;  // 0: closed by the server; -1 (EAGAIN): still open
  }
  CHECK(refused >= 8);
  CHECK(refused < 40);
  for (int fd : idle) ::close(fd);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CHECK(http(port, "GET /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(d.running());
  CHECK(d.stop(SIGTERM) == 0);
}

TEST_CASE("metrics_listen is validated as host:port, and a taken port is a start-up error") {
  TempDir dir;
  struct Case {
    std::string value, expect;
  } cases[] = {
      {"localhost:9464", "'localhost' is not an IPv4 address"},
      {"127.0.0.1", "has no port"},
      {"127.0.0.1:", "port '' is not a number"},
      {"127.0.0.1:65536", "port '65536' is not a number in [0, 65535]"},
      {"127.0.0.1:94x4", "port '94x4'"},
      {"1.2.3:80", "'1.2.3' is not an IPv4 address"},
      {"::1:9464", "an IPv6 address goes in brackets"},
      {"[::zz]:9464", "'::zz' is not an IPv6 address"},
  };
  for (const Case& c : cases) {
    INFO(c.value);
    Output o = run(bin("tokfeedd") + " --check-config '" +
                   job_with_server_key(dir, "metrics_listen = \"" + c.value + "\"") + "'");
    CHECK(o.status != 0);
    CHECK_MESSAGE(o.err.find("[server] metrics_listen: ") != std::string::npos, o.err);
    CHECK_MESSAGE(o.err.find(c.expect) != std::string::npos, o.err);
  }
  Output ok =
      run(bin("tokfeedd") + " --check-config '" + job_with_server_key(dir, "metrics_listen = \"[::1]:9464\"") + "'");
  CHECK(ok.status == 0);
  CHECK(run(bin("tokfeedd") + " --check-config '" + job_with_server_key(dir, "metrics_listen = 9464") + "'")
            .err.find("[server] metrics_listen: expected a string") != std::string::npos);

  // Someone else holds the port: tokfeedd says which address and exits.
  int taken = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(taken, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::listen(taken, 1) == 0);
  socklen_t len = sizeof a;
  getsockname(taken, reinterpret_cast<sockaddr*>(&a), &len);
  std::string where = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  Output o =
      run(bin("tokfeedd") + " --config '" + job_with_server_key(dir, "metrics_listen = \"" + where + "\"") + "'");
  CHECK(o.status == 1);
  CHECK_MESSAGE(o.err.find("[server] metrics_listen: cannot listen on " + where) != std::string::npos, o.err);
  ::close(taken);
}
