#!/usr/bin/env python3
"""One huge record: what a 50 MB line and a 50 MB word cost the token cache build.

A dataset of 20 ordinary records and one huge one (a 50 MB line of English
words, or one 50 MB word) is served with max_length 512 under the sp32k
SentencePiece model; the run measures the seconds until the token store is
built and the peak memory of the daemon's process tree (the sum of RSS over
the daemon and its builders, sampled every 50 ms). Each tokfeedd given is run
side by side on the same files, so the figures compare.

    /usr/bin/python3 bench/records/run.py --daemon OLD/tokfeedd --daemon build/daemon/tokfeedd

Options: --mb (record size, default 50), --timeout (seconds per run, default
120: a run still building then is stopped and reported as "> timeout"),
--max-record-bytes (written into [dataset]; default: the key is left out, so
the daemon's own default applies), --work (default /tmp/tokfeed-bench-records).
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def make_data(work, kind, mb):
    path = os.path.join(work, f"{kind}-{mb}mb.jsonl")
    if os.path.exists(path):
        return path
    lines = []
    for i in range(20):
        lines.append(json.dumps({"messages": [{"role": "user", "content": f"question {i}"},
                                              {"role": "assistant", "content": f"answer number {i}"}]}))
    n = mb * 1_000_000
    if kind == "line":
        words = "the quick brown fox jumps over the lazy dog and runs far away ".split()
        parts, size, k = [], 0, 0
        while size < n:
            w = words[k % len(words)]
            parts.append(w)
            size += len(w) + 1
            k += 1
        body = " ".join(parts)
    else:
        body = "a" * n
    lines.insert(10, json.dumps({"messages": [{"role": "user", "content": "Summarize this."},
                                              {"role": "assistant", "content": body}]}))
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def tree_rss(pid):
    """Sum of RSS (bytes) over pid and its descendants."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/statm") as f:
                total += int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
            with open(f"/proc/{p}/task/{p}/children") as f:
                todo += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return total


def run_one(daemon, ctl, data, work, tag, timeout, max_record_bytes):
    run_dir = os.path.join(work, tag)
    shutil.rmtree(run_dir, ignore_errors=True)
    os.makedirs(run_dir)
    sock = os.path.join(run_dir, "s.sock")
    extra = f"max_record_bytes = {max_record_bytes}\n" if max_record_bytes is not None else ""
    cfg = os.path.join(run_dir, "job.toml")
    with open(cfg, "w") as f:
        f.write(f"""[dataset]
path = "{data}"
{extra}[tokenizer]
type = "sentencepiece"
path = "{ROOT}/tests/data/tokenizers/sp32k/tokenizer.model"
template = "mistral"
[batch]
size = 2
max_length = 512
truncation = "right"
[workers]
count = 1
[server]
socket = "{sock}"
shm_prefix = "tfbench-rec-{os.getpid()}-{tag}"
[cache]
dir = "{run_dir}/cache"
""")
    log = open(os.path.join(run_dir, "daemon.log"), "w")
    t0 = time.monotonic()
    proc = subprocess.Popen([daemon, "--config", cfg], stdout=log, stderr=subprocess.STDOUT)
    peak, state, bad = 0, "?", None
    while True:
        peak = max(peak, tree_rss(proc.pid))
        elapsed = time.monotonic() - t0
        if proc.poll() is not None:
            state = f"exited {proc.returncode}"
            break
        if elapsed > timeout:
            state = f"> {timeout} s (stopped)"
            break
        if os.path.exists(sock):
            r = subprocess.run([ctl, "-s", sock, "status", "--json"], capture_output=True, text=True)
            if r.returncode == 0:
                st = json.loads(r.stdout)
                c, ds = st.get("cache", {}), st.get("dataset", {})
                if (ds.get("state") == "ready" and c.get("state") in ("built", "reused") and
                        c.get("records_done") == c.get("records_total")):
                    state = "built"
                    bad = ds.get("bad")
                    if ds.get("bad_records"):
                        bad = f"{bad}: {ds['bad_records'][0][:160]}"
                    break
        time.sleep(0.05)
    elapsed = time.monotonic() - t0
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    log.close()
    return elapsed, peak, state, bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--daemon", action="append", required=True)
    ap.add_argument("--ctl", default=os.path.join(ROOT, "build/tools/tokfeedctl"))
    ap.add_argument("--mb", type=int, default=50)
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--max-record-bytes", type=int, default=None)
    ap.add_argument("--kinds", default="line,word")
    ap.add_argument("--work", default="/tmp/tokfeed-bench-records")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    print("| daemon | record | max_record_bytes | state | seconds | peak RSS (MB) | bad records |")
    print("|---|---|---|---|---|---|---|")
    for kind in a.kinds.split(","):
        data = make_data(a.work, kind, a.mb)
        for i, d in enumerate(a.daemon):
            el, peak, state, bad = run_one(d, a.ctl, data, a.work, f"{kind}-{i}", a.timeout, a.max_record_bytes)
            mrb = a.max_record_bytes if a.max_record_bytes is not None else "default"
            print(f"| {d} | {a.mb} MB {kind} | {mrb} | {state} | {el:.2f} | {peak / 1e6:.0f} | {bad} |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
