// `[cache] dir` private by default (docs/data_model.md section 6): the
// daemon's umask and the directory's mode, set before anything is written.
#pragma once

#include <sys/types.h>

#include <string>

#include "config/config.hpp"

namespace tokfeed {

// The umask the daemon runs with: 077 (private: dirs 0700, files 0600), or
// 007 under [cache] mode = "group" (dirs 02770, files 0640, locks 0660).
mode_t cache_umask(const CacheConfig& c);

// Sets that umask, then creates `[cache] dir` with index/ and spool/ in that
// mode; existing index/ and spool/ of this user are set to it, an existing
// `[cache] dir` keeps its own (a warning when others can list it).
// Then checks that a file can be created there. Returns "" or what is wrong,
// naming the directory and what to do.
std::string prepare_cache_dir(const CacheConfig& c);

}  // namespace tokfeed
