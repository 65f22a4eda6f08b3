#!/usr/bin/python3
"""Parquet dataset benchmark: tokfeed's first index and first batch on a
Parquet dataset of about --gb GB, against `pyarrow.parquet.read_table` and HF
`datasets.load_dataset("parquet")` in the same run, and the daemon's memory
per worker on it (docs/benchmarks.md, "Parquet datasets").

    /usr/bin/python3 bench/dataset/columnar.py [--gb 1] [--shards 4] [--work /tmp/tokfeed-bench-columnar]
        [--build build] [--hf-python /work/venv/bin/python] [--skip-memory] [--no-write]

In one run:
  1. the data: --source (mixed-10k.jsonl) as an Arrow table, repeated with a
     unique `id` per copy, written by pyarrow (in --hf-python) as --shards
     Parquet files of row groups of 10,000 rows, snappy, up to --gb GB on disk;
     reused when it is there;
  2. tokfeed first index: `tokfeedd --check-config` with an empty cache dir
     (every row to its JSON line in the spool, then indexed and validated),
     best of 2; then a cached start;
  3. tokfeed first batch: `tokfeedd --config` ([cache] enabled = false, so the
     rows go to an in-memory spool) until `tokfeedctl drain --count 1` returns,
     from a cold cache dir;
  4. pyarrow: `pq.read_table(DIR)` in a fresh --hf-python process (best of 2);
     datasets: `load_dataset("parquet", data_files=..., split="train",
     cache_dir=fresh)` then `ds[0]`, in a fresh process;
  5. memory: tokfeedd serving the dataset with 1, 2 and 4 workers, PSS summed
     over the daemon and its children as bench/dataset/run.py measures it.
"""

import argparse
import datetime
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import run as dsbench  # noqa: E402  (bench/dataset/run.py: Binaries, memory sampling)

SOURCE = os.path.join(os.path.dirname(ROOT), "shared", "data", "sft", "mixed-10k.jsonl")
GB, MiB = 10 ** 9, 1 << 20
BEGIN, END = "<!-- columnar-bench:begin -->", "<!-- columnar-bench:end -->"

GENERATE = r"""
import json, os, sys
import pyarrow as pa, pyarrow.parquet as pq
src, out, target, shards = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
with open(src, encoding="utf-8") as f:
    recs = [json.loads(l) for l in f if l.strip()]
base = pa.Table.from_struct_array(pa.array(recs))
probe = os.path.join(out, "probe.parquet")
pq.write_table(base, probe, row_group_size=10000)
copies = max(1, round(target / os.path.getsize(probe)))
os.unlink(probe)
per = -(-copies // shards)
k = 0
for s in range(shards):
    parts = []
    for _ in range(per):
        if k == copies:
            break
        ids = pa.array([f"{k}-{i}" for i in range(base.num_rows)])
        parts.append(base.append_column("id", ids))
        k += 1
    if parts:
        pq.write_table(pa.concat_tables(parts), os.path.join(out, f"train-{s:05d}-of-{shards:05d}.parquet"),
                       row_group_size=10000)
print(json.dumps({"rows": base.num_rows * copies, "copies": copies}))
"""

READ_TABLE = r"""
import time, sys
t0 = time.perf_counter()
import pyarrow.parquet as pq, pyarrow as pa
t1 = time.perf_counter()
t = pq.read_table(sys.argv[1])
t2 = time.perf_counter()
first = t.slice(0, 1).to_pylist()[0]
t3 = time.perf_counter()
print({"import": t1 - t0, "read": t2 - t1, "first": t3 - t1, "rows": t.num_rows, "version": pa.__version__})
"""

LOAD_DATASET = r"""
import time, sys, glob
t0 = time.perf_counter()
import datasets
t1 = time.perf_counter()
ds = datasets.load_dataset("parquet", data_files=sorted(glob.glob(sys.argv[1] + "/*.parquet")), split="train",
                           cache_dir=sys.argv[2])
t2 = time.perf_counter()
first = ds[0]
t3 = time.perf_counter()
print({"import": t1 - t0, "read": t2 - t1, "first": t3 - t1, "rows": len(ds), "version": datasets.__version__})
"""


def log(msg):
    print(f"[columnar-bench] {msg}", file=sys.stderr, flush=True)


def dir_bytes(d):
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(d) for f in fs)


def python_stats(py, script, *args, env=None):
    t0 = time.perf_counter()
    r = subprocess.run([py, "-c", script, *args], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        sys.exit(f"{py} failed:\n{r.stderr[-3000:]}")
    out = eval(r.stdout.strip().splitlines()[-1])  # a dict literal we printed
    out["wall"] = wall
    return out


def first_batch(bins, work, data):
    name = "first-batch"
    sock = os.path.join(work, name + ".sock")
    cache = dsbench.fresh_dir(os.path.join(work, "cache-first-batch"))
    cfg = dsbench.write(os.path.join(work, name + ".toml"), dsbench.job_toml(data, cache, False, work, name))
    if os.path.exists(sock):
        os.unlink(sock)
    t0 = time.perf_counter()
    proc = bins.popen([bins.tokfeedd, "--config", cfg, "--log-level", "warn"], stdout=subprocess.DEVNULL,
                      stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        while not os.path.exists(sock):
            if proc.poll() is not None:
                sys.exit("tokfeedd exited before binding its socket")
            time.sleep(0.02)
        r = dsbench.ctl(bins, sock, "drain", "--rank", "0", "--count", "1")
        wall = time.perf_counter() - t0
        if r.returncode != 0:
            sys.exit(f"drain failed: {r.stderr}")
    finally:
        dsbench.stop_daemon(bins, proc, sock, {})
    return wall


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--gb", type=float, default=1.0)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--source", default=SOURCE)
    ap.add_argument("--work", default="/tmp/tokfeed-bench-columnar")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--hf-python", default=os.environ.get("TOKFEED_HF_PYTHON", "/work/venv/bin/python"))
    ap.add_argument("--batches", type=int, default=100)
    ap.add_argument("--skip-memory", action="store_true")
    ap.add_argument("--docs", default=os.path.join(ROOT, "docs", "benchmarks.md"))
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    t_start, load0 = time.monotonic(), os.getloadavg()[0]
    os.makedirs(args.work, exist_ok=True)
    bins = dsbench.Binaries(args.build)
    data = os.path.join(args.work, f"parquet-{args.gb:g}gb")
    meta = data + ".json"  # beside it: a .json file inside would be a shard
    if not os.path.exists(meta):
        dsbench.fresh_dir(data)
        log(f"writing about {args.gb:g} GB of Parquet into {data} ...")
        r = subprocess.run([args.hf_python, "-c", GENERATE, args.source, data, str(int(args.gb * GB)),
                            str(args.shards)], capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(r.stderr)
        dsbench.write(meta, r.stdout)
    rows = json.load(open(meta))["rows"]
    size = dir_bytes(data)
    log(f"data: {size / GB:.2f} GB, {rows:,} rows")
    for f in sorted(os.listdir(data)):  # into the page cache, for every contender alike
        with open(os.path.join(data, f), "rb") as fh:
            while fh.read(1 << 24):
                pass

    cfg_cache = os.path.join(args.work, "cache-index")
    cfg = dsbench.write(os.path.join(args.work, "index.toml"),
                        dsbench.job_toml(data, cfg_cache, True, args.work, "index"))
    firsts = []
    for i in range(2):
        dsbench.fresh_dir(cfg_cache)
        log(f"tokfeed first index {i + 1}/2 ...")
        firsts.append(dsbench.check_config(bins, cfg))
    first = min(firsts, key=lambda r: r["wall"])
    spool = dir_bytes(os.path.join(cfg_cache, "spool"))
    log("tokfeed cached start ...")
    cached = dsbench.check_config(bins, cfg)
    log("tokfeed first batch ...")
    fb = first_batch(bins, args.work, data)

    log("pyarrow read_table ...")
    pa_runs = [python_stats(args.hf_python, READ_TABLE, data) for _ in range(2)]
    pa_best = min(pa_runs, key=lambda r: r["read"])
    log("datasets load_dataset ...")
    hf_cache = tempfile.mkdtemp(prefix="hf-cache-", dir=args.work)
    env = dict(os.environ, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1")
    hf = python_stats(args.hf_python, LOAD_DATASET, data, hf_cache, env=env)
    hf_cache_bytes = dir_bytes(hf_cache)
    shutil.rmtree(hf_cache, ignore_errors=True)

    mem = None if args.skip_memory else dsbench.measure_memory(bins, args.work, data, batches=args.batches)

    counts = (0, 0, 0)
    for l in first["lines"]:
        if m := re.match(r"^# dataset: .*?([0-9]+) records, ([0-9]+) valid, ([0-9]+) bad", l):
            counts = tuple(int(x) for x in m.groups())
    cmd = " ".join(["/usr/bin/python3", "bench/dataset/columnar.py"] + [shlex.quote(a) for a in argv])
    base = first["wall"]
    md = [f"Produced by `{cmd}` on {datetime.date.today().isoformat()} in "
          f"{(time.monotonic() - t_start) / 60:.1f} min. Machine: {os.cpu_count()} cores shared with other jobs "
          f"(load average {load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end): figures are noisy, "
          f"compare the ratios of this one run.", "",
          f"Data: {args.shards} Parquet shards written by pyarrow {pa_best['version']}, {size / GB:.2f} GB, "
          f"{rows:,} rows (`{os.path.basename(args.source)}` repeated with a unique `id`; row groups of 10,000 "
          f"rows, snappy), in the page cache. tokfeed found {counts[0]:,} records, {counts[1]:,} valid, "
          f"{counts[2]:,} bad; its JSON-lines spool in `[cache] dir` took {spool / GB:.2f} GB. "
          f"HF: datasets {hf['version']}, its Arrow cache took {hf_cache_bytes / GB:.2f} GB (deleted after).", "",
          "| measurement | seconds | vs tokfeed first index |", "|---|---:|---:|",
          f"| tokfeed first index: `--check-config`, empty cache dir (best of 2) | {base:.2f} | 1.00x |",
          f"| tokfeed cached start: second `--check-config` | {cached['wall']:.2f} | "
          f"{cached['wall'] / base:.2f}x |",
          f"| tokfeed first batch: start → `drain --count 1` returns, `[cache] enabled = false` | {fb:.2f} | "
          f"{fb / base:.2f}x |",
          f"| `pq.read_table(DIR)` (best of 2, import excluded) | {pa_best['read']:.2f} | "
          f"{pa_best['read'] / base:.2f}x |",
          f"| `pq.read_table` process: Python start, import, read, first row | {pa_best['wall']:.2f} | "
          f"{pa_best['wall'] / base:.2f}x |",
          f"| `load_dataset(\"parquet\")`, fresh cache (import excluded) | {hf['read']:.2f} | "
          f"{hf['read'] / base:.2f}x |",
          f"| `load_dataset` process: Python start, import, load, `ds[0]` | {hf['wall']:.2f} | "
          f"{hf['wall'] / base:.2f}x |", "",
          "`tokfeedd --check-config` (first index) printed:", "", "```"] + [
        l for l in first["lines"] if l.startswith(("# dataset", "# tokenizer"))] + ["```", ""]
    if mem:
        md += ["Memory: `tokfeedd --config` on the dataset, `[cache] enabled = false` (the rows' JSON lines in a "
               "memory file the workers map), started afresh per worker count, then "
               f"`tokfeedctl drain --rank 0 --count {args.batches}`; PSS of the daemon and its children summed "
               "every 100 ms, the peak while draining (as bench/dataset/run.py).", "",
               "| workers | start → serving (s) | summed PSS (MiB) | anon / file / shmem (MiB) | per process (MiB) |",
               "|---:|---:|---:|---|---|"]
        for r in mem:
            p = {k: v / MiB for k, v in r["pss"].items()}
            per = ", ".join(f"{n} {v / MiB:.1f}" for n, v in r["procs"])
            md.append(f"| {r['workers']} | {r['ready_s']:.2f} | {p['Pss']:.1f} | {p['Pss_Anon']:.1f} / "
                      f"{p['Pss_File']:.1f} / {p['Pss_Shmem']:.1f} | {per} |")
        lo, hi = mem[0], mem[-1]
        added = max(hi["workers"] - lo["workers"], 1)
        md += ["", f"Per added worker: {(hi['pss']['Pss'] - lo['pss']['Pss']) / added / MiB:.1f} MiB summed PSS, "
                   f"{(hi['pss']['Pss_Anon'] - lo['pss']['Pss_Anon']) / added / MiB:.1f} MiB of it anonymous.", ""]
    print("\n".join(md))
    if not args.no_write:
        text = open(args.docs).read()
        block = BEGIN + "\n" + "\n".join(md).rstrip("\n") + "\n" + END
        b, e = text.find(BEGIN), text.find(END)
        if b >= 0 and e > b:
            text = text[:b] + block + text[e + len(END):]
        else:
            text = text.rstrip("\n") + "\n\n## Parquet datasets\n\n" + block + "\n"
        with open(args.docs, "w") as f:
            f.write(text)
        log(f"wrote the section between {BEGIN} and {END} in {args.docs}")


if __name__ == "__main__":
    main(sys.argv[1:])
