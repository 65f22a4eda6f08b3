// Waiting on a 32-bit word of a MAP_SHARED mapping, across processes.
//
// libstdc++'s std::atomic::wait uses FUTEX_PRIVATE_FLAG, which keys the wait
// on the process's own address space: a waiter in another process is never
// woken. These calls use the shared futex ops, keyed on the backing page.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace tokfeed::shm {

// Sleeps while `word` still equals `expected`, for at most `timeout`.
// Returns on a wake, a timeout, a signal, or if the word already differs.
void futex_wait(const std::atomic<uint32_t>& word, uint32_t expected, std::chrono::nanoseconds timeout) noexcept;

// Wakes every waiter on `word`.
void futex_wake_all(const std::atomic<uint32_t>& word) noexcept;

// CLOCK_MONOTONIC in nanoseconds: the clock heartbeats are written in.
uint64_t monotonic_ns() noexcept;

}  // namespace tokfeed::shm
