#!/usr/bin/env python3
"""TRL's SFTTrainer fed by tokfeed: the daemon tokenizes, applies the
model's chat template, masks labels and packs; SFTTrainer trains. A tiny
random Qwen2 from a config (nothing is downloaded); the tokenizer is the
test data's sp32k in HF form, which SFTTrainer wants as processing_class.

Deps: a venv with PyPI torch 2.x, transformers 5.x and trl (scripts/venv.sh).

    .venv/bin/python examples/trl_sft.py --steps 30 [--resume]

SFTTrainer requires a train_dataset: trainer_class gives it one row it never
reads (tokfeed.torch.placeholder_dataset()) and turns TRL's dataset
preparation off. Resume works as for the plain Trainer:
each checkpoint holds the loader's position (tokfeed_rank<R>.json).
"""
import argparse
import os
import shutil
import sys
import tarfile
import tempfile

import torch
import transformers
import trl

import tokfeed
import tokfeed.torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from train_tiny import find_tokfeedd, start_daemon  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket")
    ap.add_argument("--tokfeedd")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--resume", action="store_true", help="train half, then resume from that checkpoint")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="trl-sft-")
    proc, sock = ((None, args.socket) if args.socket else
                  start_daemon(find_tokfeedd(args.tokfeedd), tmp, args.steps, padding="packed"))
    with tarfile.open(os.path.join(HERE, "..", "tests", "data", "tokenizers", "sp32k-hf.tar.xz")) as t:
        t.extractall(os.path.join(tmp, "tok"))
    tok = transformers.PreTrainedTokenizerFast(tokenizer_file=os.path.join(tmp, "tok", "tokenizer.json"),
                                               pad_token="<unk>", eos_token="</s>")
    Trainer = tokfeed.torch.trainer_class(trl.SFTTrainer)
    half = max(1, args.steps // 2)
    try:
        def run(max_steps, resume=None):
            torch.manual_seed(0)
            cfg = transformers.Qwen2Config(vocab_size=32000, hidden_size=64, intermediate_size=128,
                                           num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
            sft = trl.SFTConfig(output_dir=os.path.join(tmp, "out"), max_steps=max_steps, learning_rate=3e-3,
                                logging_steps=5, report_to=[], save_strategy="steps", save_steps=half,
                                use_cpu=True, dataloader_num_workers=0)
            with tokfeed.Loader(sock) as loader:
                trainer = Trainer(model=transformers.Qwen2ForCausalLM(cfg), args=sft, tokfeed_loader=loader,
                                  processing_class=tok)
                trainer.train(resume_from_checkpoint=resume)
                print(f"step {trainer.state.global_step}: loader at {loader.state_dict()}")
                del trainer

        if args.resume:
            run(half)
            run(args.steps, resume=os.path.join(tmp, "out", f"checkpoint-{half}"))
        else:
            run(args.steps)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=10)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
