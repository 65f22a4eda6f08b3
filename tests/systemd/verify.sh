#!/usr/bin/env bash
# Checks the unit file with systemd-analyze: `verify` must pass (with the
# binary pointed at this build), and `security` must score it "OK" or better
# (exposure <= 2.0). Then, given tokfeedctl and the test data, runs the
# unit's ExecStartPre and ExecStart as systemd would (sandbox.sh).
set -euo pipefail
unit=$1
tokfeedd=$2
tokfeedctl=${3:-}
data=${4:-}
command -v systemd-analyze >/dev/null || { echo "systemd-analyze not installed; skipped"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
sed "s|/usr/bin/tokfeedd|$tokfeedd|g" "$unit" > "$dir/tokfeedd@test.service"
out=$(systemd-analyze verify "$dir/tokfeedd@test.service" 2>&1 || true)
# Only complaints about this unit count (the host's own units may be odd).
if grep -F "tokfeedd@" <<<"$out"; then echo "systemd-analyze verify failed"; exit 1; fi
score=$(systemd-analyze security --offline=true "$dir/tokfeedd@test.service" 2>&1 | grep -o 'Overall exposure level for [^:]*: [0-9.]*' | awk '{print $NF}')
echo "exposure: $score"
awk -v s="$score" 'BEGIN { exit !(s != "" && s <= 2.0) }' || { echo "exposure $score exceeds 2.0"; exit 1; }

if [[ -n "$tokfeedctl" ]]; then
  "$(dirname "$0")/sandbox.sh" "$unit" "$tokfeedd" "$tokfeedctl" "$data"
fi
