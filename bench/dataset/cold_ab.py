#!/usr/bin/python3
"""Two builds side by side on a cold start, alternating run by run so that a
shared machine's load falls on both alike: each build's tokfeedd cold (an
empty cache dir) on N records, as bench/dataset/cold.py runs it (chatml,
sp32k, batch 8, 2 workers), giving the first batch's seconds, the first
epoch's real tokens/s and the packed first batch; medians at the end.

    PYTHONPATH=build/python /usr/bin/python3 bench/dataset/cold_ab.py [--records 10000] [--reps 5]
        BUILD_A BUILD_B

A build's TOKFEED_FAULT_* test hooks (builds with them) read the
environment: e.g. TOKFEED_FAULT_BUILD_RECORD_US=1000 slows every record's
build by 1 ms, as builders short of cores would be.
"""

import argparse
import os
import shutil
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cold  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=10000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--work", default="/tmp/tokfeed-bench-cold-ab")
    ap.add_argument("builds", nargs=2)
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    data = cold.make_data(cold.SOURCE, args.records, os.path.join(args.work, f"data-{args.records}.jsonl"))
    res = {b: {"first": [], "epoch": [], "packed": []} for b in args.builds}
    for r in range(args.reps):
        for b in args.builds:
            tokfeedd = os.path.join(b, "daemon", "tokfeedd")
            cache = tempfile.mkdtemp(prefix="cache-", dir=args.work)
            first, epoch, _ = cold.run_tokfeed(tokfeedd, data, cache, args.work, True)
            shutil.rmtree(cache)
            cache = tempfile.mkdtemp(prefix="cache-", dir=args.work)
            packed, _, _ = cold.run_tokfeed(tokfeedd, data, cache, args.work, False, packed=True)
            shutil.rmtree(cache)
            res[b]["first"].append(first)
            res[b]["epoch"].append(epoch)
            res[b]["packed"].append(packed)
            print(f"{r} {b}: first batch {first:.3f} s, epoch {epoch / 1e6:.3f} M real tokens/s, "
                  f"packed first batch {packed:.3f} s", flush=True)
    for b in args.builds:
        m = {k: statistics.median(v) for k, v in res[b].items()}
        print(f"{b} medians: first batch {m['first']:.3f} s, epoch {m['epoch'] / 1e6:.3f} M real tokens/s, "
              f"packed first batch {m['packed']:.3f} s")


if __name__ == "__main__":
    main()
