"""Random chat-template-like Jinja templates and contexts, for diff_jinja2.py.

A template is a tree of Nodes: statements ("stmt") and typed expressions
("str", "int", "num", "bool", "list", "dict", "any"). Rendering joins the
parts; the minimizer replaces a node by a smaller one of the same category.
"""
import random

from jinja_values import WORDS, Node, candidates, rand_context, rand_text, walk  # noqa: F401


def lit_str(r, s=None):
    if s is None:
        s = rand_text(r, 3)
    out = []
    for ch in s:
        if ch == "\\":
            out.append("\\\\")
        elif ch == "'":
            out.append("\\'")
        elif ch == "\n":
            out.append("\\n" if r.random() < 0.7 else "\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif ord(ch) < 0x20 or ch == "\x7f":
            out.append("\\x%02x" % ord(ch))
        elif ord(ch) > 0x7f and r.random() < 0.1 and ord(ch) < 0x10000:
            out.append("\\u%04x" % ord(ch))
        else:
            out.append(ch)
    q = "'"
    if "'" not in s and r.random() < 0.3:
        return '"' + "".join(out).replace("\\'", "'") + '"'
    return q + "".join(out) + q


class Gen:
    """Builds one template: a body of statements over typed expressions."""

    def __init__(self, r):
        self.r = r
        self.scope = {"str": ["s1", "s2", "s3"], "int": ["n1", "n2"], "num": ["f1"], "bool": ["b1"],
                      "list": ["xs", "ys", "zs", "messages"], "dict": ["d"], "any": ["nn", "tools", "undef"]}
        self.loopvars = []  # (name, type) of enclosing loops
        self.in_loop = 0
        self.in_macro = 0
        self.counter = 0
        self.macros = []  # (name, nparams)
        self.namespaces = []

    def fresh(self, prefix):
        self.counter += 1
        return f"{prefix}{self.counter}"

    # ---- expressions -------------------------------------------------
    def e(self, t, depth=0):
        r = self.r
        if depth > 3 or r.random() < 0.25:
            return self.atom(t)
        fn = getattr(self, "e_" + t)
        return fn(depth + 1)

    def N(self, t, *parts):
        return Node(t, list(parts))

    def atom(self, t):
        r = self.r
        if t == "any":
            t = r.choice(["str", "int", "num", "bool", "list", "dict", "none"])
        if t == "none":
            return self.N("any", r.choice(["none", "None", "nn", "undef", "d.missing", "d.get('zz')"]))
        names = list(self.scope.get(t, []))
        for name, lt in self.loopvars:
            if lt == t:
                names.append(name)
        if names and r.random() < 0.6:
            return self.N(t, r.choice(names))
        if t == "str":
            return self.N(t, lit_str(r))
        if t == "int":
            return self.N(t, str(r.choice([0, 1, 2, 3, 5, 10, 600, 12, 100, 7])) if r.random() < 0.9 else "-3")
        if t == "num":
            return self.N(t, r.choice(["1.5", "0.1", "2.0", "12.34", "1e3", "2.5", "0.0", "3.14159", "1e20", "7.125"]))
        if t == "bool":
            return self.N(t, r.choice(["true", "false", "True", "False"]))
        if t == "list":
            k = r.randint(0, 3)
            return self.N(t, "[", *self.join_nodes([self.atom(r.choice(["str", "int", "num"])) for _ in range(k)]), "]")
        if t == "dict":
            k = r.randint(0, 2)
            items = []
            for _ in range(k):
                items.append(self.N("any", lit_str(r, r.choice(WORDS)), ": ", self.atom(r.choice(["str", "int", "list"]))))
            return self.N(t, "{", *self.join_nodes(items), "}")
        return self.N(t, "none")

    def join_nodes(self, nodes, sep=", "):
        out = []
        for k, n in enumerate(nodes):
            if k:
                out.append(sep)
            out.append(n)
        return out

    def call(self, t, recv, name, *args):
        return self.N(t, "(", recv, ").", name, "(", *self.join_nodes(list(args)), ")")

    def filt(self, t, subj, name, *args):
        if args:
            return self.N(t, "(", subj, " | ", name, "(", *self.join_nodes(list(args)), "))")
        return self.N(t, "(", subj, " | ", name, ")")

    def e_str(self, d):
        r = self.r
        s = lambda: self.e("str", d)  # noqa: E731
        i = lambda: self.e("int", d)  # noqa: E731
        small = lambda: self.N("int", str(r.choice([0, 1, 2, 3, -1, -2, 5, 8, 20])))  # noqa: E731
        L = lambda: lit_str(r, r.choice(["", " ", "a", "-", "ß", "\n", ", ", "xy", "İ", "%"]))  # noqa: E731
        k = r.randint(0, 66)
        if k == 66:  # urlize: links, e-mail addresses, trimmed, rel/target
            subj = r.choice([s(), "'see http://x.com/a?b=1, (www.y.org). mail me@z.io <foo.net> ' ~ s1",
                             "s1 ~ ' https://[::1]:80/ http://10.0.0.1 ii.int x@y ' ~ s2", "messages | map(attribute='content') | join(' ')"])
            return self.filt("str", subj, "urlize", *r.choice([[], ["10"], ["nofollow=true"], ["target='_blank'"],
                                                               ["rel='me'"], ["extra_schemes=['ftp:']"], ["2, true, 'x', 'y z'"]]))
        if k == 64:  # textwrap through wordwrap
            args = r.choice([[], [r.choice(["1", "2", "3", "5", "8", "0", "2.5"])], ["4", "false"], ["3, true, '|'"],
                             ["width=6, break_on_hyphens=false"], ["5, wrapstring='<br>'"], ["7, break_on_hyphens=1"],
                             ["2, break_long_words=false, break_on_hyphens=false"]])
            subj = r.choice([s(), s(), "'well-known hyphen-ated--dash a-b-c words'", "(s1 ~ ' ' ~ s2 ~ '-' ~ s1)"])
            return self.filt("str", subj, "wordwrap", *args)
        if k == 65:  # pprint.pformat, wrapped at 80 columns, dicts sorted
            subj = r.choice([self.e("any", d), self.e("dict", d), self.e("list", d), "messages", "zs", "tools", "d",
                             s(), "(s1 * 8)", "[s1 * 5, s2 * 5, d]", "{'k': s2 * 9, 'a': [1, 2], 2: none}"])
            return self.filt("str", subj, "pprint")
        if k >= 62:
            # Markup inside an expression: its +, %, * and str methods escape
            # the plain str they take in.
            m = self.filt("str", s(), r.choice(["safe", "e", "escape", "forceescape"]))
            if k == 62:
                return self.N("str", "(", m, r.choice([" + ", " ~ "]), s(), ")") if r.random() < 0.5 else self.N("str", "(", s(), " + ", m, ")")
            return self.N("str", "(", m, ")", r.choice([".upper()", ".replace('a', '<')", ".strip()", "[1:]", " * 2", ".split()|join('|')",
                                                      " | upper", " | trim", " | center(7)", " | format(" + "'<'" + ")", ".join(['<', '&'])", "|string"]))
        if k == 59:
            return self.filt("str", self.e(r.choice(["int", "num", "str"]), d), "filesizeformat", *r.choice([[], ["true"], ["binary=false"]]))
        if k == 60:
            return self.filt("str", self.e(r.choice(["str", "dict", "list", "any"]), d), r.choice(["urlencode", "striptags"]))
        if k == 61:
            return self.filt("str", self.e("dict", d), "xmlattr", *r.choice([[], ["false"]]))
        if k == 47:
            return self.N("str", "(", s(), ").", r.choice(["find", "rfind", "count", "index"]), "(", L(), ", ", small(), *([", ", small()] if r.random() < 0.5 else []), ")|string")
        if k == 48:
            return self.N("str", "(", s(), ").", r.choice(["startswith", "endswith"]), "(", L(), ", ", small(), *([", ", small()] if r.random() < 0.5 else []), ")|string")
        if k == 49:
            return self.N("str", "((", s(), ").split(", r.choice(["maxsplit=1", "sep=' ', maxsplit=1", "None, 1", "' ', -1"]), ")|join('|'))")
        if k == 50:
            return self.N("str", "((", s(), ").splitlines(", r.choice(["True", "true", "1", "keepends=True", ""]), ")|join('|'))")
        if k == 51:
            return self.N("str", "(", lit_str(r, r.choice(["%(a)s-%(b)r", "%(a)5s|%(b)-3d", "%(a)s"])), " % {'a': ", self.e("any", d), ", 'b': ", i(), "})")
        if k == 52:
            return self.N("str", r.choice(["'\\101\\x42\\u00df'", "'\\N{LATIN SMALL LETTER SHARP S}'", "'a\\tb\\\\'", "'\\0\\7'"]))
        if k == 53:
            return self.filt("str", self.e("list", d), "join", "d=" + lit_str(r, r.choice([",", " | "])))
        if k == 54:
            return self.filt("str", self.e("any", d), "tojson", r.choice(["indent=2, sort_keys=true", "separators=[',', ':']", "indent='  '", "ensure_ascii=true, indent=1"]))
        if k == 55:
            return self.N("str", "(", self.e("dict", d), ".", r.choice(["keys", "values", "items"]), "()|string)")
        if k == 56:
            return self.filt("str", self.filt("list", r.choice(["messages", "zs", "tools"]), "map", "attribute=" + lit_str(r, r.choice(["role", "function.name", "0", "content"]))), "join", "','")
        if k == 57:
            return self.filt("str", s(), "indent", r.choice(["width=2, first=true", "width='- '", "2, true, true", "first=true"]))
        if k == 0:
            return self.call("str", s(), r.choice(["upper", "lower", "title", "capitalize", "swapcase", "casefold"]))
        if k == 1:
            return self.call("str", s(), r.choice(["strip", "lstrip", "rstrip"]), *([] if r.random() < 0.5 else [L()]))
        if k == 2:
            return self.call("str", s(), "replace", L(), L(), *([] if r.random() < 0.7 else [small()]))
        if k == 3:
            return self.call("str", s(), r.choice(["center", "ljust", "rjust"]), small(), *([] if r.random() < 0.6 else [lit_str(r, r.choice(["*", "-", "ß"]))]))
        if k == 4:
            return self.call("str", s(), r.choice(["zfill", "expandtabs"]), small())
        if k == 5:
            return self.call("str", s(), r.choice(["removeprefix", "removesuffix"]), L())
        if k == 6:
            return self.N("str", "(", self.call("list", s(), r.choice(["split", "rsplit"]), *([] if r.random() < 0.4 else [L()] + ([] if r.random() < 0.6 else [small()]))), ")[", small(), "]")
        if k == 7:
            return self.N("str", "(", self.call("list", s(), r.choice(["partition", "rpartition"]), L()), ")[", str(r.randint(0, 2)), "]")
        if k == 8:
            return self.N("str", "(", s(), ")[", small(), "]")
        if k == 9:
            parts = [r.choice(["", small()]) for _ in range(r.choice([1, 2, 3]))]
            inner = []
            for j, p in enumerate(parts):
                if j:
                    inner.append(":")
                inner.append(p)
            if len(parts) == 1:
                inner.append(":")
            return self.N("str", "(", s(), ")[", *inner, "]")
        if k == 10:
            return self.filt("str", s(), r.choice(["upper", "lower", "title", "capitalize", "trim", "string", "reverse"]))
        if k == 11:
            return self.filt("str", s(), "replace", L(), L())
        if k == 12:
            return self.filt("str", self.e("any", d), "tojson", *r.choice([[], ["indent=2"], ["indent=None"], ["ensure_ascii=True"], ["sort_keys=True"], ["separators=(',', ':')"], ["indent=4, sort_keys=True"]]))
        if k == 13:
            return self.filt("str", s(), "indent", *r.choice([[], ["2"], ["4, true"], ["2, first=True"], ["2, blank=true"], ["'> '"]]))
        if k == 14:
            return self.filt("str", s(), "center", small())
        if k == 15:
            return self.filt("str", self.e("list", d), "join", *r.choice([[], [L()]]))
        if k == 16:
            return self.N("str", "(", s(), " ~ ", self.e("any", d), ")")
        if k == 17:
            return self.N("str", "(", s(), " + ", s(), ")")
        if k == 18:
            return self.N("str", "(", s(), " * ", small(), ")")
        if k == 19:
            fmt, args = self.pct_format()
            return self.N("str", "(", fmt, " % ", args, ")")
        if k == 20:
            return self.N("str", "(", s(), " if ", self.e("bool", d), " else ", s(), ")")
        if k == 21:
            return self.filt("str", self.e(r.choice(["int", "num", "bool", "list", "dict", "any"]), d), "string")
        if k == 22:
            return self.filt("str", self.e("any", d), "default", *r.choice([[L()], [L(), "true"], [L(), "boolean=true"]]))
        if k == 23:
            return self.filt("str", s(), r.choice(["first", "last"]))
        if k == 24:
            return self.filt("str", self.filt("list", self.e("list", d), "map", "'string'"), "join", L())
        if k == 25:
            return self.call("str", L(), "join", self.e("list", d))
        if k == 26:
            return self.filt("str", s(), "format", *[self.e("any", d) for _ in range(r.randint(0, 2))])
        if k == 27:
            if r.random() < 0.15:
                return self.call("str", lit_str(r, r.choice(["{a}", "{role}-{content!r:>9}", "{a:^7}", "{0}"])), "format_map", self.e("dict", d))
            fmt = r.choice(["{}-{}", "{0}{1}{0}", "{} ", "x{}y", "{a}", "{{}}{}"]) if r.random() < 0.3 else self.brace_format()
            return self.call("str", lit_str(r, fmt), "format", self.e("any", d), self.e(r.choice(["any", "int", "num", "str"]), d))
        if k == 28:
            return self.filt("str", self.filt("list", self.e("list", d), "map", r.choice(["'upper'", "'lower'", "'trim'", "'title'", "'capitalize'"])), "join", L())
        if k == 29:
            return self.N("str", "(", s(), ")[::-1]")
        if k == 30:
            return self.filt("str", self.e("dict", d), "tojson")
        if k == 31:
            return self.N("str", "(", self.e("list", d), ")|string")
        if k == 32:
            return self.filt("str", s(), "truncate", *r.choice([["3"], ["5, true"], ["4, end='!'"], ["6, leeway=0"], ["3, false, '', 1"]]))
        if k == 33:
            return self.N("str", "(", self.e("dict", d), ").get(", lit_str(r, r.choice(WORDS)), ", ", s(), ")")
        if k == 34:
            return self.N("str", "(", self.e("list", d), ")|first|string")
        if k == 35:
            return self.filt("str", self.e("any", d), "attr", lit_str(r, r.choice(WORDS)))
        if k == 36:
            return self.filt("str", self.e("list", d), "join", L(), lit_str(r, r.choice(["role", "content", "0"])))
        if k == 37:
            return self.call("str", s(), r.choice(["title", "upper", "lower"]))
        if k == 38:
            return self.filt("str", self.e("any", d), "tojson")
        if k == 39:
            return self.N("str", "(", self.e("any", d), " | string)[", small(), ":]")
        if k == 40:
            return self.N("str", "(", self.e("dict", d), ")[", lit_str(r, r.choice(WORDS)), "]")
        if k == 41:
            return self.N("str", "(", self.e("list", d), "|last)")
        if k == 42:
            return self.N("str", "(", self.e("list", d), "|max)") if r.random() < 0.5 else self.N("str", "(", self.e("list", d), "|min)")
        if k == 43:
            return self.filt("str", s(), r.choice(["trim", "lower"]))
        if k == 44:
            return self.N("str", "(", s(), ")", r.choice([".title()", ".capitalize()", ".swapcase()", ".casefold()", ".upper()", ".lower()"]))
        if k == 45:
            return self.N("str", "('%s' | format(", self.e("any", d), "))")
        return self.N("str", "strftime_now(", lit_str(r, r.choice(["%Y-%m-%d", "%d %b %Y", "%A", "%B %-d"])), ")")

    def format_spec(self):
        """A random str.format spec: [[fill]align][sign][#][0][width][,|_][.prec][type]."""
        r = self.r
        s = ""
        if r.random() < 0.3:
            s += r.choice(["", "*", "0", "ß"]) + r.choice("<>^=")
        if r.random() < 0.3:
            s += r.choice("+- ")
        if r.random() < 0.15:
            s += "#"
        if r.random() < 0.2:
            s += "0"
        if r.random() < 0.5:
            s += r.choice(["3", "8", "12"])
        if r.random() < 0.2:
            s += r.choice([",", "_"])
        if r.random() < 0.3:
            s += r.choice([".0", ".2", ".5"])
        if r.random() < 0.6:
            s += r.choice("sdbxXcefgG%n")
        return s

    def brace_format(self):
        """A str.format string: auto or manual fields, conversions, specs (one nested)."""
        r = self.r
        manual = r.random() < 0.4
        parts = []
        for _ in range(r.randint(1, 3)):
            name = str(r.randint(0, 1)) if manual else ""
            if r.random() < 0.1:
                name += r.choice(["[0]", ".role", "[role]", "[1]"])
            conv = r.choice(["", "", "", "!r", "!s", "!a"])
            spec = ""
            if r.random() < 0.7:
                spec = ":" + (self.format_spec() if r.random() < 0.9 else ">{" + ("1" if manual else "") + "}")
            parts.append(r.choice(["", "x", "ß", "{{", "}}"]) + "{" + name + conv + spec + "}")
        return "".join(parts)

    def pct_format(self):
        r = self.r
        convs = ["%s", "%d", "%i", "%r", "%x", "%X", "%o", "%f", "%.2f", "%5d", "%-5d|", "%05d", "%+d", "% d", "%e", "%g",
                 "%10.3f", "%.0f", "%600d", "%-8s|", "%8s", "%.3s", "%%", "%c", "%#x", "%#o", "%5.1e", "%G", "%E", "%.10g", "%a"]
        k = r.randint(1, 3)
        chosen = [r.choice(convs) for _ in range(k)]
        text = "".join(r.choice(["", "x", " ", "ß"]) + c for c in chosen)
        nargs = sum(1 for c in chosen if c != "%%")
        fmt = lit_str(r, text)
        args = []
        for _ in range(nargs if r.random() < 0.9 else nargs + 1):
            args.append(self.e(r.choice(["str", "int", "num", "int", "bool", "any"]), 3))
        if len(args) == 1 and r.random() < 0.5:
            return fmt, args[0]
        return fmt, self.N("list", "(", *self.join_nodes(args), ",)" if len(args) == 1 else ")")

    def e_int(self, d):
        r = self.r
        i = lambda: self.e("int", d)  # noqa: E731
        k = r.randint(0, 26)
        if k == 23:
            return self.filt("int", self.e("list", d), "sum", r.choice(["start=10", "attribute='0'", "attribute='a', start=1"]))
        if k == 24:
            return self.filt("int", "messages", r.choice(["min", "max"]), "attribute='role'") if r.random() < 0.3 else self.filt("int", self.e("list", d), r.choice(["min", "max"]))
        if k == 25:
            return self.N("int", "(", self.e("dict", d), ".keys()|length)")
        if k == 0:
            return self.N("int", "(", i(), " ", r.choice(["+", "-", "*", "//", "%"]), " ", i(), ")")
        if k == 1:
            return self.filt("int", self.e(r.choice(["str", "list", "dict"]), d), r.choice(["length", "count"]))
        if k == 2:
            return self.call("int", self.e("str", d), r.choice(["find", "rfind", "count", "index", "rindex"]), lit_str(r, r.choice(["a", "", "ß", " ", "l"])))
        if k == 3:
            return self.filt("int", self.e(r.choice(["str", "num", "any"]), d), "int", *r.choice([[], ["7"], ["default=-1"]]))
        if k == 4:
            return self.N("int", "(-", i(), ")")
        if k == 5:
            return self.filt("int", i(), "abs")
        if k == 6:
            return self.filt("int", self.e("list", d), "sum") if r.random() < 0.5 else self.filt("int", "ys", "sum")
        if k == 7 and self.loopvars:
            return self.N("int", r.choice(["loop.index", "loop.index0", "loop.revindex", "loop.revindex0", "loop.length", "loop.depth"]))
        if k == 8:
            return self.filt("int", self.N("list", "ys"), r.choice(["max", "min", "first", "last"]))
        if k == 9:
            return self.N("int", "(", self.e("list", d), ").count(", self.e("any", d), ")")
        if k == 10:
            return self.filt("int", self.e("str", d), "wordcount")
        if k == 11:
            return self.N("int", "range(", i(), ")|length")
        if k == 12 and self.namespaces:
            return self.N("int", r.choice(self.namespaces), ".c")
        if k == 13:
            return self.N("int", "(", i(), " if ", self.e("bool", d), " else ", i(), ")")
        if k == 14:
            return self.N("int", "(", self.N("list", "ys"), ")[", i(), "]")
        if k == 15:
            return self.filt("int", self.e("num", d), "round", *r.choice([[], ["1"], ["0, 'floor'"], ["1, 'ceil'"]]))
        if k == 16:
            return self.N("int", "(", i(), " ** ", self.N("int", str(r.randint(0, 5))), ")")
        if k == 17:
            return self.N("int", "(", self.e("list", d), "|length)")
        if k == 18:
            return self.N("int", "(", self.e("str", d), "|length)")
        return self.N("int", str(r.choice([0, 1, 2, 3, 4, 5, 10, 12, 100, 255, 256, 1000])))

    def e_num(self, d):
        r = self.r
        x = lambda: self.e(r.choice(["num", "int"]), d)  # noqa: E731
        k = r.randint(0, 8)
        if k == 0:
            op = r.choice(["+", "-", "*", "/", "//", "%", "**"])
            # A small literal exponent: jinja2 folds constant operands when it
            # compiles, and a huge integer power would not return.
            rhs = self.N("num", r.choice(["0", "1", "2", "3", "0.5", "-1", "2.5"])) if op == "**" else x()
            return self.N("num", "(", x(), " ", op, " ", rhs, ")")
        if k == 1:
            return self.filt("num", self.e(r.choice(["str", "int", "any"]), d), "float")
        if k == 2:
            return self.filt("num", x(), "round", *r.choice([[], ["2"], ["1, 'floor'"], ["0, 'ceil'"], ["3, 'common'"]]))
        if k == 3:
            return self.filt("num", x(), "abs")
        if k == 4:
            return self.N("num", "(-", x(), ")")
        if k == 5:
            return self.filt("num", self.N("list", "[", x(), ", ", x(), "]"), r.choice(["sum", "max", "min"]))
        return self.atom("num")

    def e_bool(self, d):
        r = self.r
        k = r.randint(0, 17)
        if k == 15:
            return self.N("bool", "(", lit_str(r, r.choice(WORDS)), r.choice([" in ", " not in "]), self.e("dict", d), ".", r.choice(["keys", "values", "items"]), "())")
        if k == 16:
            return self.N("bool", "(", self.e("any", d), " is ", r.choice(["divisibleby(2.5)", "divisibleby 0.5", "sameas false", "in 'abc'", "eq(none)", "mapping", "sequence"]), ")")
        if k <= 3:
            tests = ["defined", "undefined", "none", "string", "number", "integer", "float", "boolean", "true", "false",
                     "mapping", "iterable", "sequence", "callable", "odd", "even", "lower", "upper", "divisibleby 3",
                     "divisibleby(2)", "eq 3", "ne 'a'", "lt 5", "gt 0", "le 2", "ge 1", "in xs", "in ['a', 'b']",
                     "sameas none", "sameas true", "equalto 1", "greaterthan 2", "lessthan 3", "== 1", "escaped",
                     "filter", "test", "in d"]
            subj = self.e(r.choice(["any", "str", "int", "num", "list", "dict", "any"]), d)
            return self.N("bool", "(", subj, " is ", r.choice(["", "not "]), r.choice(tests), ")")
        if k <= 6:
            t = r.choice(["int", "str", "num", "int", "list"])
            ops = ["==", "!=", "<", ">", "<=", ">="]
            parts = ["(", self.e(t, d), " ", r.choice(ops), " ", self.e(t, d)]
            if r.random() < 0.2:
                parts += [" ", r.choice(ops), " ", self.e(t, d)]
            return self.N("bool", *parts, ")")
        if k == 7:
            return self.N("bool", "(", self.e(r.choice(["str", "any", "int"]), d), r.choice([" in ", " not in "]), self.e(r.choice(["str", "list", "dict"]), d), ")")
        if k == 8:
            return self.N("bool", "(", self.e("bool", d), r.choice([" and ", " or "]), self.e("bool", d), ")")
        if k == 9:
            return self.N("bool", "(not ", self.e("bool", d), ")")
        if k == 10:
            return self.call("bool", self.e("str", d), r.choice(["startswith", "endswith"]), r.choice([lit_str(r, r.choice(["a", "", "ß", "<"])), "('a', 'b')"]))
        if k == 11:
            return self.call("bool", self.e("str", d), r.choice(["isdigit", "isalpha", "isalnum", "isspace", "isupper", "islower", "istitle", "isnumeric", "isdecimal"]))
        if k == 12:
            return self.N("bool", "(", self.e("any", d), ")")
        return self.atom("bool")

    def e_list(self, d):
        r = self.r
        L = lambda: self.e("list", d)  # noqa: E731
        k = r.randint(0, 25)
        if k == 25:
            g = self.filt("list", r.choice(["messages", "zs", L()]), "groupby", *r.choice([["'role'"], ["'content'"], ["attribute='role', case_sensitive=true"], ["'missing', 'z'"], ["0"]]))
            return r.choice([g, self.filt("list", self.filt("list", g, "map", "attribute='grouper'"), "list"),
                             self.filt("list", self.filt("list", self.filt("list", g, "map", "attribute='list'"), "map", "'length'"), "list")])
        if k == 0:
            return self.filt("list", self.filt("list", L(), r.choice(["select", "reject"]), *r.choice([[], ["'defined'"], ["'string'"], ["'number'"], ["'odd'"], ["'equalto'", "1"], ["'in'", "['a', 'ß']"], ["'none'"], ["'divisibleby'", "num=2"], ["'in'", "seq='abc'"], ["'ne'", "b=1"]])), "list")
        if k == 1:
            return self.filt("list", self.filt("list", r.choice(["messages", self.e("any", d), "zs"]), r.choice(["selectattr", "rejectattr"]), lit_str(r, r.choice(["role", "content", "tool_calls", "missing"])), *r.choice([[], ["'equalto'", "'user'"], ["'defined'"], ["'none'"], ["'string'"], ["'in'", "['user', 'tool']"], ["'in'", "seq=['user']"], ["'eq'", "b='tool'"]])), "list")
        if k == 2:
            return self.filt("list", self.filt("list", r.choice(["messages", "zs", self.e("any", d)]), "map", *r.choice([["attribute='role'"], ["attribute='content'"], ["attribute='missing', default='z'"], ["'string'"], ["'length'"], ["'tojson'"], ["'upper'"], ["'trim'"]])), "list")
        if k == 3:
            return self.filt("list", L(), "sort", *r.choice([[], ["reverse=true"], ["case_sensitive=true"], ["attribute='role'"], ["true"]]))
        if k == 4:
            return self.filt("list", self.filt("list", L(), "unique"), "list")
        if k == 5:
            return self.filt("list", self.filt("list", L(), "reverse"), "list")
        if k == 6:
            return self.N("list", "(", self.e("dict", d), ").", r.choice(["items", "keys", "values"]), "()|list")
        if k == 7:
            return self.filt("list", self.e("dict", d), "dictsort", *r.choice([[], ["true"], ["by='value'"], ["reverse=true"]]))
        if k == 8:
            rng = self.N("list", "range(", *self.join_nodes([self.e("int", 3) for _ in range(r.randint(1, 3))]), ")")
            return r.choice([self.N("list", rng, "|list"), rng, self.N("list", rng, "[", r.choice(["1:", "::-1", "::2", ":-1"]), "]")])
        if k == 9:
            return self.N("list", "(", L(), ")[", r.choice(["1:", ":2", "::-1", "-2:", "1:-1", "::2", ":"]), "]")
        if k == 10:
            return self.N("list", "(", L(), " + ", L(), ")")
        if k == 11:
            return self.call("list", self.e("str", d), r.choice(["split", "rsplit", "splitlines"]), *([] if r.random() < 0.5 else [lit_str(r, r.choice([" ", ",", "a", "\n"]))]) if r.random() < 0.8 else [])
        if k == 12:
            return self.filt("list", self.e("any", d), "list")
        if k == 13:
            return self.filt("list", self.filt("list", self.e("dict", d), "items"), "list")
        if k == 14:
            return self.N("list", "(", L(), " * ", str(r.randint(0, 3)), ")")
        if k == 15:
            return self.filt("list", self.filt("list", self.e("any", d), r.choice(["select", "reject", "map"]), *r.choice([[], ["'string'"]])), "list")
        if k == 16:
            return self.filt("list", self.filt("list", L(), r.choice(["batch", "slice"]), r.choice(["2", "3", "2, 'f'", "1"])), "list")
        if k == 17:
            return self.N("list", "(", self.e("str", d), " | list)")
        if k == 18:
            return self.filt("list", L(), "sort", "attribute='0'")
        return self.atom("list")

    def e_dict(self, d):
        r = self.r
        k = r.randint(0, 6)
        if k == 0:
            return self.N("dict", "(messages[", self.e("int", d), "] if messages else {})")
        if k == 1:
            return self.N("dict", "dict(", *self.join_nodes([self.N("any", f"{r.choice(['a', 'b', 'role'])}=", self.e(r.choice(['str', 'int']), d)) for _ in range(r.randint(0, 2))]), ")")
        if k == 2:
            return self.N("dict", "(", self.e("dict", d), " if ", self.e("bool", d), " else d)")
        if k == 4 and r.random() < 0.5:
            # Keys of several kinds; True, 1 and 1.0 are one key, printed as
            # the object first inserted.
            # Tuples are keys too (of hashable items; equal tuples are one key).
            keys = [r.choice(["1", "7", "2.5", "none", "'x'", "'1'", "true", "false", "1.0", "-0.0", "0", "7.0",
                              "(1, 2)", "(0, 'a')", "()", "(3, ('x', none))", "(true, 1.0)", "(1.0, 2)", "(n2 + 10, s1)"]
                             + (["(1, [2])", "(d,)"] if r.random() < 0.1 else []))
                    for _ in range(r.randint(1, 3))]
            return self.N("dict", "{", *self.join_nodes([self.N("any", key, ": ", self.e("any", d)) for key in keys]), "}")
        if k == 3 and self.loopvars:
            names = [n for n, t in self.loopvars if t == "dict"]
            if names:
                return self.N("dict", r.choice(names))
        return self.atom("dict")

    def e_any(self, d):
        r = self.r
        k = r.randint(0, 11)
        if k == 9 and r.random() < 0.3:
            # What the immutable sandbox refuses: mutating methods (a
            # SecurityError when called or printed, undefined to `is defined`
            # and `default`) and names with a leading underscore.
            recv = r.choice(["xs", "ys", "d", "messages", "(xs | list)", "[]", "{}", self.e(r.choice(["list", "dict"]), d)])
            attr = r.choice(["append", "pop", "extend", "insert", "remove", "clear", "sort", "reverse", "update",
                             "setdefault", "popitem", "_x", "__class__", "__len__", "copy", "index", "count"])
            call = r.choice(["", "()", "(1)", "(0, 1)", "({})"])
            return self.N("any", recv, ".", attr, call, r.choice(["", "", " is defined", " is undefined", " | default('q')",
                                                                 " | string"]) if not call else "")
        if k == 10:
            # jinja2's attrgetter puts the default in at every step of a
            # dotted path; an explicit none is no default.
            path = r.choice(["tool_calls.0.function.name", "function.name", "content.0", "tool_calls.0", "0.role",
                             "role.0", "content.text", "tool_calls.1.function.arguments.x"])
            dflt = r.choice(["", ", default='-'", ", default=none", ", default=0", ", default=[]"])
            return self.N("any", "(", r.choice(["messages", "zs", "tools", self.e("list", d)]), " | map(attribute='",
                          path, "'", dflt, ") | list)")
        if k == 11:
            # Numbers in strings, as int/float filters read them (inf, nan,
            # bases, underscores, blanks).
            lit = lit_str(r, r.choice(["inf", "-inf", "nan", "1e400", " 12 ", "0x1A", "1_000", "0b11", "017", "0o17",
                                       "3.7", "-0", "1e3", "ff", "\u0663", "1_0.5", "infinity", "+5", ""]))
            f = r.choice(["int", "int(base=16)", "int(0, 0)", "int(default=-1)", "float", "float(default=none)",
                          "float | int", "float | round", "float | string", "float | tojson", "float | int(7)",
                          "float | round(2, 'floor')", "float | abs", "int(base=36)"])
            return self.N("any", "(", lit, " | ", f, ")")
        if k == 0:
            return self.N("any", "(", self.e("dict", d), ").", r.choice(WORDS))
        if k == 1:
            return self.N("any", "(", self.e("list", d), ")[", self.e("int", d), "]")
        if k == 2:
            return self.N("any", "(", self.e("dict", d), ").get(", lit_str(r, r.choice(WORDS)), ")")
        if k == 3:
            return self.N("any", "(", self.e("any", d), " or ", self.e("any", d), ")")
        if k == 4:
            return self.N("any", "(", self.e("any", d), " and ", self.e("any", d), ")")
        if k == 5:
            return self.N("any", "(", self.e("any", d), " if ", self.e("bool", d), ")")
        return self.e(r.choice(["str", "int", "num", "bool", "list", "dict"]), d)

    # ---- statements --------------------------------------------------
    def tag(self, body):
        r = self.r
        return r.choice(["{%", "{%", "{%", "{%-", "{%+"]) + " " + body + " " + r.choice(["%}", "%}", "%}", "-%}"])

    def text(self):
        r = self.r
        return self.N("stmt", r.choice(["", "\n", "  ", "x", "<|im_start|>", "\n  ", "a b", " \n", "\n\n", "\t", "ß\n", "  \n  "]))

    def body(self, depth, n=None):
        r = self.r
        n = r.randint(1, 4) if n is None else n
        return [self.stmt(depth) for _ in range(n)]

    def out(self, t=None, depth=0):
        r = self.r
        t = t or r.choice(["str", "str", "str", "int", "num", "bool", "list", "dict", "any"])
        # escape/safe give markupsafe's Markup, whose operators escape their
        # other operand (e_str also makes Markup inside expressions).
        tail = r.choice(["", "", "", "", "", "", " | escape", " | e", " | safe", " | forceescape"])
        return self.N("stmt", r.choice(["{{ ", "{{- ", "{{ "]), self.e(t, depth), tail, r.choice([" }}", " }}", " -}}"]))

    def stmt(self, depth):
        r = self.r
        if depth > 3:
            return r.choice([self.text, self.out])()
        k = r.randint(0, 27)
        if k >= 26:
            return self.misc_stmt(depth)
        if k == 22:
            # A filter block with a chain of filters.
            f1 = r.choice(["upper", "lower", "trim", "title", "replace('a', 'Z')", "indent(2)", "capitalize", "center(9)"])
            # (length: the block's result is no str, which fails jinja2's join)
            f2 = r.choice(["trim", "upper", "replace('\\n', '|')", "list | join", "e", "truncate(4)", "title",
                           "indent(1, true)", "center(12)", "default('x', true)", "string"] + ["length"] * (r.random() < 0.1))
            return self.N("stmt", self.tag(f"filter {f1} | {f2}"), *self.body(depth + 1), self.tag("endfilter"))
        if k == 23 and r.random() < 0.4:
            # raise_exception in a branch, as templates guard roles.
            return self.N("stmt", self.tag_split("if ", self.e("bool", 2)), "{{ raise_exception(",
                          self.e("str", 2), ") }}", self.tag("endif"))
        if k == 24:
            return self.chat_loop(depth)
        if k == 25:
            kind = r.randint(0, 2)
            if kind == 0 and self.namespaces:
                ns = r.choice(self.namespaces)
                return self.N("stmt", self.tag_split(f"set {ns}.l = ({ns}.l if {ns}.l is defined else []) + [", self.e("any", 2), "]"),
                              "{{ ", ns, ".l | length }}")
            if kind == 1 and not self.in_macro:
                name = self.fresh("mv")
                body = r.choice(["{{ a }}|{{ varargs }}|{{ kwargs }}", "{{ varargs | join(',') }}{{ kwargs | dictsort }}",
                                 "{{ a }}{{ b }}{{ varargs | length }}", "{{ kwargs.get('z', b) }}"])
                call = r.choice(["()", "(1)", "(1, 2)", "(s1, b=xs)", "(b=3)", "(1, b=2)", "(*ys[:2])", "(**{'a': 1})"]
                                + (["(1, 2, 3)", "(1, z=2)", "(1, 2, z=[1])", "(*xs)", "(**d)", "(a=1, a2=2)"]
                                   if "varargs" in body or "kwargs" in body or r.random() < 0.2 else []))
                return self.N("stmt", self.tag(f"macro {name}(a, b=none)"), body, self.tag("endmacro"), "{{ ", name, call, " }}")
            name = self.fresh("cm")
            args, inner = r.choice([("(x)", "{{ caller(1) }}"), ("(x, y=2)", "{{ caller('a') }}{{ caller('b', 'c') }}"),
                                    ("()", "{{ caller() }}"), ("(x, y)", "{{ caller(y=5, x=0) }}"),
                                    ("(x, y=2)", "{{ caller(1) | upper }}{{ caller(y=3, x=2) }}"), ("(x, y)", "{{ caller(1) }}")]
                                   + ([("(x)", "{{ caller('a', 'b') }}"), ("()", "{{ caller(y=1) }}")] if r.random() < 0.2 else []))
            return self.N("stmt", self.tag(f"macro {name}()"), inner, self.tag("endmacro"), self.tag(f"call{args} {name}()"),
                          "<{{ x is defined and x }}|{{ y is defined and y }}>", *self.body(depth + 1), self.tag("endcall"))
        if k == 21:  # a recursive loop over nested lists
            var = self.fresh("rv")
            cond = [" if ", self.e("bool", 1)] if r.random() < 0.2 else []
            head = self.tag_split(f"for {var} in ", self.e("list", 1), *cond, " recursive")
            inner = f"{{{{ loop.depth }}}}:{{{{ {var} }}}}" + self.tag(f"if {var} is iterable and {var} is not string") + \
                f"({{{{ loop({var}) }}}})" + self.tag("endif")
            return self.N("stmt", head, inner, *self.body(depth + 2), self.tag("endfor"))
        if k <= 3:
            return self.text()
        if k <= 8:
            return self.out()
        if k == 9:
            cond = self.e("bool", 1)
            parts = [self.N("stmt", self.tag_split("if ", cond)), *self.body(depth + 1)]
            if r.random() < 0.3:
                parts += [self.N("stmt", self.tag_split("elif ", self.e("bool", 1))), *self.body(depth + 1)]
            if r.random() < 0.5:
                parts += [self.N("stmt", self.tag("else")), *self.body(depth + 1)]
            parts.append(self.N("stmt", self.tag("endif")))
            return self.N("stmt", *parts)
        if k <= 11:
            return self.for_stmt(depth)
        if k == 12:
            name = self.fresh("v")
            t = r.choice(["str", "int", "list", "dict", "num", "bool"])
            node = self.N("stmt", self.tag_split(f"set {name} = ", self.e(t, 1)))
            if self.in_loop and r.random() < 0.3:  # what an iteration set is gone in the next one
                node = self.N("stmt", "{{ " + name + " is defined }}", node)
            self.scope.setdefault(t, []).append(name)
            return node
        if k == 13:
            name = self.fresh("sb")
            filt = r.choice(["", "", " | upper", " | trim", " | replace('a', 'b')", " | indent(2)", " | title"])
            parts = [self.tag(f"set {name}{filt}"), *self.body(depth + 1), self.tag("endset")]
            self.scope["str"].append(name)
            return self.N("stmt", *parts)
        if k == 14:
            ns = self.fresh("ns")
            self.namespaces.append(ns)
            return self.N("stmt", self.tag_split(f"set {ns} = namespace(c=0, s=", self.e("str", 2), self.N("stmt", ", f=none)")))
        if k == 15 and self.namespaces:
            ns = r.choice(self.namespaces)
            if r.random() < 0.5:
                return self.N("stmt", self.tag_split(f"set {ns}.c = {ns}.c + ", self.e("int", 2)))
            return self.N("stmt", self.tag_split(f"set {ns}.s = {ns}.s ~ ", self.e("str", 2)))
        if k == 16 and not self.in_macro:
            name = self.fresh("m")
            self.in_macro += 1
            saved = {t: list(v) for t, v in self.scope.items()}
            self.scope["str"] += ["p", "q"]
            parts = [self.tag(f"macro {name}(p, q='dq')"), *self.body(depth + 1), self.tag("endmacro")]
            self.scope = saved
            self.in_macro -= 1
            call = self.N("stmt", "{{ ", name, "(", self.e("str", 2), r.choice([")", ", 'x')", ", q=s2)", ", 1, 2)", ", *xs[:1])", ", **{'q': s2})", ", *ys)", ", **d)"]), " }}")
            return self.N("stmt", *parts, call)
        if k == 17 and self.in_loop:
            return self.N("stmt", self.tag_split("if ", self.e("bool", 2), self.N("stmt", " %}" + self.tag(r.choice(["break", "continue"])) + "{% endif")))
        if k == 18:
            return self.N("stmt", self.tag("filter " + r.choice(["upper", "lower", "trim", "title", "capitalize", "replace('a', 'Z')", "indent(2)"])), *self.body(depth + 1), self.tag("endfilter"))
        if k == 19 and r.random() < 0.5:
            kind = r.randint(0, 2)
            if kind == 0:
                name = self.fresh("cm")
                return self.N("stmt", self.tag(f"macro {name}(a)"), "[{{ a }}:{{ caller() }}]", self.tag("endmacro"),
                              self.tag(f"call {name}(" + r.choice(["", "*"]) + lit_str(r) + ")"), *self.body(depth + 1), self.tag("endcall"))
            if kind == 1:
                w = self.fresh("w")
                self.scope["str"].append(w)
                return self.N("stmt", self.tag_split(f"with {w} = ", self.e("str", 2)), *self.body(depth + 1), self.N("stmt", self.tag("endwith")))
            a, b = self.fresh("ta"), self.fresh("tb")
            self.scope["any"] += [a, b]
            return self.N("stmt", self.tag_split(f"set {a}, {b} = ", self.e("any", 2), ", ", self.e("any", 2)))
        if k == 19:
            if r.random() < 0.5:
                # raw blocks: whitespace control on both tags, newlines and
                # blanks next to them (trim_blocks, lstrip_blocks).
                ws = lambda: r.choice(["", "\n", "  ", "\n  ", "  \n", "\n\n"])  # noqa: E731
                open_ = r.choice(["{% raw %}", "{%- raw %}", "{% raw -%}", "{%+ raw %}", "{%- raw -%}"])
                close = r.choice(["{% endraw %}", "{%- endraw %}", "{% endraw -%}", "{%+ endraw %}", "{% endraw +%}"])
                return self.N("stmt", ws() + open_ + ws() + r.choice(["{{ x }}", "a", "{% if %}", ""]) + ws() + close + ws())
            return self.N("stmt", r.choice(["{# comment #}", "{#- c -#}", "{% raw %}{{ x }}{% endraw %}", "\n{#\n#}\n"]))
        return self.out()

    def misc_stmt(self, depth):
        """Scoping, unpacking, macro and loop idioms around random expressions."""
        r = self.r
        e = lambda t="any": self.e(t, 2)  # noqa: E731
        k = r.randint(0, 18)
        if k == 14:  # {% generation %}: jinja2 compiles its body to a caller of its own
            v = self.fresh("gv")
            inner = r.choice(["{{ " + e("str").render() + " }}", "{% set " + v + " = 1 %}x", "{{ varargs }}{{ kwargs }}",
                              "{{ caller is defined }}", "{{ loop is defined and loop.index }}", "{{ self is defined }}",
                              "{% for g in ys %}{{ g }}{% if loop.last %}{% break %}{% endif %}{% endfor %}",
                              "{{ varargs | length }}", "{{ kwargs | tojson }}"] + (["{% break %}", "{{ caller() }}"] if r.random() < 0.1 else []))
            gen = [self.tag("generation"), inner, *self.body(depth + 1, r.randint(0, 2)), self.tag("endgeneration")]
            kind = r.randint(0, 3)
            if kind == 0:
                return self.N("stmt", *gen, "{{ ", v, " is defined }}")
            if kind == 1:
                return self.N("stmt", self.tag("for m in messages"), *gen, "{{ loop.index }}", self.tag("endfor"))
            if kind == 2:
                name = self.fresh("gm")
                return self.N("stmt", self.tag(f"macro {name}(a)"), *gen, "{{ a }}", self.tag("endmacro"),
                              r.choice(["{{ " + name + "(1) }}", "{% call " + name + "(2) %}c{% endcall %}"]))
            return self.N("stmt", self.tag_split("if ", self.e("bool", 2)), *gen, self.tag("endif"))
        if k == 15:  # str.format with keywords, * and ** arguments
            fmt = r.choice(["{i}-{}", "{a}|{b}", "{role}: {content}", "{0[role]}", "{}{}", "{x!r:>5}", "{a[0]}", "{i:3d}"])
            args = r.choice([["1", "i=" + e().render()], ["**d"], ["**" + self.e("dict", 2).render()], ["*xs"], ["*" + self.e("list", 2).render()],
                             ["x=" + e().render()], ["i=n1"], ["a=s1, b=" + e().render()], ["*ys, **d"], ["messages[0] if messages else {}"],
                             ["**(messages[0] if messages else {})"]])
            return self.N("stmt", "{{ ", lit_str(r, fmt), ".format(", ", ".join(args), ") }}")
        if k == 16:  # indexing as templates write it: computed, negative, through attributes
            idx = r.choice(["[-1]", "[loop_i - 1]", "[n2 - 1]", "[n1 % 3]", "[ys | length - 1]", "[xs | length]", "[-n2]",
                            "[d.a]", "[s1]", "['role']", "[(n2 + 1) // 2]", "[none]", "[true]", "[1.0]", "[-0]"])
            recv = r.choice(["messages", "xs", "ys", "zs", "d", "s1", "tools", "messages[0] if messages else []"])
            tail = r.choice(["", ".role", "['content']", " | string", " is defined", " | default('-')", " | tojson"])
            return self.N("stmt", self.tag("set loop_i = n2"), "{{ (", recv, ")", idx.replace("loop_i", "loop_i"), tail, " }}")
        if k == 17:  # a tuple as a dict key: lookups, membership, views, filters over such dicts
            v = self.fresh("td")
            # (tuples that order at their first item: pprint orders tuples that
            # do not compare by their address)
            lit = "{" + r.choice(["(1, 2): 'a', (0, 'b'): [1], (): none", "(n2 + 10, s1): ys, (1, 2.0): 'x'", "(1, 2): 'p', (1.0, 2): 'q'",
                                  "('x', (1, 'y')): d, 'x': 1, 2: 'z'", "(true, 1): 1, (1, 1.0): 2"]) + "}"
            use = r.choice(["{{ V }}", "{{ V[(1, 2)] }}", "{{ V[(1, [2])] }}", "{{ V[[1, 2]] }}", "{{ (1, 2) in V }}",
                            "{{ [1, 2] in V }}", "{{ V.get((1, 2), '-') }}", "{{ V | dictsort }}", "{{ V | pprint }}",
                            "{{ V | tojson }}", "{{ V | list }}", "{{ V.items() | list }}", "{{ V | string }}",
                            "{% for k, x in V.items() %}{{ k }}={{ x }};{% endfor %}", "{{ V | length }}", "{{ V | first }}",
                            "{{ V.keys() | map('string') | join('|') }}", "{{ V | urlencode }}", "{{ V | xmlattr }}",
                            "{% for (a, b), x in V | items %}{{ a }}{{ b }}{{ x }}{% else %}-{% endfor %}", "{{ V | unique | list }}",
                            "{{ V[(n2 + 10, s1)] }}", "{{ V | dictsort(by='value') }}", "{{ dict(V) }}", "{{ V | sort }}"])
            return self.N("stmt", self.tag(f"set {v} = {lit}"), use.replace("V", v))
        if k == 18:  # autoescape with a true value: what escapes, what is Markup, what joins as markup_join
            v, m = self.fresh("ae"), self.fresh("am")
            S = lambda: self.e("str", 2).render()  # noqa: E731
            piece = lambda: r.choice([  # noqa: E731
                "{{ " + S() + " }}", "{{ " + S() + " | safe }}", "{{ " + S() + " | e }}", "{{ (" + S() + " | safe) ~ " + S() + " }}",
                "{{ " + S() + " ~ (" + S() + " | e) }}", "{{ " + m + "(" + S() + ") }}", "{{ " + m + "(" + S() + ") ~ " + S() + " }}",
                "{% set " + v + " %}<{{ " + S() + " }}>{% endset %}{{ " + v + " }}{{ " + v + " ~ '<' }}{{ " + v + " | length }}",
                "{% set " + v + " | upper %}<{{ s1 }}>&{% endset %}{{ " + v + " }}", "{% set " + v + " = " + S() + " %}{{ " + v + " }}",
                "{% filter " + r.choice(["upper", "replace('a', '<')", "e", "safe", "indent(2)", "center(9)", "trim"]) + " %}<{{ " + S() + " }}>{% endfilter %}",
                "{{ " + r.choice(["xs", "[s1 | safe, '<', 1]", "[s1, s2]", "messages | map(attribute='role')"]) + " | join(" + r.choice(["", "'<'", "'<' | safe", "s1", "s1 | e"]) + ") }}",
                "{{ " + S() + " | replace(" + r.choice(["'a', '<'", "'<' | safe, '>'", "'a', '&' | safe", "s2, s1", "'a', 'b', 1"]) + ") }}",
                "{{ " + r.choice(["(" + S() + " | safe) | replace('a', '<')", "d | xmlattr", "(s1 ~ ' http://x.org <y>') | urlize", "d | tojson",
                                  "d", "xs", "[s1 | safe]", "messages | first", "nn", "undef", "n1", "f1", "b1", "(s1 | e).upper()",
                                  "'%s<' % s1", "('%s<' | safe) % s1", "s1 | indent(2)", "(s1 ~ '\n<') | indent(2, true)",
                                  "s1 | center(9)", "s1 | truncate(4)", "s1 | wordwrap(3)", "s1 | striptags", "s1 | title",
                                  "s1 | urlencode", "'%s' | format(s1)", "s1 | string", "(s1 | safe) | string", "s1 | e | length",
                                  "self." + v + "b()", "(s1 | e) + s2", "(s1 | e) * 2", "'<' ~ 1 ~ none", "'<' | safe ~ '<'"]) + " }}",
                "{% call " + m + "(" + S() + ") %}<{{ " + S() + " }}>{% endcall %}",
                "{% for x in [[s1], s2] recursive %}{% if x is string %}{{ x }}{% else %}{{ loop(x) }}{% endif %}{% endfor %}",
                "{% block " + v + "b %}<{{ s1 }}>{% endblock %}",
                "{% generation %}<{{ " + S() + " }}>{% endgeneration %}",
                "{% for x in xs %}{% autoescape true %}{% if loop.first %}{% break %}{% endif %}{% endautoescape %}{% endfor %}{{ s1 }}",
                "{% autoescape " + r.choice(["false", "b1", "true", "nn"]) + " %}{{ " + S() + " }}{{ '<' }}{{ s1 ~ (s2 | safe) }}{% endautoescape %}"])
            macro = self.tag(f"macro {m}(x)") + r.choice(["<{{ x }}>", "{{ x ~ '<' }}", "{{ caller() if caller is defined else x }}"]) + self.tag("endmacro")
            inside = r.random() < 0.5
            return self.N("stmt", "" if inside else macro,
                          self.tag("autoescape " + r.choice(["true", "true", "b1", "1", "not false", "s3"])), macro if inside else "",
                          *[piece() for _ in range(r.randint(1, 4))], self.tag("endautoescape"),
                          r.choice(["", "{{ " + m + "(s1) }}", "{{ s1 }}", "{{ xs | join(s1 | safe) }}"]))
        if k == 13:  # blocks rendered in place (scoped or not), self.name(), autoescape with a false value
            name = self.fresh("blk")
            kind = r.randint(0, 3)
            if kind == 3:
                return self.N("stmt", self.tag(r.choice(["autoescape false", "autoescape none", "autoescape undef",
                                                         "autoescape ''", "autoescape 0", "autoescape true", "autoescape b1",
                                                         "autoescape 1", "autoescape not false", "autoescape xs"])),
                              *self.body(depth + 1), self.tag("endautoescape"))
            head = f"block {name}" + r.choice(["", "", " scoped"])
            blk = [self.tag(head), *self.body(depth + 1), self.tag(r.choice(["endblock", f"endblock {name}"]))]
            if kind == 0:
                return self.N("stmt", *blk)
            if kind == 1:
                return self.N("stmt", *blk, "{{ self.", name, "() ", r.choice(["", "| upper", "| length", "~ 'z'"]), " }}")
            return self.N("stmt", self.tag("for i in ys"), *blk, self.tag("endfor"), "{{ self.", name, "() }}")
        if k == 12:  # nested unpacking targets, right and wrong shapes
            a, b, c = self.fresh("na"), self.fresh("nb"), self.fresh("nc")
            kind = r.randint(0, 5)
            if kind <= 2:
                target = r.choice([f"{a}, ({b}, {c})", f"({a}, {b}), {c}", f"{a}, ({b}, ({c},))", f"({a},)",
                                   f"{a}, ({b}, {c},)", f"(({a}, {b}))"])
                src = r.choice(["[[1, [2, 3]], [4, 'ab']]", "d.items()", "d | dictsort", "[['xy', 'z']]",
                                "[(0, (1, 2))]", "[[[1, 2], 3]]", "[['a', ['b']]]", "[('x', 'yz')]", "zs"]
                               + (["[[1, [2]]]", "[[1, 2]]", "[[1, 'abc']]", "xs", "[none]"] if r.random() < 0.3 else []))
                return self.N("stmt", self.tag(f"for {target} in {src}"), "{{ ", a, " }}:{{ ", b, " }}:{{ ", c, " }};",
                              self.tag("else"), "-", self.tag("endfor"))
            if kind == 3:
                self.scope["any"] += [a, b, c]
                return self.N("stmt", self.tag_split(f"set {a}, ({b}, {c}) = ", e(), ", (", e(), r.choice([", ", ", 1, "]), e(), ")"),
                              "{{ ", a, " }}{{ ", b, " }}{{ ", c, " }}")
            if kind == 4:
                self.scope["any"] += [a, b]
                return self.N("stmt", self.tag_split(f"set ({a}, {b}), {c} = ", e("str"), ", ", e()),
                              "{{ ", a, " }}{{ ", b, " }}")
            ns = self.fresh("ns")
            return self.N("stmt", self.tag(f"set {ns} = namespace(a=1)"),
                          self.tag(r.choice([f"set {ns}.a, {b} = 2, 3", f"set {b}, {ns}.a = 'x', 'y'", f"set {ns}.a, = [5]",
                                             f"set {a}, {b} %}}xy{{% endset", f"set {ns}.a, {b} %}}xy{{% endset"])),
                          "{{ ", ns, ".a }}")
        if k == 0:  # defaults that read earlier parameters and outer names
            name = self.fresh("md")
            return self.N("stmt", self.tag(f"macro {name}(a, b=a, c=s1 ~ 'x')"), "{{ a }}|{{ b }}|{{ c }}", self.tag("endmacro"),
                          "{{ ", name, "(", e("str"), r.choice([")", ", c=1)", ", none)"]), r.choice(["", " | upper", " | length", " ~ 'z'"]), " }}")
        if k == 1:  # a macro's result set and reused
            name, v = self.fresh("mr"), self.fresh("v")
            self.scope["str"].append(v)
            return self.N("stmt", self.tag(f"macro {name}(x)"), "<{{ x }}>", self.tag("endmacro"),
                          self.tag_split(f"set {v} = {name}(", e(), ") ~ " + name + "(", e("str"), ")"), "{{ ", v, " }}")
        if k == 2:  # unpacking, right and wrong sizes
            a, b = self.fresh("ua"), self.fresh("ub")
            src = r.choice(["[[1, 2], [3, 4]]", "['ab', 'cd']", "d.items()", "[(1, 2)]", "[[none, 'x']]", "d | dictsort"]
                           + (["[[1, 2], [3]]", "['abc']", "messages", "zs"] if r.random() < 0.2 else []))
            return self.N("stmt", self.tag(f"for {a}, {b} in {src}"), "{{ ", a, " }}:{{ ", b, " }};", self.tag("endfor"))
        if k == 3:  # the outer loop kept through a set
            o, i, j = self.fresh("ol"), self.fresh("i"), self.fresh("j")
            return self.N("stmt", self.tag(f"for {i} in ys"), self.tag(f"set {o} = loop"), self.tag(f"for {j} in xs[:2]"),
                          "{{ ", o, ".index }}.{{ loop.index }}", r.choice(["", "{{ " + o + ".last }}", "{{ loop.revindex }}"]),
                          self.tag("endfor"), self.tag("endfor"))
        if k == 4:  # assignments inside if/for do not leak out of the loop
            v = self.fresh("lk")
            return self.N("stmt", self.tag_split(f"set {v} = ", e()), self.tag("for x in ys"),
                          self.tag_split("if ", e("bool")), self.tag_split(f"set {v} = ", e()), self.tag("endif"),
                          "{{ ", v, " }}", self.tag("endfor"), "[{{ ", v, " }}]")
        if k == 5:  # what tojson and string make of engine objects
            # (not cycler() or joiner(): jinja2 prints their address)
            obj = r.choice(["namespace(a=1)", "range(3)", "undef", "messages | groupby('role')",
                            "d.items()", "xs | batch(2)", "(1, 'a')", "ys | select('odd')", "'<a>' | e"])
            return self.N("stmt", "{{ ", obj, r.choice([" | tojson", " | string", " | list", " | length", " is iterable",
                                                         " is sequence", " | first", " | count"]), " }}")
        if k == 6 and r.random() < 0.2:  # set on what is no namespace
            return self.N("stmt", self.tag(r.choice(["set d.x = 1", "set xs.y = 2", "set undef.z = 3", "set loop.q = 1",
                                                       "set nn.a = 1"])), "ok")
        if k == 7:  # a for over a mapping, a string, none, a number
            v = self.fresh("fv")
            src = r.choice(["d", "s1", "d.role", "messages[0] if messages else {}", "(1, 2)", "d.values()", "s2 | list"]
                           + (["nn", "n1", "f1", "undef", "b1"] if r.random() < 0.2 else []))
            return self.N("stmt", self.tag(f"for {v} in {src}"), "{{ ", v, " }}", self.tag("else"), "-", self.tag("endfor"))
        if k == 8:  # loop.cycle / changed with several arguments, revindex, length in a filtered loop
            v = self.fresh("cv")
            return self.N("stmt", self.tag_split(f"for {v} in ", self.e("list", 2), " if ", self.e("bool", 2)),
                          "{{ loop.cycle(", e(), ", ", e("str"), ") }}{{ loop.changed(", v, ") }}{{ loop.revindex }}/{{ loop.length }}",
                          self.tag("endfor"))
        if k == 9:  # nested macros and callers
            m1, m2 = self.fresh("na"), self.fresh("nb")
            return self.N("stmt", self.tag(f"macro {m1}(x)"), "[{{ x }}{{ caller(x) if caller is defined else '' }}]",
                          self.tag("endmacro"), self.tag(f"macro {m2}()"), self.tag(f"call(y) {m1}(" + r.choice(["1", "'a'", "s2"]) + ")"),
                          "{{ y }}{{ varargs | length }}", self.tag("endcall"), self.tag("endmacro"),
                          "{{ ", m2, r.choice(["()", "(1)", "(z=1)"]), " }}")
        if k == 10:  # whitespace around tags in loops with lstrip/trim
            return self.N("stmt", r.choice(["\n  ", "  ", "\t", ""]), self.tag("for x in xs[:2]"), r.choice(["\n  ", "\n", ""]),
                          "{{ x }}", r.choice(["\n", "  \n", ""]), self.tag("endfor"), r.choice(["\n", "", "  \n\n"]))
        # an expression statement where a statement is expected
        return self.N("stmt", "{{ ", e(), " if ", e("bool"), " else ", e("str"), " }}")

    def chat_loop(self, depth):
        """A loop over messages as chat templates write it: roles, content as
        a string or a list of parts, tool calls with or without the function
        wrapper, loop.previtem/nextitem, reasoning split out of content."""
        r = self.r
        m = self.fresh("msg")
        self.loopvars.append((m, "dict"))
        self.in_loop += 1
        src = r.choice(["messages", "messages[1:]", "messages | selectattr('role', 'ne', 'system')", "messages | reverse",
                        "messages[:-1]"])
        content = r.choice([
            f"{{%- if {m}.content is string %}}{{{{ {m}.content | trim }}}}{{%- elif {m}.content is iterable %}}"
            f"{{%- for part in {m}.content %}}{{%- if part.type == 'text' %}}{{{{ part.text }}}}{{%- elif part.type is defined %}}"
            f"<{{{{ part.type }}}}>{{%- endif %}}{{%- endfor %}}{{%- endif %}}",
            f"{{%- set c = {m}.content if {m}.content is string else '' %}}{{%- if '</think>' in c %}}"
            f"{{{{ c.split('</think>')[-1].lstrip('\\n') }}}}{{%- else %}}{{{{ c }}}}{{%- endif %}}",
            f"{{{{ ({m}['content'] or '') ~ '' }}}}",
            f"{{{{ {m}.content | default('', true) | string | replace('\\n', ' ') }}}}",
        ])
        tools = r.choice([
            f"{{%- if {m}.tool_calls is defined and {m}.tool_calls %}}{{%- for tc in {m}.tool_calls %}}"
            f"{{%- if tc.function is defined %}}{{%- set tc = tc.function %}}{{%- endif %}}"
            f"<tool_call>{{{{ tc.name }}}}:{{{{ tc.arguments | tojson if tc.arguments is not string else tc.arguments }}}}"
            f"{{%- if not loop.last %}},{{%- endif %}}{{%- endfor %}}{{%- endif %}}",
            f"{{%- for tc in {m}.tool_calls | default([]) %}}{{{{ tc | tojson }}}}{{%- endfor %}}",
            "",
        ])
        nav = r.choice([
            f"{{%- if loop.previtem is defined and loop.previtem.role == {m}.role %}}[same]{{%- endif %}}",
            f"{{%- if loop.nextitem is defined %}}->{{{{ loop.nextitem.role }}}}{{%- endif %}}",
            f"{{{{ loop.index0 }}}}/{{{{ loop.length }}}}{{{{ loop.first }}}}",
            f"{{%- if {m}.role == 'user' and loop.index0 % 2 != 0 %}}{{{{ raise_exception('roles must alternate') }}}}{{%- endif %}}",
            "",
        ])
        head = self.tag_split(f"for {m} in ", self.N("list", src))
        roles = (f"{{%- if {m}.role == 'system' %}}<sys>{{%- elif {m}.role in ['user', 'tool'] %}}<{{{{ {m}.role }}}}>"
                 f"{{%- else %}}<{{{{ {m}['role'] | upper }}}}>{{%- endif %}}\n")
        parts = [head, nav, roles, content, tools]
        if r.random() < 0.5:
            parts += self.body(depth + 2, r.randint(1, 2))
        parts.append("<|end|>\n")
        self.in_loop -= 1
        self.loopvars.pop()
        parts.append(self.N("stmt", self.tag("endfor")))
        if r.random() < 0.5:
            parts.append("{%- if add_generation_prompt %}<assistant>{%- endif %}")
        return self.N("stmt", *parts)

    def tag_split(self, head, *nodes):
        r = self.r
        open_, close = r.choice(["{%", "{%", "{%-", "{%+"]), r.choice(["%}", "%}", "-%}"])
        return self.N("stmt", open_ + " " + head, *nodes, " " + close)

    def for_stmt(self, depth):
        r = self.r
        var = self.fresh("it")
        kind = r.randint(0, 4)
        if kind == 0:
            src, vt, head = self.N("list", "messages"), "dict", f"for {var} in "
        elif kind == 1:
            src, vt, head = self.e("list", 1), "any", f"for {var} in "
        elif kind == 2:
            k2 = self.fresh("kk")
            src, vt, head = self.N("list", "(", self.e("dict", 2), ").items()"), "any", f"for {k2}, {var} in "
            self.scope["str"].append(k2)
        elif kind == 3:
            src, vt, head = self.N("list", "range(", self.e("int", 3), ")"), "int", f"for {var} in "
        else:
            src, vt, head = self.e("str", 1), "str", f"for {var} in "
        self.loopvars.append((var, vt))
        self.in_loop += 1
        cond = []
        if r.random() < 0.2:
            cond = [" if ", self.e("bool", 2)]
        parts = [self.tag_split(head, src, *cond)]
        body = self.body(depth + 1)
        if r.random() < 0.5:
            body.insert(r.randint(0, len(body)), self.N("stmt", "{{ ", r.choice(["loop.index", "loop.first", "loop.last", "loop.revindex0", "loop.length", "loop.previtem", "loop.nextitem", "loop.cycle('a', 'b')", "loop.index0", "loop.depth0", f"loop.changed({var})", f"loop.changed({var}, loop.first)"]), " }}"))
        parts += body
        self.in_loop -= 1
        self.loopvars.pop()
        if r.random() < 0.2:
            parts += [self.N("stmt", self.tag("else")), *self.body(depth + 1)]
        parts.append(self.N("stmt", self.tag("endfor")))
        return self.N("stmt", *parts)

    def template(self):
        return self.N("stmt", *self.body(0, self.r.randint(1, 6)))


def generate(seed):
    r = random.Random(seed)
    g = Gen(r)
    return g.template(), rand_context(r)
