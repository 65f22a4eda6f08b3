#!/bin/sh
# One command for a GPU machine (torch 2.x, nvcc, CMake; no Boost/msgpack, so
# nothing is built there). Build here first, then carry the result:
#
#   scripts/gpu-check.sh pack            # here: copies binaries + their non-system libs into build-gpucarry/
#   run(carry=["build-gpucarry"], command="scripts/gpu-check.sh")   # there
#
# build-gpucarry/ holds bin/tokfeedd, bin/tokfeedctl, python/tokfeed/ (with
# _tokfeed*.so, built for this machine's /usr/bin/python3 ABI) and lib/
# (sentencepiece, spdlog, fmt, simdjson, ... that the GPU machine may lack).
# The GPU machine's python must match that ABI (cpython-311); otherwise
# rebuild _tokfeed for it (TOKFEED_BUILD_DIR=... scripts/gpu-check.sh).
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CARRY=$ROOT/build-gpucarry

if [ "${1:-}" = pack ]; then
  B=${TOKFEED_BUILD_DIR:-/tmp/b}
  rm -rf "$CARRY" && mkdir -p "$CARRY/bin/daemon" "$CARRY/bin/tools" "$CARRY/lib" "$CARRY/python"
  cp "$B/daemon/tokfeedd" "$CARRY/bin/daemon/" && cp "$B/tools/tokfeedctl" "$CARRY/bin/tools/"
  cp -r "$B/python/tokfeed" "$CARRY/python/"
  for f in "$B/daemon/tokfeedd" "$B/tools/tokfeedctl" "$CARRY"/python/tokfeed/_tokfeed*.so; do
    ldd "$f" | awk '/=> \// {print $3}'
  done | sort -u | grep -Ev '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+|ld-linux|libcuda|libcudart)[.-]' |
    xargs -r cp -L -t "$CARRY/lib/"
  du -sh "$CARRY"
  exit 0
fi

if [ -d "$CARRY" ]; then
  export TOKFEED_BUILD_DIR=$CARRY/bin
  export LD_LIBRARY_PATH=$CARRY/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export PYTHONPATH=$CARRY/python:$ROOT/tests/python
else
  export TOKFEED_BUILD_DIR=${TOKFEED_BUILD_DIR:-/tmp/b}
  export PYTHONPATH=$TOKFEED_BUILD_DIR/python:$ROOT/tests/python
fi
export TOKFEED_SOURCE_DIR=$ROOT
PY=${PYTHON:-python3}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
"$PY" -c 'import torch, tokfeed; print("torch", torch.__version__, "cuda", torch.version.cuda, "devices", tokfeed._tokfeed.cuda_device_count())'
# Correctness first (the CUDA unit tests; packed batches in transformers'
# sdpa and flash-attn varlen kernels, each skipped with its reason where it
# cannot run), then the measurements and the table.
"$PY" -m unittest -v test_cuda
varlen=0
"$PY" "$ROOT/bench/flash_varlen_check.py" || varlen=1
"$PY" "$ROOT/bench/gpu_check.py" "$@"
exit $varlen
