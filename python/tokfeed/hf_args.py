"""What the tokfeed loader replaces in HF TrainingArguments and TRL SFTConfig.

The daemon builds the batches, so the Trainer's data options do nothing: each
one set away from its default gets a warning that names the tokfeed config
key ruling instead, and the trainer gets a copy of the arguments with the
options that would make TRL prepare or check a dataset turned off (the
placeholder dataset is never read, so no error may blame it). The epochs are
checked at train(): training must cover the epochs the job serves, no more.
"""
import copy
import dataclasses
import math
import warnings

# (argument, the tokfeed key that rules instead, what it means there)
REPLACED = (
    ("max_length", "[batch] max_length", "tokens per sample after truncation"),
    ("truncation_mode", "[batch] truncation", '"right" keeps the start, "left" the end, "drop" leaves long samples out'),
    ("packing", "[batch] padding", '"padding_free" is TRL\'s packed layout (one row, position_ids restarting); '
                                   '"packed" fills [size, max_length] rows'),
    ("packing_strategy", "[batch] padding and pack_window", "best-fit decreasing over pack_window samples"),
    ("padding_free", "[batch] padding", '"padding_free"'),
    ("pad_to_multiple_of", "[batch] padding", '"longest" or "max_length"'),
    ("assistant_only_loss", "[tokenizer] chat_template and [batch] loss",
     '"all_assistant" trains the template\'s {% generation %} blocks, else each assistant turn; '
     '"all" every token, as assistant_only_loss=False'),
    ("completion_only_loss", "[batch] loss",
     'a prompt/completion record trains its completion unless loss = "all", as TRL does by default'),
    ("dataset_text_field", "[[datasets]] format and columns",
     'format = "text" reads `text`; columns = { field = "text" } reads another field'),
    ("dataset_num_proc", "[workers] count", "the daemon's tokenizing workers"),
    ("chat_template_path", "[tokenizer] chat_template", "the template the daemon renders"),
    ("eos_token", "[tokenizer] chat_template", "the template's own tokens"),
    ("pad_token", "[tokenizer] path", "the tokenizer's pad id (0 where it has none)"),
    ("shuffle_dataset", "[schedule] shuffle", "the daemon shuffles each epoch by [schedule] seed"),
    ("per_device_train_batch_size", "[batch] size", "rows per batch ([batch] tokens with padding_free)"),
    ("dataloader_num_workers", "[workers] count", "the daemon's workers"),
    ("dataloader_prefetch_factor", "[workers] slots", "batches each worker builds ahead"),
    ("dataloader_drop_last", "[schedule] drop_last", "whether an epoch's last short batch is left out"),
    ("data_seed", "[schedule] seed", "the epoch order"),
    ("train_sampling_strategy", "[schedule] shuffle", "the daemon's epoch order"),
)

# Options that make TRL prepare or validate the (placeholder) dataset, with
# the value that turns that off.
_NEUTRAL = {"packing": False, "padding_free": False, "assistant_only_loss": False, "completion_only_loss": None}


def _default(args, name):
    for f in dataclasses.fields(args):
        if f.name == name:
            if f.default is not dataclasses.MISSING:
                return f.default
            if f.default_factory is not dataclasses.MISSING:
                return f.default_factory()
    return None


def replaced_options(args):
    """[(name, value, tokfeed key, meaning)] for each data option of `args`
    set away from its default."""
    out = []
    if args is None or not dataclasses.is_dataclass(args):
        return out
    for name, key, meaning in REPLACED:
        if not hasattr(args, name):
            continue
        value = getattr(args, name)
        if value != _default(args, name):
            out.append((name, value, key, meaning))
    return out


def adapt_args(args, sft):
    """Warns about each replaced option and returns the arguments the trainer
    gets: a copy with dataset preparation off (`sft`: a TRL trainer)."""
    if args is None:
        return args
    for name, value, key, meaning in replaced_options(args):
        warnings.warn(f"{type(args).__name__}.{name} = {value!r} is not used: the tokfeed loader builds the batches, "
                      f"and its job config's {key} rules instead ({meaning})", UserWarning, stacklevel=4)
    if not sft:
        return args
    args = copy.copy(args)
    for name, value in _NEUTRAL.items():
        if hasattr(args, name):
            setattr(args, name, value)
    if hasattr(args, "dataset_kwargs"):
        args.dataset_kwargs = dict(args.dataset_kwargs or {}, skip_prepare_dataset=True)
    return args


def check_epochs(args, loader):
    """Raises ValueError when the Trainer would train other epochs than the
    job serves ([schedule] epochs): naming both numbers and what to set."""
    served = int(loader.epochs)
    batches = len(loader)
    if args.max_steps is not None and args.max_steps > 0:
        ga = max(int(args.gradient_accumulation_steps), 1)
        per_epoch = max(batches // ga + int(batches % ga > 0), 1)
        needed = math.ceil(args.max_steps / per_epoch)
        if needed > served:
            raise ValueError(
                f"{type(args).__name__}.max_steps = {args.max_steps} needs {needed} epochs of {per_epoch} optimizer "
                f"steps, but the tokfeed job serves [schedule] epochs = {served}: training would stop after "
                f"{served * per_epoch} steps with the learning-rate schedule planned for {args.max_steps}. Set "
                f"max_steps <= {served * per_epoch}, or [schedule] epochs = {needed} in the job config.")
        return
    want = args.num_train_epochs
    if want != served:
        raise ValueError(
            f"{type(args).__name__}.num_train_epochs = {want:g}, but the tokfeed job serves [schedule] epochs = "
            f"{served}: the Trainer plans its learning-rate schedule for {want:g} epochs and the stream has "
            f"{served}. Set num_train_epochs = {served} (or max_steps), or [schedule] epochs = {math.ceil(want)} "
            f"in the job config.")
