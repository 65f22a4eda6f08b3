"""The wheel's tokfeedd and tokfeedctl commands: exec the programs that the
wheel keeps in tokfeed/bin/ (where auditwheel's RPATH to tokfeed.libs/
holds), with the same arguments."""
import os
import shutil
import sys

_BIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin")


def program(name):
    """The path of tokfeedd or tokfeedctl: $TOKFEEDD / $TOKFEEDCTL when set,
    else the wheel's copy, else the first on PATH; None when there is none."""
    env = os.environ.get(name.upper())
    if env:
        return env
    own = os.path.join(_BIN, name)
    if os.access(own, os.X_OK):
        return own
    return shutil.which(name)


def _exec(name):
    path = os.path.join(_BIN, name)
    if not os.access(path, os.X_OK):
        sys.exit(f"{name}: not in this tokfeed installation ({path}); install the tokfeed wheel, "
                 "or build the tree (scripts/build.sh)")
    os.execv(path, [name] + sys.argv[1:])


def tokfeedd():
    _exec("tokfeedd")


def tokfeedctl():
    _exec("tokfeedctl")
