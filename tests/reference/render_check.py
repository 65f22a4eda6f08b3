#!/usr/bin/python3
"""Rendering check: tokfeed's template text == the model's own Jinja chat_template.

For each dataset, every valid record (read by tokfeed_ref.py) is rendered with
the chat_template of <tokenizer-dir>/tokenizer_config.json (jinja2, the way
HF's apply_chat_template runs it, add_generation_prompt=False) and compared,
character for character, with what `tokfeedd render` prints for the same job.

    render_check.py --tokfeedd PATH --template qwen3 --tokenizer-dir DIR DATASET...

Exit codes: 0 all identical, 1 some differ (each is shown), 77 skipped
(the tokenizer directory or jinja2 is missing).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tokfeed_ref  # noqa: E402

SKIP = 77


def jinja_template(source):
    """A jinja2 template set up as HF transformers sets up chat templates."""
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = lambda x, **kw: json.dumps(x, ensure_ascii=False, **kw)
    env.globals["raise_exception"] = raise_exception
    return env.from_string(source)


def special_tokens(tok_cfg):
    out = {}
    for key in ("bos_token", "eos_token", "pad_token", "unk_token"):
        v = tok_cfg.get(key)
        out[key] = v.get("content") if isinstance(v, dict) else v
    return out


def write_job(dirname, dataset, template, tokenizer_json):
    path = os.path.join(dirname, "job.toml")
    with open(path, "w", encoding="utf-8") as f:
        f.write(f'[dataset]\npath = {json.dumps(dataset)}\n'
                f'[tokenizer]\ntype = "hf"\npath = {json.dumps(tokenizer_json)}\n'
                f'template = "{template}"\n')
    return path


def first_difference(a, b):
    n = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return n, a[max(0, n - 20):n + 40], b[max(0, n - 20):n + 40]


def check_dataset(args, tmpl, specials, dataset):
    with tempfile.TemporaryDirectory() as tmp:
        job = write_job(tmp, os.path.abspath(dataset), args.template,
                        os.path.join(os.path.abspath(args.tokenizer_dir), "tokenizer.json"))
        ours = subprocess.run([args.tokfeedd, "render", "--config", job], check=True,
                              capture_output=True, text=True, encoding="utf-8").stdout
        convs, _ = tokfeed_ref.load_dataset(tokfeed_ref.load_config(job))
    ours = [json.loads(line) for line in ours.splitlines()]
    if len(ours) != len(convs):
        print(f"{dataset}: tokfeedd rendered {len(ours)} records, the reference read {len(convs)}")
        return 0, max(len(ours), len(convs))
    same = differ = 0
    for i, (conv, text) in enumerate(zip(convs, ours)):
        if isinstance(conv, tokfeed_ref.LateBad) or text is None:
            # A record checked when read and found bad: both must say so.
            ok = isinstance(conv, tokfeed_ref.LateBad) and text is None
            same, differ = same + ok, differ + (not ok)
            if not ok:
                print(f"{dataset}: valid record {i}: bad on one side only ({conv!r}, {text!r})")
            continue
        if isinstance(conv, tokfeed_ref.Plain):
            # No template: the text, the eos text after it unless there (data_model.md 1.3).
            eos = specials.get("eos_token") or ""
            want = (conv.prompt or "") + conv.text + ("" if conv.text.endswith(eos) else eos)
        else:
            messages = [{"role": role, "content": content} for role, content in conv]
            want = tmpl.render(messages=messages, add_generation_prompt=False, **specials)
        if want == text:
            same += 1
            continue
        differ += 1
        at, w, g = first_difference(want, text)
        print(f"{dataset}: valid record {i}: differs at character {at}\n"
              f"  template: {w!r}\n  tokfeed:  {g!r}")
    print(f"{dataset}: {args.template}: {same} identical, {differ} different")
    return same, differ


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokfeedd", required=True)
    ap.add_argument("--template", required=True, help="tokfeed's template name")
    ap.add_argument("--tokenizer-dir", required=True, help="holds tokenizer.json and tokenizer_config.json")
    ap.add_argument("datasets", nargs="+")
    args = ap.parse_args()
    cfg_path = os.path.join(args.tokenizer_dir, "tokenizer_config.json")
    if not os.path.exists(cfg_path):
        print(f"{cfg_path} is absent; skipped")
        return SKIP
    try:
        import jinja2  # noqa: F401
    except ImportError:
        print("jinja2 is not importable; skipped")
        return SKIP
    with open(cfg_path, encoding="utf-8") as f:
        tok_cfg = json.load(f)
    tmpl = jinja_template(tok_cfg["chat_template"])
    differ = 0
    for dataset in args.datasets:
        differ += check_dataset(args, tmpl, special_tokens(tok_cfg), dataset)[1]
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
