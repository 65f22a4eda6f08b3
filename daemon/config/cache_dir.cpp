#include "config/cache_dir.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace tokfeed {

mode_t cache_umask(const CacheConfig& c) { return c.group ? 007 : 077; }

namespace {

// Creates `dir` (parents included) in `mode`. An existing one is set to
// `mode` only when `ours` (index/ and spool/, which only tokfeed makes) and
// this user's: a folder the operator named, e.g. /tmp or a home, keeps its
// mode, and the log says when it lets others list it.
std::string make_dir(const std::string& dir, mode_t mode, bool ours) {
  struct stat st;
  const bool existed = ::stat(dir.c_str(), &st) == 0;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return fmt::format("cannot create it: {}", ec.message());
  if (::stat(dir.c_str(), &st) != 0) return fmt::format("cannot stat it: {}", std::strerror(errno));
  if (!S_ISDIR(st.st_mode)) return "not a directory";
  const mode_t now = st.st_mode & 07777;
  if (now == mode || st.st_uid != ::geteuid()) return {};
  if (existed && !ours) {
    if (now & 0007 & ~mode)
      spdlog::warn("[cache] dir {} is mode {:o}: other users can list it (its files are still {})", dir, now,
                   mode & 0070 ? "0640" : "0600");
    return {};
  }
  if (::chmod(dir.c_str(), mode) != 0) return fmt::format("cannot set its mode {:o}: {}", mode, std::strerror(errno));
  if (existed && (now & 0077 & ~mode)) spdlog::info("[cache] dir: {} was mode {:o}; now {:o}", dir, now, mode);
  return {};
}

}  // namespace

std::string prepare_cache_dir(const CacheConfig& c) {
  ::umask(cache_umask(c));
  if (!c.enabled) return {};
  const mode_t mode = c.group ? 02770 : 0700;
  for (const std::string& d : {c.dir, c.dir + "/index", c.dir + "/spool"}) {
    if (std::string why = make_dir(d, mode, d != c.dir); !why.empty())
      return fmt::format(
          "[cache] dir {}: {}; set [cache] dir to a directory this user can write (under systemd, "
          "CacheDirectory= gives one in $CACHE_DIRECTORY)",
          d, why);
  }
  std::string probe = fmt::format("{}/.write-check.{}", c.dir, ::getpid());
  int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0)
    return fmt::format(
        "[cache] dir {}: cannot write in it: {}; set [cache] dir to a directory this user can write "
        "(under systemd, CacheDirectory= gives one in $CACHE_DIRECTORY)",
        c.dir, std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
  return {};
}

}  // namespace tokfeed
