#!/usr/bin/env python3
"""The peer engines of bench_tokenizer, timed the same way on the same files.

    peers.py TOKENIZER_JSON CORPUS.jsonl [--warm WARM.jsonl] [--seconds S] [--ids-dir DIR]

Engines (PyPI): HF `tokenizers` (encode_batch_fast where it exists, else
encode_batch), fastokens (encode_batch_flat) and gigatoken (encode_batch with
parallel=False), each single-threaded (run.sh also pins the process to one
core). Time is the process's CPU time (all its threads), which other jobs on
a shared machine do not inflate. Each engine is loaded fresh, warmed on WARM and timed on one pass over
CORPUS (unseen text); without --warm it is warmed on CORPUS and the best pass
of at least 3 (and S seconds) is reported (hot). Prints
"RESULT <corpus> <engine> <MB/s> <tokens>" and, with --ids-dir, writes each
engine's ids (one JSON array per text) to DIR/<engine>.ids.
"""
import argparse, json, os, sys, time

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("RAYON_RS_NUM_CPUS", "1")


def load_texts(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(l) for l in f]


def hf_engine(path):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(path)
    if hasattr(tok, "encode_batch_fast"):
        run = lambda texts: tok.encode_batch_fast(texts, add_special_tokens=False)
    else:
        run = lambda texts: tok.encode_batch(texts, add_special_tokens=False)
    return run, lambda r: [e.ids for e in r]


def fastokens_engine(path):
    import fastokens
    import numpy as np
    tok = fastokens.Tokenizer.from_file(path)
    run = lambda texts: tok.encode_batch_flat(texts, add_special_tokens=False)

    def ids(r):
        flat, offs = np.frombuffer(r[0], np.uint32), np.frombuffer(r[1], np.uint64)
        return [flat[offs[i]:offs[i + 1]].tolist() for i in range(len(offs) - 1)]

    return run, ids


def gigatoken_engine(path):
    import gigatoken
    tok = gigatoken.Tokenizer(path)
    run = lambda texts: tok.encode_batch(texts, parallel=False)
    return run, lambda r: r.to_list()


ENGINES = {"hf-tokenizers": hf_engine, "fastokens": fastokens_engine, "gigatoken": gigatoken_engine}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tokenizer")
    ap.add_argument("corpus")
    ap.add_argument("--warm")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--ids-dir")
    ap.add_argument("--engines", default=",".join(ENGINES))
    a = ap.parse_args()
    texts = load_texts(a.corpus)
    warm = load_texts(a.warm) if a.warm else texts
    nbytes = sum(len(t.encode()) for t in texts)
    name = os.path.splitext(os.path.basename(a.corpus))[0]
    for engine in a.engines.split(","):
        try:
            run, to_ids = ENGINES[engine](a.tokenizer)
        except (ImportError, RuntimeError) as e:  # not installed, or it cannot load this tokenizer
            print(f"skip {engine}: {e}", file=sys.stderr)
            continue
        run(warm)
        best, spent, passes, r = 0.0, 0.0, 0, None
        while passes < 1 if a.warm else (passes < 3 or spent < a.seconds):
            t0 = time.process_time()
            r = run(texts)
            s = time.process_time() - t0
            spent += s
            passes += 1
            best = max(best, nbytes / 1e6 / s)
        ids = to_ids(r)
        print(f"RESULT {name} {engine} {best:.2f} {sum(len(x) for x in ids)}", flush=True)
        if a.ids_dir:
            with open(os.path.join(a.ids_dir, engine + ".ids"), "w") as f:
                for x in ids:
                    f.write(json.dumps(list(map(int, x)), separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
