#!/usr/bin/env bash
# Installs the Debian packages tokfeed builds and tests with, if any is missing.
set -euo pipefail
packages=(
  build-essential cmake pkg-config xz-utils clang clang-format
  libboost-dev libmsgpack-cxx-dev libsentencepiece-dev libsimdjson-dev libtomlplusplus-dev
  libpcre2-dev libutf8proc-dev libicu-dev libxxhash-dev libcli11-dev libspdlog-dev libfmt-dev libsystemd-dev
  libzstd-dev zlib1g-dev zstd libdlpack-dev doctest-dev libbenchmark-dev pybind11-dev
  python3 python3-dev python3-pip python3-numpy python3-torch python3-sentencepiece python3-jinja2 python3-matplotlib systemd
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The HF reference (tests/reference/) checks the tokenizer.json backend
# against HF `tokenizers`, from PyPI. Without it those tests skip.
if ! /usr/bin/python3 -c "import tokenizers" 2>/dev/null; then
  /usr/bin/python3 -m pip install -q --break-system-packages "tokenizers>=0.19" \
    || echo "warning: cannot install HF tokenizers for /usr/bin/python3; the hf reference tests will skip"
fi

# Parquet and Arrow datasets: tokfeed links the Apache Arrow C++ libraries
# (libarrow, libparquet), which Debian 12 does not package. Apache's own
# packages are used when CMake finds them; otherwise the ones the PyPI
# `pyarrow` wheel ships, with their headers (cmake/arrow.cmake). Without
# either, tokfeed builds without Parquet and Arrow support.
if ! /usr/bin/python3 -c "import pyarrow" 2>/dev/null && ! pkg-config --exists arrow parquet 2>/dev/null; then
  # Wheels from 22 on need NumPy 2; Debian 12's python3-numpy is 1.24.
  /usr/bin/python3 -m pip install -q --break-system-packages "pyarrow>=15,<22" \
    || echo "warning: cannot install pyarrow for /usr/bin/python3; Parquet and Arrow datasets will be disabled"
fi
