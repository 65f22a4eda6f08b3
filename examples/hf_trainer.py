#!/usr/bin/env python3
"""train_tiny.py's job through transformers' Trainer: a tiny randomly
initialised Llama-style causal LM (from a config; nothing is downloaded) fed
by tokfeed. Deps: scripts/install-hf-example.sh.

    PYTHONPATH=/tmp/b/python python3 examples/hf_trainer.py --steps 50 [--socket S]
"""
import argparse
import os
import shutil
import sys
import tempfile

import transformers

import tokfeed
import tokfeed.torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_tiny import find_tokfeedd, start_daemon  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket")
    ap.add_argument("--tokfeedd")
    ap.add_argument("--steps", type=int, default=50)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="hf-trainer-")
    proc, sock = (None, args.socket) if args.socket else start_daemon(find_tokfeedd(args.tokfeedd), tmp, args.steps)
    try:
        cfg = transformers.LlamaConfig(vocab_size=32000, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=2048)
        model = transformers.LlamaForCausalLM(cfg)  # random init
        targs = transformers.TrainingArguments(output_dir=os.path.join(tmp, "out"), max_steps=args.steps,
                                               learning_rate=3e-3, logging_steps=5, report_to=[], save_strategy="no",
                                               use_cpu=True, dataloader_num_workers=0)
        loader = tokfeed.Loader(sock)
        Trainer = tokfeed.torch.trainer_class(transformers.Trainer)
        Trainer(model=model, args=targs, tokfeed_loader=loader).train()
        loader.close()
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=10)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
