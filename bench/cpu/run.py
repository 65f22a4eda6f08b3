#!/usr/bin/env python3
"""CPU isolation: a CPU-bound fake trainer's step time, loader workers unpinned vs pinned off its cores.

The fake trainer (bench_cpu_trainer, C++) is pinned to core 0 and does a
fixed amount of arithmetic per step after taking a batch from tokfeed. The
daemon tokenizes without a token cache ([cache] enabled = false, 32-sample
batches), so its workers use CPU the whole run. Runs side by side:

  alone     the trainer's steps back to back without a loader (a container's
            CPU quota can make this slower than with a loader's waits)
  unpinned  [workers] cpus unset: the workers may run on core 0
  pinned    [workers] cpus = the other cores, nice 10, policy "batch"

and for each the median and p90 of a step's compute time, and the workers'
cores and CPU seconds (tokfeedctl status). On a 2-core machine "the other
cores" is core 1.

    /usr/bin/python3 bench/cpu/run.py [--steps 300] [--work 2000000] [--rounds 3] [--build build]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_mode(mode, tmp, a, trainer_core, other):
    trainer = [os.path.join(a.build, "bench/cpu/bench_cpu_trainer")]
    pin = ["taskset", "-c", str(trainer_core)]
    if mode == "alone":
        r = subprocess.run(pin + trainer + ["-", str(a.steps), str(a.work)], capture_output=True, text=True, check=True)
        return json.loads(r.stdout), None
    sock = os.path.join(tmp, f"{mode}.sock")
    extra = "" if mode == "unpinned" else f'cpus = "{other}"\nnice = 10\npolicy = "batch"\n'
    cfg = os.path.join(tmp, f"{mode}.toml")
    with open(cfg, "w") as f:
        f.write(f"""[dataset]
path = "{ROOT}/tests/data/sft/mixed-300.jsonl"
[tokenizer]
type = "sentencepiece"
path = "{ROOT}/tests/data/tokenizers/sp32k/tokenizer.model"
template = "mistral"
[batch]
size = 32
max_length = 2048
keep_untrained = true
[schedule]
epochs = 1000
[workers]
count = 2
slots = 2
{extra}[server]
socket = "{sock}"
shm_prefix = "tfbench-cpu-{os.getpid()}-{mode}"
[cache]
enabled = false
""")
    log = open(os.path.join(tmp, f"{mode}.log"), "w")
    d = subprocess.Popen([os.path.join(a.build, "daemon/tokfeedd"), "--config", cfg], stdout=log,
                         stderr=subprocess.STDOUT)
    try:
        for _ in range(400):
            if os.path.exists(sock):
                break
            time.sleep(0.025)
        r = subprocess.run(pin + trainer + [sock, str(a.steps), str(a.work)], capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(r.stderr)
        st = json.loads(subprocess.run([os.path.join(a.build, "tools/tokfeedctl"), "-s", sock, "status", "--json"],
                                       capture_output=True, text=True).stdout)
        workers = [(w.get("cpus"), round(w.get("cpu_s", 0), 1), w.get("nice"), w.get("policy"))
                   for w in st.get("workers", [])]
        return json.loads(r.stdout), workers
    finally:
        d.terminate()
        d.wait(20)
        log.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--work", type=int, default=2_000_000, help="multiply-adds per step")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        print("needs 2 cores or more", file=sys.stderr)
        return 77
    trainer_core, others = cores[0], cores[1:]
    other = ",".join(map(str, others))
    tmp = tempfile.mkdtemp(prefix="tokfeed-bench-cpu.")
    try:
        # Rounds interleave the modes, so load from elsewhere on the machine
        # falls on all of them; each figure is the median over the rounds.
        got = {m: [] for m in ("alone", "unpinned", "pinned")}
        for _ in range(a.rounds):
            for mode in got:
                got[mode].append(run_mode(mode, tmp, a, trainer_core, other))
        med = lambda xs: sorted(xs)[len(xs) // 2]
        rows = [(m, med([r["p50"] for r, _ in v]), med([r["p90"] for r, _ in v]), v[-1][1]) for m, v in got.items()]
        base = {m: (p50, p90) for m, p50, p90, _ in rows}["unpinned"]
        print(f"trainer on core {trainer_core}; pinned workers on {other}; {a.steps} steps of {a.work} multiply-adds; "
              f"medians of {a.rounds} interleaved rounds")
        print("| run | step p50 (ms) | step p90 (ms) | p50, p90 vs unpinned | workers (cores, cpu s, nice, policy) |")
        print("|---|---|---|---|---|")
        for mode, p50, p90, workers in rows:
            print(f"| {mode} | {p50:.2f} | {p90:.2f} | {p50 / base[0]:.2f}x, {p90 / base[1]:.2f}x | {workers or '-'} |")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
