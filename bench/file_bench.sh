#!/usr/bin/env bash
# File-level throughput of kvtool against the reference tools on the same
# bytes, in one run (docs/performance.md):
#   cp (plain save), openssl dgst -sha256 (verify), zstd -T0 -3 (compress), zstd -d.
#   bench/file_bench.sh [BUILD_DIR] [TOKENS=8192] [DIR=$TMPDIR]
# TOKENS=8192 gives a 1 GiB cache (32 layers of [1, 8, T, 128] BF16 keys and values).
set -euo pipefail
build=${1:-build}
tokens=${2:-8192}
dir=$(mktemp -d "${3:-${TMPDIR:-/tmp}}/kvbench.XXXXXX")
trap 'rm -rf "$dir"' EXIT
kvtool=$build/apps/kvtool/kvtool
make=$build/bench/kvstore_make_cache

now() { date +%s.%N; }
# run NAME CMD... : wall seconds and peak RSS (KiB) of CMD
run() {
  local name=$1; shift
  local t0 t1
  sync
  t0=$(now)
  /usr/bin/time -f "%M" -o "$dir/rss" "$@" > /dev/null 2>&1
  t1=$(now)
  printf '%s %.3f %s\n' "$name" "$(echo "$t1 - $t0" | bc -l)" "$(cat "$dir/rss")"
}

"$make" "$dir/in.safetensors" "$tokens"
"$make" "$dir/small.safetensors" 128
bytes=$(stat -c %s "$dir/in.safetensors")
echo "file: $bytes bytes ($tokens tokens x 32 layers)"
cat "$dir/in.safetensors" > /dev/null  # warm the page cache

{
  run cp cp "$dir/in.safetensors" "$dir/cp.out"
  run save "$kvtool" convert "$dir/in.safetensors" -o "$dir/save.out" --integrity -q
  run openssl openssl dgst -sha256 "$dir/save.out"
  run verify "$kvtool" verify -q "$dir/save.out"
  run zstd zstd -q -T0 -3 -f "$dir/in.safetensors" -o "$dir/ref.zst"
  run compress "$kvtool" convert "$dir/in.safetensors" -o "$dir/c.out" --compress=3 -q
  run zstd_d zstd -q -d -f "$dir/ref.zst" -o "$dir/ref.plain"
  run decompress "$kvtool" convert "$dir/c.out" -o "$dir/d.out" --decompress -q
  run inspect_big "$kvtool" inspect "$dir/in.safetensors"
  run inspect_small "$kvtool" inspect "$dir/small.safetensors"
  run inspect_compressed "$kvtool" inspect "$dir/c.out"
  run version "$kvtool" --version
} | tee "$dir/results"

awk -v bytes="$bytes" -v zin="$(stat -c %s "$dir/c.out")" -v zref="$(stat -c %s "$dir/ref.zst")" -v zours="$(stat -c %s "$dir/c.out")" '
  { t[$1] = $2; rss[$1] = $3 }
  END {
    printf "\nratios (higher is better for kvstore):\n"
    printf "  save (convert --integrity) vs cp:          %.2fx  (goal >= 0.8)\n", t["cp"] / t["save"]
    printf "  verify vs openssl dgst -sha256:            %.2fx  (goal >= 1.6)\n", t["openssl"] / t["verify"]
    printf "  compress vs zstd -T0 -3:                   %.2fx  (goal >= 0.9)\n", t["zstd"] / t["compress"]
    printf "  compressed size vs zstd -3:                %.3f   (goal within 2%%)\n", zours / zref
    printf "  decompress vs zstd -d:                     %.2fx  (goal >= 1.5)\n", t["zstd_d"] / t["decompress"]
    printf "  inspect 1 GiB vs 16 MiB file:              %.2fx time (goal <= 2)\n", t["inspect_big"] / t["inspect_small"]
    printf "  inspect compressed vs --version:           %.2fx time (goal <= 2)\n", t["inspect_compressed"] / t["version"]
    # RSS counts the pages of the mapped input, so subtract the input size.
    printf "  peak RSS beyond the mapped input: save %d MiB, compress %d MiB, decompress %d MiB (goal < 128)\n",
           (rss["save"] * 1024 - bytes) / 1048576, (rss["compress"] * 1024 - bytes) / 1048576,
           (rss["decompress"] * 1024 - zin) / 1048576
  }' "$dir/results"
