#!/usr/bin/python3
"""s3:// dataset benchmark: tokfeed's time to its first batch on a Parquet
dataset in an object store (moto in server mode on 127.0.0.1), against the
same files on a local path, in one run, as ratios (docs/benchmarks.md,
"Datasets in an object store").

    /usr/bin/python3 bench/dataset/objects.py [--gb 0.2] [--shards 4] [--work /tmp/tokfeed-bench-objects]
        [--build build] [--hf-python PY] [--reps 3] [--no-hf]

In one run:
  1. the data: bench/dataset/columnar.py's Parquet shards (--source repeated,
     row groups of 10,000 rows), reused when there; uploaded to a fresh moto
     server (PyPI `moto[server]` in --hf-python) on a free port;
  2. first batch, best of --reps, each from `tokfeedd --config` with
     `[cache] enabled = false` and check_rows = "when_read" until `tokfeedctl
     drain --count 1` returns:
     - local: the shards on disk (page cache warm);
     - s3 cold, footers first: `s3://bench/parquet/*.parquet` with an empty
       `[cache] dir`: the objects' footers are fetched, the plan made from
       them, and the row groups fetched while the daemon serves, those its
       workers wait for first;
     - s3 cold, whole objects: the same with TOKFEED_OBJECT_FOOTERS_FIRST=0,
       every object fetched whole before planning;
     - s3 warm: the objects already in `[cache] dir/objects` (listed, their
       ETags checked, nothing fetched);
  3. peers reading the same moto, each a fresh --hf-python process, timed
     from its start (Python, imports) to its first batch of 4 rows:
     - pyarrow, lazy: `pyarrow.dataset` over its S3FileSystem,
       `to_batches(batch_size=4)`, the first batch (footers and the first
       row group, in file order: no global shuffle);
     - `datasets.load_dataset("parquet", data_files=[the objects' http://
       URLs], split="train", cache_dir=fresh)` then `ds[0:4]` (it downloads
       every object and converts it to its Arrow cache first; --no-hf to skip);
  4. the fetch alone: the whole-object cold start minus the local one,
     against pyarrow's S3FileSystem reading every object whole into memory,
     4 at once, in a fresh process (its import not counted).
moto serves from memory over HTTP on loopback: the figures bound tokfeed's
own overhead (a process, listing, 8 MiB ranged reads, a copy to disk), not a
real store's latency or bandwidth.
"""

import argparse
import os
import shutil
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import columnar  # noqa: E402  (its GENERATE script)
import run as dsbench  # noqa: E402  (Binaries, job_toml, ctl, stop_daemon)

UPLOAD = r"""
import boto3, glob, os, sys
s3 = boto3.client("s3")
s3.create_bucket(Bucket="bench")
for p in sorted(glob.glob(os.path.join(sys.argv[1], "*.parquet"))):
    s3.upload_file(p, "bench", "parquet/" + os.path.basename(p))
"""

# The peer for the fetch alone: pyarrow's S3FileSystem reading every object
# whole into memory, 4 at once (as tokfeed's fetcher does), in a fresh process.
PYARROW_READ = r"""
import time, sys
from concurrent.futures import ThreadPoolExecutor
t0 = time.perf_counter()
import pyarrow.fs as pafs
fs, _ = pafs.FileSystem.from_uri("s3://bench")
t1 = time.perf_counter()
infos = fs.get_file_info(pafs.FileSelector("bench/parquet"))
def read(i):
    with fs.open_input_file(i.path) as f:
        return len(f.read())
with ThreadPoolExecutor(4) as ex:
    n = sum(ex.map(read, infos))
t2 = time.perf_counter()
# One ranged read of 8 MiB (the fetcher's unit), alone.
with fs.open_input_file(infos[0].path) as f:
    t3 = time.perf_counter()
    f.read_at(8 << 20, 0)
    t4 = time.perf_counter()
print({"import": t1 - t0, "read": t2 - t1, "bytes": n, "range8": t4 - t3})
"""

# Peers' first batch of 4 rows, from their process's start: pyarrow's lazy
# dataset reader over S3, and `load_dataset` over the objects' URLs.
PYARROW_FIRST = r"""
import pyarrow.dataset as ds, pyarrow.fs as pafs
fs, _ = pafs.FileSystem.from_uri("s3://bench")
batch = next(b for b in ds.dataset("bench/parquet", filesystem=fs, format="parquet").to_batches(batch_size=4)
             if b.num_rows)
assert batch.num_rows == 4, batch.num_rows
"""
HF_FIRST = r"""
import sys, datasets
datasets.disable_progress_bars()
d = datasets.load_dataset("parquet", data_files=sys.argv[2:], split="train", cache_dir=sys.argv[1])
assert len(d[0:4]["id"]) == 4
"""


def peer_first(hf_python, script, *args):
    t0 = time.perf_counter()
    r = subprocess.run([hf_python, "-c", script, *args], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(r.stderr[-3000:])
    return time.perf_counter() - t0


def log(msg):
    print(f"[objects-bench] {msg}", file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def first_batch(bins, work, data, cache, fresh, env=None):
    """Seconds from starting tokfeedd ([cache] off: objects still go to
    [cache] dir) until one batch is drained."""
    name = "objects-first"
    sock = os.path.join(work, name + ".sock")
    if fresh:
        dsbench.fresh_dir(cache)
    cfg = dsbench.write(os.path.join(work, name + ".toml"),
                        dsbench.job_toml(data, cache, False, work, name, dataset_extra=columnar.WHEN_READ))
    if os.path.exists(sock):
        os.unlink(sock)
    t0 = time.perf_counter()
    proc = bins.popen([bins.tokfeedd, "--config", cfg, "--log-level", "warn"], stdout=subprocess.DEVNULL,
                      stderr=subprocess.DEVNULL, start_new_session=True, env=dict(os.environ, **(env or {})))
    try:
        while not os.path.exists(sock):
            if proc.poll() is not None:
                sys.exit("tokfeedd exited before binding its socket (run it by hand on " + cfg + ")")
            time.sleep(0.01)
        r = dsbench.ctl(bins, sock, "drain", "--rank", "0", "--count", "1")
        wall = time.perf_counter() - t0
        if r.returncode != 0:
            sys.exit(f"drain failed: {r.stderr}")
    finally:
        dsbench.stop_daemon(bins, proc, sock, {})
    return wall


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--gb", type=float, default=0.2)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--source", default=columnar.SOURCE)
    ap.add_argument("--work", default="/tmp/tokfeed-bench-objects")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--hf-python", default=os.environ.get("TOKFEED_HF_PYTHON", "/root/.cache/tokfeed/venv/bin/python"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--no-hf", action="store_true", help="leave out load_dataset")
    args = ap.parse_args(argv)
    os.makedirs(args.work, exist_ok=True)
    bins = dsbench.Binaries(args.build)
    data = os.path.join(args.work, f"parquet-{args.gb:g}gb")
    if not os.path.exists(data + ".json"):
        dsbench.fresh_dir(data)
        log(f"writing about {args.gb:g} GB of Parquet into {data} ...")
        r = subprocess.run([args.hf_python, "-c", columnar.GENERATE, args.source, data, str(int(args.gb * 1e9)),
                            str(args.shards)], capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(r.stderr[-3000:])
        dsbench.write(data + ".json", r.stdout)
    size = sum(os.path.getsize(os.path.join(data, f)) for f in os.listdir(data))
    port = free_port()
    env = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_REGION": "us-east-1",
           "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_EC2_METADATA_DISABLED": "true"}
    os.environ.update(env)
    moto_log = open(os.path.join(args.work, "moto.log"), "w")
    moto = subprocess.Popen([args.hf_python, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=moto_log, stderr=subprocess.STDOUT)
    try:
        for _ in range(400):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.025)
        log(f"uploading {size / 1e6:.0f} MB in {args.shards} shards to moto on port {port} ...")
        r = subprocess.run([args.hf_python, "-c", UPLOAD, data], capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(r.stderr[-3000:])
        cache = os.path.join(args.work, "cache")
        url = "s3://bench/parquet/*.parquet"
        files = sorted(f for f in os.listdir(data) if f.endswith(".parquet"))
        urls = [f"http://127.0.0.1:{port}/bench/parquet/{f}" for f in files]
        whole = {"TOKFEED_OBJECT_FOOTERS_FIRST": "0"}
        res = {"local": [], "s3 cold, footers first": [], "s3 cold, whole objects": [], "s3 warm": [],
               "pyarrow.dataset over S3 (lazy)": []}
        if not args.no_hf:
            res["load_dataset over the objects' URLs"] = []
        peer, range8 = [], []
        for rep in range(args.reps):
            # Side by side in each round, so load on the machine hits all alike.
            res["local"].append(first_batch(bins, args.work, os.path.join(data, "*.parquet"), cache, True))
            res["s3 cold, footers first"].append(first_batch(bins, args.work, url, cache, True))
            res["s3 cold, whole objects"].append(first_batch(bins, args.work, url, cache, True, whole))
            res["s3 warm"].append(first_batch(bins, args.work, url, cache, False))
            res["pyarrow.dataset over S3 (lazy)"].append(peer_first(args.hf_python, PYARROW_FIRST))
            if not args.no_hf:
                hf_cache = dsbench.fresh_dir(os.path.join(args.work, "hf-cache"))
                res["load_dataset over the objects' URLs"].append(peer_first(args.hf_python, HF_FIRST, hf_cache,
                                                                             *urls))
                shutil.rmtree(hf_cache, ignore_errors=True)
            p = subprocess.run([args.hf_python, "-c", PYARROW_READ], capture_output=True, text=True)
            if p.returncode != 0:
                sys.exit(p.stderr[-3000:])
            got = eval(p.stdout.strip().splitlines()[-1])
            peer.append(got["read"])
            range8.append(got["range8"])
            log(f"round {rep + 1}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in res.items()) +
                f", pyarrow reading the objects {peer[-1]:.2f} s")
    finally:
        moto.kill()
        moto.wait()
        moto_log.close()
    best = {k: min(v) for k, v in res.items()}
    print(f"Parquet, {args.shards} shards, {size / 1e6:.0f} MB, moto on 127.0.0.1; first batch, best of {args.reps}"
          f" (load average {os.getloadavg()[0]:.1f})")
    print("| start | first batch | vs local | vs footers first |")
    print("|---|---:|---:|---:|")
    for k, v in best.items():
        print(f"| {k} | {v:.2f} s | {v / best['local']:.2f}x | {v / best['s3 cold, footers first']:.2f}x |")
    fetch = best["s3 cold, whole objects"] - best["local"]
    if fetch > 0:
        print(f"\nfetch: {fetch:.2f} s over the local start ({size / 1e6 / fetch:.0f} MB/s); pyarrow's S3FileSystem "
              f"reading the same objects whole, 4 at once: {min(peer):.2f} s ({size / 1e6 / min(peer):.0f} MB/s); "
              f"ratio {fetch / min(peer):.2f}x; one ranged read of 8 MiB alone: {min(range8):.3f} s")
    shutil.rmtree(os.path.join(args.work, "cache"), ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
