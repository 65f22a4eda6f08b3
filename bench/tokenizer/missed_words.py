#!/usr/bin/env python3
"""The words of a timed corpus that its warm half does not have: the words the
unseen method's word cache misses (bench_miss_path times their merges).

    missed_words.py TOKENIZER_JSON WARM.jsonl TIMED.jsonl OUT.bin

Words are the tokenizer's own pre-tokens (HF `tokenizers`), each written once,
in the order first met, as a little-endian uint32 byte length and the bytes.
"""
import json, struct, sys

from tokenizers import Tokenizer


def words(pre, path):
    with open(path, encoding="utf-8") as f:
        for line in f:
            text = json.loads(line)
            for _, (b, e) in pre.pre_tokenize_str(text):
                yield text[b:e]


def main():
    tokenizer, warm, timed, out = sys.argv[1:5]
    pre = Tokenizer.from_file(tokenizer).pre_tokenizer
    seen = set(words(pre, warm))
    n = 0
    with open(out, "wb") as f:
        for w in words(pre, timed):
            if w in seen:
                continue
            seen.add(w)
            b = w.encode("utf-8")
            f.write(struct.pack("<I", len(b)) + b)
            n += 1
    print(f"{n} words", file=sys.stderr)


if __name__ == "__main__":
    main()
