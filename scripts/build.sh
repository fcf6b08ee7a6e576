#!/usr/bin/env bash
# Configures and builds kvstore into a build directory (Release by default:
# what a distribution ships).
#   scripts/build.sh [BUILD_DIR] [extra cmake args...]
# Environment:
#   KVSTORE_WERROR=ON|OFF   warnings as errors (.ci/run turns it on)
#   KVSTORE_TARGETS="a b"   build only these targets
#   CXX                     the compiler; a build directory configured with
#                           another one is configured afresh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
shift || true
args=("$@")
if [[ -n "${KVSTORE_WERROR:-}" ]]; then args+=("-DKVSTORE_WERROR=$KVSTORE_WERROR"); fi
cache=$build/CMakeCache.txt
if [[ -n "${CXX:-}" && -f "$cache" ]]; then
  configured=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$cache")
  if [[ "$(realpath -q "$configured")" != "$(realpath -q "$(command -v "$CXX")")" ]]; then
    echo "build: $build was configured with $configured; configuring it for $CXX" >&2
    rm -rf "$build"
  fi
fi
generator=()
if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
if [[ ! -f "$cache" ]]; then
  cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release "${args[@]}" >/dev/null
else
  cmake "$build" "${args[@]}" >/dev/null
fi
targets=()
for t in ${KVSTORE_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$build" --parallel "$(nproc)" "${targets[@]}"
