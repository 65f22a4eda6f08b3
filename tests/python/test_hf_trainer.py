"""HF Trainer and TRL SFTTrainer fed by tokfeed: a run stopped after a
checkpoint and resumed from it gives the losses of an uninterrupted run
(1e-6), on the same batches, with no replay and no skipping. Runs with
TOKFEED_HF_PYTHON (PyPI torch 2.x, transformers 5.x, trl); skips elsewhere.
"""
import os
import shutil
import tarfile
import tempfile
import unittest

import torch

try:
    import transformers
except ImportError:  # pragma: no cover - the Debian interpreter
    transformers = None

import tokfeed
import tokfeed.torch
from tokfeed_testlib import SOURCE_DIR, Daemon

TOL = 1e-6


def tiny_model():
    torch.manual_seed(1234)
    cfg = transformers.Qwen2Config(vocab_size=32000, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024)
    return transformers.Qwen2ForCausalLM(cfg).float()


class Stop(transformers.TrainerCallback if transformers else object):
    """Stops training after global step `at`: the steps since the last
    checkpoint are lost, as in a crash."""

    def __init__(self, at):
        self.at = at

    def on_step_end(self, args, state, control, **kw):
        if state.global_step >= self.at:
            control.should_training_stop = True


def recording(base):
    """trainer_class(base) that records, per micro-batch, the loss and the
    batch's first row (to see that no batch is replayed or skipped)."""

    class Recording(tokfeed.torch.trainer_class(base)):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            self.record = []

        def training_step(self, model, inputs, num_items_in_batch=None):
            loss = super().training_step(model, inputs, num_items_in_batch)
            self.record.append((self.state.global_step + 1, loss.item(), tuple(inputs["input_ids"][0, :16].tolist())))
            return loss

    return Recording


@unittest.skipIf(transformers is None, "needs transformers (run with TOKFEED_HF_PYTHON)")
class TrainerResume(unittest.TestCase):
    padding = "longest"
    variants = True  # also a checkpoint without the loader's file, and ignore_data_skip

    @classmethod
    def setUpClass(cls):
        cls.d = Daemon(padding=cls.padding, batch_size=16, max_length=64, epochs=2, workers=2, slots=4)
        cls.tmp = tempfile.mkdtemp(prefix="tokfeed-trainer-")
        with tokfeed.Loader(cls.d.socket) as loader:
            cls.bpe = len(loader)

    @classmethod
    def tearDownClass(cls):
        cls.d.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def args(self, out, max_steps, **kw):
        return transformers.TrainingArguments(
            output_dir=os.path.join(self.tmp, out), max_steps=max_steps, learning_rate=3e-3, logging_steps=1,
            report_to=[], save_strategy="steps", save_steps=self.save_at, use_cpu=True, dataloader_num_workers=0,
            seed=7, disable_tqdm=True, **kw)

    def run_trainer(self, out, max_steps, resume=None, stop=None, **kw):
        callbacks = [Stop(stop)] if stop else []
        with tokfeed.Loader(self.d.socket) as loader:
            trainer = recording(transformers.Trainer)(model=tiny_model(), args=self.args(out, max_steps, **kw),
                                                      tokfeed_loader=loader, callbacks=callbacks)
            trainer.train(resume_from_checkpoint=resume)
            record, position = trainer.record, loader.state_dict()
            del trainer
        return record, position

    def setUp(self):
        # Checkpoint mid epoch 1, end 6 batches later: the whole run crosses
        # the epoch boundary, the resumed one continues mid-epoch.
        self.save_at = self.bpe + 4
        self.total = self.bpe + 10
        self.end = {"epoch": 1, "step": 10, "world_size": 1, "base": 0}

    def assert_same(self, got, want):
        self.assertEqual([r[0] for r in got], [r[0] for r in want], "steps")
        self.assertEqual([r[2] for r in got], [r[2] for r in want], "batches: replayed or skipped")
        worst = max(abs(a[1] - b[1]) for a, b in zip(got, want))
        self.assertLess(worst, TOL, f"losses differ by {worst}")
        return worst

    def test_resume_equals_uninterrupted(self):
        full, end = self.run_trainer("full", self.total)
        self.assertEqual(len(full), self.total)
        self.assertEqual(end, self.end)
        part, _ = self.run_trainer("part", self.total, stop=self.save_at + 2)
        self.assert_same(part, full[:self.save_at + 2])
        ckpt = os.path.join(self.tmp, "part", f"checkpoint-{self.save_at}")
        self.assertTrue(os.path.exists(os.path.join(ckpt, "tokfeed_rank0.json")))
        resumed, end = self.run_trainer("part", self.total, resume=ckpt)
        worst = self.assert_same(resumed, full[self.save_at:])
        self.assertEqual(end, self.end)
        print(f"{type(self).__name__}: {len(resumed)} steps after checkpoint-{self.save_at}, "
              f"max |loss diff| {worst:.2e}")
        if not self.variants:
            return

        # A checkpoint without the loader's file: the Trainer's (epoch, step).
        os.remove(os.path.join(ckpt, "tokfeed_rank0.json"))
        resumed, _ = self.run_trainer("part", self.total, resume=ckpt)
        self.assert_same(resumed, full[self.save_at:])

        # ignore_data_skip: the resumed epoch restarts at its first batch.
        resumed, _ = self.run_trainer("part", self.total, resume=ckpt, ignore_data_skip=True)
        self.assertEqual(resumed[0][2], full[self.bpe][2])


@unittest.skipIf(transformers is None, "needs transformers (run with TOKFEED_HF_PYTHON)")
class SFTTrainerResume(TrainerResume):
    """The same through TRL's SFTTrainer, on packed batches."""

    padding = "packed"
    variants = False

    def setUp(self):
        # Within epoch 0 (packed epochs differ in length; the Trainer sizes
        # every epoch by the first).
        self.save_at, self.total = 6, 10
        self.end = {"epoch": 0, "step": 10, "world_size": 1, "base": 0}

    def run_trainer(self, out, max_steps, resume=None, stop=None, **kw):
        import trl
        sft_args = trl.SFTConfig(
            output_dir=os.path.join(self.tmp, out), max_steps=max_steps, learning_rate=3e-3, logging_steps=1,
            report_to=[], save_strategy="steps", save_steps=self.save_at, use_cpu=True, dataloader_num_workers=0,
            seed=7, disable_tqdm=True, dataset_kwargs={"skip_prepare_dataset": True}, **kw)
        callbacks = [Stop(stop)] if stop else []
        with tokfeed.Loader(self.d.socket) as loader:
            trainer = recording(trl.SFTTrainer)(
                model=tiny_model(), args=sft_args, tokfeed_loader=loader, callbacks=callbacks,
                train_dataset=tokfeed.torch.placeholder_dataset(), processing_class=self.tokenizer())
            trainer.train(resume_from_checkpoint=resume)
            record, position = trainer.record, loader.state_dict()
            del trainer
        return record, position

    def tokenizer(self):
        d = os.path.join(self.tmp, "tok")
        if not os.path.exists(d):
            with tarfile.open(os.path.join(SOURCE_DIR, "tests", "data", "tokenizers", "sp32k-hf.tar.xz")) as t:
                t.extractall(d)
        return transformers.PreTrainedTokenizerFast(tokenizer_file=os.path.join(d, "tokenizer.json"),
                                                    pad_token="<unk>", eos_token="</s>")


if __name__ == "__main__":
    unittest.main()
