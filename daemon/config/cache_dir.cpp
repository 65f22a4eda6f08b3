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

// mode = "group": what tokfeed writes in `dir` must get the folder's group,
// which takes the setgid bit (or a daemon whose own group is the folder's).
// Sets the bit when this user owns the folder; else says what to run.
std::string check_group_dir(const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return fmt::format("cannot stat it: {}", std::strerror(errno));
  if ((st.st_mode & S_ISGID) || st.st_gid == ::getegid()) return {};
  if (st.st_uid == ::geteuid() && ::chmod(dir.c_str(), (st.st_mode & 07777) | S_ISGID) == 0 &&
      ::stat(dir.c_str(), &st) == 0 && (st.st_mode & S_ISGID)) {
    spdlog::info("[cache] dir {}: set its setgid bit, so files written in it get its group (gid {})", dir, st.st_gid);
    return {};
  }
  return fmt::format(
      "mode = \"group\" needs its files to get the folder's group (gid {}), but the folder has no setgid bit and "
      "this daemon's group is gid {}: its files would be unreadable to the group. Run: chmod g+s '{}' (as its owner "
      "or root), or point [cache] dir at a folder tokfeed may create",
      st.st_gid, ::getegid(), dir);
}

}  // namespace

std::string prepare_cache_dir(const CacheConfig& c) {
  ::umask(cache_umask(c));
  if (!c.enabled) return {};
  const mode_t mode = c.group ? 02770 : 0700;
  for (const std::string& d : {c.dir, c.dir + "/index", c.dir + "/spool"}) {
    std::string why = make_dir(d, mode, d != c.dir);
    if (why.empty() && c.group) why = check_group_dir(d);
    if (!why.empty())
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
