#!/usr/bin/env bash
# The main job on the bundled sample data and tokenizer: installs what is
# missing, builds, starts tokfeedd, runs the example trainer for one epoch
# with a simulated 20 ms training step, shows `tokfeedctl status`, and stops
# the daemon, leaving nothing behind.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
build=${BUILD_DIR:-build}
run=$(mktemp -d /tmp/tokfeed-demo.XXXXXX)
sock="$run/demo.sock"
sed -e "s|^socket = .*|socket = \"$sock\"|" -e "s|^shm_prefix = .*|shm_prefix = \"tokfeed-demo-$$\"|" \
    -e "s|\.\./tests/|$PWD/tests/|" examples/job.toml > "$run/job.toml"

daemon_pid=""
cleanup() {
  if [[ -n $daemon_pid ]] && kill -0 "$daemon_pid" 2>/dev/null; then kill -TERM "$daemon_pid"; wait "$daemon_pid" || true; fi
  rm -rf "$run"
}
trap cleanup EXIT

echo "== tokfeedd --check-config"
"$build/daemon/tokfeedd" --check-config "$run/job.toml" | grep '^#'
echo "== starting tokfeedd"
"$build/daemon/tokfeedd" --config "$run/job.toml" 2>"$run/daemon.log" &
daemon_pid=$!
for _ in $(seq 100); do [[ -S $sock ]] && break; sleep 0.05; done
[[ -S $sock ]] || { cat "$run/daemon.log"; echo "tokfeedd did not start" >&2; exit 1; }

echo "== example trainer: one epoch, 20 ms simulated step"
"$build/examples/example_trainer" --socket "$sock" --rank 0 --step-ms 20
echo "== tokfeedctl status"
"$build/tools/tokfeedctl" --socket "$sock" status
echo "== tokfeedctl shutdown"
"$build/tools/tokfeedctl" --socket "$sock" shutdown
wait "$daemon_pid"
daemon_pid=""
[[ ! -e $sock ]] && echo "socket removed; shared memory was anonymous and is freed"
