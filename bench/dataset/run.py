#!/usr/bin/python3
"""Dataset indexing benchmark: tokfeed's index of a multi-GB JSONL file
against `wc -l` and HF `datasets.load_dataset("json")`, and the daemon's
memory on that file (docs/benchmarks.md, "Dataset indexing").

    /usr/bin/python3 bench/dataset/run.py [--gb 4] [--work /tmp/tokfeed-bench-dataset] [--build build]
                                          [--skip-hf] [--skip-memory] [--keep] [--no-write]

In one run, on one generated file:
  1. the file: --source repeated line by line up to --gb GB (10^9 bytes), copy k
     of line i getting a top-level `"id": "k-i"` so no two records are equal;
     reused when it is already there with the size its last generation
     recorded;
  2. `wc -l` on it from the page cache: best and median of 3, after a warm-up
     read (the ceiling for a newline scan);
  3. `tokfeedd --check-config` (indexes and validates every record, loads the
     tokenizer): three runs each with an empty cache dir (first index, best and
     median, as `wc -l`), one pinned to one core (`taskset -c 0`: the
     single-core scan and validation rate), then one more (cached start); the
     fixed overhead is the same command on a one-record file;
  4. the record check alone (bench_record_check, built with the project):
     in place against the full parse, one thread, on --source and on an
     ensure_ascii copy of it;
  5. HF `datasets.load_dataset("json", data_files=FILE, split="train",
     cache_dir=...)` in a fresh Python process with a fresh cache (what
     ms-swift does); `datasets` comes from a private --target install under the
     work dir (see bench/dataset/README.md);
  6. memory: tokfeedd serving the file ([cache] off, longest padding) with 1, 2
     and 4 workers; summed and per-process PSS of the daemon and its children,
     sampled every 100 ms from start until 200 batches are drained.

Results: tables on stdout (progress on stderr) and the section between
<!-- dataset-bench:begin --> and <!-- dataset-bench:end --> in --docs
(appended as "## Dataset indexing" when missing) unless --no-write.
"""

import argparse
import datetime
import errno
import json
import os
import re
import resource
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))
from proctree import descendants  # noqa: E402

SOURCE = os.path.join(os.path.dirname(ROOT), "shared", "data", "sft", "mixed-10k.jsonl")  # ../shared beside the checkout
SP_MODEL = os.path.join(ROOT, "tests", "data", "tokenizers", "sp32k", "tokenizer.model")
GB = 10 ** 9
MiB = 1 << 20
BEGIN, END = "<!-- dataset-bench:begin -->", "<!-- dataset-bench:end -->"
SECTION = "## Dataset indexing"
# Targets (benchmark figures, not tests).
TARGET_WC_RATIO = 2.0    # tokfeed first index within 2x of `wc -l`
TARGET_HF_RATIO = 20.0   # ... and at least 20x faster than load_dataset


def log(msg):
    print(f"[dataset-bench] {msg}", file=sys.stderr, flush=True)


def children_cpu():
    """user + system CPU seconds of every waited-for child so far."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def fmt_s(s):
    return f"{s:.3f}" if s < 1 else f"{s:.2f}"


# ---------------------------------------------------------------- binaries

class Binaries:
    """tokfeedd and tokfeedctl of --build. The daemon may be rebuilt while we
    run: wait for a binary that is missing or busy (being linked), and note a
    change of its mtime so the report can say so."""

    def __init__(self, build):
        self.tokfeedd = os.path.join(build, "daemon", "tokfeedd")
        self.tokfeedctl = os.path.join(build, "tools", "tokfeedctl")
        self.mtimes = {}

    def _ready(self, path, timeout=300):
        deadline = time.monotonic() + timeout
        while not os.access(path, os.X_OK):
            if time.monotonic() > deadline:
                sys.exit(f"{path} not found or not executable (waited {timeout} s)")
            time.sleep(1)
        self.mtimes.setdefault(path, set()).add(os.stat(path).st_mtime)

    def _retry(self, fn, cmd):
        for attempt in range(120):
            self._ready(cmd[0])
            try:
                return fn()
            except OSError as e:   # ETXTBSY / ENOENT while the linker writes it
                if e.errno not in (errno.ETXTBSY, errno.ENOENT) or attempt == 119:
                    raise
                time.sleep(1)

    def run(self, cmd, **kw):
        return self._retry(lambda: subprocess.run(cmd, **kw), cmd)

    def popen(self, cmd, **kw):
        return self._retry(lambda: subprocess.Popen(cmd, **kw), cmd)

    def rebuilt(self):
        return [os.path.relpath(p, ROOT) for p, m in self.mtimes.items() if len(m) > 1]


# ---------------------------------------------------------------- 1. the file

def vary(line, k, i):
    """Copy k of source line i: a top-level "id" inserted after the `{`."""
    if not line.startswith(b"{"):
        return line                         # not an object: left as it is (a bad record either way)
    sep = b"" if line[1:].lstrip().startswith(b"}") else b", "
    return b'{"id": "%d-%d"%s' % (k, i, sep) + line[1:]


def generate(source, path, target):
    """Write `path`: copies of `source` until it holds >= target bytes (at a
    line boundary). Reuses a previous file of the same source and target.
    Returns (bytes, records, reused)."""
    meta_path = path + ".meta.json"
    st = os.stat(source)
    want = {"source": os.path.abspath(source), "source_bytes": st.st_size, "source_mtime": st.st_mtime,
            "target": target}
    try:
        with open(meta_path) as f:
            meta = json.load(f)
        if {k: meta.get(k) for k in want} == want and os.path.getsize(path) == meta["bytes"]:
            return meta["bytes"], meta["records"], True
    except (OSError, ValueError, KeyError):
        pass
    free = shutil.disk_usage(os.path.dirname(path)).free
    if free < target * 3:
        log(f"warning: {free / GB:.1f} GB free under {os.path.dirname(path)}; the file, the HF cache "
            f"(about as large again) and some room need about {3 * target / GB:.1f} GB")
    with open(source, "rb") as f:
        lines = [l for l in f.read().split(b"\n") if l.strip()]
    log(f"generating {path} ({target / GB:g} GB from {len(lines):,} records of {source}) ...")
    t0 = time.monotonic()
    size = records = k = 0
    tmp = path + ".part"
    with open(tmp, "wb") as out:
        while size < target:
            chunk = []
            for i, line in enumerate(lines):
                rec = vary(line, k, i) + b"\n"
                chunk.append(rec)
                size += len(rec)
                records += 1
                if size >= target:
                    break
            out.write(b"".join(chunk))
            k += 1
    os.replace(tmp, path)
    with open(meta_path, "w") as f:
        json.dump(dict(want, bytes=size, records=records), f)
    log(f"generated in {time.monotonic() - t0:.1f} s")
    return size, records, False


def warm(path):
    """Read the whole file once so later readers find it in the page cache."""
    buf = bytearray(16 * MiB)
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buf):
            pass


# ---------------------------------------------------------------- 2. wc -l

def measure_wc(path, records, runs=3):
    warm(path)
    times = []
    env = dict(os.environ, LC_ALL="C")
    cpus = []
    for _ in range(runs):
        c0, t0 = children_cpu(), time.perf_counter()
        out = subprocess.run(["wc", "-l", path], check=True, capture_output=True, text=True, env=env).stdout
        times.append(time.perf_counter() - t0)
        cpus.append(children_cpu() - c0)
        lines = int(out.split()[0])
    if lines != records:
        log(f"warning: wc -l counts {lines:,} lines, the generator wrote {records:,} records")
    return {"best": min(times), "median": statistics.median(times), "runs": times, "lines": lines,
            "cpu": cpus[times.index(min(times))]}


# ---------------------------------------------------------------- 3. tokfeed index

def job_toml(data, cache_dir, cache, work, name, workers=2, padding="longest"):
    return (f'# written by bench/dataset/run.py\n'
            f'[dataset]\npath = "{data}"\nformat = "auto"\non_bad_record = "skip"\n\n'
            f'[tokenizer]\ntype = "sentencepiece"\npath = "{SP_MODEL}"\ntemplate = "mistral"\n\n'
            f'[batch]\nsize = 4\nmax_length = 2048\npadding = "{padding}"\ntruncation = "right"\n'
            f'keep_untrained = true\n\n'
            f'[schedule]\nepochs = 1\nshuffle = true\nseed = 42\n\n'
            f'[workers]\ncount = {workers}\nslots = 4\n\n'
            f'[cache]\nenabled = {"true" if cache else "false"}\ndir = "{cache_dir}"\n\n'
            f'[server]\nsocket = "{os.path.join(work, name + ".sock")}"\n'
            f'shm_prefix = "tokfeed-bench-dataset-{os.getpid()}-{name}"\n')


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return path


def fresh_dir(path):
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


# `# dataset index: ... in X s` (or ms): the first such figure on the line.
INDEX_RE = re.compile(r"^# dataset index:.*?\bin ([0-9.]+(?:e-?[0-9]+)?) ?(ms|s)\b")
RECORDS_RE = re.compile(r"^# dataset: .*: ([0-9]+) records, ([0-9]+) valid, ([0-9]+) bad")


def check_config(bins, cfg, prefix=()):
    """One `tokfeedd --check-config` (after `prefix`, e.g. taskset): wall
    seconds, its `#` lines, the daemon's own index time (None when it prints
    none), (records, valid, bad)."""
    c0, t0 = children_cpu(), time.perf_counter()
    r = bins.run([*prefix, bins.tokfeedd, "--check-config", cfg], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    cpu = children_cpu() - c0
    if r.returncode != 0:
        sys.exit(f"tokfeedd --check-config {cfg} exited with {r.returncode}:\n{r.stdout}{r.stderr}")
    hashes = [l for l in r.stdout.splitlines() if l.startswith("#")]
    own = counts = None
    for l in hashes:
        if m := INDEX_RE.match(l):
            own = float(m.group(1)) / (1000 if m.group(2) == "ms" else 1)
        if m := RECORDS_RE.match(l):
            counts = tuple(int(x) for x in m.groups())
    return {"wall": wall, "cpu": cpu, "lines": hashes, "own": own, "counts": counts}


def measure_tokfeed(bins, work, data, source, records, runs=3, overhead_runs=3):
    # Fixed overhead: the same command on a one-record file (tokenizer load,
    # start-up), each run with an empty cache dir like the first index.
    tiny = os.path.join(work, "one-record.jsonl")
    with open(source, "rb") as f:
        first = next(l for l in f if l.strip())
    with open(tiny, "wb") as f:
        f.write(vary(first.rstrip(b"\n"), 0, 0) + b"\n")
    tiny_cfg = write(os.path.join(work, "one-record.toml"),
                     job_toml(tiny, os.path.join(work, "cache-tiny"), True, work, "tiny"))
    fresh_dir(os.path.join(work, "cache-tiny"))
    check_config(bins, tiny_cfg)                      # warm-up: binary and tokenizer in the page cache
    overhead = []
    for _ in range(overhead_runs):
        fresh_dir(os.path.join(work, "cache-tiny"))
        overhead.append(check_config(bins, tiny_cfg)["wall"])

    cache = os.path.join(work, "cache-index")
    cfg = write(os.path.join(work, "index.toml"), job_toml(data, cache, True, work, "index"))
    warm(data)
    # The first index as `wc -l` is timed: best and median of `runs`, each
    # with an empty cache dir.
    firsts = []
    for i in range(runs):
        fresh_dir(cache)
        log(f"tokfeedd --check-config: first index (empty cache dir), run {i + 1} of {runs} ...")
        firsts.append(check_config(bins, cfg))
        log(f"  {firsts[-1]['wall']:.2f} s")
    first = min(firsts, key=lambda r: r["wall"])
    # The same on one core: what one core scans and validates per second.
    one_core = None
    taskset = shutil.which("taskset")
    if taskset:
        fresh_dir(cache)
        log("tokfeedd --check-config: first index on one core (taskset -c 0) ...")
        one_core = check_config(bins, cfg, prefix=(taskset, "-c", "0"))
        log(f"  {one_core['wall']:.2f} s")
        fresh_dir(cache)
        check_config(bins, cfg)  # the cache the cached start reads
    log("cached start ...")
    second = check_config(bins, cfg)
    log(f"  {second['wall']:.2f} s")
    if first["counts"] and first["counts"][0] != records:
        log(f"warning: tokfeed found {first['counts'][0]:,} records, the generator wrote {records:,}")
    shutil.rmtree(os.path.join(work, "cache-tiny"), ignore_errors=True)
    return {"first": first, "first_runs": [r["wall"] for r in firsts],
            "first_own_runs": [r["own"] for r in firsts if r["own"] is not None], "one_core": one_core,
            "second": second, "overhead": min(overhead), "overhead_runs": overhead,
            "cache_files": sorted(os.listdir(cache)), "config": cfg}


# ---------------------------------------------------------------- 4. HF datasets

HF_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import datasets
t1, c1 = time.perf_counter(), time.process_time()
ds = datasets.load_dataset("json", data_files=sys.argv[1], split="train", cache_dir=sys.argv[2])
t2, c2 = time.perf_counter(), time.process_time()
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "load_cpu": c2 - c1, "rows": ds.num_rows,
                  "version": datasets.__version__}))
"""


class HfPython:
    """How to run a fresh Python with `datasets`: /usr/bin/python3 with a
    private --target install (isolated with -S from Debian's dist-packages,
    whose numpy 1.x scipy would otherwise be imported against the pip numpy 2),
    or, failing that, the system's own `datasets`."""

    def __init__(self, work):
        self.pylib = os.path.join(work, "pylib")
        self.cmd, self.env = None, None

    def _candidates(self):
        base = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        base.update(HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1", PYTHONNOUSERSITE="1",
                    HF_DATASETS_DISABLE_PROGRESS_BARS="1")
        if os.path.isdir(self.pylib):
            yield ["/usr/bin/python3", "-S"], dict(base, PYTHONPATH=self.pylib)
        yield ["/usr/bin/python3"], base

    def run(self, cmd, env, data, cache):
        env = dict(env, HF_HOME=os.path.join(cache, "home"))
        c0, t0 = children_cpu(), time.perf_counter()
        r = subprocess.run(cmd + ["-c", HF_CHILD, data, cache], capture_output=True, text=True, env=env)
        wall = time.perf_counter() - t0
        cpu = children_cpu() - c0
        if r.returncode != 0:
            return None, r.stderr.strip().splitlines()[-1:] or [f"exit {r.returncode}"]
        res = json.loads(r.stdout.strip().splitlines()[-1])
        res["wall"], res["cpu"] = wall, cpu
        return res, None

    def find(self, probe_data, probe_cache):
        """A command that loads a one-record file; installs `datasets` into
        the private dir once if none does. False when none works."""
        for attempt in range(2):
            for cmd, env in self._candidates():
                res, err = self.run(cmd, env, probe_data, fresh_dir(probe_cache))
                shutil.rmtree(probe_cache, ignore_errors=True)
                if res:
                    self.cmd, self.env = cmd, env
                    return res["version"]
            if attempt == 0:
                log(f"HF `datasets` is not usable from /usr/bin/python3 ({err[0] if err else '?'}).")
                log(f"Installing it from PyPI into {self.pylib} (private to this benchmark, so Debian's "
                    f"numpy 1.x that python3-torch needs stays in use elsewhere):")
                pip = ["/usr/bin/python3", "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                       "--upgrade", "--target", self.pylib, "datasets"]
                log("  " + shlex.join(pip))
                r = subprocess.run(pip, capture_output=True, text=True)
                if r.returncode != 0:
                    log(f"pip install failed:\n{r.stdout}{r.stderr}")
                    break
        return False


def measure_record_check(build, work, source):
    """bench_record_check (bench/dataset/bench_record_check.cpp) on --source
    and on a copy of it written with json.dumps(ensure_ascii=True): every
    non-ASCII character a \\uXXXX escape, as many dumps have it. Returns the
    table's lines, or None when the binary is not built."""
    exe = os.path.join(build, "bench", "dataset", "bench_record_check")
    if not os.access(exe, os.X_OK):
        log(f"{exe} not built: no record check table")
        return None
    ascii_copy = os.path.join(work, "source-ensure-ascii.jsonl")
    with open(source, encoding="utf-8") as f, open(ascii_copy + ".tmp", "w") as out:
        for line in f:
            if line.strip():
                out.write(json.dumps(json.loads(line), ensure_ascii=True) + "\n")
    os.replace(ascii_copy + ".tmp", ascii_copy)
    proc = subprocess.run([exe, "--reps", "5", source, ascii_copy], capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"bench_record_check failed ({proc.returncode}):\n{proc.stderr}")
    return [line.replace(work + "/", "").replace(os.path.dirname(ROOT) + "/", "../")
            for line in proc.stdout.splitlines()]


def measure_hf(work, data, records, keep):
    hf = HfPython(work)
    version = hf.find(os.path.join(work, "one-record.jsonl"), os.path.join(work, "hf-probe"))
    if not version:
        log("skipping the load_dataset row: `datasets` unavailable (see bench/dataset/README.md)")
        return None
    cache = fresh_dir(os.path.join(work, "hf-cache"))
    warm(data)
    log(f"HF datasets {version}: load_dataset('json') in a fresh process ...")
    try:
        res, err = hf.run(hf.cmd, hf.env, data, cache)
        if res is None:
            log(f"load_dataset failed: {err}")
            return None
        res["cache_bytes"] = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(cache) for f in fs)
    finally:
        if not keep:
            shutil.rmtree(cache, ignore_errors=True)
    log(f"  load_dataset {res['load_s']:.2f} s (process {res['wall']:.2f} s), {res['rows']:,} rows")
    if res["rows"] != records:
        log(f"warning: load_dataset gave {res['rows']:,} rows, the generator wrote {records:,} records")
    res["version"] = version
    res["isolated"] = "-S" in hf.cmd
    return res


# ---------------------------------------------------------------- 5. memory

PSS_KEYS = ("Pss", "Pss_Anon", "Pss_File", "Pss_Shmem")


def pss_and_name(pid):
    """({Pss, Pss_Anon, Pss_File, Pss_Shmem: bytes}, comm) of a process, or
    None when it is gone."""
    try:
        with open(f"/proc/{pid}/comm") as f:
            name = f.read().strip()
        pss = {}
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                key = line.split(":", 1)[0]
                if key in PSS_KEYS:
                    pss[key] = int(line.split()[1]) * 1024
        return (pss, name) if "Pss" in pss else None
    except OSError:
        return None


class PssSampler(threading.Thread):
    """Every `period` s: the PSS of root and each process below it. Keeps,
    per phase, the peak of the summed Pss with the sums of its parts and the
    per-process figures at that peak, and every pid seen (so that nothing is
    left running at the end)."""

    def __init__(self, root, period=0.1):
        super().__init__(daemon=True)
        self.root, self.period = root, period
        self.phase = "start"
        self.peak = {}           # phase -> ({key: summed bytes}, {pid: (name, Pss bytes)})
        self.seen = {}           # pid -> name
        self.stop_event = threading.Event()

    def sample(self):
        procs, total = {}, dict.fromkeys(PSS_KEYS, 0)
        for pid in descendants(self.root):
            got = pss_and_name(pid)
            if got:
                procs[pid] = (got[1], got[0]["Pss"])
                self.seen[pid] = got[1]
                for k, v in got[0].items():
                    total[k] += v
        if procs and total["Pss"] > self.peak.get(self.phase, ({"Pss": -1},))[0]["Pss"]:
            self.peak[self.phase] = (total, procs)

    def run(self):
        while not self.stop_event.is_set():
            self.sample()
            self.stop_event.wait(self.period)

    def stop(self):
        self.stop_event.set()
        self.join()


def ctl(bins, sock, *args, timeout=600):
    return bins.run([bins.tokfeedctl, "-s", sock, *args], capture_output=True, text=True, timeout=timeout)


def serving(st):
    """The daemon is serving: every worker has a pid and builds or waits."""
    ws = st.get("workers") or []
    return (st.get("ok") and st.get("ranks") and ws
            and all(w.get("pid", -1) > 0 and w.get("state") in ("building", "waiting", "done") for w in ws))


def stop_daemon(bins, proc, sock, pids):
    """shutdown over the socket, then SIGTERM, then SIGKILL; then any child
    seen by the sampler that is still there. Returns the pids left (none)."""
    if proc.poll() is None:
        try:
            ctl(bins, sock, "shutdown", timeout=10)
        except (subprocess.TimeoutExpired, OSError):
            pass
        for sig, wait in ((None, 20), (signal.SIGTERM, 10), (signal.SIGKILL, 10)):
            if sig:
                proc.send_signal(sig)
            try:
                proc.wait(wait)
                break
            except subprocess.TimeoutExpired:
                continue
    deadline = time.monotonic() + 10
    left = [p for p in pids if p != proc.pid and pss_and_name(p) and pss_and_name(p)[1] == pids[p]]
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = [p for p in left if pss_and_name(p)]
    for p in left:
        log(f"killing leftover {pids[p]} (pid {p})")
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return [p for p in left if pss_and_name(p)]


def measure_memory_once(bins, work, data, workers, batches, start_timeout):
    name = f"serve-w{workers}"
    sock = os.path.join(work, name + ".sock")
    cfg = write(os.path.join(work, name + ".toml"),
                job_toml(data, os.path.join(work, "cache-serve"), False, work, name, workers=workers))
    if os.path.exists(sock):
        os.unlink(sock)
    logf = open(os.path.join(work, name + ".log"), "w")
    t0 = time.monotonic()
    proc = bins.popen([bins.tokfeedd, "--config", cfg, "--log-level", "warn"], stdout=logf,
                      stderr=subprocess.STDOUT, start_new_session=True)
    sampler = PssSampler(proc.pid)
    sampler.start()
    try:
        while True:
            if proc.poll() is not None:
                sys.exit(f"tokfeedd exited with {proc.returncode} before serving; see {logf.name}")
            if time.monotonic() - t0 > start_timeout:
                sys.exit(f"tokfeedd not serving after {start_timeout} s; see {logf.name}")
            if os.path.exists(sock):
                r = ctl(bins, sock, "status", "--json", timeout=30)
                if r.returncode == 0 and serving(json.loads(r.stdout)):
                    break
            time.sleep(0.1)
        ready = time.monotonic() - t0
        sampler.phase = "drain"
        sampler.sample()
        t1 = time.monotonic()
        r = ctl(bins, sock, "drain", "--rank", "0", "--count", str(batches))
        drain_s = time.monotonic() - t1
        if r.returncode != 0:
            sys.exit(f"tokfeedctl drain exited with {r.returncode}: {r.stderr.strip()}")
        drained = json.loads(r.stdout)
        sampler.sample()
    finally:
        sampler.stop()
        left = stop_daemon(bins, proc, sock, dict(sampler.seen))
        logf.close()
    total, procs = sampler.peak["drain"]
    return {"workers": workers, "ready_s": ready, "drain_s": drain_s, "batches": drained.get("batches"),
            "pss": total, "procs": sorted(procs.values(), key=lambda p: (p[0] != "tokfeedd", p[0])),
            "start_pss": sampler.peak.get("start", ({"Pss": 0},))[0]["Pss"], "left": left}


def measure_memory(bins, work, data, workers_list=(1, 2, 4), batches=200, start_timeout=1800):
    rows = []
    for w in workers_list:
        log(f"memory: tokfeedd with {w} worker(s), drain {batches} batches ...")
        row = measure_memory_once(bins, work, data, w, batches, start_timeout)
        log(f"  serving after {row['ready_s']:.2f} s, peak summed PSS {row['pss']['Pss'] / MiB:.1f} MiB, "
            f"left running: {row['left'] or 'none'}")
        rows.append(row)
    return rows


# ---------------------------------------------------------------- report

def verdict(ok):
    return "met" if ok else "NOT met"


def report(args, data, size, records, reused, wc, tf, hf, mem, bins, elapsed, load, checks=None):
    rel = lambda p: os.path.relpath(p, ROOT) if p.startswith(ROOT + os.sep) else p
    first, second, ovh = tf["first"], tf["second"], tf["overhead"]
    net = max(first["wall"] - ovh, 0.0)
    wcb = wc["best"]
    cmd = " ".join(["/usr/bin/python3", "bench/dataset/run.py"] + [shlex.quote(a) for a in args.argv])
    md = [f"Produced by `{cmd}` on {datetime.date.today().isoformat()} in {elapsed / 60:.1f} min. "
          f"Machine: {os.cpu_count()} cores, shared with other jobs (load average {load[0]:.1f} at the start, "
          f"{load[1]:.1f} at the end), so the figures are noisy; every row comes from the same run, one "
          f"measurement at a time.", "",
          f"Data: `{rel(data)}`, {size / GB:.2f} GB ({size / (1 << 30):.2f} GiB), {records:,} records: "
          f"`{rel(args.source)}` repeated line by line, copy k of line i with a top-level `\"id\": \"k-i\"` "
          f"({'reused' if reused else 'generated'} by this run), in the page cache for every measurement. "
          f"tokfeed: sp32k `tokenizer.model`, mistral template; `tokfeedd --check-config` indexes and validates "
          f"every record, computes the token-cache key and loads the tokenizer; its fixed overhead "
          f"is the best of {len(tf['overhead_runs'])} runs on a one-record file. HF: `load_dataset(\"json\", "
          f"data_files=FILE, split=\"train\", cache_dir=...)` in a fresh `/usr/bin/python3`, fresh cache dir. "
          f"CPU = user + system seconds of the process (all its threads).", ""]
    if bins.rebuilt():
        md += [f"Note: {', '.join(bins.rebuilt())} was rebuilt during the run.", ""]

    def row(what, secs, cpu=None):
        return f"| {what} | {fmt_s(secs)} | {secs / wcb:.2f}x | {'–' if cpu is None else fmt_s(cpu)} |"

    md += ["| measurement | seconds | vs `wc -l` (best) | CPU s |", "|---|---:|---:|---:|",
           f"| `wc -l`, best / median of {len(wc['runs'])} | {fmt_s(wcb)} / {fmt_s(wc['median'])} | 1.00x | "
           f"{fmt_s(wc['cpu'])} |",
           f"| tokfeed first index: `--check-config`, empty cache dir, best / median of {len(tf['first_runs'])} | "
           f"{fmt_s(first['wall'])} / {fmt_s(statistics.median(tf['first_runs']))} | {first['wall'] / wcb:.2f}x | "
           f"{fmt_s(first['cpu'])} |",
           row("tokfeed first index minus fixed overhead (best)", net)]
    if tf["first_own_runs"]:
        md.append(row("tokfeed first index, the daemon's own `# dataset index` figure (best)",
                      min(tf["first_own_runs"])))
    if tf["one_core"]:
        oc = tf["one_core"]
        own = f"; daemon's figure {fmt_s(oc['own'])} s, {size / oc['own'] / GB:.2f} GB/s" if oc["own"] else ""
        md.append(row(f"tokfeed first index on one core (`taskset -c 0`{own})", oc["wall"], oc["cpu"]))
    md.append(row("tokfeed cached start: second `--check-config`", second["wall"], second["cpu"]))
    if second["own"] is not None:
        md.append(row("tokfeed cached start, the daemon's own `# dataset index` figure", second["own"]))
    md.append(row("fixed overhead: `--check-config` on a one-record file", ovh))
    if hf:
        md += [row(f"HF `load_dataset(\"json\")` call, fresh cache (datasets {hf['version']})", hf["load_s"],
                   hf["load_cpu"]),
               row("HF: its whole fresh process (Python start, `import datasets`, load)", hf["wall"], hf["cpu"])]
    md.append("")
    counts = first["counts"]
    if counts:
        md.append(f"tokfeed found {counts[0]:,} records, {counts[1]:,} valid, {counts[2]:,} bad; "
                  f"its cache dir after the first run: {', '.join(tf['cache_files']) or 'empty'}.")
    if hf:
        md.append(f"load_dataset gave {hf['rows']:,} rows; its Arrow cache took {hf['cache_bytes'] / GB:.2f} GB "
                  f"({'kept' if args.keep else 'deleted after'}).")
    md += ["", "`tokfeedd --check-config` (first index) printed:", "", "```"] + first["lines"] + ["```", ""]

    if checks:
        md += ["The record check alone, one thread, the records in memory (`bench_record_check`, best of 5 passes): "
               "in place, as the index runs it (the On Demand scan, then the full parse for the records it "
               "leaves), against the full parse alone; on --source and on a copy written with "
               "`json.dumps(ensure_ascii=True)`. The two gave the same verdict on every record.", ""] + checks + [""]

    if mem:
        md += [f"Memory: `tokfeedd --config` on the same file with `[cache] enabled = false`, batch 4, longest "
               f"padding, `max_length` 2048, started afresh for each worker count; serving = every worker has a "
               f"pid in `tokfeedctl status --json`; then `tokfeedctl drain --rank 0 --count {args.batches}`. PSS "
               f"from `/proc/PID/smaps_rollup` of the daemon and every process below it, summed, every 100 ms: "
               f"the peak while draining, its anon / file / shmem parts (file: pages of the mapped dataset and "
               f"binaries; shmem: the rings) and each process's PSS at that peak; start-up peak = before serving.",
               "",
               "| workers | start → serving (s) | drain (s) | batches | summed PSS, drain peak (MiB) | "
               "anon / file / shmem (MiB) | start-up peak (MiB) | per process at the peak (MiB) | left running |",
               "|---:|---:|---:|---:|---:|---|---:|---|---|"]
        for r in mem:
            p = {k: v / MiB for k, v in r["pss"].items()}
            per = ", ".join(f"{n} {v / MiB:.1f}" for n, v in r["procs"])
            md.append(f"| {r['workers']} | {fmt_s(r['ready_s'])} | {fmt_s(r['drain_s'])} | {r['batches']} | "
                      f"{p['Pss']:.1f} | {p['Pss_Anon']:.1f} / {p['Pss_File']:.1f} / {p['Pss_Shmem']:.1f} | "
                      f"{r['start_pss'] / MiB:.1f} | {per} | "
                      f"{'none' if not r['left'] else ', '.join(map(str, r['left']))} |")
        lo, hi = mem[0], mem[-1]
        added = max(hi["workers"] - lo["workers"], 1)
        md += ["", f"Summed PSS with {hi['workers']} workers is {hi['pss']['Pss'] / max(lo['pss']['Pss'], 1):.2f}x "
               f"that with {lo['workers']} ({hi['pss']['Pss'] / MiB:.1f} / {lo['pss']['Pss'] / MiB:.1f} MiB) "
               f"for a {size / MiB:,.0f} MiB file. Its parts: anon {lo['pss']['Pss_Anon'] / MiB:.1f} -> "
               f"{hi['pss']['Pss_Anon'] / MiB:.1f} MiB, "
               f"{(hi['pss']['Pss_Anon'] - lo['pss']['Pss_Anon']) / added / MiB:.1f} MiB per added worker (each "
               f"worker's own heap: tokenizer state, parser and batch buffers); file "
               f"{lo['pss']['Pss_File'] / MiB:.1f} -> {hi['pss']['Pss_File'] / MiB:.1f} MiB: the pages of the "
               f"dataset, its index and the binaries that some process has mapped, each counted once however many "
               f"map it (PSS splits a shared page among its mappers). The daemon maps each chunk while it indexes "
               f"it and drops the mapping after, so this part is the pages the workers have read records from; "
               f"more workers build more batches ahead (each its own ring of slots), so they touch a few more.", ""]

    md += ["Targets (benchmark figures, not tests):", "",
           f"- tokfeed first index within {TARGET_WC_RATIO:g}x of `wc -l` (best): "
           f"{verdict(first['wall'] <= TARGET_WC_RATIO * wcb)} on the raw wall time ({first['wall'] / wcb:.2f}x); "
           f"{verdict(net <= TARGET_WC_RATIO * wcb)} minus the fixed overhead ({net / wcb:.2f}x)"
           + (f"; {verdict(min(tf['first_own_runs']) <= TARGET_WC_RATIO * wcb)} on the daemon's own figure "
              f"({min(tf['first_own_runs']) / wcb:.2f}x)" if tf["first_own_runs"] else "") + "."]
    if hf:
        md.append(f"- tokfeed first index at least {TARGET_HF_RATIO:g}x faster than `load_dataset`: "
                  f"{verdict(hf['load_s'] >= TARGET_HF_RATIO * first['wall'])} "
                  f"({hf['load_s'] / first['wall']:.1f}x: the load_dataset call alone against tokfeed's raw "
                  f"wall time; {hf['load_s'] / max(net, 1e-9):.1f}x minus tokfeed's fixed overhead).")
    else:
        md.append(f"- tokfeed first index at least {TARGET_HF_RATIO:g}x faster than `load_dataset`: not measured "
                  f"(--skip-hf, or `datasets` unavailable).")
    return md


def write_section(path, md):
    text = open(path).read() if os.path.exists(path) else "# Benchmarks\n"
    block = BEGIN + "\n" + "\n".join(md).rstrip("\n") + "\n" + END
    b, e = text.find(BEGIN), text.find(END)
    if b >= 0 and e > b:
        text = text[:b] + block + text[e + len(END):]
    else:
        text = text.rstrip("\n") + "\n\n" + SECTION + "\n\n" + block + "\n"
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


# ---------------------------------------------------------------- main

def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gb", type=float, default=4.0, help="size of the generated file in GB (10^9 bytes)")
    ap.add_argument("--work", default="/tmp/tokfeed-bench-dataset", help="work dir (file, caches, configs)")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--source", default=SOURCE, help="JSONL repeated to make the file")
    ap.add_argument("--skip-hf", action="store_true", help="no load_dataset row")
    ap.add_argument("--skip-memory", action="store_true", help="no memory table")
    ap.add_argument("--keep", action="store_true", help="keep the HF cache after measuring")
    ap.add_argument("--batches", type=int, default=200, help="batches drained in the memory runs")
    ap.add_argument("--docs", default=os.path.join(ROOT, "docs", "benchmarks.md"))
    ap.add_argument("--no-write", action="store_true", help="print only; leave --docs alone")
    args = ap.parse_args(argv)
    args.argv = argv
    if args.gb <= 0:
        ap.error("--gb must be positive")
    args.work = os.path.abspath(args.work)
    args.build = os.path.abspath(args.build)
    args.source = os.path.abspath(args.source)
    return args


def main(argv):
    args = parse_args(argv)
    t_start = time.monotonic()
    load0 = os.getloadavg()[0]
    os.makedirs(args.work, exist_ok=True)
    bins = Binaries(args.build)
    data = os.path.join(args.work, f"data-{args.gb:g}gb.jsonl")

    size, records, reused = generate(args.source, data, int(args.gb * GB))
    print(f"file: {data}: {size:,} bytes ({size / GB:.2f} GB), {records:,} records"
          f" ({'reused' if reused else 'generated'})", flush=True)

    wc = measure_wc(data, records)
    log(f"wc -l: best {wc['best']:.3f} s, median {wc['median']:.3f} s")
    tf = measure_tokfeed(bins, args.work, data, args.source, records)
    checks = measure_record_check(args.build, args.work, args.source)
    hf = None if args.skip_hf else measure_hf(args.work, data, records, args.keep)
    mem = None if args.skip_memory else measure_memory(bins, args.work, data, batches=args.batches)

    md = report(args, data, size, records, reused, wc, tf, hf, mem, bins, time.monotonic() - t_start,
                (load0, os.getloadavg()[0]), checks)
    print("\n".join(md))
    if not args.no_write:
        write_section(args.docs, md)
        log(f"wrote the section between {BEGIN} and {END} in {args.docs}")


if __name__ == "__main__":
    main(sys.argv[1:])
