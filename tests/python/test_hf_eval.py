"""HF Trainer and TRL SFTTrainer evaluating on tokfeed's evaluation stream
(trainer_class(..., tokfeed_eval_loader=)): evaluate() and
eval_strategy="steps" work, eval_loss equals a plain loop over the same
batches, and evaluations leave the training batches and losses unchanged.
Runs with TOKFEED_HF_PYTHON (PyPI torch 2.x, transformers 5.x, trl); skips
elsewhere."""
import os
import shutil
import tempfile
import unittest

import torch

try:
    import transformers
except ImportError:  # pragma: no cover - the Debian interpreter
    transformers = None

import tokfeed
import tokfeed.torch

if transformers is not None:
    from test_hf_trainer import recording, tiny_model
from tokfeed_testlib import Daemon

TOL = 1e-5
EVAL = "[eval]\nsplit_ratio = 0.05\nbatch_size = 4\n"


def plain_eval_loss(model, socket):
    """One pass of the evaluation stream, the mean of the batch losses."""
    losses = []
    model.eval()
    with torch.no_grad(), tokfeed.Loader(socket, split="eval") as loader:
        for batch in loader:
            losses.append(model(**batch).loss.item())
    return sum(losses) / len(losses), len(losses)


@unittest.skipIf(transformers is None, "needs transformers (run with TOKFEED_HF_PYTHON)")
class TrainerEval(unittest.TestCase):
    padding = "longest"

    @classmethod
    def setUpClass(cls):
        cls.d = Daemon(padding=cls.padding, batch_size=8, max_length=64, epochs=1, workers=2, slots=4, extra=EVAL)
        cls.tmp = tempfile.mkdtemp(prefix="tokfeed-eval-")

    @classmethod
    def tearDownClass(cls):
        cls.d.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def make(self, base, out, max_steps, loader, eval_loader, **kw):
        args = transformers.TrainingArguments(
            output_dir=os.path.join(self.tmp, out), max_steps=max_steps, learning_rate=3e-3, logging_steps=1,
            report_to=[], save_strategy="no", use_cpu=True, dataloader_num_workers=0, seed=7, disable_tqdm=True, **kw)
        return recording(base)(model=tiny_model(), args=args, tokfeed_loader=loader, tokfeed_eval_loader=eval_loader)

    def run_trainer(self, out, max_steps, with_eval, **kw):
        with tokfeed.Loader(self.d.socket) as loader, tokfeed.Loader(self.d.socket, split="eval") as ev:
            extra = dict(eval_strategy="steps", eval_steps=3) if with_eval else {}
            trainer = self.make(transformers.Trainer, out, max_steps, loader, ev if with_eval else None, **extra, **kw)
            trainer.train()
            final = trainer.evaluate() if with_eval else None
            record, history, model = trainer.record, trainer.state.log_history, trainer.model
            del trainer
        return record, history, final, model

    def test_evaluate_and_eval_steps(self):
        plain, _, _, _ = self.run_trainer("plain", 6, False)
        record, history, final, model = self.run_trainer("eval", 6, True)
        # Evaluations every 3 steps: the training batches and losses are those
        # of a run without them.
        self.assertEqual([r[2] for r in record], [r[2] for r in plain], "training batches moved")
        worst = max(abs(a[1] - b[1]) for a, b in zip(record, plain))
        self.assertLess(worst, 1e-6)
        evals = [h for h in history if "eval_loss" in h]
        # At steps 3 and 6 during training, then the final evaluate(): the
        # last two see the same model and the same pass, so the same loss.
        self.assertEqual([h["step"] for h in evals], [3, 6, 6])
        self.assertEqual(evals[1]["eval_loss"], evals[2]["eval_loss"])
        self.assertNotEqual(evals[0]["eval_loss"], evals[1]["eval_loss"])
        want, n = plain_eval_loss(model, self.d.socket)
        self.assertGreater(n, 1)
        self.assertAlmostEqual(final["eval_loss"], want, delta=TOL)
        print(f"{type(self).__name__}: eval_loss {final['eval_loss']:.6f}, plain loop {want:.6f} over {n} batches "
              f"(|diff| {abs(final['eval_loss'] - want):.1e}); "
              f"{len(evals) - 1} evaluations during training, training losses unchanged (max diff {worst:.1e})")


@unittest.skipIf(transformers is None, "needs transformers (run with TOKFEED_HF_PYTHON)")
class SFTTrainerEval(TrainerEval):
    """The same through TRL's SFTTrainer, on packed batches."""

    padding = "packed"

    def make(self, base, out, max_steps, loader, eval_loader, **kw):
        import trl
        from test_hf_trainer import SFTTrainerResume

        args = trl.SFTConfig(
            output_dir=os.path.join(self.tmp, out), max_steps=max_steps, learning_rate=3e-3, logging_steps=1,
            report_to=[], save_strategy="no", use_cpu=True, dataloader_num_workers=0, seed=7, disable_tqdm=True,
            dataset_kwargs={"skip_prepare_dataset": True}, **kw)
        tok = SFTTrainerResume.tokenizer(self)
        return recording(trl.SFTTrainer)(model=tiny_model(), args=args, tokfeed_loader=loader,
                                         tokfeed_eval_loader=eval_loader,
                                         train_dataset=tokfeed.torch.placeholder_dataset(), processing_class=tok)

    def run_trainer(self, out, max_steps, with_eval, **kw):
        return super().run_trainer(out, max_steps, with_eval, **kw)


if __name__ == "__main__":
    unittest.main()
