#!/usr/bin/env bash
# Installs the Debian packages kvstore needs, only those that are missing.
# Does nothing (and needs no root) when everything is present.
set -euo pipefail

packages=(
  g++ cmake make                    # toolchain
  libzstd-dev libcli11-dev nlohmann-json3-dev libssl-dev libxxhash-dev
  googletest libgtest-dev libgmock-dev libbenchmark-dev
  zstd openssl xxhash               # reference tools for bench/ and tests
  patch                             # applies docs/python.md's mlx_lm.server diff in its test
  # The Python package (python/, built for Debian's /usr/bin/python3) and its
  # tests; libopenblas0-pthread and libgfortran5 let ../shared/mlx-ref's MLX import;
  # python3-prometheus-client for docs/python.md's /metrics example and its test.
  pybind11-dev python3-dev python3-pytest python3-setuptools python3-pip python3-numpy
  python3-prometheus-client libopenblas0-pthread libgfortran5
  redis-server redis-tools libhiredis-dev pkg-config   # shared tier and its tests
)
if [[ "${KVSTORE_WITH_CLANG:-0}" == 1 ]]; then
  packages+=(clang libclang-rt-14-dev)   # sanitizer build, libFuzzer + sanitizer runtimes
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]} == 0)); then
  exit 0
fi

echo "setup-deps: installing ${missing[*]}" >&2
if [[ $(id -u) -ne 0 ]]; then
  echo "setup-deps: missing packages; run as root (or install them): ${missing[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
