"""Rendering and labelling per sample: tokfeed against transformers, in one run.

For each chat template folder, every conversation of CONVERSATIONS.jsonl is
rendered once (one pass, each sample seen once, as an epoch sees it):
- transformers (the peer, jinja2): `apply_chat_template(tokenize=False)`,
  the text alone; then the text and its tokens as TRL's SFTTrainer takes
  them: `apply_chat_template(tokenize=True, return_dict=True,
  return_assistant_tokens_mask=True)` where the template has
  `{% generation %}` blocks (labels included), else the text and
  `tokenizer(text, add_special_tokens=False)` (no labels: no peer computes
  the prefix rule per sample);
- tokfeed: `bench_template --rounds 1` in a fresh process: `render_labeled`
  (the full render, its provenance and the label rule's prefix renders), then
  the text's tokens.

Prints microseconds per sample and the ratios peer / tokfeed.

usage: $TOKFEED_HF_PYTHON bench/template/peer.py BENCH_TEMPLATE TOKENIZER.json CONVERSATIONS.jsonl TEMPLATE_DIR...
"""
import json
import os
import re
import subprocess
import sys
import time

from transformers import PreTrainedTokenizerFast

SPECIAL = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
GENERATION = re.compile(r"\{%-?\s*generation\s*-?%\}")


def tokfeed_times(bench, tokenizer_json, conversations, folder):
    """(render µs, tokenize µs) per sample from bench_template's one line."""
    out = subprocess.run([bench, tokenizer_json, conversations, folder, "--rounds", "1"], check=True,
                         capture_output=True, text=True).stdout.splitlines()
    _name, _samples, render_us, tokenize_us, _ratio = out[-1].split()
    return float(render_us), float(tokenize_us)


def peer_times(tok, template, kwargs, records, labelled):
    """(render µs, render + tokenize µs) per sample of transformers, and the samples it rendered."""
    ok = []
    t0 = time.perf_counter()
    for msgs, tools in records:
        try:
            tok.apply_chat_template(msgs, tools=tools, chat_template=template, tokenize=False, **kwargs)
            ok.append((msgs, tools))
        except Exception:  # a conversation the template refuses: tokfeed skips it too
            pass
    render = time.perf_counter() - t0
    t0 = time.perf_counter()
    for msgs, tools in ok:
        if labelled:
            tok.apply_chat_template(msgs, tools=tools, chat_template=template, tokenize=True, return_dict=True,
                                    return_assistant_tokens_mask=True, **kwargs)
        else:
            text = tok.apply_chat_template(msgs, tools=tools, chat_template=template, tokenize=False, **kwargs)
            tok(text, add_special_tokens=False)
    both = time.perf_counter() - t0
    n = max(len(ok), 1)
    return 1e6 * render / n, 1e6 * both / n, len(ok)


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    bench, tokenizer_json, conversations = sys.argv[1:4]
    records = []
    with open(conversations) as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                records.append((r["messages"], r.get("tools")))
    tok = PreTrainedTokenizerFast(tokenizer_file=tokenizer_json)
    print(f"{'template':40} {'samples':>7} {'hf render':>10} {'tokfeed':>8} {'ratio':>6}   "
          f"{'hf +tokens':>10} {'tokfeed':>8} {'ratio':>6}   (µs per sample)")
    for folder in sys.argv[4:]:
        with open(os.path.join(folder, "tokenizer_config.json")) as f:
            cfg = json.load(f)
        template = cfg["chat_template"]
        kwargs = {k: (cfg[k]["content"] if isinstance(cfg[k], dict) else cfg[k]) for k in SPECIAL
                  if cfg.get(k) is not None}
        kwargs["date_string"] = "26 Jul 2024"
        labelled = bool(GENERATION.search(template))
        hf_render, hf_both, n = peer_times(tok, template, kwargs, records, labelled)
        tf_render, tf_tokens = tokfeed_times(bench, tokenizer_json, conversations, folder)
        tf_both = tf_render + tf_tokens
        print(f"{os.path.basename(folder.rstrip('/')):40} {n:7d} {hf_render:10.1f} {tf_render:8.1f} "
              f"{hf_render / tf_render:6.1f}   {hf_both:10.1f} {tf_both:8.1f} {hf_both / tf_both:6.1f}"
              f"{'' if labelled else '  (hf: no labels)'}")


if __name__ == "__main__":
    main()
