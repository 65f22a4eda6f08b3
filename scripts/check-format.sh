#!/usr/bin/env bash
# Fails when a C++ file differs from what clang-format (.clang-format) makes of it.
#   scripts/check-format.sh            every tracked C++ file (a few seconds)
#   scripts/check-format.sh REF        only the files changed since REF (e.g. origin/main)
#   scripts/check-format.sh --fix ...  rewrites them instead
set -euo pipefail
cd "$(dirname "$0")/.."
mode=(--dry-run --Werror)
if [[ ${1:-} == --fix ]]; then mode=(-i); shift; fi
if [[ $# -gt 0 ]]; then
  mapfile -t files < <(git diff --name-only --diff-filter=d "$1" -- '*.cpp' '*.hpp' '*.h' '*.cu')
else
  mapfile -t files < <(git ls-files -- '*.cpp' '*.hpp' '*.h' '*.cu')
fi
((${#files[@]})) || { echo "check-format: no C++ files to check"; exit 0; }
if ! command -v clang-format >/dev/null; then
  echo "check-format: clang-format is not installed (apt-get install clang-format)" >&2
  exit 1
fi
clang-format "${mode[@]}" "${files[@]}"
echo "check-format: ${#files[@]} files ok"
