"""Datasets in an object store (docs/data_model.md 1.1): s3:// Parquet shards
and JSONL give the batches the same files give from a local path, byte for
byte; a server that stops mid-fetch is retried and then gives the same
stream, or a clear error naming the object, and never a half-written file.

The store is moto in server mode on 127.0.0.1 (PyPI `moto[server]`, in the
interpreter that runs this: TOKFEED_HF_PYTHON); without it the test skips
(77). Paths come from ctest: TOKFEED_BUILD_DIR, TOKFEED_SOURCE_DIR.
"""
import gzip
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "columnar"))
from test_columnar import TOKFEEDD, TOKFEEDCTL, WITH_ARROW, Job, dataset, source_records  # noqa: E402

try:
    import boto3
    import moto.server  # noqa: F401
    import flask  # noqa: F401  (moto's server mode)
    import pyarrow as pa
    import pyarrow.parquet as pq
except ImportError as e:
    print(f"SKIP: moto[server], boto3 or pyarrow missing in {sys.executable}: {e}")
    sys.exit(77)

BUCKET = "tokfeed-data"


def read(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Moto:
    """moto_server on 127.0.0.1:port; its objects live in its memory, so a
    restart starts empty (put() fills it again)."""

    def __init__(self, port, log):
        self.port, self.log, self.proc = port, log, None

    def start(self):
        self.proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        for _ in range(400):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                if self.proc.poll() is not None:
                    raise AssertionError("moto_server exited")
                time.sleep(0.025)
        raise AssertionError("moto_server did not start")

    def kill(self):
        self.proc.kill()
        self.proc.wait()

    def put(self, files):
        s3 = boto3.client("s3")
        s3.create_bucket(Bucket=BUCKET)
        for key, path in files.items():
            s3.upload_file(path, BUCKET, key)


def answering(sock, proc, log):
    """Waits until tokfeedd answers on `sock`: its socket file appears at
    bind(), a moment before it accepts."""
    for _ in range(2400):
        if os.path.exists(sock):
            st = subprocess.run([TOKFEEDCTL, "-s", sock, "status", "--json"], capture_output=True, text=True)
            if st.returncode == 0:
                return
        if proc.poll() is not None:
            raise AssertionError("tokfeedd exited: " + read(log))
        time.sleep(0.025)
    raise AssertionError("tokfeedd does not answer on " + sock)


class S3Job(Job):
    def dump(self):
        with open(self.config + ".log", "w") as log:
            proc = subprocess.Popen([TOKFEEDD, "--config", self.config], stderr=log)
            try:
                answering(self.socket, proc, self.config + ".log")
                out = subprocess.run([TOKFEEDCTL, "-s", self.socket, "dump", "--rank", "0"], capture_output=True,
                                     text=True)
                if out.returncode != 0:
                    raise AssertionError("dump failed: " + out.stderr + read(self.config + ".log"))
                return out.stdout
            finally:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=60)


@unittest.skipUnless(WITH_ARROW, "tokfeed built without Arrow")
class S3Test(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="tokfeed-s3-")
        aws = os.path.join(cls.tmp, "aws")
        os.makedirs(aws)
        for f in ("config", "credentials"):
            open(os.path.join(aws, f), "w").close()
        cls.port = free_port()
        # The store, its credentials and region from the usual variables; no
        # profile or instance metadata is consulted.
        os.environ.update({
            "AWS_ENDPOINT_URL": f"http://127.0.0.1:{cls.port}", "AWS_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_CONFIG_FILE": os.path.join(aws, "config"),
            "AWS_SHARED_CREDENTIALS_FILE": os.path.join(aws, "credentials"), "AWS_EC2_METADATA_DISABLED": "true",
            "TOKFEED_OBJECT_BACKOFF_MS": "300"})
        cls.moto_log = open(os.path.join(cls.tmp, "moto.log"), "w")
        cls.moto = Moto(cls.port, cls.moto_log)
        cls.moto.start()
        records = source_records()
        table = pa.Table.from_struct_array(pa.array(records))
        cls.files = {}
        local = os.path.join(cls.tmp, "local")
        os.makedirs(os.path.join(local, "pq"))
        cuts = [0, 120, 121, 260, table.num_rows]
        for k in range(4):
            p = os.path.join(local, "pq", f"part-{k:05d}.parquet")
            pq.write_table(table.slice(cuts[k], cuts[k + 1] - cuts[k]), p, row_group_size=32)
            cls.files[f"pq/part-{k:05d}.parquet"] = p
        # One object of many small row groups: a few batches read a few of them.
        cls.fine = os.path.join(local, "fine.parquet")
        pq.write_table(table, cls.fine, row_group_size=2)
        cls.files["fine/all.parquet"] = cls.fine
        cls.files["pq/README.md"] = os.path.join(local, "pq", "README.md")
        with open(cls.files["pq/README.md"], "w") as f:
            f.write("not a shard\n")
        cls.jsonl = os.path.join(local, "all.jsonl")
        with open(cls.jsonl, "w", encoding="utf-8") as f:
            for r in records:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
        cls.files["jsonl/all.jsonl"] = cls.jsonl
        with open(cls.jsonl, "rb") as f, gzip.open(cls.jsonl + ".gz", "wb") as g:
            g.write(f.read())
        cls.files["jsonl/all.jsonl.gz"] = cls.jsonl + ".gz"
        cls.moto.put(cls.files)
        cls.local_pq = os.path.join(local, "pq", "*.parquet")
        cls.want = {}

    @classmethod
    def tearDownClass(cls):
        cls.moto.kill()
        cls.moto_log.close()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def fresh(self, name):
        d = os.path.join(self.tmp, name)
        os.makedirs(d)
        return d

    def baseline(self, path):
        if path not in self.want:
            self.want[path] = S3Job(self.fresh("local-" + str(len(self.want))), dataset(path)).dump()
            self.assertGreater(len(self.want[path].splitlines()), 100)
        return self.want[path]

    def assert_same(self, got, path, what):
        want = self.baseline(path)
        for i, (a, b) in enumerate(zip(got.splitlines(), want.splitlines())):
            self.assertEqual(a, b, f"{what}: batch {i} differs from the local one")
        self.assertEqual(got, want, what)

    def objects(self, cache):
        d = os.path.join(cache, "objects")
        return sorted(os.listdir(d)) if os.path.isdir(d) else []

    def test_parquet_glob_equals_local(self):
        tmp = self.fresh("pq")
        got = S3Job(tmp, dataset(f"s3://{BUCKET}/pq/*.parquet")).dump()
        self.assert_same(got, self.local_pq, "s3:// Parquet glob")
        kept = self.objects(os.path.join(tmp, "cache"))
        self.assertEqual(len(kept), 4, kept)  # the four shards, not README.md, no temporary
        self.assertTrue(all(k.endswith(".parquet") for k in kept), kept)
        # A second start reads them from the cache: nothing is fetched again.
        job = S3Job(tmp, dataset(f"s3://{BUCKET}/pq/*.parquet"))
        self.assert_same(job.dump(), self.local_pq, "s3:// Parquet glob, objects cached")
        log = read(job.config + ".log")
        self.assertNotIn("fetching s3://", log)

    def test_prefix_and_jsonl_equal_local(self):
        got = S3Job(self.fresh("prefix"), dataset(f"s3://{BUCKET}/pq")).dump()
        self.assert_same(got, self.local_pq, "s3:// prefix of Parquet shards")
        got = S3Job(self.fresh("jsonl"), dataset(f"s3://{BUCKET}/jsonl/all.jsonl")).dump()
        self.assert_same(got, self.jsonl, "s3:// JSONL")
        got = S3Job(self.fresh("jsonl-gz"), dataset(f"s3://{BUCKET}/jsonl/all.jsonl.gz")).dump()
        self.assert_same(got, self.jsonl, "s3:// JSONL, gzip")

    def test_objects_count_toward_max_gb(self):
        # Two jobs share a [cache] dir bounded to a few bytes: the second's
        # start removes the first's object, never its own.
        tmp = self.fresh("trim")
        for url, want in ((f"s3://{BUCKET}/jsonl/all.jsonl", self.jsonl), (f"s3://{BUCKET}/pq/*.parquet", self.local_pq)):
            job = S3Job(tmp, dataset(url))
            with open(job.config, "a") as f:
                f.write("max_gb = 0.000001\n")  # [cache] is the config's last table
            self.assert_same(job.dump(), want, url)
        kept = self.objects(os.path.join(tmp, "cache"))
        self.assertEqual(len(kept), 4, kept)
        self.assertTrue(all(k.endswith(".parquet") for k in kept), kept)
        self.assertRegex(read(job.config + ".log"), r"cache trim: removed [0-9a-f]+-all\.jsonl \(")

    def test_missing_object_or_bucket_is_named(self):
        tmp = self.fresh("missing")
        for url, want in ((f"s3://{BUCKET}/none/*.parquet", "the glob matches no object"),
                          (f"s3://{BUCKET}/jsonl/nope.jsonl", "no such object or bucket"),
                          ("s3://no-such-bucket/x.jsonl", "no such object or bucket")):
            r = S3Job(tmp, dataset(url)).check()
            self.assertNotEqual(r.returncode, 0, url)
            self.assertIn(url, r.stderr)
            self.assertIn(want, r.stderr)

    def start_slow(self, tmp, retries):
        """tokfeedd over the Parquet glob, fetching 16 KiB at a time with a
        pause; returns it once a shard is half fetched."""
        job = S3Job(tmp, dataset(f"s3://{BUCKET}/pq/*.parquet"))
        env = dict(os.environ, TOKFEED_FAULT_OBJECT_CHUNK="16384:60", TOKFEED_OBJECT_RETRIES=str(retries))
        log = open(job.config + ".log", "w")
        proc = subprocess.Popen([TOKFEEDD, "--config", job.config], stderr=log, env=env)
        objects = os.path.join(tmp, "cache", "objects")
        for _ in range(1200):
            if any(".tmp." in f for f in self.objects(os.path.join(tmp, "cache"))):
                return job, proc, log, objects
            self.assertIsNone(proc.poll(), read(job.config + ".log"))
            time.sleep(0.01)
        raise AssertionError("no fetch began")

    def test_server_stopped_mid_fetch_then_back(self):
        tmp = self.fresh("restart")
        job, proc, log, objects = self.start_slow(tmp, retries=8)
        try:
            self.moto.kill()
            time.sleep(1.0)
            partial = [f for f in os.listdir(objects) if ".tmp." in f]
            self.assertGreaterEqual(len(partial), 1, os.listdir(objects))
            for p in partial:
                self.assertNotIn(p.split(".tmp.")[0], os.listdir(objects))  # not under its name until whole
            st = subprocess.run([TOKFEEDCTL, "-s", job.socket, "status", "--json"], capture_output=True, text=True)
            self.assertEqual(st.returncode, 0, st.stderr)
            ob = json.loads(st.stdout)["dataset"]["objects"]
            self.assertEqual(ob["objects_total"], 4, ob)
            self.assertLess(ob["objects_done"], 4, ob)
            self.assertGreaterEqual(ob["retries"], 1, ob)
            self.assertRegex(ob["current"], rf"^s3://{BUCKET}/pq/part-\d+\.parquet$")
            self.assertRegex(ob["last_retry"], rf"^s3://{BUCKET}/pq/part-\d+\.parquet: ")
            self.moto.start()
            self.moto.put(self.files)  # the same bytes: the same ETags
            out = subprocess.run([TOKFEEDCTL, "-s", job.socket, "dump", "--rank", "0"], capture_output=True,
                                 text=True, timeout=300)
            self.assertEqual(out.returncode, 0, out.stderr + read(job.config + ".log"))
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
            log.close()
        text = read(job.config + ".log")
        self.assertIn("retrying in", text)
        if os.environ.get("TOKFEED_TEST_SHOW_LOG"):
            print(text)
        self.assert_same(out.stdout, self.local_pq, "s3:// Parquet after the server came back")
        self.assertFalse([f for f in os.listdir(objects) if ".tmp." in f])

    def test_stop_while_fetching_leaves_nothing_half_written(self):
        tmp = self.fresh("stop")
        job, proc, log, objects = self.start_slow(tmp, retries=2)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=60)
        log.close()
        self.assertEqual(rc, 0, read(job.config + ".log"))
        self.assertLess(time.monotonic() - t0, 5)
        # The fetcher removes its temporaries as it stops; past the daemon's
        # 1 s grace it may still be at it (a loaded machine), so wait for it.
        deadline = time.monotonic() + 10
        while [f for f in os.listdir(objects) if ".tmp." in f] and time.monotonic() < deadline:
            time.sleep(0.1)
        self.assertFalse([f for f in os.listdir(objects) if ".tmp." in f], os.listdir(objects))

    def test_server_gone_gives_a_clear_error(self):
        tmp = self.fresh("gone")
        job, proc, log, objects = self.start_slow(tmp, retries=2)
        try:
            self.moto.kill()
            rc = proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            log.close()
            self.moto.start()
            self.moto.put(self.files)
        text = read(job.config + ".log")
        self.assertNotEqual(rc, 0)
        self.assertRegex(text, rf"error: s3://{BUCKET}/pq/part-\d+\.parquet: the object store failed 3 time\(s\)")
        self.assertIn("restart tokfeedd", text)
        # Only whole objects are kept: the one being fetched left nothing.
        fetched = [f for f in os.listdir(objects)]
        self.assertFalse([f for f in fetched if ".tmp." in f], fetched)
        for f in fetched:
            key = "pq/" + f.split("-", 1)[1]
            self.assertEqual(os.path.getsize(os.path.join(objects, f)), os.path.getsize(self.files[key]), f)
        # The next start fetches the rest and serves the same stream.
        self.assert_same(S3Job(tmp, dataset(f"s3://{BUCKET}/pq/*.parquet")).dump(), self.local_pq,
                         "s3:// Parquet after a failed start")

    # Footers first (check_rows = "when_read"): the daemon plans from the
    # objects' footers and serves their row groups as they arrive. The fault
    # hook TOKFEED_FAULT_OBJECT_WANTED_ONLY makes the fetcher fetch only the
    # groups a worker waits for, so the objects stay partial while served.
    # The token cache is off (its builders read every row at once), and the
    # batches keep every sample (a plan that leaves samples out needs every
    # record's length before the first batch).
    WHEN_READ = 'check_rows = "when_read"'
    KEEP_ALL = "[batch]\nsize = 4\nmax_length = 512\ntruncation = \"right\"\nkeep_untrained = true\n"

    FINE = f"s3://{BUCKET}/fine/all.parquet"

    def start_footers(self, tmp, retries=6):
        job = S3Job(tmp, dataset(self.FINE, self.WHEN_READ), cache=False, batch=self.KEEP_ALL)
        env = dict(os.environ, TOKFEED_FAULT_OBJECT_WANTED_ONLY="1", TOKFEED_OBJECT_RETRIES=str(retries))
        log = open(job.config + ".log", "w")
        proc = subprocess.Popen([TOKFEEDD, "--config", job.config], stderr=log, env=env)
        try:
            answering(job.socket, proc, job.config + ".log")
            first = self.ctl(job, "dump", "--rank", "0", "--count", "1")
        except BaseException:
            proc.kill()
            proc.wait()
            log.close()
            raise
        return job, proc, log, first

    def ctl(self, job, *args):
        out = subprocess.run([TOKFEEDCTL, "-s", job.socket, *args], capture_output=True, text=True, timeout=300)
        self.assertEqual(out.returncode, 0, out.stderr + read(job.config + ".log"))
        return out.stdout

    def partial_files(self, objects):
        return sorted(f for f in os.listdir(objects) if ".tmp." in f)

    def test_footers_first_serves_before_objects_are_whole(self):
        tmp = self.fresh("footers")
        local = self.fine + "\n" + self.WHEN_READ  # the baseline's key: the local file, rows checked when read
        if local not in self.want:
            self.want[local] = S3Job(self.fresh("local-when-read"), dataset(self.fine, self.WHEN_READ),
                                     cache=False, batch=self.KEEP_ALL).dump()
        job, proc, log, first = self.start_footers(tmp)
        objects = os.path.join(tmp, "cache", "objects")
        try:
            # The first batch came while the object was partial: a sparse
            # temporary and its completion map, nothing under its own name.
            ob = json.loads(self.ctl(job, "status", "--json"))["dataset"]["objects"]
            self.assertEqual(ob["objects_total"], 1, ob)
            self.assertEqual(ob["objects_done"], 0, ob)
            self.assertLess(ob["bytes_done"], ob["bytes_total"], ob)  # the workers ran a few batches ahead
            partial = self.partial_files(objects)
            self.assertEqual(len(partial), 2, partial)
            self.assertTrue(partial[1].endswith(".map"), partial)
            self.assertEqual(partial, sorted(os.listdir(objects)))
            self.assertEqual(first.splitlines()[0], self.want[local].splitlines()[0])
            got = self.ctl(job, "dump", "--rank", "0")
            # Every row was read in the epochs: every group came, and each
            # object was kept whole under its name.
            deadline = time.monotonic() + 30
            while self.partial_files(objects) and time.monotonic() < deadline:
                time.sleep(0.1)
            self.assertFalse(self.partial_files(objects))
            ob = json.loads(self.ctl(job, "status", "--json"))["dataset"]["objects"]
            self.assertEqual((ob["objects_done"], ob["bytes_done"]), (1, ob["bytes_total"]), ob)
        finally:
            proc.send_signal(signal.SIGTERM)
            rc = proc.wait(timeout=60)
            log.close()
        self.assertEqual(rc, 0, read(job.config + ".log"))
        want = self.want[local]
        for i, (a, b) in enumerate(zip(got.splitlines(), want.splitlines())):
            self.assertEqual(a, b, f"footers first: batch {i} differs from the local one")
        self.assertEqual(got, want)
        kept = self.objects(os.path.join(tmp, "cache"))
        self.assertEqual(len(kept), 1, kept)
        with open(os.path.join(objects, kept[0]), "rb") as a, open(self.fine, "rb") as b:
            self.assertEqual(a.read(), b.read(), kept)
        # A second start finds it whole: nothing is fetched, same stream.
        again = S3Job(tmp, dataset(self.FINE, self.WHEN_READ), cache=False, batch=self.KEEP_ALL)
        self.assertEqual(again.dump(), want)
        self.assertNotIn("fetching s3://", read(again.config + ".log"))

    def test_footers_first_stop_leaves_nothing(self):
        tmp = self.fresh("footers-stop")
        job, proc, log, _ = self.start_footers(tmp)
        objects = os.path.join(tmp, "cache", "objects")
        partial = self.partial_files(objects)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=60)
        log.close()
        self.assertTrue(partial)
        self.assertEqual(rc, 0, read(job.config + ".log"))
        self.assertLess(time.monotonic() - t0, 5)
        deadline = time.monotonic() + 10
        while self.partial_files(objects) and time.monotonic() < deadline:
            time.sleep(0.1)
        self.assertFalse(self.partial_files(objects))
        self.assertFalse(os.listdir(objects))  # nothing was whole: nothing is kept

    def test_footers_first_server_gone_gives_a_clear_error(self):
        tmp = self.fresh("footers-gone")
        job, proc, log, _ = self.start_footers(tmp, retries=2)
        objects = os.path.join(tmp, "cache", "objects")
        try:
            self.moto.kill()
            # The next batches wait for groups the fetcher cannot get.
            out = subprocess.run([TOKFEEDCTL, "-s", job.socket, "dump", "--rank", "0"], capture_output=True,
                                 text=True, timeout=120)
            rc = proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            log.close()
            self.moto.start()
            self.moto.put(self.files)
        text = read(job.config + ".log")
        self.assertNotEqual(out.returncode, 0)
        self.assertNotEqual(rc, 0, text)
        self.assertIn(f"{self.FINE}: the object store failed 3 time(s)", text)
        self.assertIn("restart tokfeedd", text)
        deadline = time.monotonic() + 10
        while self.partial_files(objects) and time.monotonic() < deadline:
            time.sleep(0.1)
        self.assertFalse(self.partial_files(objects))


if __name__ == "__main__":
    unittest.main(verbosity=2)
