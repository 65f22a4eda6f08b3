"""The values a dataset carries into a chat template, tokfeed against
transformers (docs/chat_templates.md, "Values from records").

Writes random records (JSONL, deterministic from the seed) whose tool call
arguments, tool schemas, string contents and extra message keys hold the
JSON values datasets have and templates print: numbers as datasets write
them (`-0`, `-0.0`, `1E+2`, `1.0`, `1e16`, `5e-324`, 64-bit edges,
integers past 64 bits, `1e400`, and `NaN`, `Infinity` as json.dumps
writes them), strings with every escape (`\\u0000`, `\\/`, surrogate
pairs, lone surrogates), non-BMP characters, combining marks, RTL, long
text, invalid UTF-8; nested dicts and lists, empty ones,
null, booleans, duplicate keys and keys in any order; tools with enums of
numbers, float and null defaults, descriptions with quotes and newlines.

Each record is rendered by transformers' apply_chat_template on
`json.loads(record)` mapped to messages as data_model.md 1.2 says
(chat_templates_ref.to_messages) and by `tokfeedd render` (the daemon's own
path: the JSONL reader, simdjson, the record mapping, the engine), over
every template of ../shared/templates. Every text must be equal, or the
record refused by tokfeed where transformers raises (or gives text that
no tokenizer takes). A record holding what the engine does not hold (an
integer outside 64 bits, a lone surrogate, which UTF-8 cannot encode)
must be refused with a reason that says so (docs/chat_templates.md, known
differences).

usage: json_values_diff.py TOKFEEDD [--seed N] [--count N] [--write FILE] [--show N] [TEMPLATE...]
       json_values_diff.py --write FILE [--seed N] [--count N]   (the records alone)
Run with ${TOKFEED_HF_PYTHON}; exits 77 (skip) without ../shared or transformers.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

# --- the records -----------------------------------------------------------

# Number literals as datasets write them; Python reads each as int or float.
NUMBERS = [
    "0", "-0", "1", "-1", "7", "42", "-17", "255", "256", "1000000", "2147483648", "4294967296",
    "9007199254740992", "9007199254740993", "9223372036854775807", "-9223372036854775808",
    "0.0", "-0.0", "1.0", "-1.0", "0.1", "0.2", "0.30000000000000004", "1.5", "-2.5", "3.14159",
    "2.675", "0.5", "1.25", "1e5", "1E5", "1e+5", "1E+2", "1e-5", "1e-7", "1.5e-7", "0.0001", "0.00001",
    "1e15", "1e16", "1e17", "1e21", "1e22", "123456789.123456789", "1234567890123456789.0",
    "9007199254740993.0", "5e-324", "2.5e-324", "1e-320", "2.2250738585072014e-308",
    "1.7976931348623157e308", "1e308", "100.0", "12.50", "1.0e0", "-0e0", "0e10", "-0.0e-5", "4.35",
    "99.99", "1e2", "-1e-3", "6.02214076e23", "1.0000000000000002", "0.9999999999999999",
]
# What json.loads reads beyond JSON (json.dumps writes NaN and Infinity).
PYTHON_ONLY = ["NaN", "Infinity", "-Infinity", "1e400", "-1e400", "1E999", "-1.5e309"]
# Past what the engine holds (a bad record in tokfeed, known difference).
BEYOND = ["9223372036854775808", "18446744073709551615", "18446744073709551616", "-9223372036854775809",
          "123456789012345678901234567890"]

# Text pieces: (Python str). Lone surrogates are written as escapes only.
PIECES = [
    "hello", "Hello, World!", "a b  c", " leading", "trailing ", "", "x", "42", "-0", "1e5", "True", "None",
    "null", "true", "it's", 'say "hi"', "back\\slash", "C:\\path\\to\\file", "tab\there", "line\nbreak",
    "cr\rlf\r\n", "\b\f", "nul\x00byte", "\x01\x1f\x7f", "\u0085next", "\u00a0nbsp", "\u2028\u2029",
    "caf\u00e9", "e\u0301", "n\u0303a\u0308\u0304", "\u0915\u094d\u0937", "\u0645\u0631\u062d\u0628\u0627",
    "\u05e9\u05dc\u05d5\u05dd", "\u200fRTL\u200f", "abc \u202e\u062a\u0645\u202c def", "\u4e2d\u6587",
    "\u6771\u4eac", "\uac00\ud7a3", "\U0001F600", "\U0001F468\u200d\U0001F469\u200d\U0001F467",
    "\U0001F1EB\U0001F1F7", "\U0001D54F", "\U00010348", "\U0010FFFF", "\ufeffbom", "\ufffd", "\uffff",
    "{{ x }}", "{% if %}", "{#", "<|im_end|>", "</s>", "<tool_call>", "</think>", "&amp;<b>", "%s %d %%",
    "{0} {name}", "'", '"', "\\", "/", "</script>",
]
KEYS = ["a", "b", "name", "value", "x", "count", "query", "path", "items", "", "key with space",
        "\u00fcber", "\U0001F600", "a.b", "0", "1", "type", "content", "arguments", "None", "true", "_x", "-"]
TYPES = ["string", "integer", "number", "boolean", "array", "object", "null"]


class Raw:
    """A JSON text written as it is (a number literal, an escaped string)."""

    def __init__(self, text):
        self.text = text


class Dup:
    """A JSON object written with its pairs as given: duplicate keys allowed."""

    def __init__(self, pairs):
        self.pairs = pairs


def esc_char(rng, c):
    """One character of a JSON string, in one of the forms JSON allows."""
    o = ord(c)
    short = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r", "\b": "\\b", "\f": "\\f"}
    if c in short:
        return short[c]
    if o < 0x20:
        return f"\\u{o:04x}"
    if c == "/" and rng.random() < 0.5:
        return "\\/"
    r = rng.random()
    if r < 0.15:
        if o > 0xFFFF:
            v = o - 0x10000
            hi, lo = 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF)
            return (f"\\u{hi:04x}\\u{lo:04x}" if rng.random() < 0.5 else f"\\u{hi:04X}\\u{lo:04X}")
        return f"\\u{o:04x}" if rng.random() < 0.5 else f"\\u{o:04X}"
    return c


def jstr(rng, s):
    return Raw('"' + "".join(esc_char(rng, c) for c in s) + '"')


# At a text's ends, where templates `trim` (str.strip: what str.isspace calls whitespace) or test prefixes.
EDGES = ["", "", "", " ", "\n", "\t", "\r\n", "\x1c", "\x1f", "\x85", "\xa0", "\u2003", "\u3000", "\u2028",
         "\u200b", "\u180e", "\ufeff", "\x0b\x0c", "<think>", "</think>\n\n", "  \n "]


def text(rng, long_ok=True):
    r = rng.random()
    if long_ok and r < 0.03:
        # A long text: thousands of pieces.
        return "".join(rng.choice(PIECES) for _ in range(rng.randint(300, 1500)))
    return rng.choice(EDGES) + "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 4))) + rng.choice(EDGES)


def string(rng, beyond):
    """A JSON string; with `beyond`, sometimes a lone surrogate escape."""
    s = text(rng)
    if beyond and rng.random() < 0.25:
        lone = rng.choice(["\\ud800", "\\udfff", "\\ud83d", "\\ude00", "\\uDBFF"])
        at = rng.randint(0, len(s))
        body = "".join(esc_char(rng, c) for c in s[:at]) + lone + "".join(esc_char(rng, c) for c in s[at:])
        return Raw('"' + body + '"')
    return jstr(rng, s)


def number(rng, beyond):
    if beyond and rng.random() < 0.3:
        return Raw(rng.choice(BEYOND))
    if rng.random() < 0.03:
        return Raw(rng.choice(PYTHON_ONLY))
    if rng.random() < 0.2:
        return Raw(str(rng.randint(-(2**63), 2**63 - 1)) if rng.random() < 0.5 else repr(rng.uniform(-1e6, 1e6)))
    return Raw(rng.choice(NUMBERS))


def value(rng, depth, beyond):
    r = rng.random()
    if depth <= 0 or r < 0.55:
        k = rng.random()
        if k < 0.4:
            return number(rng, beyond)
        if k < 0.75:
            return string(rng, beyond)
        if k < 0.87:
            return rng.choice([True, False])
        return None
    if r < 0.78:
        return obj(rng, depth - 1, beyond)
    return [value(rng, depth - 1, beyond) for _ in range(rng.choice([0, 0, 1, 2, 3, 5]))]


def obj(rng, depth, beyond):
    n = rng.choice([0, 0, 1, 2, 3, 4, 6])
    pairs = [(rng.choice(KEYS), value(rng, depth, beyond)) for _ in range(n)]
    if pairs and rng.random() < 0.15:  # a duplicate key: Python keeps the last value, at the first's place
        pairs.append((pairs[0][0], value(rng, depth, beyond)))
    return Dup(pairs)


def dump(v):
    if isinstance(v, Raw):
        return v.text
    if isinstance(v, Dup):
        return "{" + ", ".join(json.dumps(k, ensure_ascii=False) + ": " + dump(x) for k, x in v.pairs) + "}"
    if isinstance(v, dict):
        return "{" + ", ".join(json.dumps(k, ensure_ascii=False) + ": " + dump(x) for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(dump(x) for x in v) + "]"
    return json.dumps(v, ensure_ascii=False)


def tool(rng, name, beyond):
    props = {}
    for _ in range(rng.randint(0, 4)):
        p = {"type": rng.choice(TYPES)}
        if rng.random() < 0.6:
            p["description"] = jstr(rng, rng.choice(["The value.", 'A "quoted" name', "line one\nline two",
                                                     "tab\tand back\\slash", "\u00fcber \U0001F600", text(rng, False)]))
        if rng.random() < 0.35:
            p["enum"] = [number(rng, beyond) if rng.random() < 0.6 else string(rng, beyond)
                         for _ in range(rng.randint(0, 4))]
        if rng.random() < 0.35:
            p["default"] = rng.choice([number(rng, beyond), None, Raw("1.0"), Raw("0.5"), Raw("-0.0"),
                                       rng.choice([True, False]), string(rng, beyond), Dup([])])
        if rng.random() < 0.2:
            p["items"] = {"type": rng.choice(TYPES)}
        if rng.random() < 0.15:
            p["minimum"], p["maximum"] = number(rng, beyond), number(rng, beyond)
        props[rng.choice(KEYS) or "p"] = p
    params = {"type": "object", "properties": props}
    if props and rng.random() < 0.6:
        params["required"] = rng.sample(sorted(props), rng.randint(1, len(props)))
    fn = {"name": name, "description": jstr(rng, text(rng, False) or "A tool."), "parameters": params}
    if rng.random() < 0.2:
        fn["x-extra"] = value(rng, 2, beyond)
    return {"type": "function", "function": fn}


def record(rng):
    """One record (the JSON text), and whether it holds a value past the engine's."""
    beyond = rng.random() < 0.08
    names = [rng.choice(["get_weather", "search", "calc", "lookup_\u00fcber", "f"]) + str(i)
             for i in range(rng.randint(1, 3))]
    use_tools = rng.random() < 0.6
    msgs = []
    if rng.random() < 0.4:
        msgs.append({"role": "system", "content": string(rng, beyond)})
    for turn in range(rng.randint(1, 2)):
        u = {"role": "user", "content": string(rng, beyond) if rng.random() < 0.93 else value(rng, 2, beyond)}
        if rng.random() < 0.15:
            u[rng.choice(["name", "metadata", "extra", "score"])] = value(rng, 2, beyond)
        msgs.append(u)
        if use_tools and rng.random() < 0.7:
            calls = []
            for k in range(rng.randint(1, 2)):
                args = obj(rng, 3, beyond)
                if rng.random() < 0.2:  # arguments as a JSON string, as OpenAI's API gives them
                    args = jstr(rng, dump(args))
                fn = {"name": rng.choice(names), "arguments": args}
                call = {"type": "function", "function": fn}
                if rng.random() < 0.7:
                    call["id"] = f"call_{turn}_{k}" if rng.random() < 0.8 else number(rng, beyond)
                calls.append(call)
            a = {"role": "assistant", "tool_calls": calls}
            a["content"] = rng.choice([Raw('""'), None, string(rng, beyond)]) if rng.random() < 0.7 else Raw('""')
            if a["content"] is None and rng.random() < 0.5:
                del a["content"]
            msgs.append(a)
            for k, c in enumerate(calls):
                r = rng.random()
                t = {"role": "tool", "content": (string(rng, beyond) if r < 0.6 else jstr(rng, dump(obj(rng, 2, beyond)))
                                                 if r < 0.85 else value(rng, 3, beyond))}
                if rng.random() < 0.6:
                    t["tool_call_id"] = f"call_{turn}_{k}" if rng.random() < 0.8 else number(rng, beyond)
                if rng.random() < 0.5:
                    t["name"] = c["function"]["name"]
                msgs.append(t)
        a = {"role": "assistant", "content": string(rng, beyond) if rng.random() < 0.95 else value(rng, 2, beyond)}
        if rng.random() < 0.15:
            a[rng.choice(["weight", "meta", "tags"])] = value(rng, 2, beyond)
        if rng.random() < 0.1:
            a["reasoning_content"] = string(rng, beyond)
        msgs.append(a)
    # A message's keys in another order now and then.
    for i, m in enumerate(msgs):
        if rng.random() < 0.1:
            items = list(m.items())
            rng.shuffle(items)
            msgs[i] = dict(items)
    if rng.random() < 0.1:
        # ms-swift's agent form: tool calls and results as messages of their own, a call's content a JSON string.
        swift = []
        for m in msgs:
            if m.get("tool_calls"):
                for c in m["tool_calls"]:
                    f = c["function"]
                    call = Dup([("name", f["name"]), ("arguments", f["arguments"])])
                    swift.append({"role": "tool_call", "content": jstr(rng, dump(call)) if rng.random() < 0.8 else call})
            elif m["role"] == "tool":
                swift.append({"role": "tool_response", "content": m["content"]})
            else:
                swift.append(m)
        msgs = swift
    rec = {"messages": msgs}
    if rng.random() < 0.05:
        rec["system"] = string(rng, beyond)
    if use_tools:
        rec["tools"] = [tool(rng, n, beyond) for n in names]
        if rng.random() < 0.1:
            rec["tools"] = jstr(rng, dump(rec["tools"]))
    items = list(rec.items())
    if rng.random() < 0.3:
        items.reverse()
    return dump(dict(items)), beyond


def records(seed, count):
    """The record lines (bytes): a few with invalid UTF-8 in a string."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        line, _ = record(rng)
        b = line.encode("utf-8", "surrogatepass")
        if rng.random() < 0.02:
            at = b.find(b'"content": "')
            if at >= 0:
                at += len(b'"content": "')
                b = b[:at] + rng.choice([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xe2\x82", b"\xf8\x88\x80\x80\x80"]) + b[at:]
        out.append(b)
    return out


# --- the comparison --------------------------------------------------------


def beyond_engine(v):
    if isinstance(v, bool):
        return False
    if isinstance(v, int):
        return not -(2**63) <= v < 2**63
    if isinstance(v, dict):
        return any(beyond_engine(x) for x in v.values())
    if isinstance(v, list):
        return any(beyond_engine(x) for x in v)
    return False


def lone_surrogate(s):
    return any(0xD800 <= ord(c) <= 0xDFFF for c in s)


def holds_lone_surrogate(v):
    if isinstance(v, str):
        return lone_surrogate(v)
    if isinstance(v, dict):
        return any(holds_lone_surrogate(k) or holds_lone_surrogate(x) for k, x in v.items())
    if isinstance(v, list):
        return any(holds_lone_surrogate(x) for x in v)
    return False


def expected(line, render):
    """('text', str) / ('fails', why) / ('beyond', why): what tokfeed must do with the record."""
    try:
        rec = json.loads(line.decode("utf-8"))
        pairs = json.loads(line.decode("utf-8"), object_pairs_hook=lambda p: [v for kv in p for v in kv])
    except UnicodeDecodeError as e:
        return "fails", f"not UTF-8: {e}"
    import chat_templates_ref

    try:
        msgs, tools = chat_templates_ref.to_messages(rec)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
        return "fails", f"mapping: {e!r}"
    # What the engine cannot hold makes a bad record, whether or not the template prints it; a record holding
    # both kinds is refused for the first that tokfeed meets.
    # (`pairs`: every key and value, those a later duplicate key replaces included.)
    big = beyond_engine(pairs) or beyond_engine([msgs, tools])
    lone = holds_lone_surrogate(pairs) or holds_lone_surrogate([msgs, tools])
    if big or lone:
        return "beyond", ("an integer outside 64 bits" if big else "") + (" a lone surrogate" if lone else "")
    if tools is not None and not (isinstance(tools, list) and all(isinstance(t, dict) for t in tools)):
        return "fails", "tools that are not a list of dicts"
    try:
        out = render(msgs, tools)
    except Exception as e:  # noqa: BLE001 - the template raises
        return "fails", f"{type(e).__name__}: {e}"
    return "text", out


def make_renderer(folder, tokenizer_json):
    import datetime

    from transformers import PreTrainedTokenizerFast
    from transformers.utils import chat_template_utils

    import chat_templates_ref

    cfg = json.load(open(os.path.join(folder, "tokenizer_config.json"), encoding="utf-8"))
    tmpl = cfg["chat_template"]
    if isinstance(tmpl, list):
        tmpl = {t["name"]: t["template"] for t in tmpl}["default"]
    fixed = datetime.datetime(2024, 7, 26)
    chat_template_utils._compile_jinja_template(tmpl).environment.globals["strftime_now"] = fixed.strftime
    tok = PreTrainedTokenizerFast(tokenizer_file=tokenizer_json)
    kwargs = {k: chat_templates_ref.token_text(cfg[k]) for k in chat_templates_ref.SPECIAL if cfg.get(k) is not None}
    kwargs["date_string"] = "26 Jul 2024"

    def render(msgs, tools):
        return tok.apply_chat_template(msgs, tools=tools, chat_template=tmpl, tokenize=False,
                                       add_generation_prompt=False, **kwargs)

    return render


def tokfeed_render(tokfeedd, folder, tokenizer_json, data):
    """Per record: the text, or None (a bad record); and the reasons printed for the bad ones."""
    d = tempfile.mkdtemp(prefix="tokfeed-values-")
    job = os.path.join(d, "job.toml")
    with open(job, "w", encoding="utf-8") as f:
        f.write(f"""[dataset]
path = "{data}"
on_bad_record = "skip"
check_rows = "when_read"
[tokenizer]
type = "hf"
path = "{tokenizer_json}"
template = "jinja"
chat_template = "{os.path.join(folder, "tokenizer_config.json")}"
template_kwargs = {{ date_string = "26 Jul 2024" }}
[batch]
size = 1
max_length = 65536
keep_untrained = true
[schedule]
shuffle = false
[cache]
enabled = false
""")
    r = subprocess.run([tokfeedd, "render", "--config", job], capture_output=True)
    if r.returncode != 0:
        raise RuntimeError(f"tokfeedd render failed ({r.returncode}): {r.stderr.decode(errors='replace')[-2000:]}")
    out = [json.loads(l) for l in r.stdout.decode("utf-8").split("\n") if l]
    reasons = {}
    for l in r.stderr.decode("utf-8", "replace").split("\n"):
        # "tokfeedd: render: PATH:LINE: bad record: reason"
        head, sep, why = l.partition(": bad record: ")
        if sep:
            reasons[int(head.rsplit(":", 1)[1]) - 1] = why
    return out, reasons


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tokfeedd", nargs="?")
    ap.add_argument("templates", nargs="*")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--write", help="write the records to this file")
    ap.add_argument("--show", type=int, default=3, help="differences printed per template")
    args = ap.parse_intermixed_args()
    lines = records(args.seed, args.count)
    if args.write:
        with open(args.write, "wb") as f:
            f.write(b"".join(l + b"\n" for l in lines))
        if not args.tokfeedd:
            return 0
    shared = os.environ.get("TOKFEED_SHARED", os.path.normpath(os.path.join(HERE, "..", "..", "..", "shared")))
    templates = os.path.join(shared, "templates")
    try:
        import transformers  # noqa: F401
    except ImportError:
        print("skip: transformers is not installed for this python")
        return 77
    if not os.path.isdir(templates):
        print(f"skip: {templates} is absent")
        return 77
    names = args.templates or sorted(x for x in os.listdir(templates) if os.path.isdir(os.path.join(templates, x)))
    work = tempfile.mkdtemp(prefix="tokfeed-values-data-")
    data = os.path.join(work, "records.jsonl")
    with open(data, "wb") as f:
        f.write(b"".join(l + b"\n" for l in lines))
    # Agreements, then the ways to differ: another text, a refusal of what transformers renders, a text where
    # transformers raises, a refusal whose reason does not say what the engine cannot hold.
    totals = dict.fromkeys(["equal", "refused_both", "beyond", "surrogate",
                            "other_text", "refused_rendered", "rendered_refused", "unclear_reason"], 0)
    failing = 0
    for name in names:
        folder = os.path.join(templates, name)
        manifest = json.load(open(os.path.join(folder, "manifest.json")))
        tokenizer_json = os.path.join(shared, "tokenizers", manifest["tokenizer"], "tokenizer.json")
        render = make_renderer(folder, tokenizer_json)
        got, reasons = tokfeed_render(args.tokfeedd, folder, tokenizer_json, data)
        counts = dict.fromkeys(totals, 0)
        shown = 0
        if len(got) != len(lines):
            print(f"FAIL {name}: tokfeedd printed {len(got)} records of {len(lines)}")
            failing += 1
            continue
        for i, line in enumerate(lines):
            kind, want = expected(line, render)
            g = got[i]
            why = reasons.get(i, "")
            if kind == "text" and lone_surrogate(want):
                kind = "fails"  # no tokenizer takes it
            if kind == "text":
                key = "equal" if g == want else "other_text" if g is not None else "refused_rendered"
            elif g is not None:
                key = "rendered_refused"
            elif kind == "fails":
                key = "refused_both"
            elif "64 bits" in want and "beyond the engine's 64-bit integers" in why:
                key = "beyond"
            elif "surrogate" in want and "lone UTF-16 surrogate" in why:
                key = "surrogate"
            else:
                key = "unclear_reason"
            counts[key] += 1
            if key in ("equal", "refused_both", "beyond", "surrogate"):
                continue
            if shown < args.show:
                shown += 1
                print(f"  {name} record {i + 1} ({kind}, {key}):")
                print(f"    record:       {line[:600]!r}")
                print(f"    transformers: {str(want)[:800]!r}")
                print(f"    tokfeed:      {(g if g is not None else 'refused: ' + why)[:800]!r}")
                if key == "other_text":
                    k = next((j for j in range(min(len(g), len(want))) if g[j] != want[j]), min(len(g), len(want)))
                    print(f"    first difference at {k}: transformers {want[max(0, k - 60):k + 60]!r}")
                    print(f"                              tokfeed      {g[max(0, k - 60):k + 60]!r}")
        for k in totals:
            totals[k] += counts[k]
        differing = sum(counts[k] for k in ("other_text", "refused_rendered", "rendered_refused", "unclear_reason"))
        failing += differing != 0
        print(("ok   " if differing == 0 else "FAIL ") + f"{name}: " + ", ".join(f"{v} {k}" for k, v in counts.items()),
              flush=True)
    print(f"templates passing: {len(names) - failing}/{len(names)}; records x templates: {len(lines) * len(names)}: "
          + ", ".join(f"{v} {k}" for k, v in totals.items()))
    return 0 if failing == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
