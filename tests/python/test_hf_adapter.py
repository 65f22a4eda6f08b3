"""What tokfeed.torch.trainer_class replaces, and batches HF Trainer and TRL
always take, checked with transformers and TRL themselves:
- an epoch mismatch (num_train_epochs, max_steps vs [schedule] epochs) is an
  error at train() that names both numbers;
- each SFTConfig data option the loader replaces warns with the job config key
  that rules instead, and no error blames the placeholder dataset;
- truncation = "drop" and right truncation at a small max_length train a whole
  epoch at batch size 1 in transformers.Trainer: no empty batch, no NaN loss;
- padding_free batches equal TRL's padding-free collator on the same samples,
  seq_idx included.
Runs with TOKFEED_HF_PYTHON (PyPI torch 2.x, transformers 5.x, trl); skips
elsewhere.
"""
import math
import os
import shutil
import tarfile
import tempfile
import unittest
import warnings

import torch

try:
    import transformers
    import trl
except ImportError:  # pragma: no cover - the Debian interpreter
    transformers = None

import tokfeed
import tokfeed.torch
from tokfeed_testlib import SOURCE_DIR, Daemon


def tiny_model():
    torch.manual_seed(1234)
    cfg = transformers.Qwen2Config(vocab_size=32000, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024)
    return transformers.Qwen2ForCausalLM(cfg).float()


def tokenizer(tmp):
    d = os.path.join(tmp, "tok")
    if not os.path.exists(d):
        with tarfile.open(os.path.join(SOURCE_DIR, "tests", "data", "tokenizers", "sp32k-hf.tar.xz")) as t:
            t.extractall(d)
    return transformers.PreTrainedTokenizerFast(tokenizer_file=os.path.join(d, "tokenizer.json"),
                                                pad_token="<unk>", eos_token="</s>")


class Losses(transformers.TrainerCallback if transformers else object):
    def __init__(self):
        self.losses = []

    def on_log(self, args, state, control, logs=None, **kw):
        if logs and "loss" in logs:
            self.losses.append(logs["loss"])


@unittest.skipIf(transformers is None, "needs transformers and trl (run with TOKFEED_HF_PYTHON)")
class Adapter(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.d = Daemon(batch_size=16, max_length=64, epochs=1, workers=1)
        cls.tmp = tempfile.mkdtemp(prefix="tokfeed-adapter-")

    @classmethod
    def tearDownClass(cls):
        cls.d.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def args(self, **kw):
        return transformers.TrainingArguments(output_dir=os.path.join(self.tmp, "out"), report_to=[], use_cpu=True,
                                              save_strategy="no", disable_tqdm=True, learning_rate=1e-3, **kw)

    def test_more_epochs_than_served_is_an_error_naming_both(self):
        with tokfeed.Loader(self.d.socket) as loader:
            trainer = tokfeed.torch.trainer_class(transformers.Trainer)(
                model=tiny_model(), args=self.args(num_train_epochs=3), tokfeed_loader=loader)
            with self.assertRaisesRegex(ValueError, r"num_train_epochs = 3, .*\[schedule\] epochs = 1"):
                trainer.train()
            self.assertEqual(trainer.state.global_step, 0)
            # max_steps past the served epochs: named too.
            over = len(loader) + 1
            trainer = tokfeed.torch.trainer_class(transformers.Trainer)(
                model=tiny_model(), args=self.args(max_steps=over), tokfeed_loader=loader)
            with self.assertRaisesRegex(ValueError, rf"max_steps = {over} needs 2 epochs.*\[schedule\] epochs = 1"):
                trainer.train()
            del trainer

    def test_equal_epochs_train_every_batch(self):
        with tokfeed.Loader(self.d.socket) as loader:
            n = len(loader)
            trainer = tokfeed.torch.trainer_class(transformers.Trainer)(
                model=tiny_model(), args=self.args(num_train_epochs=1, logging_steps=1), tokfeed_loader=loader)
            trainer.train()
            self.assertEqual(trainer.state.global_step, n)
            self.assertEqual(loader.state_dict()["epoch"], 1)
            del trainer

    def test_sft_options_warn_with_the_key_that_rules(self):
        options = {"max_length": 77, "packing": True, "padding_free": True, "assistant_only_loss": True,
                   "completion_only_loss": True, "per_device_train_batch_size": 3, "dataloader_num_workers": 2,
                   "truncation_mode": "keep_end", "dataset_text_field": "body"}
        keys = {"max_length": "[batch] max_length", "packing": "[batch] padding",
                "padding_free": "[batch] padding", "assistant_only_loss": "[batch] loss",
                "completion_only_loss": "[batch] loss", "per_device_train_batch_size": "[batch] size",
                "dataloader_num_workers": "[workers] count", "truncation_mode": "[batch] truncation",
                "dataset_text_field": "[[datasets]] format"}
        sft = trl.SFTConfig(output_dir=os.path.join(self.tmp, "sft"), report_to=[], use_cpu=True, max_steps=2,
                            save_strategy="no", disable_tqdm=True, **options)
        with tokfeed.Loader(self.d.socket) as loader, warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            # No train_dataset, no dataset_kwargs: the adapter supplies what TRL
            # insists on, so no error blames a placeholder.
            trainer = tokfeed.torch.trainer_class(trl.SFTTrainer)(
                model=tiny_model(), args=sft, tokfeed_loader=loader, processing_class=tokenizer(self.tmp))
            trainer.train()
            self.assertEqual(trainer.state.global_step, 2)
            del trainer
        said = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
        for name, key in keys.items():
            hit = [m for m in said if m.startswith(f"SFTConfig.{name} = ")]
            self.assertEqual(len(hit), 1, f"{name}: {said}")
            self.assertIn(key, hit[0])
        # The user's arguments are left as they were.
        self.assertTrue(sft.packing and sft.assistant_only_loss)


@unittest.skipIf(transformers is None, "needs transformers and trl (run with TOKFEED_HF_PYTHON)")
class TrainableBatches(unittest.TestCase):
    """Before: truncation = "drop" gave empty batches at size 1 (Trainer crashed
    at step 0), and untrained samples gave NaN losses in transformers.Trainer."""

    def train_epoch(self, truncation):
        tmp = tempfile.mkdtemp(prefix="tokfeed-trainable-")
        try:
            with Daemon(batch_size=1, max_length=48, epochs=1, workers=2, truncation=truncation,
                        dataset=os.path.join(SOURCE_DIR, "tests", "data", "sft", "messages-100.jsonl")) as d:
                with tokfeed.Loader(d.socket) as loader:
                    n = len(loader)
                    losses = Losses()
                    args = transformers.TrainingArguments(
                        output_dir=os.path.join(tmp, "out"), report_to=[], use_cpu=True, save_strategy="no",
                        disable_tqdm=True, num_train_epochs=1, logging_steps=1, learning_rate=1e-3)
                    trainer = tokfeed.torch.trainer_class(transformers.Trainer)(
                        model=tiny_model(), args=args, tokfeed_loader=loader, callbacks=[losses])
                    trainer.train()
                    self.assertEqual(trainer.state.global_step, n)
                    del trainer
            self.assertEqual(len(losses.losses), n)
            self.assertTrue(all(math.isfinite(x) and x > 0 for x in losses.losses), losses.losses)
            return n
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def test_drop_trains_every_step(self):
        self.assertGreater(self.train_epoch("drop"), 5)

    def test_right_truncation_has_no_untrained_step(self):
        self.assertGreater(self.train_epoch("right"), 5)


@unittest.skipIf(transformers is None, "needs transformers and trl (run with TOKFEED_HF_PYTHON)")
class PaddingFreeLikeTRL(unittest.TestCase):
    def test_batches_equal_trl_collator_with_seq_idx(self):
        from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

        collate = DataCollatorForLanguageModeling(pad_token_id=0, padding_free=True)
        with Daemon(batch_size=4, max_length=256, epochs=1, workers=1, padding="padding_free", tokens=1024) as d:
            with tokfeed.Loader(d.socket) as loader:
                checked = several = 0
                for batch in loader.epoch_batches():
                    cu = batch["cu_seq_lens_q"].tolist()
                    ids, labels = batch["input_ids"][0].tolist(), batch["labels"][0].tolist()
                    examples = [{"input_ids": ids[a:b], "labels": labels[a:b]} for a, b in zip(cu, cu[1:])]
                    want = collate(examples)
                    for name, value in want.items():
                        got = batch[name]
                        if isinstance(value, torch.Tensor):
                            self.assertEqual((got.dtype, tuple(got.shape)), (value.dtype, tuple(value.shape)), name)
                            self.assertTrue(torch.equal(got, value), name)
                        else:
                            self.assertEqual(got, value, name)
                    several += len(cu) > 2
                    if checked == 0:  # a model takes it, seq_idx included
                        with torch.no_grad():
                            self.assertTrue(math.isfinite(tiny_model()(**batch).loss.item()))
                    checked += 1
                self.assertGreater(several, 3)


if __name__ == "__main__":
    unittest.main()
