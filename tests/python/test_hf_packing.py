"""Packed and padding_free batches in a real transformers model: no sample
attends to another. Runs with TOKFEED_HF_PYTHON (PyPI torch 2.x and
transformers 5.x); skips where transformers is missing.

A tiny random Qwen2 (config built here, float32, nothing downloaded) reads
each batch as ``model(**batch)``; every sample's logits in its packed row
must equal its logits run alone (|diff| < 1e-3), in rows holding several
samples, with sdpa and eager attention. The daemon's raw layout (with
attention_mask, without use_cache=False), what the Loader yielded before,
is measured too: it must show the contamination, so the check can fail.
"""
import os
import sys
import unittest

import torch

try:
    import transformers
except ImportError:  # pragma: no cover - the Debian interpreter
    transformers = None

import tokfeed
from tokfeed.loader import _hf_packed
from tokfeed_testlib import Daemon

TOL = 1e-3
BATCHES = 4  # per layout and attention implementation


def tiny_qwen2(attn):
    torch.manual_seed(0)
    cfg = transformers.Qwen2Config(vocab_size=32000, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                                   attn_implementation=attn)
    model = transformers.Qwen2ForCausalLM(cfg).float().eval()
    assert model.config.use_cache, "the default config creates a cache: the case packing detection must survive"
    return model


def samples_of(batch):
    """(row, begin, end) in row coordinates of each sample: the cu_seq_lens_q
    segments whose position_ids count 0..n-1 (a row's padding run is a
    segment of its own, with position_ids 0)."""
    L = batch["input_ids"].shape[1]
    cu = batch["cu_seq_lens_q"].tolist()
    pos = batch["position_ids"].reshape(-1)
    out = []
    for a, b in zip(cu, cu[1:]):
        row = a // L
        assert (b - 1) // L == row, f"segment [{a}, {b}) crosses a row boundary"
        if torch.equal(pos[a:b], torch.arange(b - a, dtype=pos.dtype)):
            out.append((row, a - row * L, b - row * L))
    return out


def max_sample_diff(model, batch, samples):
    """Largest |logit| difference between each sample in `batch` and alone."""
    with torch.no_grad():
        packed = model(**batch).logits
        worst = 0.0
        for row, a, b in samples:
            ids = batch["input_ids"][row, a:b].unsqueeze(0)
            alone = model(input_ids=ids, position_ids=torch.arange(b - a).unsqueeze(0), use_cache=False).logits
            worst = max(worst, (packed[row, a:b] - alone[0]).abs().max().item())
    return worst


@unittest.skipIf(transformers is None, "needs transformers (run with TOKFEED_HF_PYTHON)")
class PackedIsolation(unittest.TestCase):
    def check(self, padding):
        report = {}
        with Daemon(padding=padding, batch_size=2, max_length=512, epochs=1, workers=1, slots=8) as d:
            for attn in ("sdpa", "eager"):
                model = tiny_qwen2(attn)
                several = 0
                worst_hf = worst_raw = 0.0
                with tokfeed.Loader(d.socket, format="raw") as loader:
                    checked = 0
                    for raw in loader:
                        hf = _hf_packed(dict(raw))
                        self.check_layout(hf, raw)
                        samples = samples_of(hf)
                        per_row = [sum(1 for s in samples if s[0] == r) for r in range(hf["input_ids"].shape[0])]
                        if max(per_row, default=0) < 2:
                            continue  # best-fit decreasing: the long samples come first, one a row
                        several += sum(n >= 2 for n in per_row)
                        worst_hf = max(worst_hf, max_sample_diff(model, hf, samples))
                        old = {k: raw[k] for k in ("input_ids", "attention_mask", "labels", "position_ids") if k in raw}
                        worst_raw = max(worst_raw, max_sample_diff(model, old, samples))
                        del raw, hf, old
                        checked += 1
                        if checked == BATCHES:
                            break
                self.assertGreater(several, 0, "no row held several samples")
                report[attn] = (worst_raw, worst_hf)
                self.assertLess(worst_hf, TOL, f"{padding}/{attn}: a sample attends to another")
                self.assertGreater(worst_raw, 10 * TOL, f"{padding}/{attn}: the contaminated layout was not caught")
            # The Loader's own default output is the layout checked above.
            with tokfeed.Loader(d.socket) as loader:
                b = next(loader)
                # padding_free adds TRL's seq_idx (test_hf_adapter checks it against TRL's collator).
                extra = {"seq_idx"} if padding == "padding_free" else set()
                self.assertEqual(set(b), {"input_ids", "labels", "position_ids", "cu_seq_lens_q", "cu_seq_lens_k",
                                          "max_length_q", "max_length_k", "use_cache"} | extra)
                self.assertIs(b["use_cache"], False)
                self.assertIsInstance(b["max_length_q"], int)
        for attn, (before, after) in report.items():
            print(f"{padding} {attn}: max |logit diff| raw layout {before:.4f}, hf layout {after:.2e}", file=sys.stderr)

    def check_layout(self, hf, raw):
        ids = hf["input_ids"]
        rows, L = ids.shape
        cu = hf["cu_seq_lens_q"]
        self.assertEqual(cu.dtype, torch.int32)
        self.assertEqual(int(cu[0]), 0)
        self.assertEqual(int(cu[-1]), rows * L, "cu_seq_lens_q covers every token of input_ids.view(-1)")
        self.assertTrue(bool((cu.diff() > 0).all()))
        self.assertEqual(hf["max_length_q"], int(cu.diff().max()))
        self.assertIs(hf["cu_seq_lens_k"], hf["cu_seq_lens_q"])
        self.assertNotIn("attention_mask", hf)
        # The raw flash-attn offsets: the same samples, padding taken out;
        # each row's padding is one more segment in cu_seq_lens_q.
        mask = raw.get("attention_mask", torch.ones_like(ids))
        real = []
        bounds = cu.tolist()
        for r in range(rows):
            n = int(mask[r].sum())
            self.assertTrue(bool((mask[r, :n] == 1).all()) and bool((mask[r, n:] == 0).all()))
            segs = [(a, b) for a, b in zip(bounds, bounds[1:]) if r * L <= a < (r + 1) * L]
            real += [b - a for a, b in segs if a < r * L + n]
            if n < L:
                self.assertEqual(segs[-1], (r * L + n, (r + 1) * L), f"row {r}: its padding is not one segment")
                self.assertTrue(bool((hf["labels"][r, n:] == -100).all()))
        self.assertEqual(real, raw["cu_seqlens"].diff().tolist())

    def test_packed(self):
        self.check("packed")

    def test_padding_free(self):
        self.check("padding_free")


if __name__ == "__main__":
    unittest.main()
