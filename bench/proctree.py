"""Process trees from /proc, shared by the benchmarks (bench/*/run.py)."""
import os


def stat_fields(pid):
    """The fields of /proc/PID/stat after the command name (state, ppid, ...)."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()


def descendants(root):
    """root and every process below it."""
    children = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                children.setdefault(int(stat_fields(name)[1]), []).append(int(name))
            except (OSError, IndexError, ValueError):
                pass
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out
