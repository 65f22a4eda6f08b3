"""Loader(config=...): a job from Python alone (tokfeed/launch.py).

The daemon a loader starts serves the same stream as one started by hand;
loaders in several processes share one daemon, started by exactly one of them;
it stops when the last loader closes, and when the trainers are killed -9,
leaving no process, socket or shared-memory segment behind.
"""
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import uuid

import tokfeed
from tokfeed import launch
from tokfeed_testlib import TOKFEEDCTL, TOKFEEDD, Daemon, job_toml

ENV = dict(os.environ, TOKFEEDD=TOKFEEDD, TOKFEEDCTL=TOKFEEDCTL)
os.environ.update(TOKFEEDD=TOKFEEDD, TOKFEEDCTL=TOKFEEDCTL)


def digest(batch):
    h = hashlib.sha256()
    for name in sorted(batch):
        t = batch[name]
        h.update(name.encode())
        h.update(t.contiguous().numpy().tobytes() if hasattr(t, "numpy") else repr(t).encode())
    return h.hexdigest()[:16]


def processes():
    """{pid: (ppid, argv)} of every process."""
    out = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
            with open(f"/proc/{p}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        out[int(p)] = (ppid, argv)
    return out


def owned(config):
    """(keepers, daemons): pids of the keepers and of the tokfeedd supervisors
    (not their forked workers) serving ``config``."""
    procs = processes()
    keepers = [p for p, (_, a) in procs.items() if "--keep" in a and config in a]
    daemons = [p for p, (pp, a) in procs.items()
               if a and os.path.basename(a[0]) == "tokfeedd" and config in a
               and not (pp in procs and procs[pp][1][:1] == a[:1])]
    return keepers, daemons


# A child trainer: attaches (Loader or Lease+Client), says so, waits for a
# line on stdin, then reads its rank to the end and prints the digests.
CHILD = r"""
import sys, hashlib
rank, config, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]
sys.path.insert(0, sys.argv[4])
from test_launch import digest
if mode == "loader":
    import tokfeed
    loader = tokfeed.Loader(config=config, rank=rank)
    started = loader._lease.started
else:
    from tokfeed import launch, _tokfeed
    lease = launch.Lease(config)
    started = lease.started
    client = _tokfeed.Client(lease.socket, rank)
print("attached", int(started), flush=True)
sys.stdin.readline()
if mode == "loader":
    print(" ".join(digest(b) for b in loader), flush=True)
    loader.close()
else:
    n = 0
    while client.next() is not None:
        n += 1
    print(n, flush=True)
"""


class Launch(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tokfeed-launch-")
        self.prefix = f"pyl-{uuid.uuid4().hex[:10]}"
        self.config = os.path.join(self.dir, "job.toml")
        self.write_config(world_size=2)
        self.children = []

    def write_config(self, world_size, **job):
        with open(self.config, "w") as f:
            f.write(job_toml(os.path.join(self.dir, "run", "job.sock"), self.prefix, **job)
                    + f"\n[ranks]\nworld_size = {world_size}\n")

    def tearDown(self):
        for c in self.children:
            if c.poll() is None:
                c.kill()
                c.wait()
            for f in (c.stdin, c.stdout):
                if f:
                    f.close()
        keepers, daemons = owned(self.config)
        for p in keepers + daemons:  # only after a failure
            os.kill(p, signal.SIGKILL)
        shutil.rmtree(self.dir, ignore_errors=True)

    def assert_nothing_left(self, timeout=15):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if owned(self.config) == ([], []):
                break
            time.sleep(0.05)
        self.assertEqual(owned(self.config), ([], []), "keeper or tokfeedd left running")
        sock = os.path.join(self.dir, "run", "job.sock")
        self.assertFalse(launch.answers(sock))
        self.assertFalse(os.path.exists(sock), "socket left behind")
        self.assertEqual([e for e in os.listdir("/dev/shm") if e.startswith(self.prefix)], [],
                         "shared-memory segments left behind")

    def child(self, rank, mode="loader"):
        c = subprocess.Popen([sys.executable, "-c", CHILD, str(rank), self.config, mode, os.path.dirname(__file__)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=ENV,
                             start_new_session=True)
        self.children.append(c)
        return c

    def served_by_hand(self, ranks):
        """Digests of each rank's batches from a daemon started by hand on the same config."""
        with _HandDaemon(self.config) as d:
            out = []
            for r in ranks:
                with tokfeed.Loader(d.socket, rank=r) as loader:
                    out.append([digest(b) for b in loader])
            return out

    def test_started_daemon_serves_the_stream_of_a_service(self):
        want = self.served_by_hand([0, 1])
        self.assertTrue(want[0] and want[1])
        got = []
        for r in (0, 1):
            loader = tokfeed.Loader(config=self.config, rank=r)
            self.assertEqual(loader._lease.started, r == 0, "the second loader attaches to the first one's daemon")
            self.assertEqual(len(owned(self.config)[1]), 1)
            got.append([digest(b) for b in loader])
            if r == 0:
                first = loader  # kept open: rank 1 attaches to the same daemon
        loader.close()
        self.assertEqual(len(owned(self.config)[1]), 1, "one loader is still open")
        first.close()
        self.assertEqual(got, want)
        self.assert_nothing_left()
        # A new loader after the stop starts a new daemon.
        with tokfeed.Loader(config=self.config, rank=1) as loader:
            self.assertTrue(loader._lease.started)
            self.assertEqual([digest(b) for b in loader], want[1])
        self.assert_nothing_left()

    def test_two_processes_share_one_daemon(self):
        want = self.served_by_hand([0, 1])
        kids = [self.child(r) for r in (0, 1)]
        started = [int(k.stdout.readline().split()[1]) for k in kids]
        self.assertEqual(sorted(started), [0, 1], "exactly one process starts the daemon")
        keepers, daemons = owned(self.config)
        self.assertEqual((len(keepers), len(daemons)), (1, 1))
        for k in kids:
            k.stdin.write("go\n")
            k.stdin.flush()
        got = [k.communicate()[0].split() for k in kids]
        self.assertEqual([k.returncode for k in kids], [0, 0])
        self.assertEqual(got, want)
        self.assert_nothing_left()

    def test_eight_local_ranks_race_to_start_one_daemon(self):
        self.write_config(world_size=8)
        kids = [self.child(r, mode="lease") for r in range(8)]  # all at once, as torchrun starts them
        started = [int(k.stdout.readline().split()[1]) for k in kids]
        self.assertEqual(sum(started), 1, f"started flags {started}")
        self.assertEqual([len(x) for x in owned(self.config)], [1, 1])
        for k in kids:
            k.stdin.write("go\n")
            k.stdin.flush()
        counts = [int(k.communicate()[0]) for k in kids]
        self.assertTrue(all(n > 0 for n in counts), counts)
        self.assert_nothing_left()

    def test_trainers_killed_leave_nothing_running(self):
        kids = [self.child(r) for r in (0, 1)]
        for k in kids:
            k.stdout.readline()
        self.assertEqual([len(x) for x in owned(self.config)], [1, 1])
        for k in kids:
            os.killpg(k.pid, signal.SIGKILL)
            k.wait()
        self.assert_nothing_left()

    def test_a_daemon_that_cannot_start_is_reported_with_its_log(self):
        self.write_config(world_size=1, tokenizer=os.path.join(self.dir, "missing.model"))
        with self.assertRaises(RuntimeError) as cm:
            tokfeed.Loader(config=self.config, rank=0)
        self.assertIn("exited with status", str(cm.exception))
        self.assertIn("missing.model", str(cm.exception))
        self.assert_nothing_left()

    def test_a_socket_folder_that_cannot_be_written_is_named(self):
        with open(self.config, "w") as f:
            f.write(job_toml("/proc/tokfeed-no/job.sock", self.prefix))
        with self.assertRaises(PermissionError) as cm:
            tokfeed.Loader(config=self.config, rank=0)
        self.assertIn("cannot create /proc/tokfeed-no/job.sock.lock", str(cm.exception))
        self.assertIn("[server] socket in a folder of yours", str(cm.exception))

    def test_serve_and_status(self):
        serve = subprocess.Popen([sys.executable, "-m", "tokfeed", "serve", self.config], env=ENV,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.children.append(serve)
        sock = launch.config_socket(self.config)
        deadline = time.monotonic() + 30
        while not launch.answers(sock) and time.monotonic() < deadline:
            time.sleep(0.05)
        st = subprocess.run([sys.executable, "-m", "tokfeed", "status", "--json", self.config], env=ENV,
                            capture_output=True, text=True)
        self.assertEqual(st.returncode, 0, st.stderr)
        self.assertIn(f'"socket":"{sock}"', st.stdout)
        with tokfeed.Loader(config=self.config, rank=0) as loader:  # attaches to the service, starts nothing
            self.assertFalse(loader._lease.started)
            self.assertEqual(owned(self.config)[0], [])
        serve.send_signal(signal.SIGTERM)
        self.assertEqual(serve.wait(20), 0)
        st = subprocess.run([sys.executable, "-m", "tokfeed", "status", self.config], env=ENV, capture_output=True,
                            text=True)
        self.assertNotEqual(st.returncode, 0)
        self.assert_nothing_left()


class _HandDaemon(Daemon):
    """tokfeed_testlib.Daemon on an existing config file."""

    def __init__(self, config):
        self.dir = tempfile.mkdtemp(prefix="tokfeed-py-")
        self.config = config
        self.socket = launch.config_socket(config)
        os.makedirs(os.path.dirname(self.socket), exist_ok=True)
        self.log = open(os.path.join(self.dir, "tokfeedd.log"), "w")
        self.proc = subprocess.Popen([TOKFEEDD, "--config", config], stdout=self.log, stderr=subprocess.STDOUT)
        self._wait_ready()


if __name__ == "__main__":
    unittest.main()
