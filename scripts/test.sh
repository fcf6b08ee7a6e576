#!/usr/bin/env bash
# Quick start, command 2: install what is missing, build, and run the whole
# test suite through ctest.
#   scripts/test.sh              normal build in build/
#   scripts/test.sh --sanitize   AddressSanitizer + UBSan build in build-asan/
#   scripts/test.sh --tsan       ThreadSanitizer build of the concurrent parts
#                                (ServerPromptCache, PromptCacheStore, SharedPromptCache,
#                                prompt_cache_sim, the prompt-cache reader, writer and
#                                conversions, the KvBackends shared by many threads)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup-deps.sh"
build=$root/build
# The Python package and its pytest suites are part of the normal build
# (ON: a missing pybind11 or python3-dev fails the configure loudly).
args=(-DKVSTORE_PYTHON=ON)
if [[ "${1:-}" == "--sanitize" ]]; then
  build=$root/build-asan
  # -O1 with line tables only: sanitizer reports keep file:line, and the
  # build is much faster than -O2 -g (CI runs on 2 cores).
  args=(-DKVSTORE_SANITIZE=address,undefined -DKVSTORE_BUILD_BENCH=OFF -DKVSTORE_PYTHON=OFF -DCMAKE_BUILD_TYPE=Debug
        "-DCMAKE_CXX_FLAGS_DEBUG=-O1 -g1")
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
fi
if [[ "${1:-}" == "--tsan" ]]; then
  build=$root/build-tsan
  export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}
  generator=()
  if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
  cmake -S "$root" -B "$build" "${generator[@]}" -DKVSTORE_SANITIZE=thread -DKVSTORE_BUILD_BENCH=OFF -DKVSTORE_PYTHON=OFF \
    -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=-O1 -g1" >/dev/null
  cmake --build "$build" --parallel "$(nproc)" --target prompt_cache_sim server_prompt_cache_test \
    prompt_cache_store_test prompt_cache_convert_test kv_backend_conformance_test shared_prompt_cache_test \
    shared_tier_redis_test
  cd "$build"
  # kv_backend_conformance_test brings in the Redis servers (a ctest fixture).
  exec ctest --output-on-failure \
    -R '^(prompt_cache_sim_short|server_prompt_cache_test|prompt_cache_store_test|prompt_cache_convert_test|kv_backend_conformance_test|shared_prompt_cache_test|shared_tier_redis_test)$'
fi
"$root/scripts/build.sh" "$build" "${args[@]}"
cd "$build"
ctest --output-on-failure --parallel "$(nproc)"
