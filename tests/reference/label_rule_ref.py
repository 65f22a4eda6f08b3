"""The label rule of docs/data_model.md 2.2 on Python jinja2, written from that
page: the prefix rule (b), and the provenance rule (c) for the messages where
(b) fails.

Provenance on jinja2: the template's AST is rewritten before it is compiled so
that every `{% for x in ... %}` with one loop variable calls a hook at the
start of each iteration with the item, and another after the loop (also after
a `break`); a `{% set name = ... %}` in such a loop's body (not in a macro or
call block) calls a third with the value, which binds an iteration that no
message is bound to (a scan by index, `{% set m = messages[k] %}`). A message is recognised by identity: the template sees the very
dict objects of the `messages` list (slices and reversals keep them). The
text the root render function yields while the innermost such iteration is
bound to messages[i] is message i's output; text rendered inside a macro or a
`{% set %}` block belongs to where it is finally written out, which is where
the root function yields it.

Used by chat_templates_ref.py; run alone it prints, per template, how many
conversations each rule serves and whether (c) gives (b)'s spans wherever
both apply:

usage: [CONVERSATIONS=N] [ALLOW_DIFFER=T1,T2] label_rule_ref.py [TEMPLATE...]
Run with ${TOKFEED_HF_PYTHON}; exits 1 when (c) differs from (b) on a
template not in ALLOW_DIFFER, 77 (skip) without ../shared or transformers.
"""
import datetime
import itertools
import json
import os
import re
import sys

try:
    from jinja2 import nodes
    from transformers.utils import chat_template_utils as ctu
except ImportError:
    if __name__ == "__main__":
        print("skip: transformers is not installed for this python")
        sys.exit(77)
    raise

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.environ.get("TOKFEED_SHARED", os.path.normpath(os.path.join(HERE, "..", "..", "..", "shared")))
TEMPLATES = os.path.join(SHARED, "templates")
GENERATION = re.compile(r"\{%-?\s*generation\s*-?%\}")
SPECIAL = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
FIXED_NOW = datetime.datetime(2024, 7, 26)


class Provenance:
    """Which message each yielded piece of the top-level output was written for."""

    def __init__(self):
        self.index = {}  # id(message dict) -> i
        self.stack = []  # (loop id, message index or None)
        self.seen = set()  # the messages an iteration was bound to

    def enter(self, loop_id, item):
        if self.stack and self.stack[-1][0] == loop_id:
            self.stack.pop()
        i = self.index.get(id(item))
        self.stack.append((loop_id, i))
        if i is not None:
            self.seen.add(i)
        return ""

    def leave(self, loop_id):
        while self.stack and self.stack[-1][0] == loop_id:
            self.stack.pop()
        return ""

    def bind(self, loop_id, value):
        """A `{% set %}` of a message in an iteration of loop_id that no
        message is bound to binds it, for the rest of the iteration."""
        i = self.index.get(id(value))
        for k in range(len(self.stack) - 1, -1, -1):
            if self.stack[k][0] == loop_id:
                if self.stack[k][1] is None and i is not None:
                    self.stack[k] = (loop_id, i)
                    self.seen.add(i)
                break
        return ""

    def current(self):
        for _, i in reversed(self.stack):
            if i is not None:
                return i
        return None


def instrument(ast):
    """Adds the enter/leave hooks to every single-variable for loop, and the
    bind hook after each `{% set name = ... %}` inside one."""
    counter = itertools.count()

    def hook(name, *args):
        return nodes.ExprStmt(nodes.Call(nodes.Name(name, "load"), [nodes.Const(a) if not isinstance(a, nodes.Node)
                                                                      else a for a in args], [], None, None))

    def visit(body, loop):
        """`loop`: the innermost enclosing instrumented loop (None outside
        loops, and in macro and call-block bodies)."""
        out = []
        for node in body:
            own = next(counter) if isinstance(node, nodes.For) and isinstance(node.target, nodes.Name) else None
            for field in node.fields:
                sub = getattr(node, field)
                if isinstance(sub, list) and sub and all(isinstance(x, nodes.Stmt) for x in sub):
                    if isinstance(node, (nodes.Macro, nodes.CallBlock)):
                        inner = None
                    elif isinstance(node, nodes.For) and field == "body" and own is not None:
                        inner = own
                    else:
                        inner = loop
                    setattr(node, field, visit(sub, inner))
            out.append(node)
            if own is not None:
                node.body.insert(0, hook("tokfeed_prov_enter", own, nodes.Name(node.target.name, "load")))
                out.append(hook("tokfeed_prov_leave", own))
            elif isinstance(node, nodes.Assign) and isinstance(node.target, nodes.Name) and loop is not None:
                out.append(hook("tokfeed_prov_bind", loop, nodes.Name(node.target.name, "load")))
        return out

    ast.body = visit(ast.body, None)
    return ast


def token_text(v):
    return v.get("content") if isinstance(v, dict) else v


class Template:
    """A model's chat template on jinja2, in transformers' environment, with provenance."""

    def __init__(self, folder):
        cfg = json.load(open(os.path.join(folder, "tokenizer_config.json"), encoding="utf-8"))
        tmpl = cfg["chat_template"]
        if isinstance(tmpl, list):
            tmpl = {t["name"]: t["template"] for t in tmpl}["default"]
        self.source = tmpl
        self.generation = bool(GENERATION.search(tmpl))
        env = ctu._compile_jinja_template(tmpl).environment
        env.globals["strftime_now"] = FIXED_NOW.strftime
        self.prov = Provenance()
        env.globals["tokfeed_prov_enter"] = self.prov.enter
        env.globals["tokfeed_prov_leave"] = self.prov.leave
        env.globals["tokfeed_prov_bind"] = self.prov.bind
        code = env.compile(instrument(env.parse(tmpl)))
        self.tmpl = env.template_class.from_code(env, code, env.make_globals(None))
        self.kwargs = {k: token_text(cfg[k]) for k in SPECIAL if cfg.get(k) is not None}
        self.kwargs["date_string"] = "26 Jul 2024"

    def render(self, msgs, tools, gen, pieces=None):
        """The text; `pieces` (a list) receives (begin, end, message index or None) in characters."""
        # As apply_chat_template prepares them: null-valued keys dropped,
        # plain JSON data, reasoning aliased.
        chat = ctu._alias_reasoning_fields(ctu._plain_template_data(ctu._normalize_chat_messages(msgs)))
        self.prov.index = {id(m): i for i, m in enumerate(chat)}
        self.prov.stack = []
        self.prov.seen = set()
        ctx = self.tmpl.new_context(dict(messages=chat, tools=ctu._plain_template_data(tools), documents=None,
                                         add_generation_prompt=gen, **self.kwargs))
        out = []
        n = 0
        for s in self.tmpl.root_render_func(ctx):
            if pieces is not None and s:
                pieces.append((n, n + len(s), self.prov.current()))
            out.append(s)
            n += len(s)
        return "".join(out)


def common_prefix(a, b):
    n = min(len(a), len(b))
    k = 0
    while k < n and a[k] == b[k]:
        k += 1
    return k


def prefix_region(t, msgs, tools, i, full):
    """(b): F[len(P):len(Fi)], or None where it fails (or a prefix is refused)."""
    try:
        p = t.render(msgs[:i], tools, msgs[i]["role"] == "assistant")
        fi = full if i + 1 == len(msgs) else t.render(msgs[: i + 1], tools, False)
    except Exception:  # noqa: BLE001 - a refused prefix: (b) does not apply
        return None
    if not (fi.startswith(p) and full.startswith(fi)):
        return None
    return (len(p), len(fi))


def own_text(pieces, n_msgs, length):
    """Per message, its own character spans in the rendering: what was written
    while an iteration was bound to it, plus, for the message that wrote last,
    the tail written after every message's text. Also the end of the last own
    text (None when none)."""
    own = [[] for _ in range(n_msgs)]
    last_end, last_msg = None, None
    for b, e, m in pieces:
        if m is None:
            continue
        if own[m] and own[m][-1][1] == b:
            own[m][-1] = (own[m][-1][0], e)
        else:
            own[m].append((b, e))
        last_end, last_msg = e, m
    if last_msg is not None and last_end < length:
        if own[last_msg][-1][1] == last_end:
            own[last_msg][-1] = (own[last_msg][-1][0], length)
        else:
            own[last_msg].append((last_end, length))
    return own, last_end


def generation_prompt(t, msgs, tools, i):
    """The text the generation prompt adds after msgs[:i]: P = render(msgs[:i],
    true) from k on, k = the common prefix of P and render(msgs[:i], false),
    or the end of the last text P writes for a message where that is less.
    '' when either render fails."""
    try:
        pieces = []
        p = t.render(msgs[:i], tools, True, pieces)
        u = t.render(msgs[:i], tools, False)
    except Exception:  # noqa: BLE001
        return ""
    _, last_end = own_text(pieces, i, len(p))
    k = common_prefix(p, u)
    return p[k if last_end is None else min(k, last_end):]


def provenance_region(t, msgs, tools, i, full, pieces, seen):
    """(c): message i's own text in F, less the generation prompt's text at its
    start; spans in characters. None when (c) does not apply: no iteration
    was bound to the message, or F has no message's own text at all."""
    if i not in seen or all(m is None for _, _, m in pieces):
        return None
    own, _ = own_text(pieces, len(msgs), len(full))
    spans = own[i]
    if not spans or msgs[i]["role"] != "assistant":
        return spans
    start = spans[0][0]
    cut = start + common_prefix(full[start:], generation_prompt(t, msgs, tools, i))
    return [(max(b, cut), e) for b, e in spans if e > cut]


def trained_spans(t, msgs, tools, stats=None):
    """(F, the trained character spans of every assistant message: (b) where
    it holds, (c) elsewhere), or None when the template refuses the
    conversation or neither rule places a message. `stats` counts turns."""
    pieces = []
    try:
        full = t.render(msgs, tools, False, pieces)
    except Exception:  # noqa: BLE001 - a template error is a refused record
        return None
    seen = set(t.prov.seen)
    out = []
    for i, m in enumerate(msgs):
        if m["role"] != "assistant":
            continue
        b = prefix_region(t, msgs, tools, i, full)
        c = provenance_region(t, msgs, tools, i, full, pieces, seen) if b is None or stats is not None else None
        if stats is not None:
            stats["c_only" if b is None else "both"] += 1
            if b is not None and c is not None and c != ([b] if b[0] < b[1] else []):
                stats["differ"] += 1
                if stats.get("show", 0) > 0:
                    stats["show"] -= 1
                    print("   (b):", repr(full[b[0]:b[1]][:300]))
                    print("   (c):", [repr(full[x:y][:300]) for x, y in c])
            if b is not None and c is None:
                stats["b_only"] += 1
        if b is not None:
            out.append(b)
        elif c is None:
            return None
        else:
            out.extend(c)
    return full, out


def main():
    if not os.path.isdir(TEMPLATES):
        print(f"skip: {TEMPLATES} is absent")
        return 77
    names = sys.argv[1:] or sorted(x for x in os.listdir(TEMPLATES) if os.path.isdir(os.path.join(TEMPLATES, x)))
    lines = open(os.path.join(TEMPLATES, "conversations.jsonl"), encoding="utf-8").read().splitlines()
    records = [json.loads(l) for l in lines[: int(os.environ.get("CONVERSATIONS", len(lines)))]]
    totals = {"before": 0, "after": 0, "both": 0, "differ": 0, "conversations": 0}
    differ = []
    for name in names:
        t = Template(os.path.join(TEMPLATES, name))
        stats = {"both": 0, "c_only": 0, "b_only": 0, "differ": 0, "show": int(os.environ.get("SHOW", 0))}
        refused = before = 0
        for rec in records:
            msgs, tools = rec["messages"], rec.get("tools")
            c_only = stats["c_only"]
            r = trained_spans(t, msgs, tools, stats)
            refused += r is None
            before += r is None or stats["c_only"] > c_only
        if t.generation:  # (a) labels these: only the template's own errors refuse
            before = refused
        totals["before"] += before
        totals["after"] += refused
        totals["conversations"] += len(records)
        totals["both"] += stats["both"] - stats["b_only"]
        totals["differ"] += stats["differ"]
        if stats["differ"]:
            differ.append(name)
        print(f"{'DIFF' if stats['differ'] else 'ok  '} {name}{' (generation)' if t.generation else ''}: "
              f"{len(records)} conversations; refused with (b) alone {before}, with (c) {refused}; assistant turns: "
              f"(b) holds {stats['both']}, (c) there too {stats['both'] - stats['b_only']}, differ "
              f"{stats['differ']}; (c) alone {stats['c_only']}")
    print(f"conversations refused, of {totals['conversations']}: {totals['before']} with (a)/(b) alone, "
          f"{totals['after']} with (c) too (the template raises); turns where both rules apply: {totals['both']}, (c) differs from (b) in "
          f"{totals['differ']} ({', '.join(differ) or 'none'})")
    allowed = set(os.environ.get("ALLOW_DIFFER", "").split(","))
    return 1 if set(differ) - allowed else 0


if __name__ == "__main__":
    sys.exit(main())
