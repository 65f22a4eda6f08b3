#!/usr/bin/env python3
"""Cost of the copy-on-write CPU mapping (ClientOptions::copy_on_write, what
tokfeed.Loader uses on CPU) against the read-only one, side by side on one
daemon: per batch of 8 x 2048 int64 (four tensors, 512 KiB), next() + read
every tensor + free, with the rings full. Prints the medians and the ratio.

    PYTHONPATH=build/python TOKFEED_BUILD_DIR=build /usr/bin/python3 bench/copy_on_write.py
"""
import os
import statistics
import sys
import time

from torch.utils.dlpack import from_dlpack

import tokfeed

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python"))
from tokfeed_testlib import Daemon  # noqa: E402


def main(rounds=6, per_round=16):
    res = {False: [], True: []}
    with Daemon(padding="max_length", batch_size=8, max_length=2048, epochs=2 * rounds, workers=2, slots=8) as d:
        for r in range(rounds):
            for cow in (False, True):
                c = tokfeed._tokfeed.Client(d.socket, 0, epoch=2 * r + cow, copy_on_write=cow)
                time.sleep(1.5)  # the workers fill the rings: measure the client
                t0 = time.perf_counter()
                for _ in range(per_round):
                    b = c.next()
                    t = {k: from_dlpack(v) for k, v in b.tensors().items()}
                    sum(int(x.sum()) for x in t.values())
                    del b, t
                res[cow].append((time.perf_counter() - t0) / per_round * 1e6)
                c.close()
                time.sleep(0.2)
    ro, cow = statistics.median(res[False]), statistics.median(res[True])
    print(f"per batch: read-only {ro:.0f} us, copy-on-write {cow:.0f} us, ratio {cow / ro:.2f}")


if __name__ == "__main__":
    main()
