#!/bin/sh
# The label rule over every template × conversation of ../shared/templates:
# first the rule alone on jinja2 (refused conversations with (b) alone and
# with (c); whether (c) gives (b)'s spans wherever both apply), then the
# daemon's batches against the reference (templates exact / total).
# usage: tests/reference/run_label_rule.sh [BUILD_DIR]   (takes some minutes)
set -u
here=$(dirname "$0")
build=${1:-build}
py=${TOKFEED_HF_PYTHON:-$HOME/.cache/tokfeed/venv/bin/python}
ALLOW_DIFFER=diffusion_gemma_training "$py" "$here/label_rule_ref.py"
rule=$?
"$py" "$here/chat_templates_ref.py" "$build/daemon/tokfeedd" "$build/tools/tokfeedctl"
daemon=$?
[ "$rule" -eq 0 ] && [ "$daemon" -eq 0 ]
