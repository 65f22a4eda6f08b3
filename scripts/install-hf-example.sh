#!/bin/sh
# Deps of examples/hf_trainer.py and examples/trl_sft.py: the HF-stack venv of
# the tests (current PyPI torch 2.x, transformers 5.x, trl; see
# python/requirements-hf.txt), with tokfeed installed into it.
#   scripts/install-hf-example.sh [DIR]     default .venv/
set -eu
dir=$(dirname "$0")
"$dir/venv.sh" "$@"
echo "run: ${1:-.venv}/bin/python examples/hf_trainer.py --steps 40 --resume"
