#!/bin/sh
# Deps of examples/hf_trainer.py only (never of the default tests): transformers
# from PyPI beside Debian's python3-torch, into a venv that sees system packages.
set -eu
VENV=${1:-/tmp/tokfeed-hf-venv}
/usr/bin/python3 -m venv --system-site-packages "$VENV"
"$VENV/bin/pip" install --quiet 'transformers>=4.40,<5' 'accelerate>=0.26'
echo "run: PYTHONPATH=/tmp/b/python $VENV/bin/python examples/hf_trainer.py --steps 50"
