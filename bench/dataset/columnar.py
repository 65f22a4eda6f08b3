#!/usr/bin/python3
"""Parquet dataset benchmark: tokfeed's time to its first batch on a Parquet
dataset of about --gb GB, read in place (rows checked at start, and with
check_rows = "when_read") and, with --build-before, by a build that copies the
rows into a JSON-lines spool first; against `pyarrow.parquet.read_table` and
HF `datasets.load_dataset("parquet")` in the same run, as ratios; and the
daemon's memory per worker on it (docs/benchmarks.md, "Parquet datasets").

    /usr/bin/python3 bench/dataset/columnar.py [--gb 1] [--shards 4] [--work /tmp/tokfeed-bench-columnar]
        [--build build] [--build-before OTHER_BUILD] [--hf-python PY] [--batches 20] [--skip-memory] [--no-write]

In one run:
  1. the data: --source (mixed-10k.jsonl) as an Arrow table, repeated with a
     unique `id` per copy, written by pyarrow (in --hf-python) as --shards
     Parquet files of row groups of 10,000 rows, snappy, up to --gb GB on disk;
     reused when it is there; read once so every contender finds it in the
     page cache;
  2. per tokfeed contender: planning cold, `tokfeedd --check-config` with an
     empty cache dir (it checks every row), and warm, the same again (a
     cached start: the kept index or verdicts); the cache dir's bytes; and
     the first batch cold: `tokfeedd --config` with `[cache] enabled = false`
     from start until `tokfeedctl drain --count 1` returns (nothing kept from
     an earlier start);
  3. pyarrow: `pq.read_table(DIR)` in a fresh --hf-python process; datasets:
     `load_dataset("parquet", data_files=..., split="train",
     cache_dir=fresh)` then `ds[0]`, in a fresh process;
  4. memory: the in-place daemon serving the dataset with 1, 2 and 4 workers
     (check_rows = "when_read", `[cache] enabled = false`, so workers decode the row groups they need:
     the plan's random order makes most samples decode a group), PSS summed
     over the daemon and its children and RSS per process at the peak while
     draining --batches batches, as bench/dataset/run.py measures it.
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


WHEN_READ = 'check_rows = "when_read"\n'


def first_batch(bins, work, data, extra=""):
    """Seconds from starting tokfeedd ([cache] off) until one batch is drained."""
    name = "first-batch"
    sock = os.path.join(work, name + ".sock")
    cache = dsbench.fresh_dir(os.path.join(work, "cache-first-batch"))
    cfg = dsbench.write(os.path.join(work, name + ".toml"),
                        dsbench.job_toml(data, cache, False, work, name, dataset_extra=extra))
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


def measure_contender(label, bins, work, data, extra, planning):
    slug = re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")
    out = {"label": label}
    if planning:
        cache = os.path.join(work, "cache-" + slug)
        cfg = dsbench.write(os.path.join(work, slug + ".toml"),
                            dsbench.job_toml(data, cache, True, work, slug, dataset_extra=extra))
        dsbench.fresh_dir(cache)
        log(f"{label}: planning, cold (--check-config, empty cache dir) ...")
        out["cold"] = dsbench.check_config(bins, cfg)
        log(f"{label}: planning, warm (--check-config again) ...")
        out["warm"] = dsbench.check_config(bins, cfg)
        out["disk"] = dir_bytes(cache)
        shutil.rmtree(cache, ignore_errors=True)
    log(f"{label}: first batch, cold ([cache] enabled = false) ...")
    out["first"] = first_batch(bins, work, data, extra)
    log(f"{label}: first batch after {out['first']:.2f} s")
    return out


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--gb", type=float, default=1.0)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--source", default=SOURCE)
    ap.add_argument("--work", default="/tmp/tokfeed-bench-columnar")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--build-before", help="a build of tokfeed that spools Parquet rows as JSON lines (before)")
    ap.add_argument("--hf-python", default=os.environ.get("TOKFEED_HF_PYTHON", "/work/venv/bin/python"))
    ap.add_argument("--batches", type=int, default=20)
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

    runs = []
    if args.build_before:
        runs.append(measure_contender("spool (before)", dsbench.Binaries(args.build_before), args.work, data, "",
                                      True))
    runs.append(measure_contender("in place, rows checked at start", bins, args.work, data, "", True))
    runs.append(measure_contender('in place, check_rows = "when_read"', bins, args.work, data, WHEN_READ, False))

    log("pyarrow read_table ...")
    pa_run = python_stats(args.hf_python, READ_TABLE, data)
    log("datasets load_dataset ...")
    hf_cache = tempfile.mkdtemp(prefix="hf-cache-", dir=args.work)
    env = dict(os.environ, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1")
    hf = python_stats(args.hf_python, LOAD_DATASET, data, hf_cache, env=env)
    hf_cache_bytes = dir_bytes(hf_cache)
    shutil.rmtree(hf_cache, ignore_errors=True)

    # check_rows = "when_read": the workers as with rows checked at start, no check before each start.
    mem = None if args.skip_memory else dsbench.measure_memory(bins, args.work, data, batches=args.batches,
                                                               dataset_extra=WHEN_READ)

    counts = (0, 0, 0)
    for l in runs[-2]["cold"]["lines"]:
        if m := re.match(r"^# dataset: .*?([0-9]+) records, ([0-9]+) valid, ([0-9]+) bad", l):
            counts = tuple(int(x) for x in m.groups())
    cmd = " ".join(["/usr/bin/python3", "bench/dataset/columnar.py"] + [shlex.quote(a) for a in argv])
    pa_s, hf_s = pa_run["wall"], hf["wall"]
    md = [f"Produced by `{cmd}` on {datetime.date.today().isoformat()} in "
          f"{(time.monotonic() - t_start) / 60:.1f} min. Machine: {os.cpu_count()} cores shared with other jobs "
          f"(load average {load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end): figures are noisy, "
          f"compare the ratios of this one run.", "",
          f"Data: {args.shards} Parquet shards written by pyarrow {pa_run['version']}, {size / GB:.2f} GB, "
          f"{rows:,} rows (`{os.path.basename(args.source)}` repeated with a unique `id`; row groups of 10,000 "
          f"rows, snappy), in the page cache. tokfeed found {counts[0]:,} records, {counts[1]:,} valid, "
          f"{counts[2]:,} bad. HF: datasets {hf['version']}, its Arrow cache took {hf_cache_bytes / GB:.2f} GB "
          f"(deleted after).", "",
          "First batch: `tokfeedd --config` with `[cache] enabled = false` (nothing kept from an earlier start), "
          "from its start until `tokfeedctl drain --count 1` returns; the peers' whole process (Python start, "
          "import, read, first row). Planning: `tokfeedd --check-config` (which checks every row, under either "
          "`check_rows`), cold with an empty `[cache] dir`, warm a second time.", "",
          "| contender | first batch (s) | vs `read_table` | vs `load_dataset` | planning cold (s) | "
          "planning warm (s) | `[cache] dir` after |", "|---|---:|---:|---:|---:|---:|---:|"]
    for r in runs:
        plan = (f"{r['cold']['wall']:.2f} | {r['warm']['wall']:.2f} | {r['disk'] / MiB:,.1f} MiB"
                if "cold" in r else "— | — | —")
        md.append(f"| tokfeed, {r['label']} | {r['first']:.2f} | {r['first'] / pa_s:.3f}x | "
                  f"{r['first'] / hf_s:.3f}x | {plan} |")
    md += [f"| `pq.read_table(DIR)` process (read alone {pa_run['read']:.2f} s) | {pa_s:.2f} | 1.000x | "
           f"{pa_s / hf_s:.3f}x | | | |",
           f"| `load_dataset(\"parquet\")` process, fresh cache (load alone {hf['read']:.2f} s) | {hf_s:.2f} | "
           f"{hf_s / pa_s:.3f}x | 1.000x | | | {hf_cache_bytes / MiB:,.1f} MiB |", ""]
    if mem:
        md += ["Memory: the in-place `tokfeedd --config` on the dataset, `check_rows = \"when_read\"`, "
               "`[cache] enabled = false` (each worker "
               "decodes the row groups its samples are in, through its cache of 4 decoded groups, 64 MiB), started "
               f"afresh per worker count, then `tokfeedctl drain --rank 0 --count {args.batches}`; PSS of the "
               "daemon and its children summed every 100 ms, the peak while draining (as bench/dataset/run.py), "
               "with each process's PSS and RSS at that peak.", "",
               "| workers | drain (batches/s) | summed PSS (MiB) | anon / file / shmem (MiB) | "
               "per process PSS (MiB) | per process RSS (MiB) |", "|---:|---:|---:|---|---|---|"]
        for r in mem:
            p = {k: v / MiB for k, v in r["pss"].items()}
            per = ", ".join(f"{n} {v / MiB:.1f}" for n, v in r["procs"])
            rss = ", ".join(f"{n} {v / MiB:.1f}" for n, v in r["rss"])
            md.append(f"| {r['workers']} | {args.batches / max(r['drain_s'], 1e-9):.2f} | {p['Pss']:.1f} | "
                      f"{p['Pss_Anon']:.1f} / {p['Pss_File']:.1f} / {p['Pss_Shmem']:.1f} | {per} | {rss} |")
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
