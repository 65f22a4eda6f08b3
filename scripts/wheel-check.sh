#!/usr/bin/env bash
# The wheel on a system without tokfeed's build dependencies: a minimal Debian
# 12 made by debootstrap (minbase, plus python3 and python3-venv: what a user's
# machine has, and none of Boost, sentencepiece, simdjson, spdlog, ...). In it,
# a fresh venv installs the repaired wheel, then:
#   - scripts/wheel-verify.sh: tokfeedd --help and tokfeedctl --help run, and ldd
#     finds every library of the programs and the extension inside the wheel or
#     in glibc/libstdc++;
#   - scripts/wheel_job.py: a job from Python alone: Loader(config=...) starts tokfeedd, two ranks read
#     their batches, the daemon stops when the loaders close;
#   - with TOKFEED_CHECK_TORCH=1, the same through tokfeed.Loader, with torch
#     from PyPI (its CUDA build: ~6 GB) or from TOKFEED_TORCH_INDEX_URL (e.g.
#     https://download.pytorch.org/whl/cpu, ~200 MB).
#   scripts/wheel-check.sh [WHEEL]     default: the newest dist/tokfeed-*manylinux*.whl (scripts/wheel.sh)
# Needs root (debootstrap, chroot, mounts). The root filesystem is made once in
# ${TOKFEED_CHROOT:-/var/tmp/tokfeed-bookworm} and reused; TOKFEED_CHROOT_FRESH=1 remakes it.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
wheel=${1:-$(ls -t dist/tokfeed-*manylinux*.whl 2>/dev/null | head -1)}
[[ -f $wheel ]] || { echo "wheel-check: no wheel (run scripts/wheel.sh first, or pass one)" >&2; exit 2; }
root=${TOKFEED_CHROOT:-/var/tmp/tokfeed-bookworm}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
t0=$(date +%s)

if [[ -n ${TOKFEED_CHROOT_FRESH:-} ]]; then rm -rf "$root"; fi
if [[ ! -x $root/usr/bin/python3 ]]; then
  command -v debootstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap
  rm -rf "$root"
  debootstrap --variant=minbase --include=python3,python3-venv bookworm "$root" "$mirror" >"$root.log" 2>&1 \
    || { tail -20 "$root.log"; exit 1; }
fi
t1=$(date +%s)

mounts=()
cleanup() {
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do umount -l "${mounts[i]}" 2>/dev/null || true; done
}
trap cleanup EXIT
for m in proc dev dev/shm; do
  mkdir -p "$root/$m"
  case $m in
    proc) mount -t proc proc "$root/proc" ;;
    dev) mount --bind /dev "$root/dev" ;;
    dev/shm) mount -t tmpfs -o size=512m shm "$root/dev/shm" ;;
  esac
  mounts+=("$root/$m")
done

work=$root/tmp/tokfeed-check
rm -rf "$work" && mkdir -p "$work/data"
cp "$wheel" "$work/"
cp tests/data/sft/mixed-300.jsonl "$work/data/"
cp tests/data/tokenizers/sp32k/tokenizer.model "$work/data/"
cp scripts/wheel_job.py scripts/wheel-verify.sh "$work/"
cat >"$work/job.toml" <<'EOF'
[dataset]
path = "data/mixed-300.jsonl"
on_bad_record = "skip"
[tokenizer]
type = "sentencepiece"
path = "data/tokenizer.model"
template = "mistral"
[batch]
size = 4
max_length = 512
[schedule]
epochs = 1
seed = 7
[workers]
count = 2
[ranks]
world_size = 2
[cache]
enabled = false
[server]
socket = "run/job.sock"
shm_prefix = "tokfeed-wheelcheck"
EOF

whl=/tmp/tokfeed-check/$(basename "$wheel")
set +e
# The network as this machine reaches it: resolver, and pip's index and CA settings.
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
if [[ -f /etc/pip.conf ]]; then
  cp /etc/pip.conf "$root/etc/pip.conf"
  mkdir -p "$root/etc/ssl/certs" && cp -L /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/" 2>/dev/null || true
fi
index=${TOKFEED_TORCH_INDEX_URL:+--index-url $TOKFEED_TORCH_INDEX_URL}
chroot "$root" /usr/bin/env -i PATH=/usr/bin:/bin HOME=/root TOKFEED_CHECK_TORCH="${TOKFEED_CHECK_TORCH:-}" \
  bash -euo pipefail -c "
cd /tmp/tokfeed-check
echo \"wheel-check: \$(. /etc/os-release; echo \$PRETTY_NAME), \$(ldd --version | head -1)\"
for lib in libboost libsentencepiece libsimdjson libspdlog libfmt libtomlplusplus libpcre2-8 libutf8proc libxxhash \\
           libzstd libsystemd libarrow; do
  if ls /usr/lib/x86_64-linux-gnu/\$lib* >/dev/null 2>&1; then echo \"wheel-check: \$lib is on this system\"; fi
done
./wheel-verify.sh $whl /tmp/tokfeed-check /tmp/tokfeed-check/job.toml
if [[ -n \$TOKFEED_CHECK_TORCH ]]; then
  . venv/bin/activate
  pip install -q $index torch
  python wheel_job.py --torch job.toml
fi
"
rc=$?
t2=$(date +%s)
echo "wheel-check: $([[ $rc == 0 ]] && echo ok || echo FAILED); root filesystem $((t1 - t0)) s, install and job $((t2 - t1)) s"
exit $rc
