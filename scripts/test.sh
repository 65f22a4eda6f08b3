#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs the whole suite.
#   scripts/test.sh            the default suite (unit, integration, shm, tsan, fault (brief), python, fuzz replay)
#   scripts/test.sh --long     also the long fault soak
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
build=${BUILD_DIR:-build}
if [[ ${1:-} == --long ]]; then export TOKFEED_LONG=1; fi
cd "$build"
ctest --output-on-failure --timeout 900 -j2
