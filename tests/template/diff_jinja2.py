"""Differential tester: tokfeed's template engine against jinja2 in
transformers' chat-template environment, on random templates and contexts
(tests/template/jinja_grammar.py). Every output must be equal, or both
renders must fail.

usage:
  diff_jinja2.py TEMPLATE_RENDER run [--minutes M | --cases N] [--seed S] [--findings FILE]
      generate cases for M minutes (or N cases), minimize each difference
      found and write it to FILE (JSON lines: template, context, jinja2's and
      tokfeed's result); exits 1 when any differs (ctest
      template.jinja2_random: a fixed seed)
  diff_jinja2.py TEMPLATE_RENDER add FINDINGS CORPUS
      append cases to the corpus with jinja2's result as "expect"
  diff_jinja2.py TEMPLATE_RENDER check CORPUS
      the corpus's stored results must be jinja2's, and tokfeed's must agree
      (ctest template.jinja2_corpus_live; template.jinja2_corpus replays it
      without Python)
Needs transformers: run it with ${TOKFEED_HF_PYTHON}.
"""
import argparse
import datetime
import html
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jinja_grammar as G  # noqa: E402
import jinja_values as V  # noqa: E402

try:
    from transformers.utils import chat_template_utils as ctu
except ImportError:
    print("skip: transformers is not installed (run with ${TOKFEED_HF_PYTHON})")
    sys.exit(77)

FIXED_NOW = datetime.datetime(2024, 7, 26)
# jinja2 prints these with a memory address or a Python-internal name; the
# engine cannot (and need not) match them.
UNCOMPARABLE = ("object at 0x", "<generator object", "<function ", "<bound method", "<built-in", "<class ",
                "<jinja2.", "<macro ", "<property")  # lower case


# (letters a replace filter put into the address too: "0x7f8cZ...>")
ADDRESS = re.compile(r"0x[0-9a-z]{8,16}>")


class Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise Timeout()


signal.signal(signal.SIGALRM, _alarm)
warnings.simplefilter("ignore")  # the SyntaxWarnings of compiling random templates


def jinja_render(src, ctx):
    """{"text": ...}, {"error": ...}, or None when it cannot be compared."""
    try:
        signal.setitimer(signal.ITIMER_REAL, 2.0)
        try:
            # transformers' own environment builder (uncached, so random
            # templates do not fill its cache).
            t = ctu._cached_compile_jinja_template(src)
            t.environment.globals["strftime_now"] = lambda f: FIXED_NOW.strftime(f)
            text = t.render(**ctx)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except Timeout:
        return None
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as e:  # noqa: BLE001 - any failure is a failed render
        return {"error": f"{type(e).__name__}: {e}"}
    # Case-blind: a title or upper filter may have cased the repr; and
    # escaped, where an escape or striptags filter went over it.
    low = text.lower()
    if any(u in low or u in html.unescape(low) for u in UNCOMPARABLE) or len(text) > (16 << 20):
        return None
    # An address whose words a replace filter changed ("Generbtor Object Do_Bbtch Bt 0X7F8C...>").
    if ADDRESS.search(low) or ADDRESS.search(html.unescape(low)):
        return None
    return {"text": text}


def tokfeed_render(exe, cases):
    """tokfeed's results for [(template, context)], one process per batch; a
    crash is reported as {"crash": ...} for the case it stopped at."""
    results = []
    while len(results) < len(cases):
        rest = cases[len(results):]
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", encoding="utf-8", delete=False) as f:
            for src, ctx in rest:
                f.write(json.dumps({"template": src, "context": ctx}, ensure_ascii=False) + "\n")
            path = f.name
        try:
            p = subprocess.run([exe, "--cases", path], capture_output=True, timeout=300)
        except subprocess.TimeoutExpired as e:
            p = subprocess.CompletedProcess(e.cmd, -9, e.stdout or b"", e.stderr or b"")
        finally:
            os.unlink(path)
        lines = p.stdout.decode("utf-8", "replace").split("\n")
        got = []
        for line in lines:
            try:
                got.append(json.loads(line))
            except ValueError:
                break
        results += got[: len(rest)]
        if len(got) < len(rest):
            results.append({"crash": f"exit {p.returncode}: {p.stderr.decode('utf-8', 'replace')[-300:]}"})
    return results


def beyond_int64(want, got):
    """Python's ints are unbounded and it has complex numbers; the engine's
    ints are 64-bit and it has none: where jinja2 computes either, the engine
    fails loudly (never a wrong number)."""
    return "text" in want and any(m in got.get("error", "") for m in ("integer overflow", "past 64 bits", "is complex"))


def past_budget(want, got):
    """The engine stops a render past its step budget ([tokenizer]
    template_max_steps) with an error that names it, where jinja2 runs on:
    a limit, not a difference (random nested loops can run millions of
    steps)."""
    return "text" in want and "step budget" in got.get("error", "")


def same(want, got):
    if "text" in want:
        return got.get("text") == want["text"]
    return "text" not in got and "crash" not in got


def context_copy(ctx):
    return json.loads(json.dumps(ctx))


def minimize(exe, tree, ctx, budget=3000):
    """Greedy, a batch of trials at a time: smaller statements and
    expressions, then fewer and shorter context values, while jinja2 and
    tokfeed still differ."""
    spent = [0]

    def first_differing(trials):
        """Index of the first (src, ctx) trial that still differs, or None."""
        spent[0] += len(trials)
        wants = [jinja_render(src, c) for src, c in trials]
        idx = [k for k, w in enumerate(wants) if w is not None]
        gots = tokfeed_render(exe, [trials[k] for k in idx])
        for k, g in zip(idx, gots):
            if not same(wants[k], g) and not beyond_int64(wants[k], g):
                return k
        return None

    changed = True
    while changed and spent[0] < budget:
        changed = False
        for node in list(V.walk(tree)):
            cands = V.candidates(node)
            if not cands:
                continue
            old = node.parts
            trials = []
            for cand in cands:
                node.parts = cand.parts
                trials.append((tree.render(), ctx))
            node.parts = old
            k = first_differing(trials)
            if k is not None:
                node.parts = cands[k].parts
                changed = True
                break
    src = tree.render()

    def shrink(make_trials):
        nonlocal ctx
        while spent[0] < budget:
            trials = make_trials()
            if not trials:
                return
            k = first_differing([(src, c) for c in trials])
            if k is None:
                return
            ctx = trials[k]

    shrink(lambda: [{k: v for k, v in ctx.items() if k != key} for key in ctx])
    for key in list(ctx):
        shrink(lambda: [dict(ctx, **{key: ctx[key][:i] + ctx[key][i + 1:]}) for i in range(len(ctx[key]))]
               if isinstance(ctx.get(key), (str, list)) else [])
    return src, ctx


def run(args):
    exe = args.exe
    deadline = time.time() + (args.minutes * 60 if args.cases is None else 3600)
    seed = args.seed if args.seed is not None else int(time.time())
    total = skipped = diffs = bigint = budget = 0
    seen = set()
    findings = open(args.findings, "a", encoding="utf-8") if args.findings else None
    started = time.time()
    batch_no = 0
    while time.time() < deadline and (args.cases is None or total < args.cases):
        trees, cases, wants = [], [], []
        n = args.batch if args.cases is None else min(args.batch, args.cases - total)
        for k in range(n):
            s = seed * 1_000_003 + batch_no * args.batch + k
            tree, ctx = G.generate(s)
            src = tree.render()
            want = jinja_render(src, ctx)
            if want is None:
                skipped += 1
                continue
            trees.append((tree, s))
            cases.append((src, ctx))
            wants.append(want)
        batch_no += 1
        got = tokfeed_render(exe, cases)
        for (tree, s), (src, ctx), want, g in zip(trees, cases, wants, got):
            total += 1
            if same(want, g):
                continue
            if beyond_int64(want, g):
                bigint += 1
                continue
            if past_budget(want, g):
                budget += 1
                continue
            diffs += 1
            if len(seen) >= args.max_findings:
                continue
            msrc, mctx = minimize(exe, tree, context_copy(ctx))
            if msrc in seen:
                continue
            seen.add(msrc)
            w = jinja_render(msrc, mctx)
            h = tokfeed_render(exe, [(msrc, mctx)])[0]
            rec = {"seed": s, "template": msrc, "context": mctx, "jinja2": w, "tokfeed": h}
            print("DIFF", json.dumps(rec, ensure_ascii=False)[:600], flush=True)
            if findings:
                findings.write(json.dumps(rec, ensure_ascii=False) + "\n")
                findings.flush()
        el = time.time() - started
        print(f"[{el:7.0f}s] cases {total} ({total / max(el, 1e-9):.0f}/s), skipped {skipped}, past 64-bit ints "
              f"{bigint}, past the step budget {budget}, differing {diffs}, "
              f"distinct minimized {len(seen)}", flush=True)
    print(f"seed {seed}: {total} cases in {time.time() - started:.0f} s, {diffs} differing, {len(seen)} minimized")
    return 0 if diffs == 0 else 1


def load_cases(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def add(args):
    have = load_cases(args.corpus) if os.path.exists(args.corpus) else []
    keys = {(c["template"], json.dumps(c["context"], sort_keys=True)) for c in have}
    n = 0
    found = load_cases(args.findings)
    gots = tokfeed_render(args.exe, [(c["template"], c["context"]) for c in found])
    with open(args.corpus, "a", encoding="utf-8") as out:
        for c, got in zip(found, gots):
            key = (c["template"], json.dumps(c["context"], sort_keys=True))
            if key in keys:
                continue
            want = jinja_render(c["template"], c["context"])
            if want is None or beyond_int64(want, got) or past_budget(want, got):
                continue
            keys.add(key)
            expect = {"text": want["text"]} if "text" in want else {"error": True}
            out.write(json.dumps({"template": c["template"], "context": c["context"], "expect": expect},
                                 ensure_ascii=False) + "\n")
            n += 1
    print(f"added {n} cases to {args.corpus}")
    return 0


def check(args):
    cases = load_cases(args.corpus)
    got = tokfeed_render(args.exe, [(c["template"], c["context"]) for c in cases])
    bad = 0
    for k, (c, g) in enumerate(zip(cases, got)):
        want = jinja_render(c["template"], c["context"])
        stored = c["expect"]
        if want is None or ("text" in want) != ("text" in stored) or want.get("text") != stored.get("text"):
            bad += 1
            print(f"case {k + 1}: the stored result is not jinja2's: stored {stored}, jinja2 {want}")
        elif not same(want, g):
            bad += 1
            print(f"case {k + 1}: tokfeed differs from jinja2\n  template {c['template']!r}\n  jinja2  {want}\n"
                  f"  tokfeed {g}")
    print(f"{len(cases) - bad}/{len(cases)} corpus cases equal to jinja2")
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("exe")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--minutes", type=float, default=1.0)
    r.add_argument("--cases", type=int)
    r.add_argument("--seed", type=int)
    r.add_argument("--batch", type=int, default=500)
    r.add_argument("--findings")
    r.add_argument("--max-findings", type=int, default=60)
    a = sub.add_parser("add")
    a.add_argument("findings")
    a.add_argument("corpus")
    c = sub.add_parser("check")
    c.add_argument("corpus")
    args = ap.parse_args()
    if not os.access(args.exe, os.X_OK):
        print(f"{args.exe} is not an executable")
        return 2
    return {"run": run, "add": add, "check": check}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
