#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs the whole suite.
#   scripts/test.sh            the default suite (unit, integration, shm, tsan, fault (brief), python, fuzz replay)
#   scripts/test.sh --long     also the long fault soak and the wheel (ctest wheel.install: a Release build)
# The HF-stack tests (label hf) run against a venv of PyPI torch 2.x,
# transformers, trl, ... (scripts/venv.sh), made once in
# ~/.cache/tokfeed/venv and reused by every checkout, or against $TOKFEED_VENV
# when set. TOKFEED_NO_VENV=1 leaves them out (they skip), and so does a venv
# that cannot be made (no network): the rest of the suite still runs.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
if [[ -z ${TOKFEED_NO_VENV:-} ]]; then
  venv=${TOKFEED_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/tokfeed/venv}
  # The tests import tokfeed from the build, not from the venv.
  if TOKFEED_VENV_NO_INSTALL=1 scripts/venv.sh "$venv"; then
    export TOKFEED_VENV=$venv TOKFEED_HF_PYTHON=$venv/bin/python
  else
    echo "warning: no HF-stack venv ($venv); the tests labelled hf will skip" >&2
  fi
fi
scripts/build.sh
build=${BUILD_DIR:-build}
if [[ ${1:-} == --long ]]; then export TOKFEED_LONG=1; fi
cd "$build"
ctest --output-on-failure --timeout 900 -j2
