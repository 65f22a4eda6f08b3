#!/usr/bin/env bash
# ctest wheel.install (tests/wheel/CMakeLists.txt).
set -euo pipefail
if [[ -z ${TOKFEED_LONG:-} ]]; then
  echo "skipped: the wheel's Release build is long; scripts/test.sh --long (TOKFEED_LONG=1) runs it"
  exit 77
fi
src=${TOKFEED_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$src"
scripts/wheel.sh
work=$(mktemp -d /tmp/tokfeed-wheel-XXXXXX)
trap 'rm -rf "$work"' EXIT
cat >"$work/job.toml" <<TOML
[dataset]
path = "$src/tests/data/sft/mixed-300.jsonl"
on_bad_record = "skip"
[tokenizer]
type = "sentencepiece"
path = "$src/tests/data/tokenizers/sp32k/tokenizer.model"
template = "mistral"
[batch]
size = 4
max_length = 512
[workers]
count = 2
[ranks]
world_size = 2
[cache]
enabled = false
[server]
socket = "run/job.sock"
shm_prefix = "tokfeed-wheeltest-$$"
TOML
# A venv with nothing but the wheel: the interpreter the wheel was built for.
PYTHON=${PYTHON:-${TOKFEED_VENV:+$TOKFEED_VENV/bin/python}} env -u PYTHONPATH -u TOKFEEDD -u TOKFEEDCTL \
  scripts/wheel-verify.sh "$(ls dist/tokfeed-*.whl)" "$work" "$work/job.toml"
