"""python -m tokfeed: the daemon and its status, from the tokfeed installation.

    python -m tokfeed serve job.toml        run tokfeedd for the job in the foreground (Ctrl-C stops it)
    python -m tokfeed status job.toml       the status of the daemon serving the job (or --socket PATH)
    python -m tokfeed status --json job.toml
"""
import argparse
import os
import sys

from ._programs import program
from .launch import config_socket


def _need(name):
    path = program(name)
    if not path:
        sys.exit(f"tokfeed: {name} not found (not in this installation, not on PATH, {name.upper()} unset)")
    return path


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m tokfeed", description="Run or inspect a tokfeed daemon.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    serve = sub.add_parser("serve", help="run tokfeedd for a job config in the foreground")
    serve.add_argument("config", help="the job's TOML config")
    serve.add_argument("--log-level", default="info", help="trace | debug | info | warn | error")
    st = sub.add_parser("status", help="show the status of the daemon serving a job")
    st.add_argument("config", nargs="?", help="the job's TOML config (its [server] socket is asked)")
    st.add_argument("--socket", "-s", help="the daemon's control socket, instead of a config")
    st.add_argument("--json", action="store_true", help="print the status as one JSON object")
    a = ap.parse_args(argv)
    if a.cmd == "serve":
        exe = _need("tokfeedd")
        try:
            os.makedirs(os.path.dirname(config_socket(a.config)), exist_ok=True)
        except (OSError, ValueError) as e:
            sys.exit(f"tokfeed: {e}")
        os.execv(exe, [exe, "--config", a.config, "--log-level", a.log_level])
    if a.socket:
        sock = a.socket
    elif a.config:
        try:
            sock = config_socket(a.config)
        except (OSError, ValueError) as e:
            sys.exit(f"tokfeed: {e}")
    else:
        sock = "/run/tokfeed/default.sock"
    exe = _need("tokfeedctl")
    os.execv(exe, [exe, "--socket", sock, "status"] + (["--json"] if a.json else []))


if __name__ == "__main__":
    main()
