#!/usr/bin/env bash
# Configures and builds build-asan/: clang, Debug at -O1 -g1, AddressSanitizer +
# UndefinedBehaviorSanitizer, with the libFuzzer targets. The test suite
# (scripts/test.sh --sanitize) and the fuzzers (scripts/fuzz.sh) share this one
# instrumented tree, so CI compiles the library under ASan once, not twice: the
# library also carries libFuzzer's coverage instrumentation
# (-fsanitize=fuzzer-no-link), which the tests' ASan runtime accepts.
#   scripts/build-asan.sh             everything (the tests and the fuzzers)
#   KVSTORE_TARGETS="a b" scripts/build-asan.sh   only these targets
# -O1 with line tables only: sanitizer reports keep file:line, and the build is
# much faster than -O2 -g (CI runs on 2 cores). The Python package is not built
# under sanitizers (the interpreter is not instrumented). KVSTORE_PORTABLE=ON:
# the POSIX fallbacks of the Linux-only system calls replace them here, so CI
# tests the fallbacks, under ASan, without a build of its own (docs/design.md,
# "Linux-only calls"); the Release and TSan builds keep the Linux calls.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
KVSTORE_WITH_CLANG=1 "$root/scripts/setup-deps.sh"
CC=clang CXX=clang++ "$root/scripts/build.sh" "$root/build-asan" \
  -DKVSTORE_SANITIZE=address,undefined -DKVSTORE_BUILD_FUZZ=ON \
  -DKVSTORE_BUILD_BENCH=OFF -DKVSTORE_PYTHON=OFF -DKVSTORE_PORTABLE=ON -DCMAKE_BUILD_TYPE=Debug \
  "-DCMAKE_CXX_FLAGS_DEBUG=-O1 -g1"
