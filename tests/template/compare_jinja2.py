"""Renders every chat template in a templates folder with Python jinja2 in
transformers' environment and with tokfeed's engine (template_render), over
every conversation and its prefixes, and reports where they differ.

usage: compare_jinja2.py TEMPLATE_RENDER TEMPLATES_DIR [NAME...]
Needs transformers (run it with ${TOKFEED_HF_PYTHON}). A development and
CI check of the engine alone; tests/reference/ checks the daemon's batches.
"""
import datetime
import json
import os
import re
import subprocess
import sys
import tempfile

from transformers.utils import chat_template_utils as ctu

GENERATION_TAG = re.compile(r"\{%-?\s*generation\s*-?%\}")
FIXED_NOW = datetime.datetime(2024, 7, 26)
SPECIAL = ("bos_token", "eos_token", "unk_token", "pad_token")


def token_text(v):
    return v.get("content") if isinstance(v, dict) else v


def load_template(folder):
    cfg = json.load(open(os.path.join(folder, "tokenizer_config.json"), encoding="utf-8"))
    tmpl = cfg["chat_template"]
    if isinstance(tmpl, list):
        named = {t["name"]: t["template"] for t in tmpl}
        tmpl = named.get("default", next(iter(named.values())))
    specials = {k: token_text(cfg[k]) for k in SPECIAL if cfg.get(k) is not None}
    return tmpl, specials


def contexts(conversations, specials):
    """(messages, tools, add_generation_prompt) cases: each conversation whole,
    and each prefix ending before an assistant turn with the generation prompt."""
    for conv in conversations:
        msgs, tools = conv["messages"], conv.get("tools")
        yield msgs, tools, False
        for i, m in enumerate(msgs):
            if m["role"] == "assistant" and i > 0:
                yield msgs[:i], tools, True
                yield msgs[: i + 1], tools, False


def py_render(compiled, tmpl, msgs, tools, gen, specials):
    chat = ctu._alias_reasoning_fields(ctu._plain_template_data(msgs))
    kwargs = dict(specials, date_string="26 Jul 2024")
    try:
        if GENERATION_TAG.search(tmpl):
            text, idx = ctu._render_with_assistant_indices(
                compiled_template=compiled, messages=chat, tools=tools, documents=None, add_generation_prompt=gen, **kwargs
            )
            # char → byte offsets
            b = [len(text[:i].encode()) for i in range(len(text) + 1)]
            return {"text": text, "generation": [[b[s], b[e]] for s, e in idx]}
        return {"text": compiled.render(messages=chat, tools=tools, documents=None, add_generation_prompt=gen, **kwargs)}
    except Exception as e:  # noqa: BLE001 - any failure is a refused record
        return {"error": f"{type(e).__name__}: {e}"}


def main():
    exe, tdir = sys.argv[1], sys.argv[2]
    if not os.path.isdir(tdir):
        print(f"skip: {tdir} is absent")
        sys.exit(77)
    names = sys.argv[3:] or sorted(d for d in os.listdir(tdir) if os.path.isdir(os.path.join(tdir, d)))
    convs = [json.loads(l) for l in open(os.path.join(tdir, "conversations.jsonl"), encoding="utf-8")]
    convs = convs[: int(os.environ.get("CONVERSATIONS", len(convs)))]
    total_ok = 0
    for name in names:
        tmpl, specials = load_template(os.path.join(tdir, name))
        compiled = ctu._compile_jinja_template(tmpl)
        compiled.environment.globals["strftime_now"] = lambda f: FIXED_NOW.strftime(f)
        cases = list(contexts(convs, specials))
        with tempfile.TemporaryDirectory() as d:
            tf, cf = os.path.join(d, "t.jinja"), os.path.join(d, "c.jsonl")
            open(tf, "w", encoding="utf-8").write(tmpl)
            with open(cf, "w", encoding="utf-8") as f:
                for msgs, tools, gen in cases:
                    chat = ctu._alias_reasoning_fields(ctu._plain_template_data(msgs))
                    ctx = dict(specials, date_string="26 Jul 2024", messages=chat, tools=tools, documents=None,
                               add_generation_prompt=gen)
                    f.write(json.dumps(ctx, ensure_ascii=False) + "\n")
            got = [json.loads(l) for l in subprocess.run([exe, tf, cf], capture_output=True, text=True, check=True).stdout.splitlines()]
        if got and "load_error" in got[0]:
            print(f"{name}: LOAD ERROR {got[0]['load_error']}")
            continue
        bad = 0
        first = None
        for k, (case, g) in enumerate(zip(cases, got)):
            want = py_render(compiled, tmpl, *case, specials)
            same = ("error" in want) == ("error" in g) and want.get("text") == g.get("text") and want.get("generation") == g.get("generation")
            if not same:
                bad += 1
                if first is None:
                    first = (k, want, g)
        ok = bad == 0
        total_ok += ok
        print(f"{name}: {len(cases) - bad}/{len(cases)} equal")
        if first and "-v" not in names:
            k, want, g = first
            print(f"   first diff at case {k}:")
            w, h = json.dumps(want, ensure_ascii=False), json.dumps(g, ensure_ascii=False)
            at = next((i for i in range(min(len(w), len(h))) if w[i] != h[i]), min(len(w), len(h)))
            print("   want:", w[max(0, at - 200): at + 300])
            print("   got: ", h[max(0, at - 200): at + 300])
    print(f"templates equal on every case: {total_ok}/{len(names)}")
    return 0 if total_ok == len(names) else 1


if __name__ == "__main__":
    sys.exit(main())
