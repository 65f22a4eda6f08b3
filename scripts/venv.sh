#!/usr/bin/env bash
# Makes the HF-stack venv the Python tests run against (TOKFEED_HF_PYTHON):
# PyPI torch 2.x, transformers, trl, ... (python/requirements-hf.txt), then
# tokfeed itself (pip install . : the wheel of pyproject.toml). Idempotent: an existing venv whose
# requirements have not changed is kept, and only tokfeed is reinstalled.
#   scripts/venv.sh [DIR]            default .venv/ in the repository
# Environment: TOKFEED_VENV_NO_INSTALL=1 skips installing tokfeed itself; PYTHON (the interpreter to base it on, default python3),
# TOKFEED_TORCH_INDEX_URL (e.g. https://download.pytorch.org/whl/cpu for the
# CPU-only torch wheel, far smaller than PyPI's CUDA one).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-.venv}
req=python/requirements-hf.txt
start=$(date +%s)
stamp="$venv/.tokfeed-requirements"
if [[ ! -x $venv/bin/python ]] || ! cmp -s "$req" "$stamp"; then
  "${PYTHON:-python3}" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip
  if [[ -n ${TOKFEED_TORCH_INDEX_URL:-} ]]; then
    "$venv/bin/pip" install -q --index-url "$TOKFEED_TORCH_INDEX_URL" torch
  fi
  "$venv/bin/pip" install -q -r "$req"
  cp "$req" "$stamp"
fi
echo "venv.sh: packages ready in $(($(date +%s) - start)) s"
if [[ -n ${TOKFEED_VENV_NO_INSTALL:-} ]]; then
  # The test suite imports tokfeed from the build tree instead.
  "$venv/bin/python" -c 'import torch, transformers; print("venv.sh:", "torch", torch.__version__, "transformers", transformers.__version__)'
else
  # tokfeedd, tokfeedctl and the binding, built by CMake for this interpreter (needs the C++ build deps).
  CMAKE_BUILD_PARALLEL_LEVEL=${JOBS:-2} "$venv/bin/pip" install -q . 2>&1 | tail -20
  "$venv/bin/python" -c 'import tokfeed, torch, transformers; print("venv.sh:", "torch", torch.__version__, "transformers", transformers.__version__, "tokfeed", tokfeed.__version__)'
fi
echo "venv.sh: $venv ready in $(($(date +%s) - start)) s"
