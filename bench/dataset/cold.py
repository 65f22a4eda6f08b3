#!/usr/bin/python3
"""Cold start benchmark: time to the first batch on a new JSONL dataset (an
empty `[cache] dir`) and again warm, and the first epoch's real tokens/s
cold, tokfeed beside a lazy PyTorch DataLoader, in one run
(docs/benchmarks.md, "Cold start").

    PYTHONPATH=build/python /usr/bin/python3 bench/dataset/cold.py [--records 10000,100000]
        [--epoch-records 10000] [--first-only 1000000] [--reps 1] [--check-rows start|when_read]
        [--build build] [--before OTHER_BUILD] [--work DIR] [--no-write]

Per size N (records, made from --source repeated, each copy's lines given a
distinct top-level "id"): chatml, sp32k, batch 8, 2 workers, right
truncation at 2048, shuffle, one epoch; tokfeed with the token cache on (the
default) and nothing else set.
  - tokfeed cold: tokfeedd started on an empty cache dir; seconds from its
    start to the first batch out of tokfeed.Loader; for N <= --epoch-records
    the rest of epoch 0 is drained too, giving real tokens (attention_mask
    ones) per second from the daemon's start to the epoch's last batch.
    Meanwhile a thread polls `tokfeedctl status` every 0.1 s: the seconds
    until the batch counts are known (when `len(loader)`, which blocks until
    then, would return: what HF Trainer waits for before its first step).
    Without the epoch, the run waits for the counts (the whole cache) too,
    so that the warm run finds it built.
  - tokfeed warm: started again on the cache the cold run left.
  - --reps R: R - 1 more cold first batches (each on an empty cache dir, the
    first batch only) and R - 1 more warm ones, interleaved; the table gives
    the median of each. Before any of it, one untimed start (first batch
    only, 10 records) takes the costs a process pays once (imports, the
    first Loader) off the first timed run.
  - --check-rows: written into the job as the dataset's `check_rows`
    (default: not written, the daemon's default).
  - tokfeed cold, packed (`padding = "packed"`, pack_window 1000): the first
    batch only.
  - Sizes in --first-only: the cold first batches and DataLoader's only
    (no counts, no warm run: building the whole cache takes too long).
  - tokfeed cold with `keep_untrained = true`: nothing is left out of the
    plan, so it is served while the cache builds.
  - --before BUILD: the cold run again with another build's tokfeedd.
  - Before every timed start the data file is read once, untimed, so that
    each finds it in the page cache (a token store just built can push it
    out).
  - DataLoader (lazy): num_workers=2, a Dataset that finds line offsets at
    init and parses, renders (the reference's chatml) and tokenizes
    (python3-sentencepiece) a record in __getitem__; seconds from creating
    the Dataset to the first batch, and for N <= --epoch-records one epoch's
    real tokens/s.
Results: a table on stdout and the section between <!-- cold-bench:begin -->
and <!-- cold-bench:end --> of --docs unless --no-write.
"""

import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
SOURCE = os.path.join(os.path.dirname(ROOT), "shared", "data", "sft", "mixed-10k.jsonl")
SP_MODEL = os.path.join(ROOT, "tests", "data", "tokenizers", "sp32k", "tokenizer.model")
BEGIN, END = "<!-- cold-bench:begin -->", "<!-- cold-bench:end -->"


def make_data(source, n, path):
    if os.path.exists(path) and sum(1 for _ in open(path, "rb")) == n:
        return path
    with open(source, "rb") as f:
        lines = [ln for ln in f if ln.strip()]
    with open(path + ".tmp", "wb") as out:
        for i in range(n):
            k, j = divmod(i, len(lines))
            ln = lines[j].lstrip()
            out.write(b'{"id": "%d-%d", ' % (k, j) + ln[1:] if ln.startswith(b"{") else ln)
    os.replace(path + ".tmp", path)
    return path


CHECK_ROWS = {"value": None}


def job(data, cache, sock, tag, keep=False, packed=False):
    check = f'check_rows = "{CHECK_ROWS["value"]}"\n' if CHECK_ROWS["value"] else ""
    return f"""[dataset]
path = "{data}"
on_bad_record = "skip"
{check}[tokenizer]
type = "sentencepiece"
path = "{SP_MODEL}"
template = "chatml"
[batch]
size = 8
max_length = 2048
keep_untrained = {"true" if keep else "false"}
{'padding = "packed"' if packed else ""}
[schedule]
epochs = 1
shuffle = true
seed = 42
[workers]
count = 2
[cache]
dir = "{cache}"
[server]
socket = "{sock}"
shm_prefix = "cold-{tag}"
"""


def counts_known(tokfeedctl, sock):
    try:
        out = subprocess.run([tokfeedctl, "-s", sock, "status", "--json"], capture_output=True, text=True,
                             timeout=10).stdout
        return json.loads(out)["ranks"][0]["counts_known"]
    except Exception:
        return False


def in_page_cache(path):
    """Reads the file once (untimed), so that no run pays for the disk: a token store built just before may have
    pushed the data out of the page cache."""
    with open(path, "rb", buffering=0) as f:
        while f.read(16 << 20):
            pass


def run_tokfeed(tokfeedd, data, cache, work, epoch, keep=False, packed=False, wait_counts=False):
    """Starts tokfeedd on `cache`; -> (first batch s, epoch real tokens/s or None, counts known s or None)."""
    import threading
    import tokfeed
    in_page_cache(data)
    tokfeedctl = os.path.join(os.path.dirname(os.path.dirname(tokfeedd)), "tools", "tokfeedctl")
    tag = f"{os.getpid()}-{time.monotonic_ns() % 10**9}"
    sock = os.path.join(work, f"{tag}.sock")
    cfg = os.path.join(work, f"{tag}.toml")
    with open(cfg, "w") as f:
        f.write(job(data, cache, sock, tag, keep, packed))
    log = open(cfg + ".log", "w")
    t0 = time.perf_counter()
    proc = subprocess.Popen([tokfeedd, "--config", cfg], stdout=log, stderr=subprocess.STDOUT)
    known = {}
    stop = threading.Event()

    def poll():
        while not stop.is_set():
            if counts_known(tokfeedctl, sock):
                known["s"] = time.perf_counter() - t0
                return
            stop.wait(0.1)

    poller = threading.Thread(target=poll, daemon=True)
    try:
        loader = None
        while loader is None:
            if proc.poll() is not None:
                raise RuntimeError("tokfeedd exited: " + open(log.name).read())
            try:
                loader = tokfeed.Loader(sock)
            except tokfeed.TokfeedError:
                time.sleep(0.01)
        if wait_counts:
            poller.start()
        it = iter(loader)
        b = next(it)
        first = time.perf_counter() - t0
        real = int(b["attention_mask"].sum() if "attention_mask" in b else b["input_ids"].numel())
        del b
        rate = None
        if epoch:
            for b in it:
                real += int(b["attention_mask"].sum())
                del b
            rate = real / (time.perf_counter() - t0)
        if wait_counts:
            poller.join()
        loader.close()
        return first, rate, known.get("s")
    finally:
        stop.set()
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class LazyJsonl:
    """A lazy map-style dataset: line offsets at init, parse + render + tokenize per item."""

    def __init__(self, path, cfg):
        self.path, self.cfg, self.tok, self.f = path, cfg, None, None
        self.offsets = [0]
        with open(path, "rb") as f:
            for ln in f:
                self.offsets.append(self.offsets[-1] + len(ln))
        self.offsets.pop()

    def __len__(self):
        return len(self.offsets)

    def __getitem__(self, i):
        import tokfeed_ref as ref
        if self.tok is None:  # per worker
            self.tok = ref.make_tokenizer(self.cfg)
            self.f = open(self.path, "rb")
        self.f.seek(self.offsets[i])
        rec = json.loads(self.f.readline())
        conv = ref.to_conversation(rec, self.cfg["datasets"][0], self.cfg["template"])
        ids, labels = ref.tokenize_sample(conv, self.cfg, self.tok)
        return ref.truncate(ids, labels, self.cfg)


def run_dataloader(data, work, epoch):
    import torch
    import tokfeed_ref as ref
    cfg_path = os.path.join(work, "dl.toml")
    with open(cfg_path, "w") as f:
        f.write(job(data, os.path.join(work, "unused"), os.path.join(work, "dl.sock"), "dl"))
    cfg = ref.load_config(cfg_path)
    pad = ref.make_tokenizer(cfg).pad_id

    def collate(rows):
        L = max(len(r[0]) for r in rows)
        ids = torch.full((len(rows), L), pad, dtype=torch.int64)
        labels = torch.full((len(rows), L), -100, dtype=torch.int64)
        mask = torch.zeros((len(rows), L), dtype=torch.int64)
        for i, (a, b) in enumerate(rows):
            ids[i, :len(a)] = torch.as_tensor(a)
            labels[i, :len(a)] = torch.as_tensor(b)
            mask[i, :len(a)] = 1
        return {"input_ids": ids, "labels": labels, "attention_mask": mask}

    in_page_cache(data)
    t0 = time.perf_counter()
    ds = LazyJsonl(data, cfg)
    dl = torch.utils.data.DataLoader(ds, batch_size=8, shuffle=True, num_workers=2, collate_fn=collate,
                                     generator=torch.Generator().manual_seed(42))
    it = iter(dl)
    b = next(it)
    first = time.perf_counter() - t0
    real = int(b["attention_mask"].sum())
    rate = None
    if epoch:
        for b in it:
            real += int(b["attention_mask"].sum())
        rate = real / (time.perf_counter() - t0)
    del it
    return first, rate


def fmt(x, unit=""):
    return "—" if x is None else (f"{x:.2f}{unit}" if x < 100 else f"{x:.0f}{unit}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", default="10000,100000")
    ap.add_argument("--epoch-records", type=int, default=10000)
    ap.add_argument("--first-only", default="", help="sizes measured for the cold first batches only")
    ap.add_argument("--reps", type=int, default=1, help="cold and warm first batches per size; the median is shown")
    ap.add_argument("--check-rows", choices=["start", "when_read"], help="the dataset's check_rows (default: unset)")
    ap.add_argument("--build", default="build")
    ap.add_argument("--before", help="another build directory: its tokfeedd cold, beside this one")
    ap.add_argument("--source", default=SOURCE)
    ap.add_argument("--work", default="/tmp/tokfeed-bench-cold")
    ap.add_argument("--docs", default=os.path.join(ROOT, "docs", "benchmarks.md"))
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    tokfeedd = os.path.join(args.build, "daemon", "tokfeedd")
    before = os.path.join(args.before, "daemon", "tokfeedd") if args.before else None
    CHECK_ROWS["value"] = args.check_rows
    t_start = time.time()
    rows = []
    # One untimed start: what a process pays once is not put on a timed run.
    tiny = make_data(args.source, 10, os.path.join(args.work, "data-10.jsonl"))
    cache = tempfile.mkdtemp(prefix="cache-", dir=args.work)
    run_tokfeed(tokfeedd, tiny, cache, args.work, False)
    shutil.rmtree(cache)
    first_only = {int(x) for x in args.first_only.split(",") if x}
    for n in [int(x) for x in args.records.split(",")] + sorted(first_only):
        data = make_data(args.source, n, os.path.join(args.work, f"data-{n}.jsonl"))
        short = n in first_only
        epoch = n <= args.epoch_records and not short
        row = {"n": n}
        if before:
            cache = tempfile.mkdtemp(prefix="cache-", dir=args.work)
            row["before_cold"], row["before_epoch"], _ = run_tokfeed(before, data, cache, args.work, epoch)
            shutil.rmtree(cache)
            olds = [row["before_cold"]]
            for _ in range(args.reps - 1):
                cache = tempfile.mkdtemp(prefix="cache-", dir=args.work)
                olds.append(run_tokfeed(before, data, cache, args.work, False)[0])
                shutil.rmtree(cache)
            row["before_cold"] = statistics.median(olds)
            print(f"{n}: before cold {' '.join(f'{x:.2f}' for x in olds)} s", file=sys.stderr)
        cache = tempfile.mkdtemp(prefix="cache-", dir=args.work)
        row["cold"], row["cold_epoch"], row["counts"] = run_tokfeed(tokfeedd, data, cache, args.work, epoch,
                                                                    wait_counts=not short)
        if short:
            row["counts"] = None
        print(f"{n}: cold {row['cold']:.2f} s, counts at {fmt(row['counts'])} s", file=sys.stderr)
        row["warm"] = None
        if not short:
            colds, warms = [row["cold"]], [run_tokfeed(tokfeedd, data, cache, args.work, False)[0]]
            for _ in range(args.reps - 1):
                fresh = tempfile.mkdtemp(prefix="cache-", dir=args.work)
                colds.append(run_tokfeed(tokfeedd, data, fresh, args.work, False)[0])
                shutil.rmtree(fresh)
                warms.append(run_tokfeed(tokfeedd, data, cache, args.work, False)[0])
            row["cold"], row["warm"] = statistics.median(colds), statistics.median(warms)
            print(f"{n}: cold {' '.join(f'{x:.2f}' for x in colds)} s, warm {' '.join(f'{x:.2f}' for x in warms)} s",
                  file=sys.stderr)
        shutil.rmtree(cache)
        cache = tempfile.mkdtemp(prefix="cache-", dir=args.work)
        row["keep"], row["keep_epoch"], _ = run_tokfeed(tokfeedd, data, cache, args.work, epoch, keep=True)
        print(f"{n}: cold, keep_untrained {row['keep']:.2f} s", file=sys.stderr)
        shutil.rmtree(cache)
        cache = tempfile.mkdtemp(prefix="cache-", dir=args.work)
        row["packed"], _, _ = run_tokfeed(tokfeedd, data, cache, args.work, False, packed=True)
        print(f"{n}: cold, packed {row['packed']:.2f} s", file=sys.stderr)
        shutil.rmtree(cache)
        row["dl"], row["dl_epoch"] = run_dataloader(data, args.work, epoch)
        print(f"{n}: dataloader {row['dl']:.2f} s", file=sys.stderr)
        rows.append(row)
    lines = [BEGIN, "",
             "| records | tokfeed cold: first batch (s) | warm (s) | cold / warm | counts known, `len()` returns (s) |"
             " DataLoader (lazy): first batch (s) | tokfeed cold / DataLoader, first batch |"
             " cold first epoch, tokfeed (real tokens/s) | DataLoader (real tokens/s) | tokfeed / DataLoader |"
             " keep_untrained = true: cold first batch (s) | its cold first epoch (real tokens/s) |"
             " packed: cold first batch (s) |"
             + (" before: cold first batch (s) | before: first epoch (tokens/s) |" if before else ""),
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|" + ("---|---|" if before else "")]
    for r in rows:
        ratio = r["cold_epoch"] / r["dl_epoch"] if r["cold_epoch"] and r["dl_epoch"] else None
        cw = f"{r['cold'] / r['warm']:.1f}×" if r["warm"] else "—"
        lines.append(f"| {r['n']:,} | {fmt(r['cold'])} | {fmt(r['warm'])} | {cw} | {fmt(r['counts'])} | "
                     f"{fmt(r['dl'])} | {r['cold'] / r['dl']:.2f}× | {fmt(r['cold_epoch'])} | {fmt(r['dl_epoch'])} | "
                     f"{'—' if ratio is None else f'{ratio:.2f}×'} | {fmt(r['keep'])} | {fmt(r['keep_epoch'])} | "
                     f"{fmt(r['packed'])} |"
                     + (f" {fmt(r['before_cold'])} | {fmt(r['before_epoch'])} |" if before else ""))
    load = os.getloadavg()[0]
    lines += ["", f"Produced by `PYTHONPATH={args.build}/python /usr/bin/python3 bench/dataset/cold.py --records "
              f"{args.records} --epoch-records {args.epoch_records}"
              f"{' --first-only ' + args.first_only if first_only else ''}"
              f"{f' --reps {args.reps}' if args.reps > 1 else ''}"
              f"{' --check-rows ' + args.check_rows if args.check_rows else ''}"
              f"{' --before ' + args.before if before else ''}` "
              f"on {datetime.date.today()} in {(time.time() - t_start) / 60:.1f} min, {os.cpu_count()} shared cores, "
              f"load average {load:.1f} at the end.", "", END]
    md = "\n".join(lines)
    print(md)
    if not args.no_write:
        text = open(args.docs).read()
        if BEGIN in text:
            text = text[:text.index(BEGIN)] + md + text[text.index(END) + len(END):]
        else:
            text = text.rstrip() + "\n\n## Cold start\n\n" + md + "\n"
        with open(args.docs, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
