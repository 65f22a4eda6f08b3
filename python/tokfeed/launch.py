"""A job from Python alone: attach to the daemon that serves a config, or
start one owned by this node's trainers (``Loader(config="job.toml")``).

The files beside the config's socket S (docs/packaging.md, "Owned daemons"):

  S.lock   the start lock. A loader holds it (flock, exclusive) only while it
           decides to attach or start, so of torchrun's 8 local ranks the
           first starts the daemon and the other 7 find it answering.
  S.lease  the lease. Every loader holds a shared flock on it for as long as it
           is open; the kernel drops it when the process exits, however it
           dies (kill -9 included).
  S.log    the started daemon's log (stderr), appended.

A daemon started here runs under a keeper: this file run as a script (the
standard library only, no torch), in a session of its own. The keeper starts
tokfeedd (which gets SIGTERM should the keeper itself die), then polls the
lease every 50 ms for an exclusive flock. It gets one only when no loader holds
the lease: it then stops tokfeedd (SIGTERM, SIGKILL after 10 s) and exits,
releasing the lock only once the daemon is gone. A loader that arrives
meanwhile waits for its shared lock, finds no daemon answering, and starts a
new one. A daemon that exits on its own takes its keeper with it.
"""
import errno
import fcntl
import os
import signal
import socket as _socket
import subprocess
import sys
import time

POLL_S = 0.05
STOP_GRACE_S = 10.0
_KEEPERS = []


def config_socket(config):
    """The control socket a job config names ([server] socket, relative to
    the config's folder), as tokfeedd resolves it."""
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        import tomli as tomllib
    path = os.path.abspath(config)
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except OSError as e:
        raise FileNotFoundError(f"{config}: cannot read the job config: {e.strerror}") from e
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{config}: not valid TOML: {e}") from e
    sock = doc.get("server", {}).get("socket", "/run/tokfeed/default.sock")
    if not isinstance(sock, str) or not sock:
        raise ValueError(f"{config}: [server] socket must be a path string")
    return os.path.normpath(os.path.join(os.path.dirname(path), sock))


def answers(sock):
    """True when a daemon accepts connections on ``sock``."""
    s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        s.connect(sock)
        return True
    except OSError:
        return False
    finally:
        s.close()


def _tail(path, lines=20):
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 8192))
            return "\n".join(f.read().decode(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


class Lease:
    """One loader's share of a daemon: attaches to ``config``'s socket when
    a daemon answers there, else starts one under a keeper. ``release()``
    (or the process's death) gives the share up; the keeper stops the daemon
    once every share is gone."""

    def __init__(self, config, tokfeedd=None, start_timeout=60.0):
        self.config = os.path.abspath(config)
        if not os.path.isfile(self.config):
            raise FileNotFoundError(f"{config}: no such job config")
        self.socket = config_socket(self.config)
        self.started = False
        try:
            os.makedirs(os.path.dirname(self.socket), exist_ok=True)
            lock = os.open(self.socket + ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o660)
        except OSError as e:
            raise PermissionError(
                f"{config}: cannot create {self.socket}.lock beside the job's socket ({e.strerror}); to start the "
                "daemon from Python, put [server] socket in a folder of yours (e.g. socket = \"run/job.sock\", "
                "relative to the config)") from e
        self._fd = None
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            fd = os.open(self.socket + ".lease", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o660)
            try:
                fcntl.flock(fd, fcntl.LOCK_SH)  # waits while a keeper stops its daemon
                if not answers(self.socket):
                    self._start(tokfeedd, start_timeout)
                    self.started = True
            except BaseException:
                os.close(fd)
                raise
            self._fd = fd
        finally:
            os.close(lock)  # releases the start lock

    def _start(self, tokfeedd, timeout):
        if tokfeedd is None:
            from ._programs import program
            tokfeedd = program("tokfeedd")
        if not tokfeedd or not os.access(tokfeedd, os.X_OK):
            raise FileNotFoundError(
                f"no daemon answers on {self.socket} and tokfeedd was not found (not in the tokfeed wheel, "
                "not on PATH, TOKFEEDD unset): pip install tokfeed, or start the service")
        log_path = self.socket + ".log"
        with open(log_path, "ab") as log:
            keeper = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--keep", tokfeedd, self.config,
                                       self.socket], stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                      start_new_session=True, close_fds=True)
        deadline = time.monotonic() + timeout
        while not answers(self.socket):
            if keeper.poll() is not None:
                raise RuntimeError(f"tokfeedd for {self.config} exited with status {keeper.returncode} before its "
                                   f"socket {self.socket} answered; its log ({log_path}) ends:\n{_tail(log_path)}")
            if time.monotonic() > deadline:
                keeper.terminate()
                raise TimeoutError(f"tokfeedd for {self.config} did not answer on {self.socket} within "
                                   f"{timeout:.0f} s; its log: {log_path}")
            time.sleep(0.02)
        # The keeper outlives this loader (another may close last): kept here
        # until it exits, then reaped by a later start or release.
        _KEEPERS[:] = [k for k in _KEEPERS if k.poll() is None] + [keeper]

    @property
    def held(self):
        return self._fd is not None

    def release(self):
        if self._fd is not None:
            os.close(self._fd)  # drops the shared flock
            self._fd = None
        _KEEPERS[:] = [k for k in _KEEPERS if k.poll() is None]  # reaps keepers that have exited

    def __del__(self):
        self.release()


# ---- the keeper (run as a script: `python launch.py --keep TOKFEEDD CONFIG SOCKET`) ----


def _pdeathsig():
    import ctypes
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def keep(tokfeedd, config, sock):
    fd = os.open(sock + ".lease", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o660)
    keeper_pid = os.getpid()

    def child_setup():
        _pdeathsig()
        if os.getppid() != keeper_pid:  # the keeper died before prctl took effect
            os._exit(1)

    daemon = subprocess.Popen([tokfeedd, "--config", config], stdin=subprocess.DEVNULL, preexec_fn=child_setup)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    while daemon.poll() is None:
        if stop:
            break
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break  # no loader holds the lease
        except OSError as e:
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
        time.sleep(POLL_S)
    if daemon.poll() is None:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
    rc = daemon.returncode
    return rc if rc >= 0 else 128 - rc


if __name__ == "__main__" and len(sys.argv) == 5 and sys.argv[1] == "--keep":
    sys.exit(keep(*sys.argv[2:]))
