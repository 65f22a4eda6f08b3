// metrics: the daemon's status as Prometheus text exposition (format 0.0.4),
// and watch: the status table, refreshed in place.
#include <time.h>

#include <cerrno>
#include <cstdio>

#include "ctl.hpp"
#include "control/metrics_text.hpp"
#include "tokfeed/proto/frame.hpp"
#include "tokfeed/proto/messages.hpp"

namespace tokfeed::ctl {

int metrics(const std::string& socket) {
  msgpack::object_handle reply;
  std::string error;
  if (!proto::call(socket, proto::encode_frame(proto::encode_request(proto::Op::kStatus)), reply, error)) {
    std::fprintf(stderr, "tokfeedctl: metrics: %s\n", error.c_str());
    return 1;
  }
  std::string out = prometheus_text(reply.get());
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

int watch(const std::string& socket) {
  // Ticks on an absolute clock, so a slow status call does not stretch the
  // period past one second.
  timespec next{};
  clock_gettime(CLOCK_MONOTONIC, &next);
  for (;;) {
    std::printf("\033[H\033[2J");
    if (int rc = status(socket, false); rc != 0) return rc;
    std::fflush(stdout);
    next.tv_sec += 1;
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, nullptr) == EINTR) {
    }
  }
}

}  // namespace tokfeed::ctl
