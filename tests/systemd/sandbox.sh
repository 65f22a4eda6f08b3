#!/usr/bin/env bash
# Runs the unit's ExecStartPre and ExecStart the way systemd runs them, with
# its filesystem protections, where no systemd runs (a container): in a
# private mount namespace the whole tree is read-only (ProtectSystem=strict,
# ProtectHome=read-only) but for the directories the unit's
# CacheDirectory= and RuntimeDirectory= give, exported as $CACHE_DIRECTORY
# and $RUNTIME_DIRECTORY, and the process runs under the unit's UMask=.
#  1. As shipped: --check-config passes, resolves [cache] dir to
#     $CACHE_DIRECTORY, and the daemon starts, builds its token cache there
#     (0700 / 0600) and serves a batch.
#  2. The unit without CacheDirectory=: --check-config fails, naming the
#     read-only default cache folder, so the unit does not start.
# Skips (77) without root or unshare. With systemd running (PID 1), the
# same is done by systemd-run --property=... instead.
set -euo pipefail
unit=$1 tokfeedd=$2 tokfeedctl=$3 data=$4
[[ $(id -u) == 0 ]] && command -v unshare >/dev/null || { echo "sandbox: needs root and unshare; skipped"; exit 77; }
unshare -m true 2>/dev/null || { echo "sandbox: no mount namespace here; skipped"; exit 77; }

key() { sed -n "s/^$1=//p" "$unit" | tail -1; }
cache_name=$(key CacheDirectory)
runtime_name=$(key RuntimeDirectory)
umask_value=$(key UMask)
pre=$(key ExecStartPre)
start=$(key ExecStart)
[[ -n "$cache_name" ]] || { echo "sandbox: the unit has no CacheDirectory="; exit 1; }
[[ $(key ProtectSystem) == strict ]] || { echo "sandbox: expected ProtectSystem=strict"; exit 1; }

work=$(mktemp -d /var/tmp/tokfeed-sandbox.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/etc" "$work/cache" "$work/run/$runtime_name" "$work/home"
# As systemd makes it: CacheDirectoryMode= (0755 when the unit leaves it out).
mkdir -m "$(key CacheDirectoryMode || true)" "$work/cache/$cache_name" 2>/dev/null || mkdir -m 0755 "$work/cache/$cache_name"
cat > "$work/etc/job.toml" <<TOML
[dataset]
path = "$data/sft/mixed-300.jsonl"
[tokenizer]
type = "sentencepiece"
path = "$data/tokenizers/sp32k/tokenizer.model"
[server]
socket = "$work/run/$runtime_name/job.sock"
shm_prefix = "tokfeed-sandbox-$$"
TOML
# The unit's commands, for instance "job", with this build's binary.
cmd() { sed -e "s|/usr/bin/tokfeedd|$tokfeedd|" -e "s|/etc/tokfeed/%i.toml|$work/etc/job.toml|" <<<"$1"; }

# Runs "$@" in the sandbox: / read-only, only the given dirs writable.
sandboxed() {
  local writable=$1
  shift
  unshare -m bash -c '
    set -e
    mount --make-rprivate /
    for d in '"$writable"'; do mount --bind "$d" "$d"; done
    mount -o remount,bind,ro /
    umask '"${umask_value:-0022}"'
    exec "$@"' sandbox "$@"
}
env_of() { echo "HOME=$work/home XDG_CACHE_HOME= CACHE_DIRECTORY=$1 RUNTIME_DIRECTORY=$work/run/$runtime_name"; }

echo "== 1. as shipped: CacheDirectory=$cache_name -> \$CACHE_DIRECTORY"
cache="$work/cache/$cache_name"
out=$(sandboxed "$cache $work/run/$runtime_name" env $(env_of "$cache") $(cmd "$pre") 2>&1) || {
  echo "$out"; echo "sandbox: ExecStartPre failed as shipped"; exit 1; }
grep -q "^dir = \"$cache\"" <<<"$out" || { echo "$out"; echo "sandbox: [cache] dir is not \$CACHE_DIRECTORY"; exit 1; }
echo "ExecStartPre: ok, [cache] dir = $cache"
sandboxed "$cache $work/run/$runtime_name" env $(env_of "$cache") $(cmd "$start") 2>"$work/daemon.log" &
pid=$!
sock="$work/run/$runtime_name/job.sock"
for _ in $(seq 200); do [[ -S "$sock" ]] && break; sleep 0.05; done
if ! "$tokfeedctl" -s "$sock" dump --rank 0 --count 1 >"$work/batch.json" 2>&1; then
  cat "$work/daemon.log"; kill "$pid"; echo "sandbox: ExecStart did not serve"; exit 1
fi
# The first batch may come while the token cache still builds: wait for it.
for _ in $(seq 600); do
  "$tokfeedctl" -s "$sock" status --json | grep -q '"cache":{"state":"building"' || break
  sleep 0.05
done
"$tokfeedctl" -s "$sock" shutdown >/dev/null
wait "$pid" || { cat "$work/daemon.log"; echo "sandbox: the daemon failed"; exit 1; }
echo "ExecStart: served a batch; the cache it wrote:"
find "$cache" -printf '%M %m %p\n' | sed "s|$work|WORK|"
bad=$(find "$cache" \( -type d ! -perm 0700 \) -o \( -type f ! -perm 0600 \))
[[ -z "$bad" ]] || { echo "sandbox: not private: $bad"; exit 1; }
[[ -n $(find "$cache" -name '*.bin') ]] || { echo "sandbox: no token store in $cache"; exit 1; }

echo "== 2. without CacheDirectory=: the default cache folder is read-only"
if out=$(sandboxed "$work/run/$runtime_name" env HOME="$work/home" XDG_CACHE_HOME= $(cmd "$pre") 2>&1); then
  echo "$out"; echo "sandbox: --check-config passed with a read-only cache folder"; exit 1
fi
grep "error:" <<<"$out"
grep -q "$work/home/.cache/tokfeed" <<<"$out" || { echo "sandbox: the error does not name the folder"; exit 1; }
echo "sandbox: ok"
