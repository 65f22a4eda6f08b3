#!/usr/bin/python3
"""s3:// dataset benchmark: tokfeed's time to its first batch on a Parquet
dataset in an object store (moto in server mode on 127.0.0.1), against the
same files on a local path, in one run, as ratios (docs/benchmarks.md,
"Datasets in an object store").

    /usr/bin/python3 bench/dataset/objects.py [--gb 0.2] [--shards 4] [--work /tmp/tokfeed-bench-objects]
        [--build build] [--hf-python PY] [--reps 3]

In one run:
  1. the data: bench/dataset/columnar.py's Parquet shards (--source repeated,
     row groups of 10,000 rows), reused when there; uploaded to a fresh moto
     server (PyPI `moto[server]` in --hf-python) on a free port;
  2. first batch, best of --reps, each from `tokfeedd --config` with
     `[cache] enabled = false` and check_rows = "when_read" until `tokfeedctl
     drain --count 1` returns:
     - local: the shards on disk (page cache warm);
     - s3 cold: `s3://bench/parquet/*.parquet` with an empty `[cache] dir`,
       so every object is listed and fetched whole first;
     - s3 warm: the same with the objects already in `[cache] dir/objects`
       (listed, their ETags checked, nothing fetched);
  3. the fetch alone: the cold start's log line `fetching objects` to the
     index's end is not separated; the report gives the cold - local
     difference and the bytes fetched per second over it.
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


def log(msg):
    print(f"[objects-bench] {msg}", file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def first_batch(bins, work, data, cache, fresh):
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
                      stderr=subprocess.DEVNULL, start_new_session=True)
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
        res = {"local": [], "s3 cold": [], "s3 warm": []}
        for rep in range(args.reps):
            # Side by side in each round, so load on the machine hits all three alike.
            res["local"].append(first_batch(bins, args.work, os.path.join(data, "*.parquet"), cache, True))
            res["s3 cold"].append(first_batch(bins, args.work, url, cache, True))
            res["s3 warm"].append(first_batch(bins, args.work, url, cache, False))
            log(f"round {rep + 1}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in res.items()))
    finally:
        moto.kill()
        moto.wait()
        moto_log.close()
    best = {k: min(v) for k, v in res.items()}
    print(f"Parquet, {args.shards} shards, {size / 1e6:.0f} MB, moto on 127.0.0.1; first batch, best of {args.reps}"
          f" (load average {os.getloadavg()[0]:.1f})")
    print("| start | first batch | vs local |")
    print("|---|---|---|")
    for k, v in best.items():
        print(f"| {k} | {v:.2f} s | {v / best['local']:.2f}x |")
    fetch = best["s3 cold"] - best["local"]
    if fetch > 0:
        print(f"fetch: {fetch:.2f} s over the local start, {size / 1e6 / fetch:.0f} MB/s")
    shutil.rmtree(os.path.join(args.work, "cache"), ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
