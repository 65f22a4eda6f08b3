"""tokfeed.Loader: the trainer-facing iterator over a daemon's batch stream."""
import gc

import torch
from torch.utils.dlpack import from_dlpack

from . import _tokfeed
from .launch import Lease


def _parse_device(device):
    dev = torch.device(device)
    if dev.type not in ("cpu", "cuda"):
        raise _tokfeed.InvalidArgument(f"device {device!r}: expected 'cpu', 'cuda' or 'cuda:N'")
    if dev.type == "cpu":
        return dev, None
    # Ask the CUDA runtime libtokfeed links, not torch, so the error names the
    # real cause ("no CUDA device: cudaErrorNoDevice: ...").
    count = _tokfeed.cuda_device_count()
    index = dev.index if dev.index is not None else 0
    if index >= count:
        why = _tokfeed.cuda_status() if count == 0 else ""
        raise _tokfeed.InvalidArgument(f"no CUDA device: {device!r} requested, {count} present"
                                       + (f" ({why})" if why else ""))
    return torch.device("cuda", index), index


FORMATS = ("hf", "raw")
SPLITS = ("train", "eval")

# The daemon's names for what transformers does not take: the unpadded
# flash-attn offsets and the padding mask of a packed row.
_RAW_ONLY = ("cu_seqlens", "max_seqlen", "attention_mask")


def _hf_packed(out):
    """A packed or padding_free batch as transformers takes it in
    ``model(**batch)`` (DataCollatorWithFlattening's names): no
    attention_mask, so the model builds its mask from position_ids (sdpa,
    eager) or passes cu_seq_lens_q/k to flash-attn varlen; max_length_q/k as
    ints; use_cache=False, since transformers looks for packed sequences only
    when no cache is made. padding_free batches (one row, no attention_mask
    from the daemon) also get TRL's ``seq_idx``: the index of each token's
    sample, int32, shape [1, tokens], for linear-attention layers."""
    padding_free = "attention_mask" not in out
    for name in _RAW_ONLY:
        out.pop(name, None)
    cu = out["cu_seq_lens_q"]
    if padding_free:
        lengths = cu[1:] - cu[:-1]
        ids = torch.arange(lengths.numel(), dtype=torch.int32, device=cu.device)
        out["seq_idx"] = torch.repeat_interleave(ids, lengths.long(), output_size=out["input_ids"].shape[-1])[None]
    out["cu_seq_lens_k"] = cu
    m = int(out["max_length_q"][0])  # on CUDA a sync on the copy, already waited for by the stream
    out["max_length_q"] = m
    out["max_length_k"] = m
    out["use_cache"] = False
    return out


class Loader:
    """Iterates a tokfeedd daemon's batch stream for one rank.

    ``Loader(config="job.toml", rank=r)`` in place of a socket attaches to
    the daemon serving that job, or starts tokfeedd for it: one daemon shared
    by the node's loaders, stopped when the last closes or its process exits
    (tokfeed/launch.py, docs/packaging.md).

    Yields dicts that ``model(**batch)`` takes (docs/data_model.md section 5):
    input_ids, attention_mask, labels, position_ids for padded jobs. Packed
    and padding_free jobs (format="hf", the default) give input_ids, labels,
    position_ids restarting at 0 per sample, cu_seq_lens_q/k, max_length_q/k
    (ints) and use_cache=False, and no attention_mask: transformers then keeps
    the samples of a row apart (sdpa, eager, flash-attn varlen).
    format="raw" yields the daemon's tensors as they are (attention_mask,
    and cu_seqlens/max_seqlen: offsets into the unpadded tokens, for calling
    flash-attn yourself). Iterating runs from the current position through
    the last configured epoch; ``epoch_batches()`` (or
    ``tokfeed.torch.EpochLoader``) stops at the end of the current epoch.

    device="cpu": tensors are zero-copy views of the daemon's shared memory,
    mapped copy-on-write: an in-place write (``t += 1``, a collator's
    ``masked_fill_``) copies the page it lands on for this process only; the
    ring and other ranks never see it. A tensor keeps its ring slot until it
    is freed; a rank can hold at most ``workers * slots`` batches.

    device="cuda[:N]": batches are copied by libtokfeed on its own stream into
    pooled device buffers, ``prefetch`` batches ahead, and the current torch
    stream waits for the copies. Use the tensors on that stream.

    split="eval" reads the rank's evaluation stream ([eval] in the job,
    docs/data_model.md section 7) through its own rings: the training
    stream's position never moves. Each ``for batch in loader`` is one pass
    over this rank's share of the evaluation set, in a fixed order; every
    pass yields the same bytes. ``len(loader)`` is the batches of a pass,
    and a position is (epoch = pass, step).
    """

    def __init__(self, socket=None, rank=0, device="cpu", prefetch=2, liveness_timeout=1.5, verify_checksums=False,
                 format="hf", config=None, split="train"):
        self._lease = None
        if (socket is None) == (config is None):
            raise _tokfeed.InvalidArgument("Loader: give the daemon's socket, or config= (a job's TOML) to attach to "
                                           "or start the daemon serving it")
        if format not in FORMATS:
            raise _tokfeed.InvalidArgument(f"format {format!r}: expected one of {FORMATS}")
        if split not in SPLITS:
            raise _tokfeed.InvalidArgument(f"split {split!r}: expected one of {SPLITS}")
        self.format = format
        self.split = split
        self.socket = str(socket)
        self.rank = int(rank)
        self.prefetch = int(prefetch)
        self.liveness_timeout = float(liveness_timeout)
        self.verify_checksums = bool(verify_checksums)
        self.device, self._cuda_index = _parse_device(device)
        self._client = None
        self._stream = None
        self._next = (0, 0, 0, 0)
        self._held = None  # a batch fetched past an epoch's end by epoch_batches(), and its index
        if config is not None:
            # Attach to the daemon serving the config, or start one owned by
            # this node's loaders (tokfeed/launch.py).
            self._lease = Lease(config)
            self.socket = self._lease.socket
        try:
            self._connect(0, 0)
        except BaseException:
            self._release_lease()
            raise

    # ---- position ----

    def state_dict(self):
        """The position of the NEXT batch this loader yields:
        {"epoch", "step", "world_size", "base"} (docs/data_model.md 4.3).

        Loading it at another world size (an elastic restart) continues the
        same epoch: every row not yet delivered is delivered once."""
        return {"epoch": self._next[0], "step": self._next[1], "world_size": self._next[2],
                "base": self._next[3]}

    def load_state_dict(self, state):
        """Repositions at ``state`` (from state_dict(); {} means the start).

        The daemon repositions in O(1). Batches from the old position that are
        still alive (CPU tensors) must be freed first, since their slots are
        reused: otherwise this raises InvalidArgument.
        """
        try:
            pos = tuple(int(state.get(k, 0)) for k in ("epoch", "step", "world_size", "base"))
        except (AttributeError, TypeError, ValueError) as e:
            raise _tokfeed.InvalidArgument(f"load_state_dict: expected a dict from state_dict(), got {state!r}") from e
        if pos[2] == 0:
            pos = (pos[0], pos[1], self._next[2], pos[3])
        if pos == self._next:
            return
        old = self._next
        self._disconnect()  # raises, leaving the loader as it was, while old batches are alive
        try:
            self._connect(*pos)
        except BaseException:
            # The daemon refused the position: stay usable where we stood.
            self._connect(*old)
            raise

    def set_epoch(self, epoch):
        """Positions at (epoch, 0), the DistributedSampler.set_epoch convention.

        A no-op when the loader already stands there (e.g. after finishing the
        previous epoch), so calling it at the top of every epoch keeps the
        daemon's already-built batches. Calling it mid-epoch skips the rest.
        """
        if int(epoch) != self._next[0] or self._next[1] != 0:
            self.load_state_dict({"epoch": int(epoch), "step": 0, "base": 0})

    def __len__(self):
        """Batches in the current epoch for this rank (packing varies it by epoch).

        On a cold start the daemon serves while its token cache builds, and
        the count is known only once every record is built: ``len()`` blocks
        until then (batches can be read meanwhile)."""
        return self._client.batches_per_epoch

    @property
    def epochs(self):
        return self._epochs

    @property
    def mapping_base(self):
        return self._client.mapping_base

    @property
    def mapping_size(self):
        return self._client.mapping_size

    # ---- iteration ----

    def __iter__(self):
        if self.split == "eval":
            return self._one_pass()
        return self

    def _one_pass(self):
        """Yields one evaluation pass. A pass left part way is not resumed:
        the next one starts at its first batch."""
        if self._next[1] != 0:
            self.load_state_dict({"epoch": self._next[0] + 1, "step": 0})
        for _ in range(len(self)):
            yield next(self)

    def __next__(self):
        if self._held is not None:
            out, index = self._held
            self._held = None
            self._next = self._client.position_of(index + 1)
            return out
        out, _ = self._fetch()
        return out

    def _fetch(self):
        """-> (batch dict, its epoch)."""
        if self._stream is not None:
            b = self._stream.next(torch.cuda.current_stream(self.device).cuda_stream)
        else:
            b = self._client.next()
        if b is None:
            self._next = (self._epochs, 0, self._next[2], 0)
            raise StopIteration
        out = {name: from_dlpack(cap) for name, cap in b.tensors().items()}
        epoch, step, index = b.epoch, b.step, b.index
        self._next = self._client.position_of(index + 1)
        if self.format == "hf" and "cu_seq_lens_q" in out:
            _hf_packed(out)
        return out, (epoch, step, index)

    def epoch_batches(self):
        """Yields the rest of the current epoch, then stops."""
        epoch = self._next[0]
        while self._next[0] == epoch:
            if self._held is not None:  # this epoch's first batch, fetched by the last one's loop
                yield next(self)
                continue
            try:
                out, (e, step, index) = self._fetch()
            except StopIteration:
                return
            if e != epoch:
                # The daemon's batch counts were still unknown when the last
                # batch came (a cold start), so the position did not show the
                # epoch's end: this batch opens the next epoch. Kept for it.
                self._held = (out, index)
                self._next = (e, step, self._next[2], 0)
                return
            yield out

    # ---- connection ----

    def _connect(self, epoch, step, world_size=0, base=0):
        self._disconnect()
        self._client = _tokfeed.Client(self.socket, self.rank, epoch, step, self.liveness_timeout,
                                       self.verify_checksums, world_size=world_size, base=base,
                                       copy_on_write=self._cuda_index is None, split=self.split)
        self._epochs = self._client.epochs
        if self._cuda_index is not None:
            self._stream = _tokfeed.DeviceStream(self._client, self._cuda_index, self.prefetch)
        self._next = self._client.position

    def _disconnect(self):
        self._held = None  # repositioning drops it with the rest of the old stream
        if self._client is None:
            return
        if self._stream is not None:
            self._stream.close()  # releases the host batches it held; device tensors stay valid
            self._stream = None
        if self._client.live_batches:
            gc.collect()  # tensors caught in reference cycles
        live = self._client.live_indices
        if live:
            where = ", ".join(self._where(i) for i in live[:4]) + (", ..." if len(live) > 4 else "")
            raise _tokfeed.InvalidArgument(
                f"{len(live)} batch(es) still alive ({where}); free their tensors (or .clone() them) "
                "before load_state_dict/set_epoch: their slots are reused")
        self._client.close()
        self._client = None

    def _where(self, index):
        e, s, _, _ = self._client.position_of(index)
        return f"epoch {e} step {s}"

    def close(self):
        """Detaches from the daemon (after the last live batch is freed)."""
        if self._stream is not None:
            self._stream.close()
            self._stream = None
        if self._client is not None:
            self._client.close()
            self._client = None
        self._release_lease()

    def _release_lease(self):
        if self._lease is not None:
            self._lease.release()
            self._lease = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
