#!/usr/bin/env python3
"""Builds the tokenizer benchmark's corpora: English, Chinese and code, each in
a warm half and a timed half that share no paragraph.

    make_corpora.py SHARED_DIR OUT_DIR [MB]

Sources: the golden texts and the SFT data in SHARED_DIR (real text from Debian
packages), plus Debian's own package READMEs (English) and Python standard
library (code) where this machine has them. Every text is cut into paragraphs
(at blank lines), paragraphs are deduplicated and classified by content, and
each goes to the warm or the timed half by a hash of its bytes, so a timed
paragraph never occurs in the warm half. Paragraphs are then joined back into
texts of about 2 KiB, the size of a typical record. Writes OUT_DIR/{english,
chinese,code}.jsonl (timed) and OUT_DIR/{english,chinese,code}-warm.jsonl, at
most MB megabytes each (default 2); one JSON string per line.
"""
import glob, hashlib, json, os, re, sys

CJK = re.compile(r"[\u3400-\u9fff\u3000-\u303f\uff00-\uffef]")
CODE = re.compile(r"^\s*(def |class |import |from \S+ import|return\b|if .*:$|for .*:$|#include|[{}]$)|[;{}]\s*$|==|\(self",
                  re.M)


def leaves(v):
    if isinstance(v, str):
        yield v
    elif isinstance(v, list):
        for x in v:
            yield from leaves(x)
    elif isinstance(v, dict):
        for x in v.values():
            yield from leaves(x)


def classify(t):
    cjk = len(CJK.findall(t))
    if cjk >= 0.3 * len(t):
        return "chinese"
    if cjk == 0 and len(CODE.findall(t)) >= max(1, t.count("\n") // 4):
        return "code"
    if cjk == 0 and sum(c.isascii() and (c.isalpha() or c == " ") for c in t) >= 0.8 * len(t):
        return "english"
    return None


def read(path):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (UnicodeDecodeError, OSError):
        return ""


def main():
    shared, out = sys.argv[1], sys.argv[2]
    cap = float(sys.argv[3]) * 1e6 if len(sys.argv) > 3 else 2e6
    texts = []
    for p in sorted(glob.glob(os.path.join(shared, "golden", "*.jsonl"))):
        texts += [json.loads(l)["text"] for l in open(p, encoding="utf-8")]
    for p in sorted(glob.glob(os.path.join(shared, "data", "sft", "*.jsonl"))):
        for l in open(p, encoding="utf-8"):
            texts += list(leaves(json.loads(l)))
    texts += [read(p) for p in sorted(glob.glob("/usr/share/doc/*/README*")) if not p.endswith((".gz", ".html"))]
    texts += [read(p) for p in sorted(glob.glob("/usr/lib/python3*/*.py"))]

    seen = set()
    halves = {(k, h): [] for k in ("english", "chinese", "code") for h in ("warm", "timed")}
    for t in texts:
        for para in re.split(r"\n[ \t]*\n", t):
            if len(para) < 16 or para in seen:
                continue
            seen.add(para)
            kind = classify(para)
            if kind is None:
                continue
            half = "timed" if hashlib.sha1(para.encode()).digest()[0] & 1 else "warm"
            halves[(kind, half)].append(para)

    os.makedirs(out, exist_ok=True)
    for (kind, half), paras in sorted(halves.items()):
        name = kind if half == "timed" else kind + "-warm"
        size, docs, cur = 0, [], []
        for p in paras:
            if size >= cap:
                break
            cur.append(p)
            size += len(p.encode()) + 2
            if sum(len(x) for x in cur) >= 2048:
                docs.append("\n\n".join(cur))
                cur = []
        if cur:
            docs.append("\n\n".join(cur))
        with open(os.path.join(out, name + ".jsonl"), "w", encoding="utf-8") as f:
            for d in docs:
                f.write(json.dumps(d, ensure_ascii=False) + "\n")
        print(f"{name}: {len(docs)} texts, {sum(len(d.encode()) for d in docs) / 1e6:.2f} MB", file=sys.stderr)


if __name__ == "__main__":
    main()
