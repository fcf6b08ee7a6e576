#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (-fsanitize=fuzzer,address,undefined)
# and runs each over its seed corpus for a bounded time.
#   scripts/fuzz.sh [TOTAL_SECONDS]   (default 60, shared by all targets)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
total=${1:-60}
KVSTORE_WITH_CLANG=1 "$root/scripts/setup-deps.sh"
build=$root/build-fuzz
# Only the fuzzers (and the instrumented library): the test suite is built elsewhere.
CC=clang CXX=clang++ KVSTORE_TARGETS=kvstore_fuzzers "$root/scripts/build.sh" "$build" \
  -DKVSTORE_BUILD_FUZZ=ON -DKVSTORE_BUILD_TESTS=ON -DKVSTORE_BUILD_BENCH=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo
mapfile -t targets < <(find "$build/tests/fuzz" -maxdepth 1 -type f -name 'fuzz_*' -perm -u+x | sort)
if ((${#targets[@]} == 0)); then
  echo "fuzz: no targets built" >&2
  exit 1
fi
per=$(( total / ${#targets[@]} ))
(( per < 5 )) && per=5
for t in "${targets[@]}"; do
  name=$(basename "$t")
  corpus=$build/corpus/$name
  mkdir -p "$corpus"
  cp -n "$root"/tests/fuzz/corpus/"${name#fuzz_}"/* "$corpus"/ 2>/dev/null || true
  echo "fuzz: $name for ${per}s"
  "$t" -max_total_time="$per" -timeout=10 -rss_limit_mb=2048 -print_final_stats=0 "$corpus" \
    > "$build/$name.log" 2>&1 || { tail -50 "$build/$name.log"; exit 1; }
done
echo "fuzz: ${#targets[@]} targets clean"
