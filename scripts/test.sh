#!/usr/bin/env bash
# Quick start, command 2: install what is missing, build, and run the whole
# test suite through ctest.
#   scripts/test.sh              normal build in build/
#   scripts/test.sh --sanitize   AddressSanitizer + UBSan build in build-asan/
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup-deps.sh"
build=$root/build
args=()
if [[ "${1:-}" == "--sanitize" ]]; then
  build=$root/build-asan
  # -O1 with line tables only: sanitizer reports keep file:line, and the
  # build is much faster than -O2 -g (CI runs on 2 cores).
  args=(-DKVSTORE_SANITIZE=address,undefined -DKVSTORE_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=Debug
        "-DCMAKE_CXX_FLAGS_DEBUG=-O1 -g1")
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
fi
"$root/scripts/build.sh" "$build" "${args[@]}"
cd "$build"
ctest --output-on-failure --parallel "$(nproc)"
