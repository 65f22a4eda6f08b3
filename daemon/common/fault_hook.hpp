// Test-only fault hook (TOKFEED_FAULT_HOOKS builds): how a child ends when it
// reaches TOKFEED_FAULT_CRASH_LINE, chosen by TOKFEED_FAULT_CRASH_HOW:
// "abort" (the default), "throw" (an exception out of the child's work),
// "exit" (exit(1), running the process's atexit handlers) or "segv".
#pragma once

#ifdef TOKFEED_FAULT_HOOKS
#include <signal.h>

#include <cstdlib>
#include <stdexcept>
#include <string_view>

namespace tokfeed {

[[noreturn]] inline void fault_crash() {
  const char* how = std::getenv("TOKFEED_FAULT_CRASH_HOW");
  std::string_view h = how ? how : "abort";
  if (h == "throw") throw std::runtime_error("fault hook: an error out of the child's work");
  if (h == "exit") std::exit(1);
  if (h == "segv") ::raise(SIGSEGV);
  std::abort();
}

}  // namespace tokfeed
#endif
