#!/usr/bin/env bash
# Tokenizer throughput, single thread, side by side in one run: tokfeed's own
# encoder (bench_tokenizer) against HF `tokenizers`, fastokens and gigatoken
# from PyPI (peers.py), on the Qwen3 and Llama-3 tokenizer.json, over English,
# Chinese and code texts (make_corpora.py: warm and timed halves that share no
# paragraph). Two methods:
#   unseen: a fresh tokenizer warmed on the warm half, one pass over the timed half;
#   hot:    warmed on the timed half itself, best of several passes over it.
# Every process is pinned to one core (taskset); MB/s are per CPU-second of the
# process. Every engine's ids on every timed text are checked against HF's.
# The whole sweep runs BENCH_REPEAT times, interleaved; the table gives the
# median and [min-max] of each figure, and tokfeed / the best peer (medians).
#
#   bench/tokenizer/run.sh [BENCH_BINARY] [SHARED_DIR]
# BENCH_PYTHON: the interpreter with tokenizers, fastokens, gigatoken, numpy
#   (default $TOKFEED_VENV/bin/python, else python3);
# BENCH_MB (default 2): megabytes per corpus half; BENCH_REPEAT (default 3);
# BENCH_CPU (default 1): the core to pin to; BENCH_SECONDS (default 1): hot mode;
# BENCH_TOKENIZERS (default "qwen3 llama3"): folders of SHARED_DIR/tokenizers.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bin="$(realpath "${1:-$here/../../build/bench/tokenizer/bench_tokenizer}")"
shared="$(realpath "${2:-$here/../../../shared}")"
py="${BENCH_PYTHON:-${TOKFEED_VENV:+$TOKFEED_VENV/bin/python}}"
py="${py:-python3}"
repeat="${BENCH_REPEAT:-3}"
cpu="${BENCH_CPU:-1}"
seconds="${BENCH_SECONDS:-1}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export TOKENIZERS_PARALLELISM=false RAYON_NUM_THREADS=1 RAYON_RS_NUM_CPUS=1

"$py" "$here/make_corpora.py" "$shared" "$work/corpora" "${BENCH_MB:-2}"
echo "engines: $("$py" -c 'import importlib.metadata as m; print(", ".join(f"{p} {m.version(p)}" for p in ("tokenizers", "fastokens", "gigatoken")))')" >&2

fails=0
for rep in $(seq 1 "$repeat"); do
  for tok in ${BENCH_TOKENIZERS:-qwen3 llama3}; do
    json="$shared/tokenizers/$tok/tokenizer.json"
    [ -f "$json" ] || { echo "skip $tok: no $json" >&2; continue; }
    for corpus in english chinese code; do
      timed="$work/corpora/$corpus.jsonl"
      for mode in unseen hot; do
        warm=()
        [ "$mode" = unseen ] && warm=(--warm "$work/corpora/$corpus-warm.jsonl")
        ids="$work/ids/$tok-$corpus-$mode"
        mkdir -p "$ids"
        dump=()
        [ "$rep" = 1 ] && dump=(--dump-ids "$ids/tokfeed-hf.ids")
        pyids=()
        [ "$rep" = 1 ] && pyids=(--ids-dir "$ids")
        { taskset -c "$cpu" "$bin" --hf "$json" --seconds "$seconds" "${warm[@]}" "${dump[@]}" "$timed"
          taskset -c "$cpu" "$py" "$here/peers.py" "$json" "$timed" --seconds "$seconds" "${warm[@]}" "${pyids[@]}"
        } | sed "s/^RESULT /RESULT $tok $mode /" | tee -a "$work/results.txt" >&2
        if [ "$rep" = 1 ]; then
          for e in "$ids"/*.ids; do
            [ "$(basename "$e")" = hf-tokenizers.ids ] && continue
            if cmp -s "$e" "$ids/hf-tokenizers.ids"; then
              echo "CHECK $tok $corpus $mode $(basename "$e" .ids): ids equal HF on all $(wc -l < "$e") texts" | tee -a "$work/checks.txt" >&2
            else
              d=$(paste -d'\t' "$e" "$ids/hf-tokenizers.ids" | awk -F'\t' '$1 != $2' | wc -l)
              echo "CHECK $tok $corpus $mode $(basename "$e" .ids): $d of $(wc -l < "$e") texts DIFFER from HF" | tee -a "$work/checks.txt" >&2
              fails=$((fails + 1))
            fi
          done
        fi
      done
    done
  done
done

"$py" - "$work/results.txt" "$work/corpora" <<'PY'
import collections, json, os, statistics, sys
r = collections.defaultdict(list)
for l in open(sys.argv[1]):
    _, tok, mode, corpus, engine, mbps, _tokens = l.split()
    r[(tok, mode, corpus, engine)].append(float(mbps))
mb = {c: sum(len(json.loads(l).encode()) for l in open(os.path.join(sys.argv[2], c + ".jsonl"), encoding="utf-8")) / 1e6
      for c in ("english", "chinese", "code")}
peers = ("fastokens", "gigatoken", "hf-tokenizers")
print("| tokenizer | method | text | MB | tokfeed | fastokens | gigatoken | HF tokenizers | tokfeed / best peer | tokfeed / HF |")
print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
fmt = lambda v: f"{statistics.median(v):.1f} [{min(v):.1f}-{max(v):.1f}]" if v else "-"
for tok in dict.fromkeys(k[0] for k in r):
    for mode in ("unseen", "hot"):
        for corpus in ("english", "chinese", "code"):
            ours = r.get((tok, mode, corpus, "tokfeed-hf"), [])
            if not ours:
                continue
            best = max((statistics.median(r[(tok, mode, corpus, p)]) for p in peers[:2] if r.get((tok, mode, corpus, p))), default=float("nan"))
            hf = r.get((tok, mode, corpus, "hf-tokenizers"), [])
            ratio_hf = statistics.median(ours) / statistics.median(hf) if hf else float("nan")
            cells = " | ".join(fmt(r.get((tok, mode, corpus, p), [])) for p in peers)
            print(f"| {tok} | {mode} | {corpus} | {mb[corpus]:.2f} | {fmt(ours)} | {cells} | {statistics.median(ours) / best:.2f}x | {ratio_hf:.0f}x |")
PY
cat "$work/checks.txt"
[ "$fails" = 0 ] || { echo "$fails id checks failed" >&2; exit 1; }
