"""Adapters from tokfeed.Loader to torch training loops.

Plain loop:
    loader = tokfeed.Loader(sock)
    for epoch in range(loader.epochs):
        for batch in tokfeed.torch.EpochLoader(loader):
            ...
    # or simply `for batch in loader:` for the whole stream.

HF Trainer or TRL SFTTrainer (one Trainer epoch = one tokfeed epoch):
    TrainerCls = tokfeed.torch.trainer_class(transformers.Trainer)
    trainer = TrainerCls(model=model, args=args, tokfeed_loader=loader,
                         tokfeed_eval_loader=tokfeed.Loader(sock, rank, split="eval"))  # optional
    trainer.train()                                   # saves the loader position with each checkpoint
    trainer.train(resume_from_checkpoint=True)        # continues at exactly the next batch
    trainer.evaluate()                                # one pass of the job's evaluation stream
"""
import json
import os

from . import hf_args
from .loader import Loader

STATE_FILE = "tokfeed_rank{rank}.json"


class EpochLoader:
    """One tokfeed epoch per ``for``: what HF Trainer and epoch loops expect.

    ``len()`` is the batches per epoch. ``set_epoch(e)`` positions at (e, 0)
    unless the loader already stands in epoch e: the Trainer calls it at each
    epoch start, also right after a resume has placed the loader mid-epoch,
    which it must not rewind.
    """

    def __init__(self, loader: Loader):
        self.loader = loader

    def __len__(self):
        return len(self.loader)

    def __iter__(self):
        return self.loader.epoch_batches()

    def set_epoch(self, epoch):
        if self.loader.state_dict()["epoch"] != int(epoch):
            self.loader.set_epoch(epoch)

    def state_dict(self):
        return self.loader.state_dict()

    def load_state_dict(self, state):
        self.loader.load_state_dict(state)


class EvalPassLoader:
    """One evaluation pass per ``for`` (a Loader with split="eval"), as the
    Trainer's evaluation loop iterates an eval dataloader. ``len()`` is this
    rank's batches per pass. Every pass yields the same batches."""

    def __init__(self, loader: Loader):
        if getattr(loader, "split", "train") != "eval":
            raise ValueError("tokfeed_eval_loader= takes tokfeed.Loader(socket, rank, split=\"eval\")")
        self.loader = loader

    def __len__(self):
        return len(self.loader)

    def __iter__(self):
        return iter(self.loader)


def save_state(loader: Loader, checkpoint_dir):
    """Writes the loader's position (of its next batch) into a checkpoint
    directory, one file per rank; returns the path."""
    os.makedirs(checkpoint_dir, exist_ok=True)
    path = os.path.join(checkpoint_dir, STATE_FILE.format(rank=loader.rank))
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(loader.state_dict(), f)
    os.replace(tmp, path)
    return path


def load_state(loader: Loader, checkpoint_dir):
    """Positions the loader at the state save_state() wrote; False (and the
    loader untouched) when the checkpoint has none for this rank."""
    path = os.path.join(checkpoint_dir, STATE_FILE.format(rank=loader.rank))
    if not os.path.exists(path):
        return False
    with open(path) as f:
        loader.load_state_dict(json.load(f))
    return True


def placeholder_dataset():
    """A one-row ``datasets.Dataset`` for trainers that insist on a
    train_dataset (TRL's SFTTrainer; pass ``dataset_kwargs={"skip_prepare_dataset":
    True}`` too). The tokfeed loader replaces the Trainer's loader, so it is
    never read."""
    import datasets

    return datasets.Dataset.from_dict({"input_ids": [[0]]})


def trainer_class(base):
    """A subclass of ``base`` (transformers.Trainer or a subclass such as
    trl.SFTTrainer) fed by the tokfeed loader given as ``tokfeed_loader=``.

    - get_train_dataloader returns an EpochLoader over it; no train_dataset
      is needed (a TRL trainer gets placeholder_dataset() when none is given,
      and dataset preparation is turned off).
    - Each TrainingArguments/SFTConfig data option the loader replaces
      (max_length, packing, padding_free, assistant_only_loss,
      per_device_train_batch_size, dataloader_num_workers, ...: see
      tokfeed.hf_args.REPLACED) set away from its default gets a warning
      naming the job config key that rules instead.
    - train() raises ValueError, naming both numbers, when num_train_epochs
      differs from the job's [schedule] epochs, or max_steps needs more
      epochs than it serves.
    - Each checkpoint also holds ``tokfeed_rank<R>.json``, the position of
      the next batch.
    - ``train(resume_from_checkpoint=...)`` repositions the daemon there (in
      O(1)) instead of replaying or skipping batches; a checkpoint without
      that file resumes at (the Trainer's epoch, batches trained in it).
      With ``ignore_data_skip`` the resumed epoch restarts at its first
      batch, as with a map-style dataset.
    - ``tokfeed_eval_loader=`` (a Loader with split="eval"): ``evaluate()``
      and ``eval_strategy="steps"``/``"epoch"`` run one pass of the job's
      evaluation stream ([eval], docs/data_model.md section 7) through its
      own rings, so the training stream's position never moves. No
      eval_dataset is needed (a placeholder stands in for the Trainer's
      check). ``eval_loss`` is the mean of the per-batch losses, as the
      Trainer computes it for any eval dataloader. Passing another
      eval_dataset to evaluate() uses the Trainer's own pipeline for it.
    """

    class TokfeedTrainer(base):
        def __init__(self, *args, tokfeed_loader=None, tokfeed_eval_loader=None, **kwargs):
            if tokfeed_loader is None:
                raise TypeError("tokfeed_loader= is required")
            sft = any(c.__module__.startswith("trl.") for c in base.__mro__)
            if len(args) > 1:
                args = (args[0], hf_args.adapt_args(args[1], sft)) + tuple(args[2:])
            else:
                kwargs["args"] = hf_args.adapt_args(kwargs.get("args"), sft)
            if sft and len(args) < 4 and kwargs.get("train_dataset") is None:
                kwargs["train_dataset"] = placeholder_dataset()
            self.tokfeed_eval_loader = tokfeed_eval_loader and EvalPassLoader(tokfeed_eval_loader)
            if tokfeed_eval_loader is not None and kwargs.get("eval_dataset") is None:
                kwargs["eval_dataset"] = placeholder_dataset()
            super().__init__(*args, **kwargs)
            self.tokfeed_loader = tokfeed_loader
            self._tokfeed_checkpoint = None

        def get_train_dataloader(self):
            return EpochLoader(self.tokfeed_loader)

        def get_eval_dataloader(self, eval_dataset=None):
            # evaluate() passes self.eval_dataset (the placeholder) or None.
            own = eval_dataset is None or eval_dataset is self.eval_dataset
            if self.tokfeed_eval_loader is not None and own:
                return self.tokfeed_eval_loader
            return super().get_eval_dataloader(eval_dataset)

        def train(self, *args, **kwargs):
            hf_args.check_epochs(self.args, self.tokfeed_loader)
            return super().train(*args, **kwargs)

        def _inner_training_loop(self, *args, **kwargs):
            self._tokfeed_checkpoint = kwargs.get("resume_from_checkpoint")
            return super()._inner_training_loop(*args, **kwargs)

        def get_resumed_dataloader(self, dataloader, num_batches):
            if not isinstance(dataloader, EpochLoader):
                return super().get_resumed_dataloader(dataloader, num_batches)
            ckpt = self._tokfeed_checkpoint
            if not (ckpt and load_state(dataloader.loader, ckpt)):
                # TrainerState.epoch is (epoch + fraction done) at the save.
                dataloader.load_state_dict({"epoch": int(self.state.epoch or 0), "step": num_batches})
            return dataloader

        def _save_checkpoint(self, model, trial):
            super()._save_checkpoint(model, trial)
            run_dir = self._get_output_dir(trial=trial)
            save_state(self.tokfeed_loader, os.path.join(run_dir, f"checkpoint-{self.state.global_step}"))

    TokfeedTrainer.__name__ = "Tokfeed" + base.__name__
    TokfeedTrainer.__qualname__ = TokfeedTrainer.__name__
    return TokfeedTrainer
