#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs the whole suite.
#   scripts/test.sh            the default suite (unit, integration, shm, tsan, fault (brief), python, fuzz replay)
#   scripts/test.sh --long     also the long fault soak
# The HF-stack tests (label hf) run against .venv/ (scripts/venv.sh: PyPI
# torch 2.x, transformers, trl; made once, then reused), or against
# $TOKFEED_VENV when set. TOKFEED_NO_VENV=1 leaves them out (they skip).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
if [[ -z ${TOKFEED_NO_VENV:-} ]]; then
  if [[ -z ${TOKFEED_VENV:-} ]]; then
    scripts/venv.sh .venv
    export TOKFEED_VENV=$PWD/.venv
  fi
  export TOKFEED_HF_PYTHON=$TOKFEED_VENV/bin/python
fi
scripts/build.sh
build=${BUILD_DIR:-build}
if [[ ${1:-} == --long ]]; then export TOKFEED_LONG=1; fi
cd "$build"
ctest --output-on-failure --timeout 900 -j2
