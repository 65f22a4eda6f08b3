#!/usr/bin/env python3
"""GPU check of packed batches in transformers' attention kernels (run by
scripts/gpu-check.sh after gpu_check.py's copy checks).

A tiny random Qwen2 (config built here; nothing downloaded) on cuda:0 reads
packed and padding_free batches from tokfeed.Loader(device="cuda:0") as
``model(**batch)``: with flash_attention_2 the batch's cu_seq_lens_q/k and
max_length_q/k go to flash-attn's varlen kernel; with sdpa the mask comes
from position_ids. Each sample's logits in its row must equal its logits
run alone (bf16 for flash-attn: |diff| < --tol-bf16; sdpa in float32:
< 1e-3). Prints one line per (layout, kernel) and exits 1 on a failure.

Kernels that cannot run here are skipped with the reason (no CUDA, no
flash_attn package), so the script also runs, and says so, on a machine
without them.
"""
import argparse
import importlib.util
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python"))


def samples_of(batch):
    """(row, begin, end) of each sample: cu_seq_lens_q segments whose
    position_ids count 0..n-1 (a padding run is a segment of position 0s)."""
    L = batch["input_ids"].shape[1]
    cu = batch["cu_seq_lens_q"].tolist()
    pos = batch["position_ids"].reshape(-1).cpu()
    return [(a // L, a % L, a % L + (b - a)) for a, b in zip(cu, cu[1:])
            if torch.equal(pos[a:b], torch.arange(b - a, dtype=pos.dtype))]


def check(attn, dtype, tol, padding, batches):
    import transformers

    import tokfeed
    import tokfeed_testlib as lib

    torch.manual_seed(0)
    cfg = transformers.Qwen2Config(vocab_size=32000, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                                   attn_implementation=attn)
    model = transformers.Qwen2ForCausalLM(cfg).to("cuda:0", dtype).eval()
    worst, several = 0.0, 0
    with lib.Daemon(padding=padding, batch_size=2, max_length=512, epochs=1, workers=2, slots=8) as d:
        with tokfeed.Loader(d.socket, device="cuda:0") as loader, torch.no_grad():
            for _ in range(batches):
                b = next(loader)
                assert isinstance(b["max_length_q"], int) and b["use_cache"] is False and "attention_mask" not in b
                logits = model(**b).logits.float()
                samples = samples_of(b)
                several += sum(sum(1 for s in samples if s[0] == r) >= 2 for r in range(b["input_ids"].shape[0]))
                for row, a, e in samples:
                    ids = b["input_ids"][row, a:e].unsqueeze(0)
                    alone = model(input_ids=ids, position_ids=torch.arange(e - a, device="cuda:0").unsqueeze(0),
                                  use_cache=False).logits.float()
                    worst = max(worst, (logits[row, a:e] - alone[0]).abs().max().item())
                del b
    ok = worst < tol and several > 0
    print(f"{padding:>12} {attn:>17} {str(dtype):>14}  rows with several samples {several:>3}  "
          f"max |logit diff| {worst:.2e} (< {tol})  {'ok' if ok else 'FAIL'}")
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, default=4)
    ap.add_argument("--tol-bf16", type=float, default=5e-2)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("flash_varlen_check: skipped: torch sees no CUDA device")
        return 0
    if importlib.util.find_spec("transformers") is None:
        print("flash_varlen_check: skipped: transformers is not installed (scripts/venv.sh)")
        return 0
    kernels = [("sdpa", torch.float32, 1e-3)]
    if importlib.util.find_spec("flash_attn") is not None:
        kernels.append(("flash_attention_2", torch.bfloat16, args.tol_bf16))
    else:
        print("flash_varlen_check: flash_attention_2 skipped: the flash_attn package is not installed")
    ok = True
    for padding in ("packed", "padding_free"):
        for attn, dtype, tol in kernels:
            ok &= check(attn, dtype, tol, padding, args.batches)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
