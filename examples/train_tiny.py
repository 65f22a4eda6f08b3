#!/usr/bin/env python3
"""Trains a tiny causal LM on CPU from tokfeed batches and prints the loss.

    PYTHONPATH=/tmp/b/python python3 examples/train_tiny.py --steps 50
    python3 examples/train_tiny.py --socket /run/tokfeed/job.sock   # an existing daemon

Without --socket it writes a job config (the bundled sample data and sp32k
tokenizer) into a temp dir and runs its own tokfeedd (found with --tokfeedd,
$TOKFEED_BUILD_DIR/daemon/tokfeedd, /tmp/b/daemon/tokfeedd or PATH).
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import tokfeed

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# Token ids are folded into this many buckets (id % BUCKETS) for the
# embedding and the targets: a full 32k-vocab head costs seconds a step on
# Debian's CPU torch, and folding keeps a learnable next-token task.
BUCKETS = 1024


class TinyLM(nn.Module):
    """Embedding, two residual MLP blocks, a head: enough to learn bigrams."""

    def __init__(self, vocab=BUCKETS, dim=32):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, 4 * dim), nn.GELU(),
                                                  nn.Linear(4 * dim, dim)) for _ in range(2))
        self.head = nn.Linear(dim, vocab)

    def forward(self, input_ids, labels):
        # Not in place: the batch tensors are read-only shared memory.
        input_ids = input_ids % BUCKETS
        labels = torch.where(labels < 0, labels, labels % BUCKETS)
        h = self.embed(input_ids)
        for block in self.blocks:
            h = h + block(h)
        logits = self.head(h[:, :-1])
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels[:, 1:].reshape(-1), ignore_index=-100)


def find_tokfeedd(given):
    for c in (given, os.path.join(os.environ.get("TOKFEED_BUILD_DIR", ""), "daemon", "tokfeedd"),
              "/tmp/b/daemon/tokfeedd", shutil.which("tokfeedd")):
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    sys.exit("tokfeedd not found: pass --tokfeedd or --socket")


def start_daemon(tokfeedd, tmp, steps, padding="longest"):
    sock = os.path.join(tmp, "train-tiny.sock")
    config = os.path.join(tmp, "job.toml")
    data = os.path.join(ROOT, "tests", "data", "sft", "mixed-300.jsonl")
    model = os.path.join(ROOT, "tests", "data", "tokenizers", "sp32k", "tokenizer.model")
    # At max_length 128, 69 of the 300 records have no trained token (their
    # assistant text starts past it) and are left out: 231 / batch 8 = 29
    # batches an epoch. Enough epochs for `steps`.
    epochs = max(1, (steps + 28) // 29)
    with open(config, "w") as f:
        f.write(f"""[dataset]
path = "{data}"
on_bad_record = "skip"
[tokenizer]
type = "sentencepiece"
path = "{model}"
template = "mistral"
[batch]
size = 8
max_length = 128
padding = "{padding}"
truncation = "right"
[schedule]
epochs = {epochs}
shuffle = true
seed = 7
[workers]
count = 2
slots = 4
[server]
socket = "{sock}"
shm_prefix = "train-tiny-{os.getpid()}"
""")
    log = open(os.path.join(tmp, "tokfeedd.log"), "w")
    proc = subprocess.Popen([tokfeedd, "--config", config], stdout=log, stderr=subprocess.STDOUT)
    for _ in range(600):
        if proc.poll() is not None:
            sys.exit(f"tokfeedd exited: {open(log.name).read()}")
        try:
            tokfeed.Loader(sock).close()
            return proc, sock
        except tokfeed.TokfeedError:
            time.sleep(0.05)
    sys.exit("tokfeedd did not start")


def train(loader, steps, lr):
    torch.manual_seed(0)
    model = TinyLM()
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses, times = [], []
    it = iter(loader)
    start, tokens = time.perf_counter(), 0
    for step in range(steps):
        t0 = time.perf_counter()
        batch = next(it)
        real = int(batch["attention_mask"].sum())
        loss = model(batch["input_ids"], batch["labels"])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        del batch  # frees the slot before the next batch is asked for
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
        tokens += real
        if step % 5 == 0 or step == steps - 1:
            # rate and ETA over the steps so far
            el = time.perf_counter() - start
            eta = el / (step + 1) * (steps - step - 1)
            print(f"step {step:3d}/{steps} loss {losses[-1]:.4f}  {(step + 1) / el:.1f} steps/s  "
                  f"{tokens / el:,.0f} tokens/s  ETA {eta:.0f} s", flush=True)
    return losses, times


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--socket", help="an existing daemon's socket (default: start one)")
    ap.add_argument("--tokfeedd", help="the daemon binary to start")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--lr", type=float, default=1e-2)
    args = ap.parse_args()
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))

    tmp = proc = None
    sock = args.socket
    if sock is None:
        tmp = tempfile.mkdtemp(prefix="train-tiny-")
        proc, sock = start_daemon(find_tokfeedd(args.tokfeedd), tmp, args.steps)
    try:
        with tokfeed.Loader(sock) as loader:
            losses, times = train(loader, args.steps, args.lr)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=10)
            shutil.rmtree(tmp, ignore_errors=True)
    k = min(5, len(losses))
    first, last = sum(losses[:k]) / k, sum(losses[-k:]) / k
    print(f"first_loss {first:.4f} last_loss {last:.4f} step_ms {1000 * sum(times[1:]) / max(1, len(times) - 1):.1f}")
    return 0 if last < first else 1


if __name__ == "__main__":
    sys.exit(main())
