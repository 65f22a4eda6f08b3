// Anonymous shared-memory segments: created with O_TMPFILE in the shm
// directory, so they never have a name and no crash can leave one behind;
// the kernel frees the memory with the last mapping. Peers receive them as
// file descriptors over the control socket (SCM_RIGHTS).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tokfeed::shm {

// An owned mapping (and, optionally, its file descriptor).
class Mapping {
 public:
  Mapping() = default;
  Mapping(int fd, void* base, std::size_t size) : fd_(fd), base_(base), size_(size) {}
  Mapping(Mapping&& o) noexcept { *this = static_cast<Mapping&&>(o); }
  Mapping& operator=(Mapping&& o) noexcept;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping();

  void* base() const { return base_; }
  std::size_t size() const { return size_; }
  int fd() const { return fd_; }
  template <class T>
  T* at(uint64_t offset) const {
    return reinterpret_cast<T*>(static_cast<char*>(base_) + offset);
  }
  explicit operator bool() const { return base_ != nullptr; }
  void close_fd();

 private:
  int fd_ = -1;
  void* base_ = nullptr;
  std::size_t size_ = 0;
};

struct SegmentError {
  std::string message;  // empty on success
  explicit operator bool() const { return !message.empty(); }
};

// Creates a zero-filled segment of `bytes` in `dir` and maps it read-write.
// The whole size is reserved up front (posix_fallocate), so a directory
// without room fails here with the bytes needed and free, not with SIGBUS
// later. `what` names the segment in errors.
SegmentError create_segment(const std::string& dir, std::size_t bytes, const std::string& what, Mapping& out) noexcept;

// Maps a received segment fd. `writable` maps it read-write (the fd must
// allow it). Checks the file's size against `min_bytes`.
SegmentError map_segment(int fd, bool writable, std::size_t min_bytes, Mapping& out) noexcept;

// A new read-only descriptor of the file behind `fd` (through /proc/self/fd),
// so a peer receiving it cannot map the segment writable.
int reopen_read_only(int fd) noexcept;

// Bytes free for unprivileged users in the filesystem holding `dir`.
uint64_t free_bytes(const std::string& dir) noexcept;

}  // namespace tokfeed::shm
