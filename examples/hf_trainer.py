#!/usr/bin/env python3
"""train_tiny.py's job through transformers' Trainer: a tiny randomly
initialised Qwen2 (from a config; nothing is downloaded) fed by tokfeed,
on packed batches, checkpointing every --save-steps and, with --resume,
stopping after the first checkpoint and resuming from it.

Deps: a venv with PyPI torch 2.x and transformers 5.x (scripts/venv.sh).

    .venv/bin/python examples/hf_trainer.py --steps 40 --save-steps 10 --resume
"""
import argparse
import os
import shutil
import sys
import tempfile

import torch
import transformers

import tokfeed
import tokfeed.torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_tiny import find_tokfeedd, start_daemon  # noqa: E402


def tiny_qwen2():
    torch.manual_seed(0)
    cfg = transformers.Qwen2Config(vocab_size=32000, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048)
    return transformers.Qwen2ForCausalLM(cfg)  # random init


class StopAt(transformers.TrainerCallback):
    def __init__(self, step):
        self.step = step

    def on_step_end(self, args, state, control, **kw):
        if state.global_step >= self.step:
            control.should_training_stop = True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket")
    ap.add_argument("--tokfeedd")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--save-steps", type=int, default=10)
    ap.add_argument("--resume", action="store_true", help="stop after the first checkpoint, then resume from it")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="hf-trainer-")
    proc, sock = ((None, args.socket) if args.socket else
                  start_daemon(find_tokfeedd(args.tokfeedd), tmp, args.steps, padding="packed"))
    out = os.path.join(tmp, "out")
    Trainer = tokfeed.torch.trainer_class(transformers.Trainer)
    try:
        def run(resume=None, stop=None):
            targs = transformers.TrainingArguments(
                output_dir=out, max_steps=args.steps, learning_rate=3e-3, logging_steps=5, report_to=[],
                save_strategy="steps", save_steps=args.save_steps, use_cpu=True, dataloader_num_workers=0)
            with tokfeed.Loader(sock) as loader:  # packed batches: model(**batch) keeps samples apart
                trainer = Trainer(model=tiny_qwen2(), args=targs, tokfeed_loader=loader,
                                  callbacks=[StopAt(stop)] if stop else [])
                trainer.train(resume_from_checkpoint=resume)
                print(f"loader stands at {loader.state_dict()} after step {trainer.state.global_step}")
                del trainer

        if args.resume:
            run(stop=args.save_steps)
            ckpt = os.path.join(out, f"checkpoint-{args.save_steps}")
            print(f"resuming from {ckpt}: the loader continues at {open(os.path.join(ckpt, 'tokfeed_rank0.json')).read()}")
            run(resume=ckpt)
        else:
            run()
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=10)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
