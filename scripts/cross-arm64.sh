#!/usr/bin/env bash
# arm64 check of the client side (libtokfeed, the example trainer, the shm
# ring), the part linked into trainers on GH200 / Grace nodes: cross-built
# with Debian's aarch64 toolchain and arm64 multiarch -dev packages; the
# example trainer then starts under qemu-user. Not part of scripts/test.sh;
# docs/portability.md gives its cost, and why the daemon and the ring tests
# are not in it. The daemon's sources are compiled for aarch64 too (no link):
# each with its flags from the host build's compile_commands.json, against the
# host's headers (the daemon's arm64 -dev packages cannot be installed beside
# the amd64 ones), so the code taken where SSE2 is absent compiles there.
#   scripts/cross-arm64.sh            build into build-arm64/ and run the tests
#   HOST_BUILD=dir                    the configured host build (default build/)
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

host=${HOST_BUILD:-build}
if [[ ! -f $host/compile_commands.json ]]; then
  echo "cross-arm64: no $host/compile_commands.json (configure the host build first): daemon sources not compiled" >&2
  exit 1
fi
# One compile command per daemon source: the aarch64 compiler, no optimization,
# object to /dev/null, -isystem dirs and the host's /usr/include searched last.
python3 - "$host/compile_commands.json" "$PWD/daemon/" >"$build/daemon-compile.txt" <<'PY'
import json, shlex, sys
for e in json.load(open(sys.argv[1])):
    if not e["file"].startswith(sys.argv[2]):
        continue
    args, out, skip = shlex.split(e["command"])[1:], ["aarch64-linux-gnu-g++"], False
    for i, a in enumerate(args):
        if skip:
            skip = False
        elif a in ("-o", "-c"):
            skip = True
        elif a == "-isystem":
            out.append("-idirafter")
        elif not a.startswith("-O") and a != "-g":
            out.append(a)
    out += ["-O0", "-c", "-o", "/dev/null", "-idirafter", "/usr/include", e["file"]]
    print(shlex.join(out))
PY
count=$(wc -l <"$build/daemon-compile.txt")
if ! xargs -d '\n' -P "$(nproc)" -I{} sh -c '{}' <"$build/daemon-compile.txt"; then
  echo "cross-arm64: a daemon source does not compile for aarch64" >&2
  exit 1
fi
echo "cross-arm64: $count daemon sources compiled for aarch64"
