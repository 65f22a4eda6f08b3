#!/usr/bin/env python3
"""GPU check of tokfeed's CUDA path (run by scripts/gpu-check.sh).

For each batch size: starts a daemon (padding = max_length, so every batch has
the same bytes), reads N batches on the host (device="cpu", cloned), then the
same N with device="cuda:0" and checks every device tensor equals its host
batch; measures the loader's H2D rate against plain pinned cudaMemcpy
(torch copy_ from a pinned tensor) of the same bytes, and the wall time
next() adds per batch. Prints a table last; exits 1 on any mismatch.
"""
import argparse
import os
import sys
import tempfile
import time

import torch

import tokfeed

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python"))
import tokfeed_testlib as lib  # noqa: E402


def drain(loader, n):
    out = []
    for _ in range(n):
        out.append({k: v.clone() for k, v in next(loader).items()})
    return out


def pinned_gbps(nbytes, reps):
    src = torch.empty(nbytes, dtype=torch.uint8).pin_memory()
    dst = torch.empty(nbytes, dtype=torch.uint8, device="cuda:0")
    dst.copy_(src, non_blocking=True)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        dst.copy_(src, non_blocking=True)
    torch.cuda.synchronize()
    return nbytes * reps / (time.perf_counter() - t0) / 1e9


def one_size(batch_size, max_length, n):
    # padding = max_length: every batch has the same bytes.
    d = lib.Daemon(batch_size=batch_size, max_length=max_length, epochs=20, workers=4, slots=8, padding="max_length")
    try:
        with tokfeed.Loader(d.socket) as cpu:
            host = drain(cpu, n)
            time.sleep(1.0)  # let the workers refill the rings: measure the client, not the tokenizer
            t0 = time.perf_counter()
            for _ in range(n):
                next(cpu)
            cpu_next_us = (time.perf_counter() - t0) / n * 1e6
        nbytes = sum(t.numel() * t.element_size() for t in host[0].values())
        bad = 0
        with tokfeed.Loader(d.socket, device="cuda:0", prefetch=2) as gpu:
            gpu.load_state_dict({})
            for i in range(n):
                b = next(gpu)
                for k, v in b.items():
                    if not torch.equal(v.cpu(), host[i][k]):
                        bad += 1
        with tokfeed.Loader(d.socket, device="cuda:0", prefetch=2) as gpu:
            gpu.set_epoch(1)
            time.sleep(1.0)
            next(gpu)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(n):
                b = next(gpu)
            torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            registered = gpu._stream.host_registered
        return dict(batch=batch_size, bytes=nbytes, bad=bad, loader_gbps=nbytes * n / dt / 1e9,
                    pinned_gbps=pinned_gbps(nbytes, n), gpu_next_us=dt / n * 1e6, cpu_next_us=cpu_next_us,
                    registered=registered)
    finally:
        d.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1,4,16,32")
    ap.add_argument("--max-length", type=int, default=2048)
    ap.add_argument("--batches", type=int, default=60)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("gpu_check: torch sees no CUDA device")
    rows = [one_size(int(s), args.max_length, args.batches) for s in args.sizes.split(",")]
    print(f"\n{'batch':>5} {'MiB':>7} {'mismatch':>8} {'loader GB/s':>11} {'pinned GB/s':>11} "
          f"{'gpu next us':>11} {'cpu next us':>11} {'registered':>10}")
    for r in rows:
        print(f"{r['batch']:>5} {r['bytes'] / 2**20:>7.2f} {r['bad']:>8} {r['loader_gbps']:>11.2f} "
              f"{r['pinned_gbps']:>11.2f} {r['gpu_next_us']:>11.1f} {r['cpu_next_us']:>11.1f} {str(r['registered']):>10}")
    return 1 if any(r["bad"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
