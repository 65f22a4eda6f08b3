// cpu_relax(): the spin-wait hint of the CPU the code is built for. It tells
// the core that this thread spins on a shared word, so a sibling hyper-thread
// gets the pipeline and the memory-order speculation is not flushed when the
// word changes. On a CPU without such a hint it only stops the compiler from
// folding the loop.
#pragma once

namespace tokfeed::shm {

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#else
  asm volatile("" ::: "memory");
#endif
}

}  // namespace tokfeed::shm
