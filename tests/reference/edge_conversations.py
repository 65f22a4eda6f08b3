"""Conversations of the shapes real SFT datasets have and chat templates
branch on, for chat_templates_ref.py (CONVERSATIONS_FILE=...).

Deterministic: the same seed writes the same file. Each record is one
shape, or several combined; the shapes follow docs/data_model.md 1 and 1.2:
- content as a list of parts (one text part, several, an image part beside
  text), empty-string content, `"content": null` beside tool calls;
- tool calls with `arguments` as a dict or a JSON string, with and without
  the `function` wrapper, with and without `id`/`type`; tool messages with
  `name`/`tool_call_id`, content as a string, a dict or a list, several in a
  row; `tools` absent, empty, a list, a JSON string of one;
- reasoning under `reasoning_content`, `thinking` or `reasoning`, with and
  without a `<think>` block in the content;
- a system message not first, two system messages, a leading assistant
  turn, a user-only conversation, consecutive user turns;
- long Unicode text (CJK, emoji sequences, combining marks, RTL), text that
  looks like Jinja (`{{`, `{%`) or special tokens (`<|im_end|>`, `</s>`),
  backslashes, quotes, control characters;
- per-message `"loss"` switches, keys whose value is null, a `documents`
  key (ignored: the template sees documents = None);
- the other record formats: ShareGPT (`conversations`, with `system`,
  `function_call`, `observation`), ms-swift's `tool_call`/`tool_response`,
  a top-level `system`, alpaca (with and without `input`, `system`),
  query/response with `history`.

usage: edge_conversations.py OUT.jsonl [--seed N] [--count N]
"""
import argparse
import json
import random

ASCII = [
    "How do I reverse a list in Python?",
    "Summarize the following passage in two sentences.",
    "Write a haiku about autumn rain.",
    "What is the capital of Australia?",
    "Explain the difference between TCP and UDP.",
    "Translate 'good morning' into French.",
    "List three prime numbers greater than 100.",
    "Sure. Here is one way to do it.",
    "The answer is 42.",
    "I am not sure, but here is my best guess.",
]
CJK = [
    "床前明月光，疑是地上霜。举头望明月，低头思故乡。",
    "東京タワーは何メートルですか？",
    "안녕하세요, 만나서 반갑습니다.",
    "稻多打出米，人多讲出理。——《谚语》",
    "请用中文解释一下量子纠缠。",
]
EMOJI = ["👍", "🎉🎉", "👩‍💻", "👨‍👩‍👧‍👦", "🏳️‍🌈", "👋🏽", "🇫🇷🇯🇵", "❤️", "1️⃣", "🧑🏿‍🚀"]
COMBINING = ["e\u0301", "n\u0303", "a\u0308\u0304", "Z\u0351\u0334\u0353a\u0308\u0315l\u0346g\u0310o\u0336", "\u0915\u094d\u0937"]
RTL = ["مرحبا بالعالم", "שלום עולם", "\u200fالعربية\u200f", "abc \u202eتم\u202c def", "مرحبا 123 world"]
TRICKY = [
    "{{ messages }}",
    "{% if true %}yes{% endif %}",
    "{# comment #}",
    "<|im_end|>",
    "<|im_start|>assistant\n",
    "</s>",
    "<s>",
    "<|eot_id|>",
    "<think>",
    "</think>",
    "[INST]",
    "C:\\Users\\name\\file.txt",
    "a \\\" quoted \\\\ string",
    "She said \"hi\" and 'bye'.",
    "tab\tseparated\tvalues",
    "line one\r\nline two",
    "bell\x07 and \x1b[0m escape",
    "line\u2028separator\u2029paragraph",
    "{\"json\": [1, 2, {\"k\": null}]}",
    "  leading and trailing spaces  ",
    "\n\nnewlines around\n\n",
    "%s %d {0} {}",
    "</tool_call>",
    "<tool_response>",
    "\\n literal backslash-n",
    "`code` and ```fenced```",
]

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Get the current weather in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search", "description": "Search the web for \"a query\" (quotes, \\ backslashes, {{braces}}).",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string"}, "limit": {"type": "integer", "default": 5}}, "required": ["query"]}}},
    {"type": "function", "function": {
        "name": "calculator", "description": "Evaluate an arithmetic expression.",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}},
]


# JSON number literals as datasets write them, put in place of their markers
# after serialization (json.dumps writes its own forms only).
RAW_NUMBERS = ["1E5", "1.0e2", "-0", "-0.0", "0.1", "1e-7", "12345678901234567890", "9223372036854775807",
               "-9223372036854775808", "1.5e300", "3.141592653589793", "100.0", "2.5E-3", "1e16", "123456789012345678"]

# Tools as datasets give them besides the HF form: without the "type"/"function"
# wrapper, with null defaults, nested schemas, non-ASCII text.
ODD_TOOLS = [
    {"name": "lookup", "description": "Look up a word in the dictionary (词典).",
     "parameters": {"type": "object", "properties": {"word": {"type": "string", "default": None},
                                                     "langs": {"type": "array", "items": {"type": "string"}}},
                    "required": []}},
    {"type": "function", "function": {
        "name": "set_flags", "description": "",
        "parameters": {"type": "object", "properties": {
            "flags": {"type": "object", "properties": {"a": {"type": "boolean", "default": False},
                                                       "b": {"type": ["integer", "null"], "enum": [1, 2, None]}}},
            "ratio": {"type": "number", "minimum": 0.0, "maximum": 1e3}}}}},
    {"type": "function", "function": {"name": "no_params", "description": "Takes nothing."}},
]


class Gen:
    def __init__(self, seed):
        self.r = random.Random(seed)
        self.ids = 0

    def text(self, kind=None):
        r = self.r
        kind = kind or r.choice(["ascii", "ascii", "cjk", "emoji", "combining", "rtl", "tricky", "mixed"])
        if kind == "ascii":
            return r.choice(ASCII)
        if kind == "cjk":
            return r.choice(CJK)
        if kind == "emoji":
            return r.choice(ASCII) + " " + "".join(r.choice(EMOJI) for _ in range(r.randint(1, 4)))
        if kind == "combining":
            return r.choice(ASCII) + " " + " ".join(r.choice(COMBINING) for _ in range(3))
        if kind == "rtl":
            return r.choice(RTL) + " " + r.choice(ASCII)
        if kind == "tricky":
            return r.choice(ASCII) + " " + r.choice(TRICKY) + " " + r.choice(TRICKY)
        pools = [ASCII, CJK, EMOJI, COMBINING, RTL, TRICKY]
        return " ".join(r.choice(r.choice(pools)) for _ in range(r.randint(3, 8)))

    def long_text(self):
        pools = [CJK, EMOJI, COMBINING, RTL, ASCII, TRICKY]
        parts = []
        n = 0
        target = self.r.randint(3000, 12000)
        while n < target:
            s = self.r.choice(self.r.choice(pools))
            parts.append(s)
            n += len(s)
        return self.r.choice(["", "\n", " "]).join(parts)

    def call_id(self):
        self.ids += 1
        return "call_%08d" % (self.ids * 7919 % 100000000)

    def args(self, name):
        r = self.r
        if name == "get_weather":
            a = {"city": r.choice(["Paris", "東京", "São Paulo", "Zürich", "New \"York\""])}
            if r.random() < 0.5:
                a["unit"] = r.choice(["celsius", "fahrenheit"])
        elif name == "search":
            a = {"query": self.text(), "limit": r.randint(1, 10)}
        else:
            a = {"expression": r.choice(["2 + 2", "(3.5 * 4) / 7", "2 ** 10 - 1", "\\frac{1}{2}"])}
        return a

    def tool_call(self, name=None, args_str=None, wrapper=True, with_id=True):
        """A tool call: the HF form ({"type", "function": {...}}), or without
        the `function` wrapper ({"name", "arguments"})."""
        r = self.r
        name = name or r.choice([t["function"]["name"] for t in TOOLS])
        a = self.args(name)
        if args_str is None:
            args_str = r.random() < 0.4
        if args_str:
            a = json.dumps(a, ensure_ascii=r.random() < 0.5)
        if not wrapper:
            call = {"name": name, "arguments": a}
        else:
            call = {"type": "function", "function": {"name": name, "arguments": a}}
        if with_id:
            call["id"] = self.call_id()
        return call

    def number_args(self):
        """Arguments whose numbers are raw JSON literals (markers, see RAW_NUMBERS)."""
        r = self.r
        return {"x": "\x00NUM%d\x00" % r.randrange(len(RAW_NUMBERS)), "ys": ["\x00NUM%d\x00" % r.randrange(len(RAW_NUMBERS))
                                                                          for _ in range(r.randint(1, 3))],
                "flag": r.choice([True, False, None]), "nested": {"k": {"k": {"k": [[], {}, ""]}}}}

    def tool_result(self, call, shape=None):
        r = self.r
        name = call.get("function", call)["name"]
        shape = shape or r.choice(["str", "str", "json_str", "dict", "list"])
        if shape == "str":
            content = self.text()
        elif shape == "json_str":
            content = json.dumps({"result": self.text()}, ensure_ascii=False)
        elif shape == "dict":
            content = {"result": self.text(), "ok": True, "n": r.randint(0, 9)}
        else:
            content = [{"type": "text", "text": self.text()}]
        m = {"role": "tool", "content": content}
        if r.random() < 0.7:
            m["tool_call_id"] = call.get("id", self.call_id())
        if r.random() < 0.7:
            m["name"] = name
        return m

    def parts(self, text, kind=None):
        r = self.r
        kind = kind or r.choice(["one", "several", "image"])
        if kind == "one":
            return [{"type": "text", "text": text}]
        if kind == "several":
            return [{"type": "text", "text": text}, {"type": "text", "text": self.text()}]
        image = r.choice([{"type": "image"}, {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
                          {"type": "image", "image": "file:///tmp/a.png"}])
        return [image, {"type": "text", "text": text}] if r.random() < 0.5 else [{"type": "text", "text": text}, image]

    def reasoning(self, m):
        r = self.r
        how = r.choice(["reasoning_content", "reasoning_content", "thinking", "reasoning", "think_in_content",
                        "both"])
        thought = self.text()
        if not isinstance(m.get("content", ""), (str, type(None))) and how in ("think_in_content", "both"):
            how = "reasoning_content"  # content parts: reasoning beside them
        if how == "think_in_content":
            m["content"] = "<think>\n" + thought + "\n</think>\n\n" + (m.get("content") or "")
        elif how == "both":
            m["reasoning_content"] = thought
            m["content"] = "<think>" + self.text() + "</think>" + (m.get("content") or "")
        else:
            m[how] = thought
        return m


def messages_record(g, feats):
    """A `messages` record with the features in `feats` (a set of names)."""
    r = g.r
    msgs = []
    tools = None
    if "tools" in feats or "calls" in feats:
        tools = r.sample(TOOLS, r.randint(1, len(TOOLS)))
    if "system" in feats:
        msgs.append({"role": "system", "content": g.text() if "empty" not in feats or r.random() < 0.5 else ""})
    if "two_systems" in feats:
        msgs.append({"role": "system", "content": g.text()})
    if "leading_assistant" in feats:
        msgs.append({"role": "assistant", "content": g.text()})
    turns = r.randint(6, 12) if "many_turns" in feats else r.randint(1, 3)
    for t in range(turns):
        user = {"role": "user", "content": g.long_text() if "long" in feats and t == 0 else g.text()}
        if "parts" in feats and r.random() < 0.7:
            user["content"] = g.parts(user["content"])
        if "empty" in feats and r.random() < 0.3:
            user["content"] = ""
        msgs.append(user)
        if "consecutive_users" in feats and r.random() < 0.5:
            msgs.append({"role": "user", "content": g.text()})
        if "system_later" in feats and t == turns - 1:
            msgs.append({"role": "system", "content": g.text()})
        if "user_only" in feats:
            continue
        if "calls" in feats and (t == 0 or r.random() < 0.5):
            names = [x["function"]["name"] for x in tools]
            wrapper = "unwrapped" not in feats or r.random() < 0.3
            calls = [g.tool_call(r.choice(names), wrapper=wrapper, with_id=r.random() < 0.8)
                     for _ in range(r.choice([1, 1, 2, 3]))]
            a = {"role": "assistant", "tool_calls": calls}
            content_kind = r.choice(["empty", "null", "absent", "text"])
            if content_kind == "empty":
                a["content"] = ""
            elif content_kind == "null":
                a["content"] = None
            elif content_kind == "text":
                a["content"] = g.text()
            if "reasoning" in feats and r.random() < 0.6:
                g.reasoning(a)
            msgs.append(a)
            for c in calls:
                msgs.append(g.tool_result(c))
        a = {"role": "assistant", "content": g.long_text() if "long" in feats and t == turns - 1 else g.text()}
        if "parts" in feats and r.random() < 0.5:
            a["content"] = g.parts(a["content"], r.choice(["one", "several"]))
        if "empty" in feats and r.random() < 0.3:
            a["content"] = ""
        if "reasoning" in feats and r.random() < 0.7:
            g.reasoning(a)
        msgs.append(a)
    if "numbers" in feats:
        a = {"role": "assistant", "content": "", "tool_calls": [
            {"id": g.call_id(), "type": "function", "function": {"name": "calculator", "arguments": g.number_args()}}]}
        msgs.append(a)
        msgs.append({"role": "tool", "tool_call_id": a["tool_calls"][0]["id"],
                     "content": raw_numbers(json.dumps(g.number_args()))})
        msgs.append({"role": "assistant", "content": g.text()})
        tools = (tools or []) + [TOOLS[2]]
        feats = feats | {"tools"}
    if "odd_tools" in feats:
        tools = (tools or []) + r.sample(ODD_TOOLS, r.randint(1, len(ODD_TOOLS)))
        feats = feats | {"tools"}
    if "odd_calls" in feats:
        for m in msgs:
            if m.get("role") != "assistant":
                continue
            k = r.choice(["empty_calls", "bad_args", "null_id", "content_null", "empty_reasoning", "extra"])
            if k == "empty_calls":
                m["tool_calls"] = []
            elif k == "bad_args":
                m["tool_calls"] = [{"type": "function", "function": {"name": "search", "arguments": "not json {"}}]
            elif k == "null_id":
                m["tool_calls"] = [{"id": None, "type": "function",
                                    "function": {"name": "search", "arguments": {"query": None}}}]
            elif k == "content_null":
                m["content"] = None
            elif k == "empty_reasoning":
                m["reasoning_content"] = ""
            else:
                m["metadata"] = {"source": "web", "score": 0.5}
                m["weight"] = 0
    if "roles" in feats:
        k = r.choice(["developer", "ipython", "function", "tool_plain"])
        msgs.insert(r.randrange(len(msgs) + 1),
                    {"role": k if k != "tool_plain" else "tool", "content": g.text()})
    if "odd_content" in feats:
        m = r.choice([m for m in msgs if m["role"] in ("user", "assistant")] or msgs)
        m["content"] = r.choice([42, 3.5, True, {"text": g.text()}, [g.text(), g.text()], [], "\x00nul\x00"])
    if "names" in feats:
        for m in msgs:
            if m["role"] in ("user", "assistant") and r.random() < 0.6:
                m["name"] = r.choice(["alice", "Bob Smith", "用户", "o'brien"])
    if "system_parts" in feats and msgs and msgs[0]["role"] == "system":
        msgs[0]["content"] = g.parts(msgs[0]["content"], r.choice(["one", "several"]))
    if "loss" in feats:
        for m in msgs:
            if r.random() < 0.4:
                m["loss"] = r.random() < 0.5
    if "nulls" in feats:
        for m in msgs:
            if r.random() < 0.5:
                m[r.choice(["name", "tool_calls", "reasoning_content", "weight"])] = None
    if "legacy_function_call" in feats:  # OpenAI's older form: function_call, role function
        call = g.tool_call("search", args_str=True, wrapper=False, with_id=False)
        msgs += [{"role": "assistant", "content": None, "function_call": call},
                 {"role": "function", "name": "search", "content": g.text()},
                 {"role": "assistant", "content": g.text()}]
    if "missing_role" in feats:
        del r.choice(msgs)["role"]
    rec = {"messages": msgs}
    if "tools" in feats or "calls" in feats:
        how = r.choice(["list", "list", "list", "string"]) if "tools_string" not in feats else "string"
        rec["tools"] = json.dumps(tools, ensure_ascii=False) if how == "string" else tools
    elif "tools_strings" in feats:  # each tool a JSON string (transformers refuses them)
        rec["tools"] = [json.dumps(t) for t in r.sample(TOOLS, 2)]
    elif "empty_tools" in feats:
        rec["tools"] = []
    elif "null_tools" in feats:
        rec["tools"] = None
    if "documents" in feats:
        rec["documents"] = [{"title": "Doc " + str(i), "text": g.text()} for i in range(r.randint(1, 2))]
    if "top_system" in feats:
        rec["system"] = r.choice([g.text(), g.text(), "", None])
    return rec


def swift_record(g):
    """ms-swift's agent form: tool_call / tool_response messages, tools as a JSON string."""
    r = g.r
    tools = r.sample(TOOLS, r.randint(1, 3))
    msgs = [{"role": "user", "content": g.text()}]
    for _ in range(r.choice([1, 2])):
        calls = [g.tool_call(r.choice(tools)["function"]["name"], wrapper=False, with_id=False)
                 for _ in range(r.choice([1, 2]))]
        for c in calls:
            msgs.append({"role": "tool_call", "content": json.dumps(c, ensure_ascii=False)})
        for c in calls:
            msgs.append({"role": "tool_response", "content": g.text()})
    msgs.append({"role": "assistant", "content": g.text()})
    rec = {"tools": json.dumps(tools, ensure_ascii=False), "messages": msgs}
    if r.random() < 0.5:
        rec["system"] = g.text()
    return rec


def sharegpt_record(g):
    r = g.r
    conv = []
    if r.random() < 0.2:  # axolotl's per-turn weight, and other keys that pass through
        conv.append({"from": "human", "value": g.text(), "weight": 0})
        conv.append({"from": "gpt", "value": g.text(), "weight": 1})
    if r.random() < 0.3:
        conv.append({"from": "system", "value": g.text()})
    turns = r.randint(1, 3)
    calls = r.random() < 0.4
    for t in range(turns):
        conv.append({"from": r.choice(["human", "user"]), "value": g.text()})
        if calls and t == 0:
            c = g.tool_call(wrapper=False, with_id=False)
            conv.append({"from": "function_call", "value": json.dumps(c, ensure_ascii=False)})
            conv.append({"from": "observation", "value": g.text()})
        conv.append({"from": r.choice(["gpt", "assistant"]), "value": g.text()})
    rec = {"conversations": conv}
    if r.random() < 0.4 and conv[0]["from"] != "system":
        rec["system"] = g.text()
    if calls:
        rec["tools"] = json.dumps(r.sample(TOOLS, 2), ensure_ascii=False)
    return rec


def alpaca_record(g):
    r = g.r
    rec = {"instruction": g.text(), "output": g.text()}
    kind = r.choice(["input", "empty_input", "null_input", "none"])
    if kind == "input":
        rec["input"] = g.text()
    elif kind == "empty_input":
        rec["input"] = ""
    elif kind == "null_input":
        rec["input"] = None
    if r.random() < 0.4:
        rec["system"] = g.text()
    return rec


def query_response_record(g):
    r = g.r
    rec = {"query": g.text(), "response": g.text()}
    if r.random() < 0.6:
        rec["history"] = [[g.text(), g.text()] for _ in range(r.randint(1, 2))]
    if r.random() < 0.4:
        rec["system"] = g.text()
    return rec


# Each messages record: the features it combines.
COMBOS = [
    {"parts"}, {"parts", "system"}, {"parts", "long"}, {"empty"}, {"empty", "system"},
    {"calls"}, {"calls", "system"}, {"calls", "unwrapped"}, {"calls", "reasoning"}, {"calls", "parts"},
    {"calls", "tools_string"}, {"calls", "system", "reasoning", "loss"},
    {"reasoning"}, {"reasoning", "system"}, {"reasoning", "long"},
    {"system_later"}, {"two_systems"}, {"leading_assistant"}, {"user_only"}, {"user_only", "system"},
    {"consecutive_users"}, {"long"}, {"long", "system"},
    {"tools"}, {"tools", "system"}, {"empty_tools"}, {"null_tools"}, {"documents"}, {"documents", "system"},
    {"loss"}, {"loss", "system"}, {"nulls"}, {"nulls", "calls"}, {"top_system"}, {"top_system", "system"},
    set(),
    {"numbers"}, {"numbers", "system"}, {"odd_tools"}, {"odd_tools", "calls"}, {"odd_calls", "calls"},
    {"odd_calls", "reasoning"}, {"roles"}, {"roles", "system"}, {"odd_content"}, {"names"}, {"names", "system"},
    {"system_parts", "system"}, {"tools_strings"}, {"missing_role"}, {"legacy_function_call"}, {"many_turns"}, {"many_turns", "calls", "reasoning"},
]
FEATURES = sorted(set().union(*COMBOS))


def generate(seed, count):
    g = Gen(seed)
    out = []
    others = [swift_record, sharegpt_record, alpaca_record, query_response_record]
    for feats in COMBOS:
        out.append(messages_record(g, feats))
    for f in others:
        out.append(f(g))
    for _ in range(8):
        out.append(raw_record(g))
    # Then random combinations of the features, and of the other formats.
    while len(out) < count:
        if g.r.random() < 0.8:
            out.append(messages_record(g, set(g.r.sample(FEATURES, g.r.randint(2, 5)))))
        else:
            out.append(g.r.choice(others)(g))
    return out[:count]


def raw_numbers(text):
    """JSON text with each number marker replaced by its literal."""
    for i, n in enumerate(RAW_NUMBERS):
        text = text.replace('"\\u0000NUM%d\\u0000"' % i, n)
    return text


def dumps(rec):
    return raw_numbers(json.dumps(rec, ensure_ascii=False))


def raw_record(g):
    """Records whose JSON text matters: a duplicate key (json.loads keeps the
    last value at the first one's place), keys in another order, escapes."""
    r = g.r
    u, a = json.dumps(g.text(), ensure_ascii=False), json.dumps(g.text(), ensure_ascii=r.random() < 0.5)
    kind = r.choice(["dup_content", "dup_role", "content_first", "escapes"])
    if kind == "dup_content":
        return ('{"messages": [{"role": "user", "content": "first", "content": %s}, '
                '{"role": "assistant", "content": %s, "content": %s}]}' % (u, a, u))
    if kind == "dup_role":
        return ('{"messages": [{"role": "system", "content": %s, "role": "user"}, '
                '{"role": "assistant", "content": %s}]}' % (u, a))
    if kind == "content_first":
        return '{"messages": [{"content": %s, "role": "user"}, {"content": %s, "role": "assistant"}]}' % (u, a)
    return ('{"messages": [{"role": "user", "content": "\\u00e9\\u4e2d \\ud83d\\ude00 \\/ \\b\\f\\n\\r\\t %s"}, '
            '{"role": "assistant", "content": %s}]}' % (u[1:-1], a))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=20261206)
    ap.add_argument("--count", type=int, default=400)
    a = ap.parse_args()
    with open(a.out, "w", encoding="utf-8") as f:
        for rec in generate(a.seed, a.count):
            f.write((rec if isinstance(rec, str) else dumps(rec)) + "\n")


if __name__ == "__main__":
    main()
