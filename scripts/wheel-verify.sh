#!/usr/bin/env bash
# Checks an installed tokfeed wheel (run by scripts/wheel-check.sh in a bare
# Debian chroot, and by the ctest wheel.install on this machine):
#   scripts/wheel-verify.sh WHEEL DIR [JOB.toml]
# makes a fresh venv in DIR/venv, installs WHEEL (no index: it needs nothing
# else), runs tokfeedd --help and tokfeedctl --help, checks with ldd that the
# programs and the extension find every library inside the wheel or in the
# C/C++ runtime (glibc, libstdc++, libgcc_s), and, given a job config, runs
# scripts/wheel_job.py on it (from DIR).
set -euo pipefail
wheel=$1 dir=$2 job=${3:-}
here=$(cd "$(dirname "$0")" && pwd)
py=${PYTHON:-python3}
rm -rf "$dir/venv"
"$py" -m venv "$dir/venv"
# shellcheck disable=SC1091
. "$dir/venv/bin/activate"
pip install -q --no-index "$wheel"
tokfeedd --help >/dev/null
tokfeedctl --help >/dev/null
echo "wheel-verify: tokfeedd --help and tokfeedctl --help run"
pkg=$(python -c 'import os, tokfeed; print(os.path.dirname(tokfeed.__file__))')
libs=$(dirname "$pkg")/tokfeed.libs
runtime='/(libc|libm|libpthread|libdl|librt|libstdc\+\+|libgcc_s)\.so[.0-9]*$|/ld-linux-x86-64\.so\.2$'
bad=0
for f in "$pkg/bin/tokfeedd" "$pkg/bin/tokfeedctl" "$pkg"/_tokfeed*.so; do
  out=$(ldd "$f")
  if grep -q 'not found' <<<"$out"; then
    echo "wheel-verify: $f: missing libraries:"; grep 'not found' <<<"$out"; bad=1
  fi
  while read -r path; do
    path=$(readlink -f "$path")
    [[ $path == "$(readlink -f "$libs")"/* ]] && continue
    grep -Eq "$runtime" <<<"$path" && continue
    echo "wheel-verify: $(basename "$f") links $path, outside the wheel and the C/C++ runtime"; bad=1
  done < <(awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' <<<"$out")
done
((bad == 0)) || exit 1
echo "wheel-verify: ldd: $(ls "$libs" | wc -l) libraries from tokfeed.libs/, the rest glibc and libstdc++"
if [[ -n $job ]]; then
  (cd "$(dirname "$job")" && python "$here/wheel_job.py" "$(basename "$job")")
fi
