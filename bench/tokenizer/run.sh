#!/usr/bin/env bash
# Tokenizer throughput, single thread: tokfeed's HF backend (qwen3 tokenizer.json),
# SentencePiece (sp32k tokenizer.model) and HF `tokenizers` from Python (qwen3),
# over English, Chinese and code texts taken from the golden and SFT data.
# Prints one markdown table; the ratio column is tokfeed-hf / HF tokenizers.
#
#   bench/tokenizer/run.sh [BENCH_BINARY] [SHARED_DIR]
# Needs: python3 with `tokenizers` (python3 -m pip install tokenizers).
# BENCH_SECONDS (default 2): minimum timed seconds per measurement;
# BENCH_MB (default 1.5): megabytes of text per corpus.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bin="${1:-$here/../../build/bench/tokenizer/bench_tokenizer}"
shared="${2:-$here/../../../shared}"
seconds="${BENCH_SECONDS:-2}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export TOKENIZERS_PARALLELISM=false RAYON_NUM_THREADS=1 RAYON_RS_NUM_CPUS=1

# 1. Classify texts by content into three corpora (identical input for all).
python3 - "$shared" "$work" <<'PY'
import glob, json, os, re, sys
shared, work = sys.argv[1], sys.argv[2]
texts = []
for p in sorted(glob.glob(os.path.join(shared, "golden", "*.jsonl"))):
    texts += [json.loads(l)["text"] for l in open(p, encoding="utf-8")]
def leaves(v):
    if isinstance(v, str): yield v
    elif isinstance(v, list):
        for x in v: yield from leaves(x)
    elif isinstance(v, dict):
        for x in v.values(): yield from leaves(x)
for p in sorted(glob.glob(os.path.join(shared, "data", "sft", "*.jsonl"))):
    for l in open(p, encoding="utf-8"):
        texts += list(leaves(json.loads(l)))
code_re = re.compile(r"^\s*(def |class |import |from \S+ import|return\b|if .*:$|for .*:$|#include|[{}]$)|[;{}]\s*$|==|\(self", re.M)
cjk_re = re.compile(r"[\u3400-\u9fff\u3000-\u303f\uff00-\uffef]")
buckets = {"english": [], "chinese": [], "code": []}
seen = set()
for t in texts:
    if len(t) < 16 or t in seen:
        continue
    seen.add(t)
    cjk = len(cjk_re.findall(t))
    if cjk >= 0.3 * len(t):
        buckets["chinese"].append(t)
    elif cjk == 0 and len(code_re.findall(t)) >= max(2, t.count("\n") // 4):
        buckets["code"].append(t)
    elif cjk == 0 and sum(c.isascii() and (c.isalpha() or c == " ") for c in t) >= 0.8 * len(t):
        buckets["english"].append(t)
cap = float(os.environ.get("BENCH_MB", "1.5")) * 1e6  # per corpus, so HF's side stays quick
for name, ts in buckets.items():
    kept, size = [], 0
    for t in ts:
        if size >= cap:
            break
        kept.append(t)
        size += len(t.encode())
    ts = buckets[name] = kept
    with open(os.path.join(work, name + ".jsonl"), "w", encoding="utf-8") as f:
        for t in ts:
            f.write(json.dumps(t, ensure_ascii=False) + "\n")
    print(f"{name}: {len(ts)} texts, {sum(len(t.encode()) for t in ts) / 1e6:.2f} MB", file=sys.stderr)
PY

corpora=("$work/english.jsonl" "$work/chinese.jsonl" "$work/code.jsonl")

# 2. C++: tokfeed-hf on qwen3, sentencepiece on sp32k.
"$bin" --hf "$shared/tokenizers/qwen3/tokenizer.json" --sp "$shared/tokenizers/sp32k/tokenizer.model" \
  --seconds "$seconds" "${corpora[@]}" > "$work/cpp.txt"

# 3. HF tokenizers (qwen3), single thread: encode_batch and one encode per text.
python3 - "$shared" "$seconds" "${corpora[@]}" > "$work/py.txt" <<'PY'
import json, os, sys, time
from tokenizers import Tokenizer
shared, seconds, corpora = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
tok = Tokenizer.from_file(os.path.join(shared, "tokenizers", "qwen3", "tokenizer.json"))
def best(fn, nbytes):
    fn()  # warm-up
    b, spent, passes = 0.0, 0.0, 0
    while passes < 3 or spent < seconds:
        t0 = time.perf_counter(); fn(); s = time.perf_counter() - t0
        spent += s; passes += 1; b = max(b, nbytes / 1e6 / s)
    return b
for path in corpora:
    name = os.path.splitext(os.path.basename(path))[0]
    texts = [json.loads(l) for l in open(path, encoding="utf-8")]
    nbytes = sum(len(t.encode()) for t in texts)
    batch = best(lambda: tok.encode_batch(texts, add_special_tokens=False), nbytes)
    single = best(lambda: [tok.encode(t, add_special_tokens=False) for t in texts], nbytes)
    print(f"RESULT {name} hf-batch {batch:.2f} 0")
    print(f"RESULT {name} hf-single {single:.2f} 0")
PY

# 4. One markdown table.
python3 - "$work/cpp.txt" "$work/py.txt" "$work" <<'PY'
import json, os, sys
r = {}
for p in sys.argv[1:3]:
    for l in open(p):
        if l.startswith("RESULT "):
            _, corpus, impl, mbps, _tokens = l.split()
            r[(corpus, impl)] = float(mbps)
work = sys.argv[3]
print("| text | MB | tokfeed-hf qwen3 (MB/s) | HF tokenizers qwen3, encode_batch 1 thread (MB/s) | HF tokenizers qwen3, encode (MB/s) | tokfeed-hf / HF batch | tokfeed-hf / HF encode | sentencepiece sp32k (MB/s) |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for corpus in ("english", "chinese", "code"):
    mb = sum(len(json.loads(l).encode()) for l in open(os.path.join(work, corpus + ".jsonl"), encoding="utf-8")) / 1e6
    ours, batch, single, sp = (r.get((corpus, k), float("nan")) for k in ("tokfeed-hf", "hf-batch", "hf-single", "sentencepiece"))
    print(f"| {corpus} | {mb:.2f} | {ours:.1f} | {batch:.1f} | {single:.1f} | {ours / batch:.1f}x | {ours / single:.1f}x | {sp:.1f} |")
PY
