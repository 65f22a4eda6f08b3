// Renders of a record's skeleton (docs/chat_templates.md, "One render per
// shape"): the record with its strings replaced by sentinels, rendered while
// the engine watches whether the template reads a sentinel's bytes. A
// template that only copies such strings on (prints them, joins them with
// `+` or `~`, tests their truth) renders every record of that shape as the
// skeleton with each sentinel replaced by its string.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "template/budget.hpp"

namespace tokfeed::tmpl::skeleton {

// A sentinel: U+FFFE, this process's 8 letters, the leaf's index in 4 hex
// digits, U+FFFF. No template can write one without reading one first (the
// letters are drawn when the process starts).
constexpr std::size_t kSentinelSize = 3 + 8 + 4 + 3;
constexpr uint32_t kMaxLeaves = 0xFFFF;
std::string sentinel(uint32_t leaf);
// The first sentinel in s[from:] (its position, or npos), its leaf in `leaf`.
std::size_t find(std::string_view s, std::size_t from, uint32_t& leaf) noexcept;
// Where the sentinel of `s` that covers byte `at` starts (at or before
// it, ending after it), or npos.
std::size_t covering(std::string_view s, std::size_t at) noexcept;

struct Trace;  // template/skeleton_ops.hpp

// What the renders of a skeleton did, while a Watch is installed on the
// thread.
// Once a read is seen, the skeleton stands for no record: the render
// running stops at its next step (its step count is set past its budget),
// and the renders after it fail at once (Template::render).
struct Watch {
  // The record's strings, which operations on a whole sentinel (a string
  // method, some filters, `in`) are answered from, and the operations asked
  // (null: every such operation is a read).
  Trace* trace = nullptr;
  bool read = false;            // bytes of a string holding a sentinel were read
  int64_t leaf = -1;            // the first such sentinel's leaf (-1: none known)
  std::vector<uint32_t> reads;  // leaves read along with it (a filter of a list or dict)
  uint64_t copies = 0;          // sentinels copied on by output and concatenation
  uint64_t steps = 0;           // the renders' steps, all together
  uint64_t peak = 0;            // the most memory one render held
  std::size_t longest = 0;      // the longest output of one render
};

extern TOKFEED_TLS Watch* tl_watch;

// A read of `s`'s bytes by the template (StrRef's accessors).
[[gnu::cold, gnu::noinline]] void saw_read(const std::string& s) noexcept;
// A look at the items of a skeleton's dict that stands for the record's
// leaf `hole` (DictObj::hole).
[[gnu::cold, gnu::noinline]] void saw_hole(uint32_t hole) noexcept;
// A string copied on as it is (output, concatenation): counted, for the
// bound on what the record's strings add (each such copy adds at most all
// of them).
inline void saw_copy() noexcept {
  if (tl_watch) ++tl_watch->copies;
}
// A question whose answer the skeleton cannot give for the record (the
// label rule's comparison at a sentinel, `is sameas`).
void undecided() noexcept;

// Installs `w` on this thread while in scope.
class WatchScope {
 public:
  explicit WatchScope(Watch& w) noexcept : prev_(tl_watch) { tl_watch = &w; }
  ~WatchScope() { tl_watch = prev_; }
  WatchScope(const WatchScope&) = delete;
  WatchScope& operator=(const WatchScope&) = delete;

 private:
  Watch* prev_;
};

}  // namespace tokfeed::tmpl::skeleton
