#!/usr/bin/env bash
# Builds the libFuzzer targets (-fsanitize=fuzzer,address,undefined) in the
# clang ASan tree that scripts/test.sh --sanitize also uses (scripts/build-asan.sh),
# and runs each over its seed corpus for a bounded time.
#   scripts/fuzz.sh [TOTAL_SECONDS]   (default 60 of wall time, shared by all targets)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
total=${1:-60}
build=$root/build-asan
# Only the fuzzers (and the instrumented library); after scripts/test.sh
# --sanitize they are built already.
KVSTORE_TARGETS=kvstore_fuzzers "$root/scripts/build-asan.sh"
mapfile -t targets < <(find "$build/tests/fuzz" -maxdepth 1 -type f -name 'fuzz_*' -perm -u+x | sort)
if ((${#targets[@]} == 0)); then
  echo "fuzz: no targets built" >&2
  exit 1
fi
# TOTAL_SECONDS of wall time: one target per core at a time, so each target
# gets TOTAL_SECONDS * cores / targets seconds (at least 5).
jobs=$(nproc)
per=$(( total * jobs / ${#targets[@]} ))
(( per < 5 )) && per=5
run_one() {
  local t=$1 name corpus
  name=$(basename "$t")
  corpus=$build/corpus/$name
  mkdir -p "$corpus"
  cp -n "$root"/tests/fuzz/corpus/"${name#fuzz_}"/* "$corpus"/ 2>/dev/null || true
  echo "fuzz: $name for ${per}s"
  # Crash inputs land next to the log, named in it.
  (cd "$build" && "$t" -max_total_time="$per" -timeout=10 -rss_limit_mb=2048 -print_final_stats=0 \
    "$corpus" > "$build/$name.log" 2>&1) || { echo "fuzz: $name FAILED"; tail -50 "$build/$name.log"; return 1; }
}
failed=0
running=0
for t in "${targets[@]}"; do
  if (( running >= jobs )); then
    wait -n || failed=1
    running=$(( running - 1 ))
  fi
  run_one "$t" &
  running=$(( running + 1 ))
done
while (( running > 0 )); do
  wait -n || failed=1
  running=$(( running - 1 ))
done
if (( failed )); then
  echo "fuzz: a target failed (its log and crash input are in $build)" >&2
  exit 1
fi
echo "fuzz: ${#targets[@]} targets clean, ${per}s each"
