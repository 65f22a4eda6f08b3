#!/usr/bin/env python3
"""tokenizer.json normalizers and pre-tokenizers against HF `tokenizers`.

    hf_components_diff.py TOKFEEDD QWEN3_TOKENIZER_JSON SP32K_TOKENIZER_JSON [--texts N]

Builds tokenizer.json variants in a temporary folder and requires tokfeed's
ids to equal HF's on each (add_special_tokens=False):
- a byte tokenizer (one token per byte, no merges) with each normalizer, so
  that the ids are the bytes of the normalized text: every code point, in
  runs of consecutive code points, and random texts;
- the same with each pre-tokenizer followed by ByteLevel with a prefix
  space, so that the ids show where the text was split: every code point
  between two letters, and random texts;
- Qwen3 (byte-level BPE) and sp32k (BPE on Metaspace-style text) with the
  normalizer or pre-tokenizer swapped, alone and in Sequences, on random
  texts (those of hf_random_diff.py, plus compatibility chars, capitals,
  Hangul and chars assigned after Unicode 9.0 next to combining marks).
Exit 77 (skipped) when a tokenizer file or `tokenizers` is missing.
"""
import argparse
import copy
import json
import os
import random
import subprocess
import sys
import tempfile
import unicodedata

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    from tokenizers import Tokenizer
except ImportError:
    print("tokenizers is not installed: skipped")
    sys.exit(77)
import hf_random_diff  # noqa: E402

NFKC, NFD, NFKD = {"type": "NFKC"}, {"type": "NFD"}, {"type": "NFKD"}
LOWER, ACCENTS = {"type": "Lowercase"}, {"type": "StripAccents"}
STRIP, LSTRIP = {"type": "Strip", "strip_left": True, "strip_right": True}, {"type": "Strip", "strip_left": True,
                                                                                 "strip_right": False}
RSTRIP = {"type": "Strip", "strip_left": False, "strip_right": True}


def seq_n(*steps):
    return {"type": "Sequence", "normalizers": list(steps)}


NORMALIZERS = {
    "NFKC": NFKC, "NFD": NFD, "NFKD": NFKD, "Lowercase": LOWER, "StripAccents": ACCENTS, "Strip": STRIP,
    "Strip-left": LSTRIP, "Strip-right": RSTRIP, "NFKD+StripAccents+Lowercase": seq_n(NFKD, ACCENTS, LOWER),
    "Strip+NFKC+Lowercase": seq_n(STRIP, NFKC, LOWER), "NFD+NFKC": seq_n(NFD, {"type": "NFC"}, NFKC),
}

QWEN3_NORMALIZERS = ["NFKC", "NFD", "NFKD", "Lowercase", "StripAccents", "Strip", "NFKD+StripAccents+Lowercase"]
SP32K_NORMALIZERS = ["NFKC", "Strip+NFKC+Lowercase"]

WS, WSPLIT = {"type": "Whitespace"}, {"type": "WhitespaceSplit"}


def punct(behavior):
    return {"type": "Punctuation", "behavior": behavior}


def split_string(s, behavior, invert=False):
    return {"type": "Split", "pattern": {"String": s}, "behavior": behavior, "invert": invert}


BEHAVIORS = ["Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"]
PRE_TOKENIZERS = {"Whitespace": [WS], "WhitespaceSplit": [WSPLIT], "CharDelimiterSplit": [
    {"type": "CharDelimiterSplit", "delimiter": "-"}], "CharDelimiterSplit-wide": [
    {"type": "CharDelimiterSplit", "delimiter": "\u3001"}], "Whitespace+Punctuation+Digits": [
    WS, punct("Contiguous"), {"type": "Digits", "individual_digits": True}]}
PRE_TOKENIZERS.update({f"Punctuation-{b}": [punct(b)] for b in BEHAVIORS})
PRE_TOKENIZERS.update({f"Split-String-{b}": [split_string(", ", b)] for b in BEHAVIORS})
PRE_TOKENIZERS["Split-String-inverted"] = [split_string("a", "Removed", True)]
PRE_TOKENIZERS["Punctuation-default"] = [{"type": "Punctuation"}]

EVERY_PRE_TOKENIZERS = ["Whitespace", "WhitespaceSplit", "Punctuation-default", "CharDelimiterSplit-wide",
                        "Whitespace+Punctuation+Digits"]

BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
PREFIXED = dict(BYTE_LEVEL, add_prefix_space=True)


def byte_tokenizer():
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    table, n = {}, 0
    for b in range(256):
        if b in bs:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + n)
            n += 1
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
            "pre_tokenizer": BYTE_LEVEL, "post_processor": None, "decoder": None,
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                      "vocab": {table[b]: b for b in range(256)}, "merges": []}}


# Chars that the forms and classes treat apart: compatibility chars (ligatures,
# circled and fullwidth forms, Roman numerals, ㎏, ½, superscripts), capitals
# with special lowercases (İ, Σ, Ⅻ), Hangul syllables and jamo, chars whose
# category changed after Unicode 9.0, marks HF's normalizer does not know.
SPECIAL = ("\ufb01\ufb02\u2460\u2473\uff21\uff41\uff10\uff01\u2162\u216b\u338f\u00bd\u00b2\u2075\u2126\u212b"
           "\u0130\u03a3\u1e9e\u00c5\u01c4\u01c5\u1f88\uac00\ud7a3\u1100\u1161\u11a8\u3131\u1cf2\u1cf3"
           "\U000111c9\u166d\u0f73\u0344\u2e43\u0cf3\U0001e4d0\U0001e4ec\U00011f41\u1ab0\u1dfa\U0001e944"
           "\u0e33\u0eb3\u1e9b\u0958\u2fd5\ufe10\u3000\u00a0\u2028\u200d\u200c_")


def random_texts(rng, n):
    texts = []
    for _ in range(n):
        t = hf_random_diff.random_text(rng)
        extra = "".join(rng.choice(SPECIAL) + ("" if rng.random() < 0.5 else rng.choice(hf_random_diff.MARKS))
                        for _ in range(rng.randint(0, 6)))
        at = rng.randint(0, len(t))
        t = t[:at] + extra + t[at:]
        if rng.random() < 0.2:
            t = rng.choice(["  ", "\t", " \u3000"]) + t + rng.choice(["  ", "\n", "\u2003"])
        texts.append(t)
    return texts


def all_code_points(sep="", known=False):
    # known: only those this Python (Unicode 14.0) or UNICODE_15 knows. HF's
    # Lowercase and Whitespace know Unicode 16.0, tokfeed's data (ICU, Debian
    # 12) stops at 15.0; 15.1 and 16.0 chars are left out there.
    cps = [chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    if known:
        new = set(hf_random_diff.UNICODE_15)
        cps = [c for c in cps if unicodedata.category(c) != "Cn" or c in new]
    return [sep + sep.join(cps[i:i + 64]) + sep for i in range(0, len(cps), 64)]


def compare(tokfeedd, folder, name, tok, texts, show):
    path = os.path.join(folder, name.replace("/", "_") + ".json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)
    theirs = [e.ids for e in Tokenizer.from_file(path).encode_batch(texts, add_special_tokens=False)]
    payload = "".join(json.dumps(t, ensure_ascii=False) + "\n" for t in texts).encode("utf-8")
    done = subprocess.run([tokfeedd, "tokenize", "--tokenizer", path, "--type", "hf"], input=payload,
                          capture_output=True)
    if done.returncode != 0:
        print(f"{name}: tokfeedd failed: {done.stderr.decode(errors='replace').strip()[:400]}")
        return False
    mine = [json.loads(line) for line in done.stdout.decode("utf-8").splitlines()]
    bad = [i for i in range(len(texts)) if i >= len(mine) or mine[i] != theirs[i]]
    for i in bad[:show]:
        print(f"  text {i}: {texts[i][:200]!r}\n    tokfeed {mine[i][:60] if i < len(mine) else None}\n"
              f"    hf      {theirs[i][:60]}")
    print(f"{name}: {len(texts) - len(bad)}/{len(texts)} texts equal HF tokenizers")
    return not bad


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tokfeedd")
    ap.add_argument("qwen3")
    ap.add_argument("sp32k")
    ap.add_argument("--seed", type=int, default=33)
    ap.add_argument("--texts", type=int, default=1500)
    ap.add_argument("--show", type=int, default=3)
    ap.add_argument("--only", default="", help="run only the variants whose name contains this")
    args = ap.parse_args()
    for path in (args.qwen3, args.sp32k):
        if not os.path.exists(path):
            print(f"{path} is not present: skipped")
            sys.exit(77)
    rng = random.Random(args.seed)
    texts = random_texts(rng, args.texts)
    every, every_known, between = all_code_points(), all_code_points(known=True), all_code_points("a", True)
    qwen3 = json.load(open(args.qwen3, encoding="utf-8"))
    sp32k = json.load(open(args.sp32k, encoding="utf-8"))
    runs = []
    # The byte tokenizer shows the normalized text itself: every code point
    # for each normalizer alone, random texts for all.
    for name, norm in NORMALIZERS.items():
        tok = byte_tokenizer()
        tok["normalizer"] = norm
        if "+" not in name:
            runs.append((f"bytes/{name}/every-code-point", tok, every if name.startswith("NF") else every_known))
        runs.append((f"bytes/{name}/random", tok, texts))
        if name in QWEN3_NORMALIZERS:
            tok = copy.deepcopy(qwen3)
            tok["normalizer"] = norm
            runs.append((f"qwen3/{name}/random", tok, texts))
        if name in SP32K_NORMALIZERS:
            tok = copy.deepcopy(sp32k)
            tok["normalizer"] = seq_n(norm, *sp32k["normalizer"]["normalizers"])
            runs.append((f"sp32k/{name}/random", tok, texts))
    # The byte tokenizer with a prefix space per piece shows the pieces.
    for name, steps in PRE_TOKENIZERS.items():
        tok = byte_tokenizer()
        tok["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": steps + [PREFIXED]}
        if name in EVERY_PRE_TOKENIZERS:
            runs.append((f"bytes/{name}/every-code-point", tok, between))
        runs.append((f"bytes/{name}/random", tok, texts))
        if name in EVERY_PRE_TOKENIZERS:
            tok = copy.deepcopy(qwen3)
            tok["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": steps + [BYTE_LEVEL]}
            runs.append((f"qwen3/{name}/random", tok, texts))
    tok = copy.deepcopy(sp32k)
    tok["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [WS, punct("Contiguous")]}
    runs.append(("sp32k/Whitespace+Punctuation/random", tok, texts))
    # Both at once, in front of Qwen3's own split.
    tok = copy.deepcopy(qwen3)
    tok["normalizer"] = seq_n(STRIP, NFKC, LOWER)
    tok["pre_tokenizer"]["pretokenizers"].insert(0, punct("MergedWithNext"))
    runs.append(("qwen3/Strip+NFKC+Lowercase+Punctuation+Split/random", tok, texts))
    ok = True
    with tempfile.TemporaryDirectory() as folder:
        for name, tok, run_texts in runs:
            if args.only in name:
                ok &= compare(args.tokfeedd, folder, name, tok, run_texts, args.show)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
