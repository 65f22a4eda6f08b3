"""tokfeed: batches from a tokfeedd daemon as torch tensors.

    import tokfeed
    loader = tokfeed.Loader(config="job.toml", rank=0)   # starts tokfeedd, or attaches
    loader = tokfeed.Loader("/run/tokfeed/job.sock", rank=0)  # a running service
    for batch in loader:          # dict of torch tensors
        loss = model(**batch).loss

See python/README.md for the semantics of positions, epochs and errors.
"""
from . import _tokfeed
from ._tokfeed import (
    TokfeedError,
    DaemonLost,
    CorruptError,
    RefusedError,
    IoError,
    InvalidArgument,
)


def __getattr__(name):
    # Loader imports torch: loaded on first use, so that `python -m tokfeed`
    # and the daemon's keeper (launch.py) run without it.
    if name == "Loader":
        from .loader import Loader
        return Loader
    raise AttributeError(f"module 'tokfeed' has no attribute {name!r}")

__version__ = "0.1.0"
__all__ = [
    "Loader",
    "TokfeedError",
    "DaemonLost",
    "CorruptError",
    "RefusedError",
    "IoError",
    "InvalidArgument",
]
