// tokfeedctl subcommands.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "tokfeed/proto/frame.hpp"

namespace tokfeed::ctl {

struct StreamArgs {
  std::string socket;
  uint32_t rank = 0;
  std::optional<uint64_t> count;
  uint64_t epoch = 0;
  uint64_t step = 0;
  uint64_t world_size = 0;
  uint64_t base = 0;
};

int status(const std::string& socket, bool json);
int shutdown(const std::string& socket);
int metrics(const std::string& socket);
int watch(const std::string& socket);
int dump(const StreamArgs& a);
int drain(const StreamArgs& a);

// JSON string escaping shared by the subcommands.
void append_json_string(std::string& out, std::string_view s);

}  // namespace tokfeed::ctl
