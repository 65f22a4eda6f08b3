// A dataset that cannot be served: a missing or unreadable file, a shard
// with no valid records, a bad record under on_bad_record = "fail". The
// message names the file (and line) and what to do.
#pragma once

#include <stdexcept>

namespace tokfeed {

class DatasetError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace tokfeed
