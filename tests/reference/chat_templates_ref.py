"""The daemon's batches under every model chat template of ../shared/templates
against transformers (docs/data_model.md 2.1-2.2).

For each template folder × ../shared/templates/conversations.jsonl, tokfeedd
(template = "jinja", batch 1, no shuffle) must give, batch by batch, the
input_ids and labels the reference computes:
- text: transformers' apply_chat_template (date_string "26 Jul 2024"), ids
  from the same tokenizer.json with add_special_tokens=False;
- labels: templates with {% generation %}: transformers'
  return_assistant_tokens_mask; others: the prefix rule where it holds, else
  the provenance rule, both implemented independently on jinja2
  (label_rule_ref.py), whose text must equal apply_chat_template's;
- records the template refuses (it raises, or neither rule places an
  assistant message) are exactly the ones the daemon skips.

Records of every format the daemon reads (docs/data_model.md 1.2) are
mapped to messages and tools here, from that page (to_chat); a message's own
`"loss"` switch overrides the rule for it (2.2), here on jinja2's spans.
CONVERSATIONS_FILE names another file of records than conversations.jsonl
(edge_conversations.py writes one).

usage: [CONVERSATIONS=N] [CONVERSATIONS_FILE=F] chat_templates_ref.py TOKFEEDD TOKFEEDCTL [TEMPLATE...]
       [CONVERSATIONS=N] chat_templates_ref.py TOKFEEDD TOKFEEDCTL --builtin NAME=FOLDER...
--builtin runs the daemon with its built-in template NAME (template = "qwen2_5")
against the model's own template in FOLDER (Qwen-Qwen2.5-7B-Instruct): tool
calls, tool results and tool lists render as the model's template renders them.
Run with ${TOKFEED_HF_PYTHON}; exits 77 (skip) without ../shared or transformers.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.environ.get("TOKFEED_SHARED", os.path.normpath(os.path.join(HERE, "..", "..", "..", "shared")))
TEMPLATES = os.path.join(SHARED, "templates")
GENERATION = re.compile(r"\{%-?\s*generation\s*-?%\}")
SPECIAL = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
MAX_LENGTH = 65536

try:
    import datetime

    from transformers import PreTrainedTokenizerFast
    from transformers.utils import chat_template_utils

    import label_rule_ref
except ImportError:
    print("skip: transformers is not installed for this python")
    sys.exit(77)
if not os.path.isdir(TEMPLATES):
    print(f"skip: {TEMPLATES} is absent")
    sys.exit(77)


def token_text(v):
    return v.get("content") if isinstance(v, dict) else v


def present(rec, key):
    """A record's field, None where absent or null (data_model.md 1)."""
    return rec.get(key)


def tool_call(content):
    """ms-swift's tool_call / ShareGPT's function_call content in the HF form."""
    call = json.loads(content) if isinstance(content, str) else content
    if isinstance(call.get("function"), dict):
        return call
    return {"type": "function", "function": {"name": call["name"], "arguments": call.get("arguments", {})}}


def beyond_engine(v):
    """Whether a record holds a value the daemon refuses (docs/chat_templates.md, known
    differences): an integer outside 64 bits, or a string with a lone surrogate (`\\ud800`)."""
    if isinstance(v, bool):
        return False
    if isinstance(v, int):
        return not -(2**63) <= v < 2**63
    if isinstance(v, str):
        return any(0xD800 <= ord(c) <= 0xDFFF for c in v)
    if isinstance(v, dict):
        return any(beyond_engine(k) for k in v) or any(beyond_engine(x) for x in v.values())
    if isinstance(v, list):
        return any(beyond_engine(x) for x in v)
    return False


def to_chat(rec):
    """(messages, tools) as docs/data_model.md 1.2 maps a record under a model's template."""
    if beyond_engine(rec):
        raise ValueError("a value the engine does not hold")
    msgs, tools = to_messages(rec)
    if beyond_engine([msgs, tools]):  # in tools or a tool call given as a JSON string
        raise ValueError("a value the engine does not hold")
    return msgs, tools


def to_messages(rec):
    tools = present(rec, "tools")
    if isinstance(tools, str):
        tools = json.loads(tools)
    if present(rec, "messages") is not None or present(rec, "conversations") is not None:
        sharegpt = present(rec, "messages") is None
        msgs = []
        for t in rec["conversations" if sharegpt else "messages"]:
            if sharegpt:
                role = {"human": "user", "gpt": "assistant"}.get(t["from"], t["from"])
                m = {"role": role, **{("content" if k == "value" else k): v for k, v in t.items() if k != "from"}}
            else:
                m = dict(t)
            role = m["role"]
            if role in ("tool_call", "function_call"):
                call = tool_call(m.get("content", m.get("value")))
                prev = msgs[-1] if msgs else None
                if prev is not None and prev.get("_mapped"):
                    prev["tool_calls"].append(call)
                    continue
                a = {"role": "assistant", "content": "", "tool_calls": [call], "_mapped": True}
                if "loss" in m:
                    a["loss"] = m["loss"]
                msgs.append(a)
                continue
            if role in ("tool_response", "observation"):
                m["role"] = "tool"
            msgs.append(m)
        for m in msgs:
            m.pop("_mapped", None)
        system = present(rec, "system")
        if isinstance(system, str) and msgs[0].get("role") != "system":
            msgs.insert(0, {"role": "system", "content": system})
        return msgs, tools
    # alpaca and query/response: section 1's conversation.
    msgs = []
    if isinstance(present(rec, "system"), str):
        msgs.append({"role": "system", "content": rec["system"]})
    if present(rec, "instruction") is not None and present(rec, "output") is not None:
        user = rec["instruction"]
        if present(rec, "input"):
            user += "\n" + rec["input"]
        msgs += [{"role": "user", "content": user}, {"role": "assistant", "content": rec["output"]}]
    else:
        for q, r in present(rec, "history") or []:
            msgs += [{"role": "user", "content": q}, {"role": "assistant", "content": r}]
        msgs += [{"role": "user", "content": rec["query"]}, {"role": "assistant", "content": rec["response"]}]
    return msgs, tools


def switches(msgs):
    """Per message: whether it trains (assistant messages), its own bool
    `"loss"` overriding (data_model.md 2.2)."""
    out = []
    for m in msgs:
        train = m.get("role") == "assistant"
        if isinstance(m.get("loss"), bool):
            train = m["loss"]
        out.append(train)
    return out


def region(rule, msgs, tools, i, full, pieces, seen):
    """Message i's trained text by (b), else (c); None where neither places it."""
    b = label_rule_ref.prefix_region(rule, msgs, tools, i, full)
    if b is not None:
        return [b] if b[0] < b[1] else []
    return label_rule_ref.provenance_region(rule, msgs, tools, i, full, pieces, seen)


def subtract(spans, b, e):
    out = []
    for s, f in spans:
        if f <= b or s >= e:
            out.append((s, f))
            continue
        if s < b:
            out.append((s, b))
        if f > e:
            out.append((e, f))
    return out


class Reference:
    def __init__(self, folder, tokenizer_json):
        cfg = json.load(open(os.path.join(folder, "tokenizer_config.json"), encoding="utf-8"))
        tmpl = cfg["chat_template"]
        if isinstance(tmpl, list):
            tmpl = {t["name"]: t["template"] for t in tmpl}["default"]
        self.template = tmpl
        self.generation = bool(GENERATION.search(tmpl))
        # strftime_now formats a fixed instant, as the daemon's template_time
        # (default 2024-07-26); transformers caches the compiled template.
        fixed = datetime.datetime(2024, 7, 26)
        chat_template_utils._compile_jinja_template(tmpl).environment.globals["strftime_now"] = fixed.strftime
        self.tok = PreTrainedTokenizerFast(tokenizer_file=tokenizer_json)
        self.kwargs = {k: token_text(cfg[k]) for k in SPECIAL if cfg.get(k) is not None}
        self.kwargs["date_string"] = "26 Jul 2024"
        self.rule = label_rule_ref.Template(folder)

    def render(self, msgs, tools, gen):
        return self.tok.apply_chat_template(msgs, tools=tools, chat_template=self.template, tokenize=False,
                                            add_generation_prompt=gen, **self.kwargs)

    def encode(self, rec):
        """(ids, labels), or None when the template refuses the record."""
        try:
            msgs, tools = to_chat(rec)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError):
            return None  # a record the mapping refuses
        try:
            text = self.render(msgs, tools, False)
        except Exception:  # noqa: BLE001 - a template error is a refused record
            return None
        enc = self.tok(text, add_special_tokens=False, return_offsets_mapping=True)
        ids = enc["input_ids"]
        if self.generation:
            out = self.tok.apply_chat_template(msgs, tools=tools, chat_template=self.template, tokenize=True,
                                               return_dict=True, return_assistant_tokens_mask=True, **self.kwargs)
            assert out["input_ids"] == ids, "apply_chat_template's ids differ from the text's"
            mask = out["assistant_masks"]
            train = switches(msgs)
            overrides = [i for i, m in enumerate(msgs) if train[i] != (m.get("role") == "assistant")]
            if not overrides:
                return ids, [t if m else -100 for t, m in zip(ids, mask)]
            # A switch: the blocks' text, plus or less the switched messages' regions.
            rendered, gen = chat_template_utils.render_jinja_template(
                conversations=[chat_template_utils._normalize_chat_messages(msgs)], tools=tools,
                chat_template=self.template, return_assistant_tokens_mask=True, **self.kwargs)
            assert rendered[0] == text
            spans = list(gen[0])
            pieces = []
            full = self.rule.render(msgs, tools, False, pieces)
            seen = set(self.rule.prov.seen)
            for i in overrides:
                r = region(self.rule, msgs, tools, i, full, pieces, seen)
                if r is None:
                    return None
                for b, e in r:
                    spans = spans + [(b, e)] if train[i] else subtract(spans, b, e)
            # Tokens as return_assistant_tokens_mask marks them: each that ends
            # after a span's start, among the spans that end after it starts
            # (an empty block inside a token marks it).
            spans.sort()
            labels = []
            for t, (b, e) in zip(ids, enc["offset_mapping"]):
                hit = any(f > b and e > s for s, f in spans)
                labels.append(t if hit else -100)
            return ids, labels
        else:
            # The prefix rule, else the provenance rule, in characters.
            if any(isinstance(m.get("loss"), bool) for m in msgs):
                pieces = []
                try:
                    full = self.rule.render(msgs, tools, False, pieces)
                except Exception:  # noqa: BLE001
                    return None
                seen = set(self.rule.prov.seen)
                spans = []
                for i, train in enumerate(switches(msgs)):
                    if train:
                        r = region(self.rule, msgs, tools, i, full, pieces, seen)
                        if r is None:
                            return None
                        spans += r
                r = (full, spans)
            else:
                r = label_rule_ref.trained_spans(self.rule, msgs, tools)
            if r is None:
                return None
            assert r[0] == text, "jinja2 with provenance renders other text than apply_chat_template"
            spans = r[1]
        labels = []
        for t, (b, e) in zip(ids, enc["offset_mapping"]):
            hit = any(max(b, s) < min(e, f) or (b == e and s <= b < f) for s, f in spans)
            labels.append(t if hit else -100)
        return ids, labels


def run_daemon(tokfeedd, tokfeedctl, folder, tokenizer_json, conversations, n, builtin=None):
    d = tempfile.mkdtemp(prefix="tokfeed-tmpl-")
    template = (f'template = "{builtin}"' if builtin else
                f'template = "jinja"\nchat_template = "{os.path.join(folder, "tokenizer_config.json")}"\n'
                'template_kwargs = { date_string = "26 Jul 2024" }')
    try:
        sock = os.path.join(d, "d.sock")
        job = os.path.join(d, "job.toml")
        with open(job, "w", encoding="utf-8") as f:
            f.write(f"""[dataset]
path = "{conversations}"
on_bad_record = "skip"
[tokenizer]
type = "hf"
path = "{tokenizer_json}"
{template}
[batch]
size = 1
max_length = {MAX_LENGTH}
keep_untrained = true
[schedule]
shuffle = false
[workers]
count = 1
[cache]
enabled = false
[server]
socket = "{sock}"
shm_prefix = "tmpl-{uuid.uuid4().hex[:10]}"
""")
        log = open(os.path.join(d, "log"), "w")
        proc = subprocess.Popen([tokfeedd, "--config", job], stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 120
            while True:
                if proc.poll() is not None:
                    return None, open(os.path.join(d, "log")).read()[-2000:]
                if os.path.exists(sock) and subprocess.run([tokfeedctl, "-s", sock, "status"], capture_output=True).returncode == 0:
                    break
                if time.monotonic() > deadline:
                    return None, "tokfeedd did not become ready"
                time.sleep(0.05)
            r = subprocess.run([tokfeedctl, "-s", sock, "dump", "--count", str(n)], capture_output=True, text=True)
            if r.returncode != 0:
                return None, r.stderr + open(os.path.join(d, "log")).read()[-2000:]
            batches = [json.loads(l) for l in r.stdout.splitlines() if l.strip()]
            return [(b["input_ids"][0], b["labels"][0]) for b in batches], ""
        finally:
            subprocess.run([tokfeedctl, "-s", sock, "shutdown"], capture_output=True)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
            log.close()
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main():
    tokfeedd, tokfeedctl = sys.argv[1], sys.argv[2]
    builtins = {}
    if sys.argv[3:4] == ["--builtin"]:
        builtins = dict(a.split("=", 1) for a in sys.argv[4:])
        names = list(builtins.values())
        builtin_of = {folder: name for name, folder in builtins.items()}
    else:
        names = sys.argv[3:] or sorted(x for x in os.listdir(TEMPLATES) if os.path.isdir(os.path.join(TEMPLATES, x)))
        builtin_of = {}
    conversations = os.environ.get("CONVERSATIONS_FILE") or os.path.join(TEMPLATES, "conversations.jsonl")
    # JSONL lines end at "\n" alone (str.splitlines would also split at U+2028 inside a string).
    lines = [l for l in open(conversations, encoding="utf-8", newline="").read().split("\n") if l.strip()]
    limit = int(os.environ.get("CONVERSATIONS", len(lines)))
    if limit < len(lines):  # a sample, for ctest's time budget
        conversations = os.path.join(tempfile.mkdtemp(prefix="tokfeed-conv-"), "conversations.jsonl")
        open(conversations, "w", encoding="utf-8").write("\n".join(lines[:limit]) + "\n")
    records = [json.loads(l) for l in lines[:limit]]
    passing = 0
    label_eq = label_total = 0
    for name in names:
        folder = os.path.join(TEMPLATES, name)
        manifest = json.load(open(os.path.join(folder, "manifest.json")))
        tokenizer_json = os.path.join(SHARED, "tokenizers", manifest["tokenizer"], "tokenizer.json")
        ref = Reference(folder, tokenizer_json)
        want = [x for x in (ref.encode(r) for r in records) if x is not None]
        got, err = run_daemon(tokfeedd, tokfeedctl, folder, tokenizer_json, conversations, max(len(want), 1),
                              builtin_of.get(name))
        if name in builtin_of:
            tools = sum(1 for r in map(to_chat, records) if r[1] or any(m["role"] == "tool" or m.get("tool_calls")
                                                                         for m in r[0]))
            print(f"     built-in '{builtin_of[name]}' vs {name}: {tools} of {len(records)} conversations "
                  "have tools, tool calls or tool results")
        if got is None and not want and "no valid records" in err:
            passing += 1  # the template refuses every conversation, and the daemon says so
            print(f"ok   {name}: 0 samples, {len(records)} refused (the daemon refuses to start: no valid records)")
            continue
        if got is None:
            print(f"FAIL {name}: the daemon did not serve: {err.strip()[-600:]}")
            continue
        ids_ok = len(got) == len(want) and all(g[0] == w[0] for g, w in zip(got, want))
        leq = sum(1 for g, w in zip(got, want) if g == w)
        label_eq += leq
        label_total += len(want)
        if ids_ok and leq == len(want):
            passing += 1
            print(f"ok   {name}: {len(want)} samples, {len(records) - len(want)} refused")
        else:
            first = next((k for k, (g, w) in enumerate(zip(got, want)) if g != w), min(len(got), len(want)))
            print(f"FAIL {name}: daemon {len(got)} samples, reference {len(want)}; first difference at sample {first}; "
                  f"{leq}/{len(want)} equal")
    print(f"templates passing: {passing}/{len(names)}; samples with equal ids and labels: {label_eq}/{label_total}")
    return 0 if passing == len(names) else 1


if __name__ == "__main__":
    sys.exit(main())
