#include "tokfeed/shm/segment.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace tokfeed::shm {

namespace {

std::string human(uint64_t bytes) {
  char buf[64];
  if (bytes >= (1ULL << 30)) snprintf(buf, sizeof buf, "%.2f GiB", bytes / double(1ULL << 30));
  else if (bytes >= (1ULL << 20)) snprintf(buf, sizeof buf, "%.1f MiB", bytes / double(1ULL << 20));
  else snprintf(buf, sizeof buf, "%llu KiB", static_cast<unsigned long long>(bytes >> 10));
  return buf;
}

}  // namespace

Mapping& Mapping::operator=(Mapping&& o) noexcept {
  if (this != &o) {
    this->~Mapping();
    fd_ = o.fd_;
    base_ = o.base_;
    size_ = o.size_;
    o.fd_ = -1;
    o.base_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

Mapping::~Mapping() {
  if (base_) munmap(base_, size_);
  close_fd();
  base_ = nullptr;
}

void Mapping::close_fd() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

uint64_t free_bytes(const std::string& dir) noexcept {
  struct statvfs st;
  if (statvfs(dir.c_str(), &st) != 0) return 0;
  return static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
}

SegmentError create_segment(const std::string& dir, std::size_t bytes, const std::string& what, Mapping& out) noexcept {
  // O_TMPFILE: the file has no name, so nothing is left in `dir` whatever
  // process is killed, and no other user can open it by name.
  int fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {
    return {"cannot create the " + what + " segment in " + dir + ": " + std::strerror(errno) +
            " (set [server] shm_dir to a tmpfs directory you can write)"};
  }
  if (int rc = posix_fallocate(fd, 0, static_cast<off_t>(bytes)); rc != 0) {
    uint64_t avail = free_bytes(dir);
    ::close(fd);
    if (rc == ENOSPC || rc == EFBIG) {
      return {"not enough shared memory for the " + what + " segment: need " + std::to_string(bytes) + " bytes (" +
              human(bytes) + ") in " + dir + ", " + std::to_string(avail) + " bytes (" + human(avail) +
              ") free. Enlarge it (docker run --shm-size, or mount -o remount,size=... " + dir +
              "), lower [workers] slots / [batch] size / max_length, or set [server] shm_dir"};
    }
    return {"cannot reserve " + std::to_string(bytes) + " bytes for the " + what + " segment in " + dir + ": " +
            std::strerror(rc)};
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    int err = errno;
    ::close(fd);
    return {"cannot map the " + what + " segment (" + std::to_string(bytes) + " bytes): " + std::strerror(err)};
  }
  out = Mapping(fd, base, bytes);
  return {};
}

SegmentError map_segment(int fd, bool writable, std::size_t min_bytes, Mapping& out) noexcept {
  struct stat st;
  if (fstat(fd, &st) != 0) return {std::string("cannot stat the segment: ") + std::strerror(errno)};
  if (static_cast<uint64_t>(st.st_size) < min_bytes) {
    return {"segment is " + std::to_string(st.st_size) + " bytes, smaller than its header needs (" +
            std::to_string(min_bytes) + ")"};
  }
  int prot = PROT_READ | (writable ? PROT_WRITE : 0);
  void* base = mmap(nullptr, static_cast<std::size_t>(st.st_size), prot, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) return {std::string("cannot map the segment: ") + std::strerror(errno)};
  out = Mapping(fd, base, static_cast<std::size_t>(st.st_size));
  return {};
}

int reopen_read_only(int fd) noexcept {
  std::string path = "/proc/self/fd/" + std::to_string(fd);
  return ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
}

}  // namespace tokfeed::shm
