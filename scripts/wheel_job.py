"""A job from Python alone, as scripts/wheel-check.sh runs it in a bare
system: two ranks of a config, each from a loader that starts the daemon or
attaches to it (tokfeed/launch.py), in two processes; their batch checksums,
then the same ranks read again through a daemon started by `python -m
tokfeed serve`. The two runs must give the same stream, and no tokfeedd may
be left when the loaders are gone.

    python wheel_job.py [--torch] job.toml
"""
import os
import subprocess
import sys
import time

from tokfeed import _tokfeed, launch


def read_rank(config, rank, use_torch):
    """(checksums, real tokens) of every batch of ``rank``, in order."""
    if use_torch:
        import tokfeed
        with tokfeed.Loader(config=config, rank=rank, verify_checksums=True) as loader:
            out = []
            for b in loader:
                out.append(int(b["input_ids"].sum()) * 1000003 + int((b["labels"] != -100).sum()))
            return out
    lease = launch.Lease(config)
    client = _tokfeed.Client(lease.socket, rank, verify_checksums=True)
    out = []
    while True:
        b = client.next()
        if b is None:
            break
        out.append(b.checksum)
        del b
    client.close()
    lease.release()
    return out


def daemons(config):
    """Pids of the tokfeedd processes serving ``config``."""
    pids = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if os.path.basename(argv[0]) == b"tokfeedd" and os.fsencode(config) in argv:
                pids.append(int(p))
    return pids


def main():
    use_torch = "--torch" in sys.argv
    config = os.path.abspath([a for a in sys.argv[1:] if not a.startswith("--")][0])
    if os.environ.get("WHEEL_JOB_RANK"):
        r = int(os.environ["WHEEL_JOB_RANK"])
        print(" ".join(str(c) for c in read_rank(config, r, use_torch)))
        return
    t = time.monotonic()
    # Two ranks in two processes, started together: one starts the daemon, the other attaches.
    procs = [subprocess.Popen([sys.executable] + sys.argv, env=dict(os.environ, WHEEL_JOB_RANK=str(r)),
                              stdout=subprocess.PIPE, text=True) for r in (0, 1)]
    owned = [p.communicate()[0].split() for p in procs]
    if any(p.returncode for p in procs):
        sys.exit("wheel-check: a rank failed")
    started = time.monotonic() - t
    for _ in range(100):
        if not daemons(config):
            break
        time.sleep(0.05)
    left = daemons(config)
    # The same job served by `python -m tokfeed serve`, read by the same code.
    serve = subprocess.Popen([sys.executable, "-m", "tokfeed", "serve", config], stderr=subprocess.DEVNULL)
    sock = launch.config_socket(config)
    while not launch.answers(sock):
        time.sleep(0.02)
    served = [read_rank(config, r, use_torch) for r in (0, 1)]
    status = subprocess.run([sys.executable, "-m", "tokfeed", "status", config], capture_output=True, text=True)
    serve.terminate()
    serve.wait()
    served = [[str(c) for c in s] for s in served]
    kind = "tokfeed.Loader (torch)" if use_torch else "Lease + Client"
    print(f"wheel-check: {kind}: ranks 0 and 1 read {len(owned[0])} + {len(owned[1])} batches in {started:.2f} s "
          f"from a daemon they started; tokfeedd left after close: {left or 'none'}")
    print(f"wheel-check: the same as from `python -m tokfeed serve`: {owned == served}; "
          f"`python -m tokfeed status` exit {status.returncode}")
    if use_torch:
        import torch
        maps = sorted({line.split()[-1] for line in open("/proc/self/maps") if "libcudart.so" in line})
        print(f"wheel-check: torch {torch.__version__}; the binding's CUDA runtime: {maps or 'none (CPU torch)'}; "
              f"cuda_status: {_tokfeed.cuda_status() or 'a device'}")
    if owned != served or left or not owned[0] or status.returncode:
        sys.exit("wheel-check: FAILED")


if __name__ == "__main__":
    main()
