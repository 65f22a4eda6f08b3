"""For diff_jinja2.py: random contexts (strings with Unicode case-mapping
edge cases and control characters, ints, floats, None, nested lists and
dicts, chat messages with tool calls), and the template tree that
jinja_grammar.py builds and the minimizer shrinks."""

# Pieces of strings: ASCII, case-mapping edge cases, control characters,
# characters that JSON, repr and HTML escaping treat specially.
PIECES = [
    "a", "b", "Hello", "world", "user", "assistant", "tool", " ", "  ", "\n", "\t", "\r\n", "x_y", "a-b", "1", "42",
    "inf", "nan", "1e400", "0x1f", "1_0",
    "-7", "3.5", "ß", "ﬃ", "İ", "ǅ", "Σ", "ς", "ŉ", "é", "E\u0301", "Ω", "ǰ", "ΐ", "ﬀ", "ᾳ", "\x00", "\x01", "\x1f", "\x7f",
    "\x85", "\u2028", "\xa0", "😀", "中文", "'", '"', "\\", "<", ">", "&", "{", "}", "%", "%s", "{}", "_", "THE END",
    "mIxEd cAsE", "o'k", "İstanbul", "straße", "ﬁne", "Dž", "\u0130i", "AbC1", "  pad  ", "<tool_call>", "</s>",
    "\u00b2", "\u0660", "Ⅻ", "½", "\u2003", "\u3000", "ı", "ſ", "K", "µ",
]
ROLES = ["system", "user", "assistant", "tool"]
WORDS = ["role", "content", "name", "tool_calls", "arguments", "type", "a", "b", "k", "missing", "0"]


def rand_text(r, maxlen=4):
    return "".join(r.choice(PIECES) for _ in range(r.randint(0, maxlen)))


def rand_int(r):
    return r.choice([0, 1, 2, 3, -1, -2, 5, 7, 10, 12, 100, -100, 255, 256, 1024, 2**31, -(2**40), 999999937])


def rand_float(r):
    return r.choice([0.0, -0.0, 1.0, 1.5, 2.5, -1.5, 0.1, 12.34, 1e20, 1e16, 1e-5, 3.0, 100.0, 0.5, 2.675, 1e300, -7.25])


def rand_value(r, depth=0):
    k = r.randint(0, 9 if depth < 2 else 5)
    if k <= 2:
        return rand_text(r)
    if k == 3:
        return rand_int(r)
    if k == 4:
        return rand_float(r)
    if k == 5:
        return r.choice([None, True, False])
    if k <= 7:
        return [rand_value(r, depth + 1) for _ in range(r.randint(0, 4))]
    return {r.choice(WORDS): rand_value(r, depth + 1) for _ in range(r.randint(0, 4))}


def rand_message(r):
    m = {"role": r.choice(ROLES), "content": r.choice([rand_text(r), rand_text(r), None, ""])}
    if r.random() < 0.15:  # content as a list of parts
        m["content"] = [r.choice([{"type": "text", "text": rand_text(r)}, {"type": "image"}, {"text": "x"}, rand_text(r)])
                        for _ in range(r.randint(0, 3))]
    if r.random() < 0.1:
        m["content"] = rand_text(r) + "</think>" + r.choice(["\n", "\n\nok", "", " a"])
    if r.random() < 0.3:
        m["tool_calls"] = [
            {"type": "function", "function": {"name": r.choice(["get", "f", "ß"]), "arguments": {"x": rand_value(r, 1)}}}
            for _ in range(r.randint(0, 2))
        ]
        if r.random() < 0.3:  # no function wrapper, arguments as a JSON string
            m["tool_calls"] = [{"name": "f", "arguments": r.choice(['{"x": 1}', "not json", ""])}]
    if r.random() < 0.2:
        m["reasoning_content"] = rand_text(r)
    return m


def rand_context(r):
    ctx = {
        "s1": rand_text(r, 6),
        "s2": rand_text(r, 3),
        "s3": r.choice(["", " ", "a", "ABC", "Hello World", "ß", "ǅemal", "hello-world (x)", rand_text(r, 2)]),
        "n1": rand_int(r),
        "n2": r.choice([0, 1, 2, 3, 4, -3, 7]),
        "f1": rand_float(r),
        "b1": r.choice([True, False]),
        "nn": None,
        "xs": [rand_text(r, 2) for _ in range(r.randint(0, 5))],
        "ys": [rand_int(r) for _ in range(r.randint(0, 5))],
        "zs": [rand_value(r, 1) for _ in range(r.randint(0, 4))],
        "d": {r.choice(WORDS): rand_value(r, 1) for _ in range(r.randint(0, 4))},
        "messages": [rand_message(r) for _ in range(r.randint(0, 4))],
        "tools": r.choice([None, [], [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]]),
        "add_generation_prompt": r.choice([True, False]),
        "bos_token": "<s>",
    }
    if r.random() < 0.5:
        ctx["d"]["role"] = r.choice(ROLES)
    return ctx


class Node:
    __slots__ = ("cat", "parts")

    def __init__(self, cat, parts):
        self.cat, self.parts = cat, parts

    def render(self):
        return "".join(p if isinstance(p, str) else p.render() for p in self.parts)


def candidates(node):
    """Smaller replacements for `node`: nothing (a statement), or a
    descendant expression of the same category."""
    out = []
    if node.cat == "stmt":
        out.append(Node("stmt", []))
    stack = [p for p in node.parts if isinstance(p, Node)]
    while stack:
        n = stack.pop()
        if n.cat == node.cat and node.cat != "stmt":
            out.append(n)
        stack.extend(p for p in n.parts if isinstance(p, Node))
    if node.cat in ("str", "int", "num", "bool", "list", "dict", "any"):
        out.append(Node(node.cat, [{"str": "'a'", "int": "1", "num": "1.5", "bool": "true", "list": "[]", "dict": "{}",
                                    "any": "none"}[node.cat]]))
    return out


def walk(node):
    """Every node, parents first."""
    yield node
    for p in node.parts:
        if isinstance(p, Node):
            yield from walk(p)
