"""tokfeed: batches from a tokfeedd daemon as torch tensors.

    import tokfeed
    loader = tokfeed.Loader("/run/tokfeed/job.sock", rank=0)
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
from .loader import Loader

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
