// Exit statuses a forked child (worker, cache builder, record checker) ends
// with besides 0, which the supervisor reads.
#pragma once

namespace tokfeed {

// The child ran out of [workers] max_memory (std::bad_alloc).
inline constexpr int kChildOutOfMemory = 4;

}  // namespace tokfeed
