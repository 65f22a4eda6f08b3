#!/usr/bin/env bash
# Configures and builds tokfeed into ${BUILD_DIR:-build}.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPython3_EXECUTABLE=/usr/bin/python3 \
  ${TOKFEED_HF_PYTHON:+-DTOKFEED_HF_PYTHON=$TOKFEED_HF_PYTHON} >/dev/null
cmake --build "$build" -j"$(nproc)"
