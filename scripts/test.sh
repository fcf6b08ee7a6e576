#!/usr/bin/env bash
# Quick start, command 2: install what is missing, build, and run the whole
# test suite through ctest.
#   scripts/test.sh              Release build in build/ (the default compiler),
#                                with the Python package and its pytest suites
#   scripts/test.sh --sanitize   AddressSanitizer + UBSan build in build-asan/, with clang
#                                (so CI compiles the whole tree with both compilers) and
#                                the POSIX fallbacks of the Linux-only calls (KVSTORE_PORTABLE);
#                                scripts/build-asan.sh, which scripts/fuzz.sh shares
#   scripts/test.sh --tsan       ThreadSanitizer build of the concurrent parts in build-tsan/
#                                (ServerPromptCache, PromptCacheStore, SharedPromptCache,
#                                prompt_cache_sim, the prompt-cache reader, writer and
#                                conversions, the KvBackends shared by many threads)
# KVSTORE_WERROR=ON makes warnings errors (scripts/build.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mode=${1:-}
# As build-asan.sh: -O1 with line tables only, no Python package.
tsan_args=(-DKVSTORE_BUILD_BENCH=OFF -DKVSTORE_PYTHON=OFF -DCMAKE_BUILD_TYPE=Debug
           "-DCMAKE_CXX_FLAGS_DEBUG=-O1 -g1")
tsan_tests=(prompt_cache_sim_short server_prompt_cache_test prompt_cache_store_test
            prompt_cache_convert_test kv_backend_conformance_test shared_prompt_cache_test
            shared_tier_redis_test env_test prompt_cache_store_sharing_test model_registry_test)
case "$mode" in
  "")
    "$root/scripts/setup-deps.sh"
    # ON: a missing pybind11 or python3-dev fails the configure loudly.
    "$root/scripts/build.sh" "$root/build" -DKVSTORE_PYTHON=ON
    cd "$root/build"
    exec ctest --output-on-failure --parallel "$(nproc)"
    ;;
  --sanitize)
    export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
    export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
    "$root/scripts/build-asan.sh"
    cd "$root/build-asan"
    exec ctest --output-on-failure --parallel "$(nproc)"
    ;;
  --tsan)
    "$root/scripts/setup-deps.sh"
    export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}
    targets="${tsan_tests[*]/prompt_cache_sim_short/prompt_cache_sim}"
    KVSTORE_TARGETS="$targets" "$root/scripts/build.sh" "$root/build-tsan" \
      -DKVSTORE_SANITIZE=thread "${tsan_args[@]}"
    cd "$root/build-tsan"
    # kv_backend_conformance_test brings in the Redis servers (a ctest fixture).
    pattern=$(IFS='|'; echo "${tsan_tests[*]}")
    exec ctest --output-on-failure -R "^($pattern)\$"
    ;;
  *)
    echo "usage: scripts/test.sh [--sanitize | --tsan]" >&2
    exit 1
    ;;
esac
