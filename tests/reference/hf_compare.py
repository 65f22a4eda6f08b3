#!/usr/bin/env python3
"""Compare tokfeed's HF tokenizer.json backend with HF `tokenizers` (PyPI).

Not part of the default tests: it needs `python3 -m pip install tokenizers`
and a built `tokfeedd`. Every string of every record of the SFT data
(all formats: alpaca, messages, sharegpt, query/response, self-cognition),
plus the golden texts, is encoded by both with add_special_tokens=False, and
the exact-match counts are printed per tokenizer and per source.

Our side runs `tokfeedd tokenize --tokenizer PATH --type hf`, which reads one
JSON string per line on stdin and prints one JSON array of ids per line.
Use --cmd to run another command ("{tokenizer}" is replaced by the path).

  python3 tests/reference/hf_compare.py --shared ../shared --tokfeedd build/daemon/tokfeedd
"""
import argparse
import glob
import json
import os
import shlex
import subprocess
import sys

from tokenizers import Tokenizer


def strings_of(value, out):
    """All string leaves of a JSON value (every content string of a record)."""
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, list):
        for v in value:
            strings_of(v, out)
    elif isinstance(value, dict):
        for v in value.values():
            strings_of(v, out)


def load_sources(shared):
    sources = {}
    for path in sorted(glob.glob(os.path.join(shared, "data", "sft", "*.json*"))):
        texts = []
        with open(path, encoding="utf-8") as f:
            if path.endswith(".jsonl"):
                for line in f:
                    if line.strip():
                        strings_of(json.loads(line), texts)
            else:
                strings_of(json.load(f), texts)
        sources["sft/" + os.path.basename(path)] = texts
    for path in sorted(glob.glob(os.path.join(shared, "golden", "*.jsonl"))):
        with open(path, encoding="utf-8") as f:
            sources["golden/" + os.path.basename(path)] = [json.loads(l)["text"] for l in f if l.strip()]
    return sources


def ours(cmd_template, tokenizer_path, texts):
    cmd = [part.replace("{tokenizer}", tokenizer_path) for part in shlex.split(cmd_template)]
    payload = "".join(json.dumps(t, ensure_ascii=False) + "\n" for t in texts)
    done = subprocess.run(cmd, input=payload.encode("utf-8"), capture_output=True, check=True)
    lines = done.stdout.decode("utf-8").splitlines()
    if len(lines) != len(texts):
        sys.exit(f"{cmd[0]} printed {len(lines)} lines for {len(texts)} texts")
    return [json.loads(l) for l in lines]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shared", default=os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared"))
    ap.add_argument("--tokfeedd", default="tokfeedd")
    ap.add_argument("--cmd", help='our encoder command; default: "TOKFEEDCTL tokenize --tokenizer {tokenizer} --type hf"')
    ap.add_argument("--tokenizers", default="qwen3,sp32k", help="names under SHARED/tokenizers (llama3,deepseek_v3 too)")
    ap.add_argument("--show", type=int, default=3, help="mismatches to print per source")
    args = ap.parse_args()
    cmd = args.cmd or f"{shlex.quote(args.tokfeedd)} tokenize --tokenizer {{tokenizer}} --type hf"

    sources = load_sources(args.shared)
    all_exact = True
    for name in args.tokenizers.split(","):
        path = os.path.join(args.shared, "tokenizers", name, "tokenizer.json")
        if not os.path.exists(path):
            print(f"{name}: {path} not present, skipped")
            continue
        hf = Tokenizer.from_file(path)
        total_ok = total = 0
        for source, texts in sources.items():
            theirs = [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]
            mine = ours(cmd, path, texts)
            bad = [i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b]
            ok = len(texts) - len(bad)
            total_ok += ok
            total += len(texts)
            print(f"{name:12s} {source:32s} {ok:6d}/{len(texts):6d} exact")
            for i in bad[: args.show]:
                print(f"    text {i}: {texts[i][:80]!r}\n      ours {mine[i][:20]}\n      hf   {theirs[i][:20]}")
        all_exact &= total_ok == total
        print(f"{name:12s} {'TOTAL':32s} {total_ok:6d}/{total:6d} exact")
    sys.exit(0 if all_exact else 1)


if __name__ == "__main__":
    main()
