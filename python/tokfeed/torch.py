"""Adapters from tokfeed.Loader to torch training loops.

Plain loop:
    loader = tokfeed.Loader(sock)
    for epoch in range(loader.epochs):
        for batch in tokfeed.torch.EpochLoader(loader):
            ...
    # or simply `for batch in loader:` for the whole stream.

HF Trainer (one Trainer epoch = one tokfeed epoch):
    TrainerCls = tokfeed.torch.trainer_class(transformers.Trainer)
    trainer = TrainerCls(model=model, args=args, tokfeed_loader=loader)
"""
from .loader import Loader


class EpochLoader:
    """One tokfeed epoch per ``for``: what HF Trainer and epoch loops expect.

    ``len()`` is the batches per epoch; ``set_epoch(e)`` positions at (e, 0)
    (a no-op when already there), which the Trainer calls at each epoch start.
    """

    def __init__(self, loader: Loader):
        self.loader = loader

    def __len__(self):
        return len(self.loader)

    def __iter__(self):
        return self.loader.epoch_batches()

    def set_epoch(self, epoch):
        self.loader.set_epoch(epoch)

    def state_dict(self):
        return self.loader.state_dict()

    def load_state_dict(self, state):
        self.loader.load_state_dict(state)


def trainer_class(base):
    """A subclass of ``base`` (transformers.Trainer or a subclass) whose
    get_train_dataloader returns the tokfeed loader given as
    ``tokfeed_loader=``; no train_dataset is needed."""

    class TokfeedTrainer(base):
        def __init__(self, *args, tokfeed_loader=None, **kwargs):
            if tokfeed_loader is None:
                raise TypeError("tokfeed_loader= is required")
            super().__init__(*args, **kwargs)
            self.tokfeed_loader = tokfeed_loader

        def get_train_dataloader(self):
            return EpochLoader(self.tokfeed_loader)

    TokfeedTrainer.__name__ = "Tokfeed" + base.__name__
    return TokfeedTrainer
