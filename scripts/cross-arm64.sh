#!/usr/bin/env bash
# arm64 check of the client side (libtokfeed, the example trainer, the shm
# ring), the part linked into trainers on GH200 / Grace nodes: cross-built
# with Debian's aarch64 toolchain and arm64 multiarch -dev packages; the
# example trainer then starts under qemu-user. Not part of scripts/test.sh;
# docs/portability.md gives its cost, and why the daemon and the ring tests
# are not in it.
#   scripts/cross-arm64.sh            build into build-arm64/ and run the tests
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build-arm64}
# Only Multi-Arch: same packages, which install beside the amd64 ones.
packages=(g++-aarch64-linux-gnu qemu-user libxxhash-dev:arm64 libboost-dev:arm64 libmsgpack-cxx-dev:arm64)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  dpkg --print-foreign-architectures | grep -qx arm64 || $sudo dpkg --add-architecture arm64
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
cmake -S . -B "$build" -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DTOKFEED_BUILD_DAEMON=OFF -DTOKFEED_BUILD_PYTHON=OFF -DTOKFEED_WITH_CUDA=OFF >/dev/null
cmake --build "$build" -j"$(nproc)" --target tokfeed_client example_trainer ring_stress ring_wait
file -L "$build/examples/example_trainer" | grep -q "ARM aarch64"
qemu-aarch64 -L /usr/aarch64-linux-gnu "$build/examples/example_trainer" --help | head -1
echo "cross-arm64: client, example trainer and ring tests built for aarch64"
