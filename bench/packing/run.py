#!/usr/bin/python3
"""Packing and token-cache benchmark (docs/benchmarks.md, "Packing").

On one data set and tokenizer, in one run:
  * the useful-token ratio (real tokens / tokens delivered) of longest,
    max_length and packed padding, one full epoch each;
  * the token cache: time to the first batch on a cold start (the cache is
    built) against a warm start (the cache is reused);
  * resume: time to the first batch of a position deep in the epoch, against
    the first batch of the epoch, on the same warm daemon.

    bench/packing/run.py --build build [--data ../shared/data/sft/mixed-10k.jsonl]
                         [--tokenizer qwen3|sp32k] [--max-length 2048]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def tokenizer_section(build, name):
    if name == "qwen3":
        path = os.path.join(build, "test-data", "qwen3", "tokenizer.json")
        return f'type = "hf"\npath = "{path}"\ntemplate = "qwen2_5"\n'
    path = os.path.join(ROOT, "tests", "data", "tokenizers", "sp32k", "tokenizer.model")
    return f'type = "sentencepiece"\npath = "{path}"\ntemplate = "mistral"\n'


class Daemon:
    def __init__(self, build, tmp, name, body):
        self.sock = os.path.join(tmp, name + ".sock")
        self.cfg = os.path.join(tmp, name + ".toml")
        with open(self.cfg, "w") as f:
            f.write(body + f'\n[server]\nsocket = "{self.sock}"\nshm_prefix = "bench-pack-{os.getpid()}-{name}"\n')
        self.ctl = os.path.join(build, "tools", "tokfeedctl")
        self.t0 = time.monotonic()
        self.p = subprocess.Popen([os.path.join(build, "daemon", "tokfeedd"), "--config", self.cfg,
                                   "--log-level", "warn"])
        while not os.path.exists(self.sock):
            if self.p.poll() is not None:
                sys.exit(f"tokfeedd exited with {self.p.returncode}")
            time.sleep(0.005)

    def drain(self, *args):
        out = subprocess.run([self.ctl, "-s", self.sock, "drain", *args], check=True, capture_output=True, text=True)
        return json.loads(out.stdout)

    def status(self):
        out = subprocess.run([self.ctl, "-s", self.sock, "status", "--json"], check=True, capture_output=True,
                             text=True)
        return json.loads(out.stdout)

    def stop(self):
        self.p.terminate()
        self.p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--data", default=os.path.join(ROOT, "..", "shared", "data", "sft", "mixed-10k.jsonl"))
    ap.add_argument("--tokenizer", default="qwen3", choices=["qwen3", "sp32k"])
    ap.add_argument("--max-length", type=int, default=2048)
    ap.add_argument("--size", type=int, default=4)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    data = os.path.abspath(args.data)
    args.build = os.path.abspath(args.build)  # configs live in a temp dir
    tmp = tempfile.mkdtemp(prefix="tokfeed-bench-pack-")
    try:
        def body(padding, cache_dir):
            return (f'[dataset]\npath = "{data}"\n[tokenizer]\n{tokenizer_section(args.build, args.tokenizer)}'
                    f'[batch]\nsize = {args.size}\nmax_length = {args.max_length}\npadding = "{padding}"\n'
                    f'[workers]\ncount = {args.workers}\n[cache]\ndir = "{cache_dir}"\n')

        rows = []
        cache = os.path.join(tmp, "cache")
        for padding in ("longest", "max_length", "packed"):
            d = Daemon(args.build, tmp, padding, body(padding, cache))
            r = d.drain()
            d.stop()
            rows.append((padding, r["batches"], r["real_tokens"], r["tokens"]))

        # Cold and warm start of the packed job, each with the same fresh key.
        starts = []
        cold_cache = os.path.join(tmp, "cache-cold")
        for label in ("cold (cache built)", "warm (cache reused)"):
            d = Daemon(args.build, tmp, "start", body("packed", cold_cache))
            r = d.drain("--count", "1")
            first = time.monotonic() - d.t0
            st = d.status()
            starts.append((label, first, st["cache"]["seconds"], st["cache"]["state"]))
            if label.startswith("warm"):
                # Resume deep in the epoch against the epoch's first batch, on
                # the same warm daemon.
                bpe = st["ranks"][0]["batches_per_epoch"]
                t_first = d.drain("--count", "1")["first_batch_s"]
                t_deep = d.drain("--count", "1", "--step", str(bpe - 1))["first_batch_s"]
            d.stop()

        tok = "Qwen3 tokenizer.json, qwen2_5 template" if args.tokenizer == "qwen3" else "sp32k, mistral template"
        print(f"Data: `{os.path.relpath(data, ROOT)}`; {tok}; batch size {args.size}, max_length "
              f"{args.max_length}, {args.workers} workers, one epoch drained by `tokfeedctl drain`.\n")
        print("| padding | batches | real tokens | tokens delivered | useful-token ratio | pad fraction |")
        print("|---|---|---|---|---|---|")
        for padding, batches, real, tokens in rows:
            print(f"| {padding} | {batches} | {real:,} | {tokens:,} | {real / tokens:.2%} | {1 - real / tokens:.2%} |")
        print("\n| start | time to first batch | token cache |")
        print("|---|---|---|")
        for label, first, secs, state in starts:
            print(f"| {label} | {first:.2f} s | {state} in {secs:.2f} s |")
        print(f"\nResume on a warm daemon: first batch of epoch 0 in {t_first * 1000:.1f} ms; at step {bpe - 1} "
              f"(the epoch's last) in {t_deep * 1000:.1f} ms: no batch before the position is built.")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
