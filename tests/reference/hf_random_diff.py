#!/usr/bin/env python3
"""Random Unicode through tokfeed's tokenizer.json encoder and HF `tokenizers`.

    hf_random_diff.py TOKFEEDD TOKENIZER_JSON [--seed S] [--texts N]

Texts are drawn from a fixed seed: words of ASCII, Latin with accents and
combining marks, Greek, Cyrillic, Han, Hangul, Arabic, emoji (ZWJ sequences
too), digits, runs of one repeated char or word (where BPE ties between equal
pairs matter), every kind of Unicode space, punctuation, unpaired code
points from anywhere in the code space (assigned ones: see assigned_char),
characters assigned in Unicode 15.0 (UNICODE_15), combining marks of every
Unicode version after a base (reordered or composed by NFC, or not), and
contractions. Both sides encode
every text with add_special_tokens=False; the ids must be equal on all of
them. Exit 77 (skipped) when TOKENIZER_JSON or `tokenizers` is missing.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import unicodedata

try:
    from tokenizers import Tokenizer
except ImportError:
    print("tokenizers is not installed: skipped")
    sys.exit(77)

RANGES = [
    (0x20, 0x7E), (0xA0, 0x17F), (0x300, 0x36F), (0x370, 0x3FF), (0x400, 0x4FF), (0x600, 0x6FF),
    (0x900, 0x97F), (0xE00, 0xE7F), (0x1100, 0x11FF), (0x2000, 0x206F), (0x3000, 0x30FF),
    (0x4E00, 0x9FFF), (0xAC00, 0xD7A3), (0xFF00, 0xFFEF), (0x1F300, 0x1FAFF),
]
SPACES = " \t\n\r\x0b\x0c\u00a0\u1680\u2000\u2001\u2007\u200a\u2028\u2029\u202f\u205f\u3000\u180e\u200b"
WORDS = ["the", " the", "ing", "tion", "hello", "world", "def", "return", "self", "{", "}", "()", "==",
         "'s", "'t", "'re", "'LL", "123", "4567", "中国", "的", "こんにちは", "안녕", "привет", "ñ", "é",
         "e\u0301", "👍", "👨\u200d👩\u200d👧", "\u00e9\u0301", "    ", "\n\n", "http://", "<|", "|>"]


def assigned_char(rng):
    # Any code point assigned in this Python's Unicode (14.0 in the venv).
    while True:
        cp = rng.randint(0x80, 0x10FFFF)
        if not 0xD800 <= cp <= 0xDFFF and unicodedata.category(chr(cp)) != "Cn":
            return chr(cp)


# Characters assigned in Unicode 15.0, which this Python does not know: emoji
# (So), CJK Extension H and Kawi letters (Lo), Kawi digits (Nd), Kaktovik
# numerals (No), a Kannada sign (Mc), Kawi punctuation (Po), Nag Mundari
# letters. tokfeed classifies them with its Unicode data (utf8proc, 15.0)
# wherever the tokenizer's regex names a general category, as HF's
# Oniguruma does. Characters assigned in 15.1 and later are not drawn: the
# Unicode data Debian 12 ships stops at 15.0 (HF tokenizers knows 16.0).
UNICODE_15 = ["\U0001FA77", "\U0001F6DC", "\U0001FAE8", "\U0001FABF", "\U00031350", "\U000323AF", "\U00011F04",
              "\U00011F50", "\U0001D2C0", "\u0CF3", "\U00011F43", "\U0001E4D0", "\U0001E4EB"]

MARKS = [chr(cp) for cp in range(0x300, 0x20000) if unicodedata.combining(chr(cp))]


def random_text(rng):
    parts = []
    for _ in range(rng.randint(1, 24)):
        kind = rng.random()
        if kind < 0.25:
            parts.append(rng.choice(WORDS))
        elif kind < 0.45:
            lo, hi = rng.choice(RANGES)
            chars = (chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 12)))
            parts.append("".join(c for c in chars if unicodedata.category(c) != "Cn"))
        elif kind < 0.55:
            parts.append("".join(rng.choice(SPACES) for _ in range(rng.randint(1, 6))))
        elif kind < 0.67:
            # Runs: equal pairs side by side, where the leftmost must merge first.
            unit = rng.choice(["a", " ", "=", "-", "0", "ab", "中", "ا", "\n", "e\u0301", "aa", "!", "\t"])
            parts.append(unit * rng.randint(2, 40))
        elif kind < 0.72:
            parts.append(assigned_char(rng))
        elif kind < 0.77:
            parts.append(rng.choice(UNICODE_15) + rng.choice(["", "x", " ", "\u05c4", "!", "中"]))
        elif kind < 0.82:
            # A base and combining marks of any Unicode version: HF's NFC knows
            # the marks of Unicode 9.0 and older only (unicode.hpp).
            parts.append(rng.choice("aeAE\u05c4\u0627\u3042 ") + "".join(rng.choice(MARKS) for _ in range(rng.randint(1, 3))))
        elif kind < 0.90:
            parts.append("".join(chr(rng.randint(0x21, 0x7E)) for _ in range(rng.randint(1, 16))))
        else:
            parts.append(str(rng.randint(0, 10**rng.randint(1, 12))))
    return "".join(parts)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tokfeedd")
    ap.add_argument("tokenizer")
    ap.add_argument("--seed", type=int, default=33)
    ap.add_argument("--texts", type=int, default=20000)
    ap.add_argument("--show", type=int, default=5)
    args = ap.parse_args()
    if not os.path.exists(args.tokenizer):
        print(f"{args.tokenizer} is not present: skipped")
        sys.exit(77)
    rng = random.Random(args.seed)
    texts = [random_text(rng) for _ in range(args.texts)]
    theirs = [e.ids for e in Tokenizer.from_file(args.tokenizer).encode_batch(texts, add_special_tokens=False)]
    payload = "".join(json.dumps(t, ensure_ascii=False) + "\n" for t in texts).encode("utf-8")
    done = subprocess.run([args.tokfeedd, "tokenize", "--tokenizer", args.tokenizer, "--type", "hf"],
                          input=payload, capture_output=True, check=True)
    lines = done.stdout.decode("utf-8").splitlines()
    if len(lines) != len(texts):
        sys.exit(f"tokfeedd printed {len(lines)} lines for {len(texts)} texts")
    mine = [json.loads(l) for l in lines]
    bad = [i for i in range(len(texts)) if mine[i] != theirs[i]]
    for i in bad[: args.show]:
        print(f"text {i}: {texts[i]!r}\n  tokfeed {mine[i]}\n  hf      {theirs[i]}")
    tokens = sum(len(t) for t in theirs)
    print(f"{os.path.basename(os.path.dirname(args.tokenizer))}: {len(texts) - len(bad)}/{len(texts)} random texts "
          f"({tokens} tokens) equal HF tokenizers")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
