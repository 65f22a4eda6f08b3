// Access control with two real users created here (skipped cleanly when not
// root or without useradd): the daemon runs as user A; user B can neither
// attach (socket mode, then SO_PEERCRED) nor open A's segments; listing B
// in [server] allow_uids lets B attach, and B's client maps the data
// read-only with only its own rank's consumer segment writable.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <dirent.h>
#include <fstream>
#include <sstream>
#include <thread>

#include "harness.hpp"
#include "tokfeed/client.hpp"

using namespace tokfeed::testing;

namespace {

struct User {
  std::string name;
  uid_t uid = 0;
  gid_t gid = 0;
};

class Users {
 public:
  ~Users() {
    for (const User& u : made_) run("userdel '" + u.name + "' 2>/dev/null");
  }
  // Two fresh users named `prefix` + 'a' / 'b' + a tag, or false with the
  // reason logged (the tests need root and useradd).
  bool make_pair(const std::string& prefix, User& a, User& b) {
    if (geteuid() != 0 || run("command -v useradd").status != 0) {
      MESSAGE("needs root and useradd to create two users; skipped");
      return false;
    }
    std::string tag = std::to_string(getpid() % 100000);
    if (!make(prefix + "a" + tag, a) || !make(prefix + "b" + tag, b)) {
      MESSAGE("useradd failed; skipped");
      return false;
    }
    return true;
  }

  bool make(const std::string& name, User& out) {
    run("userdel '" + name + "' 2>/dev/null");
    if (run("useradd --system --no-create-home --shell /usr/sbin/nologin '" + name + "'").status != 0) return false;
    passwd* pw = getpwnam(name.c_str());
    if (!pw) return false;
    out = {name, pw->pw_uid, pw->pw_gid};
    made_.push_back(out);
    return true;
  }

 private:
  std::vector<User> made_;
};

// Runs `fn` in a child process as `u`, with `groups` as its supplementary
// groups; its return value is the exit status.
template <class F>
int as_user(const User& u, F fn, std::vector<gid_t> groups = {}) {
  pid_t pid = fork();
  if (pid == 0) {
    if (setgroups(groups.size(), groups.data()) != 0 || setgid(u.gid) != 0 || setuid(u.uid) != 0) _exit(100);
    _exit(fn());
  }
  int st;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

// The daemon's ring segments: its descriptors on nameless tmpfs files.
std::vector<std::string> segment_fds(pid_t pid) {
  std::vector<std::string> out;
  std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      char target[512];
      std::string p = dir + "/" + e->d_name;
      ssize_t n = readlink(p.c_str(), target, sizeof target - 1);
      if (n > 0 && std::string(target, n).find("/dev/shm/#") == 0) out.push_back(p);
    }
    closedir(d);
  }
  return out;
}

// This process's shared mappings of nameless /dev/shm files: "r--s" etc.
std::vector<std::string> shm_mapping_perms() {
  std::ifstream in("/proc/self/maps");
  std::vector<std::string> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.find("/dev/shm/#") == std::string::npos) continue;
    std::istringstream ls(line);
    std::string range, perms;
    ls >> range >> perms;
    out.push_back(perms);
  }
  return out;
}

std::string job(const std::string& extra_server) {
  return "[dataset]\npath = \"" + data_path("sft/mixed-300.jsonl") +
         "\"\n[tokenizer]\ntype = \"sentencepiece\"\npath = \"" + data_path("tokenizers/sp32k/tokenizer.model") +
         "\"\n[ranks]\nworld_size = 2\n[server]\nshm_dir = \"/dev/shm\"\n" + extra_server;
}

}  // namespace

TEST_CASE("user B can neither attach to nor open the segments of user A's daemon; allow_uids / allow_gids let B in") {
  Users users;
  User a, b;
  if (!users.make_pair("tf", a, b)) return;
  TempDir dir;
  REQUIRE(chown(dir.path().c_str(), a.uid, a.gid) == 0);
  REQUIRE(chmod(dir.path().c_str(), 0711) == 0);  // B may reach the socket by path; the socket mode decides
  std::string as_a =
      "setpriv --reuid=" + std::to_string(a.uid) + " --regid=" + std::to_string(a.gid) + " --clear-groups";

  // write_job appends a second [server] table; put ours in its place.
  auto config = [&](const std::string& name, const std::string& extra) {
    std::string cfg = write_job(dir, job(extra), name);
    run("sed -i '0,/^\\[server\\]$/!{/^\\[server\\]$/d}' '" + cfg + "'");
    return cfg;
  };

  {
    std::string cfg = config("deny", "");
    Daemon d(cfg, socket_of(dir, "deny"), as_a);
    struct stat st;
    REQUIRE(stat(d.socket().c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0660);
    CHECK(st.st_uid == a.uid);

    auto attach_rc = [&] {
      return as_user(b, [&] {
        tokfeed::ClientOptions opt;
        opt.socket = d.socket();
        std::unique_ptr<tokfeed::Client> c;
        tokfeed::Status s = tokfeed::Client::connect(opt, c);
        if (s.ok()) return 0;
        std::fprintf(stderr, "user B's attach: %s\n", s.message().c_str());
        // Refused by the socket's mode: it names access, not a missing daemon.
        if (s.message().find("Permission denied (no access") != std::string::npos &&
            s.message().find("is tokfeedd running") == std::string::npos)
          return 1;
        return s.message().find("not allowed") != std::string::npos ? 2 : 3;
      });
    };
    // The socket's mode: B is not its owner or in its group.
    CHECK(attach_rc() == 1);
    // Past the mode (as if B were in the group): SO_PEERCRED refuses B.
    REQUIRE(chmod(d.socket().c_str(), 0666) == 0);
    CHECK(attach_rc() == 2);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    CHECK_MESSAGE(d.log().find("refused connection from uid " + std::to_string(b.uid)) != std::string::npos, d.log());
    CHECK(d.log().find(" pid ") != std::string::npos);

    // The segments: nameless, mode 0600, owned by A; B cannot open them
    // through the daemon's or a worker's descriptors.
    std::vector<std::string> segs = segment_fds(d.pid());
    REQUIRE(segs.size() == 3);  // data + one consumer segment per rank
    for (const std::string& p : segs) {
      REQUIRE(stat(p.c_str(), &st) == 0);
      CHECK((st.st_mode & 0777) == 0600);
      CHECK(st.st_uid == a.uid);
      CHECK(as_user(b, [&] { return ::open(p.c_str(), O_RDONLY) < 0 && errno == EACCES ? 0 : 1; }) == 0);
    }
  }

  // Let B in: by uid, by B's primary group, and (as deployed: the socket
  // left 0660 in A's group) by a supplementary group. B attaches, reads a
  // batch, and maps the data read-only and only its own rank's consumer
  // segment writable.
  struct Case {
    std::string allow;
    std::vector<gid_t> groups;
    bool open_socket;
  } cases[] = {{"allow_uids = [" + std::to_string(b.uid) + "]\n", {}, true},
               {"allow_gids = [" + std::to_string(b.gid) + "]\n", {}, true},
               {"allow_gids = [" + std::to_string(a.gid) + "]\n", {a.gid}, false}};
  int n = 0;
  for (const Case& k : cases) {
    INFO(k.allow);
    std::string name = "allow" + std::to_string(n++);
    std::string cfg = config(name, k.allow);
    Daemon d(cfg, socket_of(dir, name), as_a);
    if (k.open_socket) REQUIRE(chmod(d.socket().c_str(), 0666) == 0);  // as if B could reach it
    int rc = as_user(
        b,
        [&] {
          tokfeed::ClientOptions opt;
          opt.socket = d.socket();
          opt.rank = 1;
          std::unique_ptr<tokfeed::Client> c;
          if (auto s = tokfeed::Client::connect(opt, c); !s.ok()) {
            std::fprintf(stderr, "user B's attach: %s\n", s.message().c_str());
            return 10;
          }
          tokfeed::Batch batch;
          if (!c->next(batch).ok()) return 11;
          std::vector<std::string> perms = shm_mapping_perms();
          int writable = 0, readonly = 0;
          for (const std::string& p : perms) {
            if (p == "rw-s") ++writable;
            if (p == "r--s") ++readonly;
          }
          if (writable != 1 || readonly != 1 || perms.size() != 2) return 12;
          // The data mapping cannot be made writable: its descriptor is read-only.
          void* base = const_cast<void*>(c->mapping_base());
          if (mprotect(base, 4096, PROT_READ | PROT_WRITE) == 0) return 13;
          return 0;
        },
        k.groups);
    CHECK(rc == 0);
  }
}

TEST_CASE("[server] allow_uids / allow_gids: strict validation, and --check-config shows them") {
  TempDir dir;
  std::string head = "[dataset]\npath = \"" + data_path("sft/mixed-300.jsonl") +
                     "\"\n[tokenizer]\ntype = \"sentencepiece\"\npath = \"" +
                     data_path("tokenizers/sp32k/tokenizer.model") + "\"\n[server]\nsocket = \"" + dir.file("s.sock") +
                     "\"\n";
  struct Case {
    std::string body, expect;
  } cases[] = {
      {"allow_uids = 1000\n", "[server] allow_uids: expected an array of numeric ids"},
      {"allow_uids = [\"alice\"]\n", "[server] allow_uids: expected an array of numeric ids"},
      {"allow_gids = [-1]\n", "[server] allow_gids: -1 is out of range"},
      {"allow_gids = [4294967295]\n", "[server] allow_gids: 4294967295 is out of range"},
      {"allow_uids = [1000, 1000]\n", "[server] allow_uids: id 1000 is listed twice"},
      {"allow_user = [1000]\n", "[server] unknown key 'allow_user'"},
  };
  for (const Case& c : cases) {
    INFO(c.body);
    std::ofstream(dir.file("job.toml")) << head << c.body;
    Output o = run(bin("tokfeedd") + " --check-config '" + dir.file("job.toml") + "'");
    CHECK(o.status != 0);
    CHECK_MESSAGE(o.err.find(c.expect) != std::string::npos, o.err);
    CHECK(o.err.find("job.toml") != std::string::npos);
  }
  std::ofstream(dir.file("job.toml")) << head << "allow_uids = [1000, 1001]\nallow_gids = [990]\n";
  Output ok = run(bin("tokfeedd") + " --check-config '" + dir.file("job.toml") + "'");
  CHECK(ok.status == 0);
  CHECK(ok.out.find("allow_uids = [1000, 1001]\nallow_gids = [990]") != std::string::npos);
}

namespace {

// Every entry below `root` (itself included): path, mode bits, owner.
struct Entry {
  std::string path;
  mode_t mode;
  uid_t uid;
  bool dir;
};
std::string fmt_mode(const Entry& e) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%c %04o uid %u  ", e.dir ? 'd' : '-', static_cast<unsigned>(e.mode),
                static_cast<unsigned>(e.uid));
  return buf + e.path.substr(e.path.rfind("/cache") == std::string::npos ? 0 : e.path.rfind("/cache"));
}

std::vector<Entry> walk(const std::string& root) {
  std::vector<Entry> out;
  struct stat st;
  if (lstat(root.c_str(), &st) != 0) return out;
  out.push_back({root, static_cast<mode_t>(st.st_mode & 07777), st.st_uid, S_ISDIR(st.st_mode)});
  if (!S_ISDIR(st.st_mode)) return out;
  if (DIR* d = opendir(root.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n == "." || n == "..") continue;
      for (Entry& x : walk(root + "/" + n)) out.push_back(std::move(x));
    }
    closedir(d);
  }
  return out;
}

}  // namespace

TEST_CASE("the cache is private whatever the umask: user B reads no token store, index, spool or lock of A's") {
  Users users;
  User a, b;
  if (!users.make_pair("tfc", a, b)) return;
  TempDir dir;
  REQUIRE(chown(dir.path().c_str(), a.uid, a.gid) == 0);
  REQUIRE(chmod(dir.path().c_str(), 0755) == 0);  // B may walk to the cache: its modes alone decide
  // A gzip shard, so that a decompressed spool is written too.
  REQUIRE(run("gzip -c '" + data_path("sft/mixed-300.jsonl") + "' > '" + dir.file("data.jsonl.gz") + "'").status == 0);
  std::string as_a =
      "setpriv --reuid=" + std::to_string(a.uid) + " --regid=" + std::to_string(a.gid) + " --clear-groups";
  const mode_t old_umask = ::umask(022);  // the daemon inherits a permissive umask

  auto serve = [&](const std::string& name, const std::string& cache_extra) {
    std::string cfg = write_job(dir,
                                "[dataset]\npath = \"" + dir.file("data.jsonl.gz") +
                                    "\"\n[tokenizer]\ntype = \"sentencepiece\"\npath = \"" +
                                    data_path("tokenizers/sp32k/tokenizer.model") + "\"\n[cache]\ndir = \"" +
                                    dir.file(name) + "\"\n" + cache_extra,
                                name);
    REQUIRE(chown(cfg.c_str(), a.uid, a.gid) == 0);
    Daemon d(cfg, socket_of(dir, name), as_a);
    // A batch delivered and the build done: the index, the spool and the
    // token store are written.
    REQUIRE(dump(d.socket(), 0, "--count 1").size() == 1);
    d.wait_cache_built();
    std::vector<Entry> all = walk(dir.file(name));
    d.stop(SIGTERM);
    return all;
  };

  std::vector<Entry> priv = serve("cache", "");
  std::string seen;
  int files = 0;
  bool index = false, spool = false, bin = false, lock = false;
  for (const Entry& e : priv) {
    seen += fmt_mode(e) + "\n";
    CHECK_MESSAGE(e.uid == a.uid, e.path);
    CHECK_MESSAGE(e.mode == (e.dir ? 0700 : 0600), e.path);
    if (e.dir) {
      CHECK(as_user(b, [&] { return opendir(e.path.c_str()) == nullptr && errno == EACCES ? 0 : 1; }) == 0);
      continue;
    }
    ++files;
    index |= e.path.find("/index/") != std::string::npos;
    spool |= e.path.find("/spool/") != std::string::npos;
    bin |= e.path.size() > 4 && e.path.compare(e.path.size() - 4, 4, ".bin") == 0;
    lock |= e.path.find(".lock") != std::string::npos;
    CHECK(as_user(b, [&] { return ::open(e.path.c_str(), O_RDONLY) < 0 && errno == EACCES ? 0 : 1; }) == 0);
  }
  MESSAGE("private cache, daemon umask 022, as user B sees it:\n" << seen);
  CHECK(files >= 5);
  CHECK(index);
  CHECK(spool);
  CHECK(bin);
  CHECK(lock);

  // mode = "group": shared with A's group; B reads it only as a member.
  std::vector<Entry> grp = serve("gcache", "mode = \"group\"\n");
  std::string store;
  for (const Entry& e : grp) {
    if (e.dir) CHECK_MESSAGE(e.mode == 02770, e.path);
    else CHECK_MESSAGE((e.mode == 0640 || (e.mode == 0660 && e.path.find(".lock") != std::string::npos)), e.path);
    if (!e.dir && e.path.size() > 4 && e.path.compare(e.path.size() - 4, 4, ".bin") == 0) store = e.path;
  }
  REQUIRE(!store.empty());
  CHECK(as_user(b, [&] { return ::open(store.c_str(), O_RDONLY) >= 0 ? 0 : 1; }, {a.gid}) == 0);
  CHECK(as_user(b, [&] { return ::open(store.c_str(), O_RDONLY) < 0 && errno == EACCES ? 0 : 1; }) == 0);
  ::umask(old_umask);
}
