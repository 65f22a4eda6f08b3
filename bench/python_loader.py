#!/usr/bin/env python3
"""Python-side costs of tokfeed (CPU, zero-copy).

1. next() overhead: a warm daemon with deep rings (every batch already
   built), drained by (a) the raw binding (_tokfeed.Client.next) and (b)
   tokfeed.Loader (adds DLPack -> torch), in microseconds per batch.
2. The tiny training loop of examples/train_tiny.py, step time fed by tokfeed
   vs by torch.utils.data.DataLoader(num_workers=2) doing the same work in
   Python (tests/reference/tokfeed_ref.py renders and tokenizes with
   python sentencepiece, same template, same truncation, padded to longest).

    PYTHONPATH=/tmp/b/python python3 bench/python_loader.py [--steps 30]
"""
import argparse
import os
import sys
import time

import torch

import tokfeed

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "tests", "python"), os.path.join(ROOT, "tests", "reference"),
                os.path.join(ROOT, "examples")]
import tokfeed_testlib as lib  # noqa: E402
from train_tiny import TinyLM  # noqa: E402


def next_overhead(n):
    # 2 workers x 64 slots: 128 batches built before the clock starts.
    with lib.Daemon(batch_size=8, max_length=128, epochs=4, workers=2, slots=64) as d:
        c = tokfeed._tokfeed.Client(d.socket)
        time.sleep(3.0)
        t0 = time.perf_counter()
        for _ in range(n):
            b = c.next()
            del b
        raw = (time.perf_counter() - t0) / n * 1e6
        c.close()
        del c
        loader = tokfeed.Loader(d.socket)
        loader.load_state_dict({"epoch": 1, "step": 0})  # a new session: let it refill
        time.sleep(3.0)
        t0 = time.perf_counter()
        for _ in range(n):
            batch = next(loader)
            del batch
        full = (time.perf_counter() - t0) / n * 1e6
        loader.close()
    return raw, full


class RefDataset(torch.utils.data.Dataset):
    """The same samples the daemon builds, in Python."""

    def __init__(self, config):
        import tokfeed_ref as ref
        self.ref = ref
        self.cfg = ref.load_config(config)
        self.convs, _ = ref.load_dataset(self.cfg)
        self.tok = None  # built lazily in each worker

    def __len__(self):
        return len(self.convs)

    def __getitem__(self, i):
        if self.tok is None:
            self.tok = self.ref.make_tokenizer(self.cfg)
        ids, labels = self.ref.tokenize_sample(self.convs[i], self.cfg, self.tok)
        return self.ref.truncate(ids, labels, self.cfg)


def collate(rows):
    n, L = len(rows), max(len(r[0]) for r in rows)
    ids = torch.zeros(n, L, dtype=torch.int64)
    labels = torch.full((n, L), -100, dtype=torch.int64)
    for i, (a, b) in enumerate(rows):
        ids[i, :len(a)] = torch.tensor(a)
        labels[i, :len(b)] = torch.tensor(b)
    return {"input_ids": ids, "labels": labels}


def loop(batches, steps):
    torch.manual_seed(0)
    model = TinyLM()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    it = iter(batches)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        b = next(it)
        loss = model(b["input_ids"], b["labels"])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        del b
        times.append(time.perf_counter() - t0)
    warm = sorted(times[2:])
    return 1000 * sum(warm) / len(warm), 1000 * warm[len(warm) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--n", type=int, default=100)
    args = ap.parse_args()
    torch.set_num_threads(2)

    raw, full = next_overhead(args.n)
    print(f"next() per batch: binding {raw:.1f} us, Loader (with 4x from_dlpack) {full:.1f} us")

    with lib.Daemon(batch_size=8, max_length=128, epochs=4, workers=2, slots=8) as d:
        with tokfeed.Loader(d.socket) as loader:
            tf_mean, tf_med = loop(loader, args.steps)
        dl = torch.utils.data.DataLoader(RefDataset(d.config), batch_size=8, shuffle=True, num_workers=2,
                                         collate_fn=collate, persistent_workers=True)
        dl_mean, dl_med = loop(dl, args.steps)
    print(f"tiny loop step: tokfeed mean {tf_mean:.1f} ms (median {tf_med:.1f}); "
          f"DataLoader(num_workers=2) mean {dl_mean:.1f} ms (median {dl_med:.1f})")


if __name__ == "__main__":
    main()
