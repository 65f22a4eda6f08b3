// The Prometheus text exposition (format 0.0.4) of a status reply. One
// formatter for both `tokfeedctl metrics` and the daemon's HTTP endpoint
// ([server] metrics_listen), so the two always print the same text.
#pragma once

#include <msgpack.hpp>
#include <string>

namespace tokfeed {

// `status` is the decoded reply of the "status" op (docs/status.md). Fields it
// lacks read as 0.
std::string prometheus_text(const msgpack::object& status);

}  // namespace tokfeed
