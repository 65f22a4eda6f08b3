#!/usr/bin/python3
"""tokfeed vs PyTorch DataLoader, side by side, in one run.

    PYTHONPATH=build/python /usr/bin/python3 bench/compare/run.py [--build build] [--records 2000]

Same machine, data, tokenizer, template, truncation (right) and padding, for
two tokenizers in turn: sp32k `tokenizer.model` (mistral template; tokfeed
links libsentencepiece, the peer uses python3-sentencepiece: the same C++
encoder on both sides) and Qwen3 `tokenizer.json` (qwen2_5 template; tokfeed's
own BPE against HF `tokenizers`). Three loaders:

- tokfeed:      tokfeedd with workers.count = W, read with tokfeed.Loader.
- dataloader:   torch DataLoader(num_workers=W, persistent_workers=True,
                prefetch_factor=2) over a map-style Dataset whose __getitem__
                renders and tokenizes with python sentencepiece or HF tokenizers
                (the functions of tests/reference/tokfeed_ref.py), and a
                collate_fn that pads and builds the masks:
                how ms-swift / HF Trainer feed a run (lazy_tokenize=True).
- dl-pretok:    the same DataLoader over a dataset tokenized up front in the
                main process (ms-swift lazy_tokenize=False); workers only
                collate. Its pre-tokenization time (measured once per dataset,
                in its own process) is added to its time to first batch and its
                CPU time, amortized over one epoch, to its CPU per sample.

Settings: (a) batch 1, max_length 2048, padding max_length; (b) batch 8,
longest padding. W in --workers. Memory against dataset size: setting (b) on
the whole --data file (10k records) and on a copy 10x larger. Each measurement runs in its own Python
process; the parent samples PSS (/proc/PID/smaps_rollup, every 50 ms) of that
process's whole tree, so the sampling costs no loader CPU. Results: a table
on stdout, docs/benchmarks.md section "## tokfeed vs PyTorch DataLoader",
bench/compare/compare.png.
"""
import argparse
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid

# Debian's python3-torch and python3-matplotlib are built against Debian's
# numpy; a newer numpy pip-installed into /usr/local (pulled in by e.g.
# `pip install datasets`) shadows it and breaks both. Prefer Debian's packages;
# the PyPI-only ones (HF tokenizers) are still found after them.
DEBIAN_DIST = "/usr/lib/python3/dist-packages"
if os.path.isdir(DEBIAN_DIST) and sys.executable.startswith("/usr/bin/"):
    sys.path.insert(0, DEBIAN_DIST)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
sys.path.insert(0, os.path.dirname(HERE))
from proctree import descendants, stat_fields  # noqa: E402
DATA = os.path.join(os.path.dirname(ROOT), "shared", "data", "sft", "mixed-10k.jsonl")  # ../shared beside the checkout
SP_MODEL = os.path.join(ROOT, "tests", "data", "tokenizers", "sp32k", "tokenizer.model")
QWEN_ARCHIVE = os.path.join(ROOT, "tests", "data", "tokenizers", "qwen3.tar.xz")
# name -> tokfeed [tokenizer] settings; "path" of qwen3 is filled in by main() (extracted from the archive).
TOKENIZERS = {"sp32k": dict(type="sentencepiece", path=SP_MODEL, template="mistral",
                            label="sp32k tokenizer.model (libsentencepiece vs python3-sentencepiece)"),
              "qwen3": dict(type="hf", path=None, template="qwen2_5",
                            label="Qwen3 tokenizer.json (tokfeed's BPE vs HF tokenizers)")}
SYSTEMS = ("tokfeed", "dataloader", "dl-pretok")
SETTINGS = {"a": dict(batch=1, max_length=2048, padding="max_length"),
            "b": dict(batch=8, max_length=2048, padding="longest")}
SECTION = "## tokfeed vs PyTorch DataLoader"
MiB = 1 << 20


# ---------------------------------------------------------------- /proc

def cpu_seconds(pids):
    """utime + stime of the given processes (all their threads)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            f = stat_fields(pid)
            total += int(f[11]) + int(f[12])
        except (OSError, IndexError):
            pass
    return total / tick


def pss_bytes(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class PssSampler(threading.Thread):
    """Peak of: PSS of root's descendants + (root's PSS - root's baseline).

    Not clamped: pages a forked worker shares with the trainer move part of the
    trainer's PSS to the worker, and the sum counts each page once."""

    def __init__(self, root, period=0.05):
        super().__init__(daemon=True)
        self.root, self.period = root, period
        self.samples = []  # (root_pss, others_pss)
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            pids = descendants(self.root)
            root = pss_bytes(self.root)
            others = sum(pss_bytes(p) for p in pids if p != self.root)
            self.samples.append((root, others))
            self.stop.wait(self.period)

    def peak(self, baseline):
        return max((r - baseline + o for r, o in self.samples), default=0)


# ---------------------------------------------------------------- the loaders (run in a child process)

def job_toml(spec, tmp):
    tag = uuid.uuid4().hex[:10]
    return f"""[dataset]
path = "{spec['data']}"
on_bad_record = "skip"
[tokenizer]
type = "{spec['tok']['type']}"
path = "{spec['tok']['path']}"
template = "{spec['tok']['template']}"
[batch]
size = {spec['batch']}
max_length = {spec['max_length']}
padding = "{spec['padding']}"
truncation = "right"
keep_untrained = true
[schedule]
epochs = {spec['epochs']}
shuffle = true
seed = 42
[workers]
count = {spec['workers']}
slots = 4
[cache]
enabled = false
[server]
socket = "{os.path.join(tmp, 'd.sock')}"
shm_prefix = "cmp-{tag}"
"""


def start_tokfeed(spec, config):
    """Starts tokfeedd; -> (proc, loader) once the first attach succeeds."""
    import tokfeed
    sock = os.path.join(os.path.dirname(config), "d.sock")
    log = open(config + ".log", "w")
    proc = subprocess.Popen([spec["tokfeedd"], "--config", config], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("tokfeedd exited: " + open(log.name).read())
        try:
            return proc, tokfeed.Loader(sock)
        except tokfeed.TokfeedError:
            time.sleep(0.01)
    raise RuntimeError("tokfeedd did not start")


def stop_tokfeed(proc):
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class LazyDataset:
    """ms-swift lazy_tokenize=True: render + tokenize in __getitem__ (in the worker)."""

    def __init__(self, cfg):
        import tokfeed_ref as ref
        self.ref, self.cfg = ref, cfg
        self.convs, _ = ref.load_dataset(cfg)
        self.tok = None

    def __len__(self):
        return len(self.convs)

    def __getitem__(self, i):
        if self.tok is None:  # one SentencePieceProcessor per worker
            self.tok = self.ref.make_tokenizer(self.cfg)
        ids, labels = self.ref.tokenize_sample(self.convs[i], self.cfg, self.tok)
        return self.ref.truncate(ids, labels, self.cfg)


class PretokDataset:
    """ms-swift lazy_tokenize=False: columns of token ids built up front (see pretokenize)."""

    def __init__(self, path):
        import numpy as np
        z = np.load(path)
        self.ids, self.labels, self.offsets = z["ids"], z["labels"], z["offsets"]

    def __len__(self):
        return len(self.offsets) - 1

    def __getitem__(self, i):
        b, e = self.offsets[i], self.offsets[i + 1]
        return self.ids[b:e], self.labels[b:e]


def make_collate(padding, max_length, pad_id):
    import torch

    def collate(rows):
        L = max_length if padding == "max_length" else max(len(r[0]) for r in rows)
        n = len(rows)
        ids = torch.full((n, L), pad_id, dtype=torch.int64)
        labels = torch.full((n, L), -100, dtype=torch.int64)
        mask = torch.zeros((n, L), dtype=torch.int64)
        pos = torch.zeros((n, L), dtype=torch.int64)
        for i, (a, b) in enumerate(rows):
            k = len(a)
            ids[i, :k] = torch.as_tensor(a)
            labels[i, :k] = torch.as_tensor(b)
            mask[i, :k] = 1
            pos[i, :k] = torch.arange(k)
        return {"input_ids": ids, "attention_mask": mask, "labels": labels, "position_ids": pos}
    return collate


def dataloader_batches(spec, config):
    """An endless batch stream from torch DataLoader, in tokfeed's order (spec 4)."""
    import torch
    import tokfeed_ref as ref
    cfg = ref.load_config(config)
    ds = LazyDataset(cfg) if spec["system"] == "dataloader" else PretokDataset(spec["pretok"])
    pad_id = ref.make_tokenizer(cfg).pad_id
    order = []
    dl = torch.utils.data.DataLoader(ds, batch_size=cfg["size"], sampler=order, num_workers=spec["workers"],
                                     collate_fn=make_collate(cfg["padding"], cfg["max_length"], pad_id),
                                     persistent_workers=True, prefetch_factor=2)
    epoch = 0
    while True:
        order[:] = ref.permutation(len(ds), epoch, cfg)
        yield from dl
        epoch += 1


def pretokenize(data, out, tok):
    """Tokenizes the whole dataset in this process; -> seconds (wall, CPU)."""
    import numpy as np
    import tokfeed_ref as ref
    with tempfile.TemporaryDirectory() as tmp:
        config = os.path.join(tmp, "job.toml")
        with open(config, "w") as f:
            f.write(job_toml(dict(data=data, batch=1, max_length=2048, padding="longest", epochs=1, workers=1,
                                  tok=tok), tmp))
        t0, c0 = time.perf_counter(), time.process_time()
        cfg = ref.load_config(config)
        convs, _ = ref.load_dataset(cfg)
        tok = ref.make_tokenizer(cfg)
        rows = [ref.truncate(*ref.tokenize_sample(c, cfg, tok), cfg) for c in convs]
        offsets = np.cumsum([0] + [len(r[0]) for r in rows])
        np.savez(out, ids=np.concatenate([np.asarray(r[0], np.int32) for r in rows]),
                 labels=np.concatenate([np.asarray(r[1], np.int32) for r in rows]), offsets=offsets)
        return {"wall": time.perf_counter() - t0, "cpu": time.process_time() - c0, "samples": len(rows)}


def timed_next(it):
    t = time.perf_counter()
    b = next(it)
    return b, time.perf_counter() - t


def drain(it, samples):
    """No training step: real tokens/s, pad fraction and loader CPU over `samples` samples."""
    me = os.getpid()
    c0, t0 = cpu_seconds(descendants(me)), time.perf_counter()
    n = real = total = 0
    while n < samples:
        b = next(it)
        m = b["attention_mask"]
        n += m.shape[0]
        real += int(m.sum())
        total += m.numel()
        del b, m
    wall = time.perf_counter() - t0
    cpu = cpu_seconds(descendants(me)) - c0
    return {"samples": n, "real_tokens": real, "wall": wall, "cpu": cpu, "pad_fraction": 1 - real / max(1, total)}


def stall(it, steps, step_ms):
    """Trainer loop with a simulated step: time waiting in next() / wall time."""
    wait, t0 = 0.0, time.perf_counter()
    for _ in range(steps):
        b, w = timed_next(it)
        wait += w
        del b
        time.sleep(step_ms / 1000)
    return wait / (time.perf_counter() - t0)


def measure(spec):
    """One run of one loader; -> dict (printed as JSON by --one)."""
    import warnings
    import torch
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message="This DataLoader will create")  # W > cores is on purpose
    res = {"baseline_pss": pss_bytes(os.getpid())}
    print("READY", flush=True)  # the parent takes the baseline after this
    tmp = tempfile.mkdtemp(prefix="tokfeed-cmp-")
    proc = None
    try:
        config = os.path.join(tmp, "job.toml")
        with open(config, "w") as f:
            f.write(job_toml(spec, tmp))
        t0 = time.perf_counter()
        if spec["system"] == "tokfeed":
            proc, loader = start_tokfeed(spec, config)
            it = iter(loader)
        else:
            it = dataloader_batches(spec, config)
        b = next(it)
        res["first_batch_s"] = time.perf_counter() - t0
        del b
        res["drain"] = drain(it, spec["drain"])
        if spec["stall"]:
            res["stall"] = {str(ms): stall(it, spec["steps"], ms) for ms in (20, 80)}
        if spec["system"] == "tokfeed":
            res["warm_attach_s"] = warm_attach(loader, os.path.join(tmp, "d.sock"))
        del it
    finally:
        if proc is not None:
            stop_tokfeed(proc)
        shutil.rmtree(tmp, ignore_errors=True)
    return res


def warm_attach(loader, sock):
    """A new trainer attaching to the running daemon: Loader() -> first batch."""
    import gc
    import tokfeed
    loader.close()
    gc.collect()
    time.sleep(0.5)  # detach is asynchronous
    t0 = time.perf_counter()
    with tokfeed.Loader(sock) as again:
        b = next(again)
        dt = time.perf_counter() - t0
        del b
    return dt


# ---------------------------------------------------------------- the parent: sweep, tables, plot

def run_child(spec):
    """Runs measure(spec) in a fresh interpreter, sampling its tree's PSS; -> result dict."""
    cmd = [sys.executable, os.path.abspath(__file__), "--one", json.dumps(spec)]
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert child.stdout.readline().strip() == "READY"
        sampler = PssSampler(child.pid)
        sampler.start()
        out = child.stdout.read()
        child.wait()
        sampler.stop.set()
        sampler.join()
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
    if child.returncode != 0:
        raise RuntimeError(f"run {spec['system']} W={spec['workers']} failed ({child.returncode})")
    res = json.loads(out.strip().splitlines()[-1])
    res["peak_pss"] = sampler.peak(res["baseline_pss"])
    return res


def make_subset(src, records, scale, path):
    with open(src, "rb") as f:
        lines = [next(f) for _ in range(records)]
    with open(path, "wb") as f:
        for _ in range(scale):
            f.writelines(lines)
    return path


def derive(spec, res, pretok):
    """Per-run figures for the table."""
    d = res["drain"]
    cpu_per_sample = d["cpu"] / d["samples"]
    first = res["first_batch_s"]
    if spec["system"] == "dl-pretok":
        cpu_per_sample += pretok["cpu"] / pretok["samples"]  # one epoch's share of pre-tokenization
        first += pretok["wall"]
    tokens_per_sample = d["real_tokens"] / d["samples"]
    row = dict(spec=spec, tok_s=d["real_tokens"] / d["wall"], tok_cpu_s=tokens_per_sample / cpu_per_sample,
               cpu_1k=1000 * cpu_per_sample, pss=res["peak_pss"], first=first, pad=d["pad_fraction"],
               warm=res.get("warm_attach_s"), stall=res.get("stall"))
    return row


def sweep(args, tmp):
    rows, pretok, files = [], {}, {}
    base = make_subset(args.data, args.records, 1, os.path.join(tmp, f"subset-{args.records}.jsonl"))
    for tokname in args.tokenizers:
        pretok[base, tokname] = run_pretok(base, tmp, tokname)
        for key, setting in SETTINGS.items():
            for w in args.workers:
                for system in SYSTEMS:
                    rows.append(one(args, dict(setting, key=key, system=system, workers=w, data=base, scale=1,
                                               stall=True, steps=args.steps, tokname=tokname), pretok))
    # Memory against dataset size: the whole --data file and a copy `scale` times larger.
    if args.pss_tokenizers:
        full = make_subset(args.data, args.pss_records, 1, os.path.join(tmp, f"full-{args.pss_records}.jsonl"))
        big = make_subset(args.data, args.pss_records, args.scale,
                          os.path.join(tmp, f"full-{args.pss_records}x{args.scale}.jsonl"))
        files = {1: full, args.scale: big}
    for tokname in args.pss_tokenizers:
        if "dl-pretok" in args.scale_systems:
            pretok[full, tokname] = run_pretok(full, tmp, tokname)
            pretok[big, tokname] = tile_pretok(pretok[full, tokname], args.scale,
                                               os.path.join(tmp, f"{os.path.basename(big)}.{tokname}.npz"))
        for w in args.scale_workers:
            for scale, path in files.items():
                for system in args.scale_systems:
                    rows.append(one(args, dict(SETTINGS["b"], key="b", system=system, workers=w, data=path,
                                               scale=scale, stall=False, steps=0, tokname=tokname, pss=True), pretok))
    return rows, files


def run_pretok(path, tmp, tokname):
    out = os.path.join(tmp, f"{os.path.basename(path)}.{tokname}.npz")
    cmd = [sys.executable, os.path.abspath(__file__), "--pretokenize", path, out, json.dumps(TOKENIZERS[tokname])]
    r = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    r["npz"] = out
    print(f"pre-tokenized {path} ({tokname}): {r['samples']} samples in {r['wall']:.1f} s", flush=True)
    return r


def tile_pretok(base, scale, out):
    """The ×scale copy repeats the records: its columns are the base's, repeated; its
    pre-tokenization time and CPU are taken as scale × the base's (not re-measured)."""
    import numpy as np
    z = np.load(base["npz"])
    off = z["offsets"]
    offsets = np.concatenate([[0]] + [off[1:] + k * off[-1] for k in range(scale)])
    np.savez(out, ids=np.tile(z["ids"], scale), labels=np.tile(z["labels"], scale), offsets=offsets)
    return {"wall": scale * base["wall"], "cpu": scale * base["cpu"], "samples": scale * base["samples"], "npz": out}


def one(args, spec, pretok):
    needed = 2 + args.drain + 2 * spec["steps"] * spec["batch"] + spec["batch"]
    n = sum(1 for _ in open(spec["data"], "rb"))
    spec.update(tokfeedd=args.tokfeedd, drain=args.drain, epochs=math.ceil(needed / n) + 1,
                tok=TOKENIZERS[spec["tokname"]])
    spec.setdefault("pss", False)
    p = pretok.get((spec["data"], spec["tokname"]))
    if spec["system"] == "dl-pretok":
        spec["pretok"] = p["npz"]
    t0 = time.perf_counter()
    row = derive(spec, run_child(spec), p)
    st = row["stall"] or {}
    print(f"  {spec['tokname']} [{spec['key']}] x{spec['scale']}{' pss' if spec['pss'] else ''} "
          f"{spec['system']:<10} W={spec['workers']}: "
          f"{row['tok_s']:,.0f} tok/s, {row['tok_cpu_s']:,.0f} tok/CPU-s, stall {st.get('20', float('nan')):.3f}/"
          f"{st.get('80', float('nan')):.3f}, PSS {row['pss'] / MiB:.0f} MiB, first {row['first'] * 1000:.0f} ms "
          f"({time.perf_counter() - t0:.0f} s)", flush=True)
    return row


# ---------------------------------------------------------------- report

def fmt_ms(s):
    return "–" if s is None else f"{s * 1000:,.0f}"


def fmt_pct(x):
    return "–" if x is None else f"{100 * x:.1f}%"


def find(rows, tokname, key, system, w, scale=1, pss=False):
    for r in rows:
        s = r["spec"]
        if (s["tokname"], s["key"], s["system"], s["workers"], s["scale"], s["pss"]) == (tokname, key, system, w,
                                                                                            scale, pss):
            return r
    return None


def main_table(rows, tokname):
    out = ["| setting | loader | W | real tokens/s | real tokens per loader CPU-s | CPU s / 1k samples | "
           "stall @20 ms | stall @80 ms | peak PSS (MiB) | first batch (ms) | warm attach → first batch (ms) | pad |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        s = r["spec"]
        if s["tokname"] != tokname or s["pss"]:
            continue
        st = r["stall"]
        out.append(f"| ({s['key']}) | {s['system']} | {s['workers']} | {r['tok_s']:,.0f} | {r['tok_cpu_s']:,.0f} | "
                   f"{r['cpu_1k']:.1f} | {fmt_pct(st['20'])} | {fmt_pct(st['80'])} | {r['pss'] / MiB:.0f} | "
                   f"{fmt_ms(r['first'])} | {fmt_ms(r['warm'])} | {fmt_pct(r['pad'])} |")
    return out


def ratio_table(rows, tokname, workers):
    out = ["| setting | W | vs | real tokens per loader CPU-s ratio | real tokens/s ratio | "
           "stall @80 ms (tokfeed / peer) | PSS ratio |",
           "|---|---:|---|---:|---:|---:|---:|"]
    for key in SETTINGS:
        for w in workers:
            t = find(rows, tokname, key, "tokfeed", w)
            for peer in SYSTEMS[1:]:
                p = find(rows, tokname, key, peer, w)
                if t and p:
                    out.append(f"| ({key}) | {w} | {peer} | {t['tok_cpu_s'] / p['tok_cpu_s']:.2f}x | "
                               f"{t['tok_s'] / p['tok_s']:.2f}x | {fmt_pct(t['stall']['80'])} / "
                               f"{fmt_pct(p['stall']['80'])} | {t['pss'] / p['pss']:.2f}x |")
    return out


def pss_budget(path, tokname, w):
    return 1.3 * (os.path.getsize(path) + os.path.getsize(TOKENIZERS[tokname]["path"])) + 50 * MiB * w


def pss_table(rows, args, files):
    out = ["| tokenizer | dataset | W | loader | peak PSS (MiB) | budget 1.3×(file+tokenizer)+50 MiB×W (MiB) | within |",
           "|---|---|---:|---|---:|---:|---|"]
    for tokname in args.pss_tokenizers:
        for w in args.scale_workers:
            for scale, path in files.items():
                for system in args.scale_systems:
                    r = find(rows, tokname, "b", system, w, scale, pss=True)
                    if r:
                        b = pss_budget(path, tokname, w)
                        n = args.pss_records * scale
                        out.append(f"| {tokname} | {n:,} records ({os.path.getsize(path) / MiB:.1f} MiB) | {w} | "
                                   f"{system} | {r['pss'] / MiB:.0f} | {b / MiB:.0f} | "
                                   f"{'yes' if r['pss'] <= b else 'no'} |")
    return out


def targets(rows, args, tokname):
    lines = []
    ok = [find(rows, tokname, k, "tokfeed", w)["tok_cpu_s"] / find(rows, tokname, k, "dataloader", w)["tok_cpu_s"]
          for k in SETTINGS for w in args.workers]
    lines.append(f"- ≥5× the peer's (dataloader) real tokens per loader CPU-second at equal W: "
                 f"{'met' if min(ok) >= 5 else 'NOT met'} (ratios {min(ok):.2f}x–{max(ok):.2f}x).")
    st = [find(rows, tokname, k, "tokfeed", 2) for k in SETTINGS]
    st = [r["stall"]["80"] for r in st if r]
    if st:
        lines.append(f"- stall < 1% at the 80 ms step with 2 workers: {'met' if max(st) < 0.01 else 'NOT met'} "
                     f"({', '.join(fmt_pct(x) for x in st)} for settings a, b).")
    tf = [r for r in rows if r["spec"]["system"] == "tokfeed" and r["spec"]["tokname"] == tokname]
    within = all(r["pss"] <= pss_budget(r["spec"]["data"], tokname, r["spec"]["workers"]) for r in tf)
    lines.append(f"- summed PSS ≤ 1.3×(dataset file + tokenizer) + 50 MiB per worker (tokfeed, every run): "
                 f"{'met' if within else 'NOT met'} (max {max(r['pss'] for r in tf) / MiB:.0f} MiB).")
    warm = [r["warm"] for r in tf if r["warm"] is not None]
    lines.append(f"- first batch within 200 ms of attach on a warm daemon: {'met' if max(warm) < 0.2 else 'NOT met'} "
                 f"(max {max(warm) * 1000:.0f} ms over {len(warm)} runs).")
    return lines


def report(rows, args, files, pretok_note, elapsed):
    cmd = f"PYTHONPATH={args.build or 'build'}/python /usr/bin/python3 bench/compare/run.py " + " ".join(args.argv)
    nproc, load = os.cpu_count(), os.getloadavg()
    md = [SECTION, "",
          f"Produced by `{cmd.strip()}` on {time.strftime('%Y-%m-%d')} in {elapsed / 60:.1f} min. Machine: "
          f"{nproc} cores shared with other jobs (load average {load[0]:.1f} at the end), so absolute figures are "
          f"low and noisy and W=4 oversubscribes the cores; every system ran in the same sweep, one at a time. "
          f"Data: the first {args.records} records of `mixed-10k.jsonl` for the sweep (so it fits in about 20 "
          f"minutes for both tokenizers), right truncation at 2048. Tokenizers: sp32k `tokenizer.model` with the "
          f"mistral template (tokfeed links libsentencepiece, the peer calls python3-sentencepiece: the same C++ "
          f"encoder on both sides), and the Qwen3 `tokenizer.json` with the qwen2_5 template (tokfeed's own BPE; "
          f"the peer calls HF `tokenizers` with TOKENIZERS_PARALLELISM=false, one thread per worker). "
          f"(a) batch 1, padding max_length 2048; (b) batch 8, longest padding. Throughput: {args.drain} samples "
          f"drained with no training step. Stall: {args.steps} steps of time.sleep(20 ms / 80 ms), time in next() / "
          f"wall time. CPU: utime+stime of the trainer process and every process below it (daemon and workers, or "
          f"DataLoader workers) over the drain. PSS: peak over 50 ms samples of the loader processes' summed PSS "
          f"plus the trainer process's change from its baseline (after importing torch). tokfeed's first batch "
          f"counts from starting tokfeedd; warm attach is a new `tokfeed.Loader` on the same daemon after the run. "
          f"tokfeed runs with `[cache] enabled = false`, so its workers tokenize while they serve, as the lazy "
          f"DataLoader does (with the token cache, the default, a warm start tokenizes nothing: see Packing). "
          f"{pretok_note}", "",
          "![tokfeed vs DataLoader](../bench/compare/compare.png)", ""]
    for tokname in args.tokenizers:
        md += [f"### {TOKENIZERS[tokname]['label']}", ""] + main_table(rows, tokname)
        md += ["", "Ratios tokfeed / peer at equal W:", ""] + ratio_table(rows, tokname, args.workers)
        md += ["", "Targets (benchmark figures, not tests):", ""] + targets(rows, args, tokname) + [""]
    if files:
        md += [f"### Memory against dataset size", "",
               f"Setting (b), no stall phase, on the whole `mixed-10k.jsonl` and on a copy {args.scale}× larger "
               f"(its records repeated):", ""]
        md += pss_table(rows, args, files)
    return md


def write_section(path, md):
    text = open(path).read() if os.path.exists(path) else "# Benchmarks\n"
    at = text.find("\n" + SECTION + "\n")
    if at >= 0:
        nxt = text.find("\n## ", at + 1)
        text = text[:at].rstrip("\n") + "\n" + (text[nxt:] if nxt >= 0 else "")
    with open(path, "w") as f:
        f.write(text.rstrip("\n") + "\n\n" + "\n".join(md) + "\n")


def plot(rows, args, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    panels = [(t, k) for t in args.tokenizers for k in SETTINGS]
    fig, axes = plt.subplots(len(panels), 2, figsize=(11, 3.6 * len(panels)), squeeze=False)
    for i, (tokname, key) in enumerate(panels):
        s = SETTINGS[key]
        title = f"{tokname} ({key}) batch {s['batch']}, padding {s['padding']}"
        for system, mark, color in zip(SYSTEMS, "os^", ("tab:blue", "tab:orange", "tab:green")):
            rs = [find(rows, tokname, key, system, w) for w in args.workers]
            axes[i][0].plot(args.workers, [r["tok_s"] for r in rs], marker=mark, color=color, label=system)
            for ms, ls in (("20", ":"), ("80", "-")):
                axes[i][1].plot(args.workers, [100 * r["stall"][ms] for r in rs], marker=mark, linestyle=ls,
                                color=color, label=f"{system} @{ms} ms")
        axes[i][0].set(title=title + ": real tokens/s", xlabel="workers", ylabel="real tokens/s", yscale="log")
        axes[i][1].set(title=title + ": stall", xlabel="workers", ylabel="stall (% of wall time)")
        for ax in axes[i]:
            ax.set_xticks(args.workers)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
    fig.suptitle(f"tokfeed vs torch DataLoader ({args.records} records, {os.cpu_count()} shared cores)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def find_tokfeedd(args):
    for c in (args.tokfeedd, os.path.join(args.build, "daemon", "tokfeedd") if args.build else None,
              os.path.join(ROOT, "build", "daemon", "tokfeedd"), shutil.which("tokfeedd")):
        if c and os.access(c, os.X_OK):
            return os.path.abspath(c)
    sys.exit("tokfeedd not found: pass --build or --tokfeedd")


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", help="build dir (daemon/tokfeedd; put its python/ on PYTHONPATH)")
    ap.add_argument("--tokfeedd")
    ap.add_argument("--data", default=DATA)
    ap.add_argument("--records", type=int, default=2000, help="first N records of --data for the sweep")
    ap.add_argument("--tokenizers", default="sp32k,qwen3", help="sweep with each of: sp32k, qwen3")
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--steps", type=int, default=100, help="simulated steps per stall measurement")
    ap.add_argument("--drain", type=int, default=320, help="samples drained for tokens/s and CPU")
    ap.add_argument("--pss-records", type=int, default=10000, help="records of --data for the memory runs")
    ap.add_argument("--scale", type=int, default=10, help="the larger copy repeats the records this many times")
    ap.add_argument("--scale-workers", default="2,4")
    ap.add_argument("--scale-systems", default="tokfeed,dataloader,dl-pretok")
    ap.add_argument("--pss-tokenizers", default="sp32k", help="memory runs with each of these ('' for none)")
    ap.add_argument("--docs", default=os.path.join(ROOT, "docs", "benchmarks.md"))
    ap.add_argument("--plot", default=os.path.join(HERE, "compare.png"))
    ap.add_argument("--no-write", action="store_true", help="print only; leave docs and plot alone")
    args = ap.parse_args(argv)
    args.argv = argv
    args.workers = [int(x) for x in args.workers.split(",")]
    args.scale_workers = [int(x) for x in args.scale_workers.split(",")]
    args.scale_systems = args.scale_systems.split(",")
    args.tokenizers = [t for t in args.tokenizers.split(",") if t]
    args.pss_tokenizers = [t for t in args.pss_tokenizers.split(",") if t]
    for t in args.tokenizers + args.pss_tokenizers:
        if t not in TOKENIZERS:
            ap.error(f"unknown tokenizer '{t}': expected one of {', '.join(TOKENIZERS)}")
    return args


def extract_qwen(tmp):
    """The Qwen3 tokenizer.json from the repository's archive (../shared need not exist)."""
    import tarfile
    dest = os.path.join(tmp, "qwen3")
    os.makedirs(dest)
    with tarfile.open(QWEN_ARCHIVE) as t:
        for name in ("tokenizer.json", "tokenizer_config.json"):  # only these two regular files
            member = t.getmember(name)
            assert member.isfile(), name
            with open(os.path.join(dest, name), "wb") as f:
                f.write(t.extractfile(member).read())
    return os.path.join(dest, "tokenizer.json")


def main(argv):
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # one thread per loader process, both sides
    os.environ.setdefault("RAYON_NUM_THREADS", "1")
    if argv[:1] == ["--one"]:
        print(json.dumps(measure(json.loads(argv[1]))))
        return 0
    if argv[:1] == ["--pretokenize"]:
        print(json.dumps(pretokenize(argv[1], argv[2], json.loads(argv[3]))))
        return 0
    args = parse_args(argv)
    args.tokfeedd = find_tokfeedd(args)
    t0 = time.perf_counter()
    print(f"sweep: first {args.records} records of {args.data}, tokenizers {args.tokenizers}, workers "
          f"{args.workers}; memory: {args.pss_records} records and ×{args.scale}", flush=True)
    tmp = tempfile.mkdtemp(prefix="tokfeed-compare-")
    try:
        TOKENIZERS["qwen3"]["path"] = extract_qwen(tmp)
        rows, files = sweep(args, tmp)
        note = ("dl-pretok's pre-tokenization (main process, the same tokenizer as its workers) is timed once per "
                "dataset in its own process and added to its first batch; its CPU is amortized over one epoch in its "
                "CPU figures; its tokens are held as int32 numpy columns (like an Arrow table); for the larger copy, "
                "whose records repeat the base file's, the columns are the base's repeated and its pre-tokenization "
                f"time is taken as ×{args.scale} the base's.")
        md = report(rows, args, files, note, time.perf_counter() - t0)
        if not args.no_write:
            plot(rows, args, args.plot)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("\n".join(md))
    if not args.no_write:
        write_section(args.docs, md)
        print(f"\nwrote {args.plot} and the section of {args.docs}")
    print(f"total {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
