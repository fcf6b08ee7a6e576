#!/usr/bin/env bash
# kvtool verify of an XXH3 file against `xxhsum -H2` of the same file
# (docs/performance.md, "Verify of an XXH3 file against xxhsum -H2"):
#   bench/verify_bench.sh [BUILD_DIR] [TOKENS=8192] [DIR=$TMPDIR]
# TOKENS=8192 gives a 1 GiB cache (32 layers of [1, 8, T, 128] BF16 keys and
# values ~ N(0, 1)), converted with --integrity=xxh3. The page cache is warm
# (the file is read once first). $RUNS rounds (default 7), each running the
# reference then kvtool; prints the best and median wall time of each, their
# ratios, and the load average before and after. The same pair runs in
# bench/file_bench.sh among the other commands.
set -euo pipefail
build=${1:-build}
tokens=${2:-8192}
dir=$(mktemp -d "${3:-${TMPDIR:-/tmp}}/kvverify.XXXXXX")
trap 'rm -rf "$dir"' EXIT
runs=${RUNS:-7}
kvtool=$(realpath "$build/apps/kvtool/kvtool")
"$build/bench/kvstore_make_cache" "$dir/in.safetensors" "$tokens"
"$kvtool" convert "$dir/in.safetensors" -o "$dir/x.safetensors" --integrity=xxh3 -q
rm "$dir/in.safetensors"
file=$dir/x.safetensors
cat "$file" > /dev/null
echo "file: $(stat -c %s "$file") bytes; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
now() { date +%s.%N; }
timed() {  # NAME CMD...: one run, "NAME seconds" appended to the runs file
  local name=$1 t0 t1; shift
  t0=$(now)
  "$@" > /dev/null
  t1=$(now)
  echo "$name $(echo "$t1 - $t0" | bc -l)" >> "$dir/runs"
}
xxhsum -H2 "$file" > /dev/null && "$kvtool" verify -q "$file"  # warm-up
for ((r = 0; r < runs; r++)); do
  timed xxhsum xxhsum -H2 "$file"
  timed verify "$kvtool" verify -q "$file"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
sort -k1,1 -k2,2n "$dir/runs" | awk '
  { n[$1]++; t[$1, n[$1]] = $2 }
  END {
    for (c in n) { best[c] = t[c, 1]; med[c] = t[c, int((n[c] + 1) / 2)] }
    printf "xxhsum -H2:        best %.4f s  median %.4f s\n", best["xxhsum"], med["xxhsum"]
    printf "kvtool verify -q:  best %.4f s  median %.4f s\n", best["verify"], med["verify"]
    printf "xxhsum / verify:   best %.2fx  median %.2fx  (goal >= 1.0)\n",
           best["xxhsum"] / best["verify"], med["xxhsum"] / med["verify"]
  }'
