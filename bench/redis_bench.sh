#!/usr/bin/env bash
# Chunk put/get throughput of the Redis backend against raw SET/GET of the
# same byte sizes on the same server: raw hiredis in the same process
# (kvstore_bench), and redis-benchmark as an outside reference. Starts its
# own servers (scripts/redis-services.sh, ports from 47379 unless
# KVSTORE_REDIS_PORT_BASE says otherwise) and stops them.
#   bash bench/redis_bench.sh [BUILD_DIR] [REPETITIONS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
reps=${2:-5}
[[ -x "$build/bench/kvstore_bench" ]] || { echo "redis_bench: build kvstore_bench first" >&2; exit 1; }

dir=$(mktemp -d)
trap 'bash "$root/scripts/redis-services.sh" stop "$dir/services" >/dev/null' EXIT
KVSTORE_REDIS_PORT_BASE=${KVSTORE_REDIS_PORT_BASE:-47379} \
  bash "$root/scripts/redis-services.sh" start "$dir/services" >/dev/null
url=$(grep '^KVSTORE_TEST_REDIS_URL=' "$dir/services/env" | cut -d= -f2-)
port=${url##*:}
password=${KVSTORE_REDIS_PASSWORD:-kvstore-test}

KVSTORE_BENCH_REDIS_URL=$url "$build/bench/kvstore_bench" \
  --benchmark_filter='BM_(RawHiredis|Redis)(Set|Get|PutChunk|GetChunk)/' \
  --benchmark_repetitions="$reps" --benchmark_report_aggregates_only=true > "$dir/bench.txt"

# name/size -> MB/s of the median, e.g. "BM_RedisGetChunk 1048576 1063.4".
awk '/_median/ {
  split($1, p, "/"); rate = "";
  for (i = 2; i <= NF; ++i) if ($i ~ /^bytes_per_second=/) rate = substr($i, 18);
  unit = substr(rate, length(rate) - 2, 1); v = substr(rate, 1, length(rate) - 3) + 0;
  if (unit == "G") v *= 1024; if (unit == "k") v /= 1024;
  printf "%s %s %.1f\n", p[1], p[2], v * 1.048576
}' "$dir/bench.txt" > "$dir/rates.txt"

rate() { awk -v n="$1" -v s="$2" '$1 == n && $2 == s { print $3 }' "$dir/rates.txt"; }
echo "median of $reps runs, MB/s (10^6 bytes/s); ratio = backend / raw hiredis"
printf '%-10s %12s %12s %7s %12s %12s %7s\n' size raw_SET put_chunk ratio raw_GET get_chunk ratio
for size in 1048576 8388608 33554432; do
  rs=$(rate BM_RawHiredisSet "$size"); ps=$(rate BM_RedisPutChunk "$size")
  rg=$(rate BM_RawHiredisGet "$size"); gg=$(rate BM_RedisGetChunk "$size")
  printf '%-10s %12s %12s %7.2f %12s %12s %7.2f\n' "$((size >> 20))MiB" "$rs" "$ps" \
    "$(awk -v a="$ps" -v b="$rs" 'BEGIN { print a / b }')" "$rg" "$gg" \
    "$(awk -v a="$gg" -v b="$rg" 'BEGIN { print a / b }')"
done

echo "redis-benchmark -c 1 (MB/s):"
for size in 1048576 8388608; do
  n=$(( size > 1048576 ? 40 : 300 ))
  redis-benchmark -h 127.0.0.1 -p "$port" -a "$password" -t set,get -d "$size" -n "$n" -c 1 -q \
    2>/dev/null | tr '\r' '\n' | awk -v s="$size" -v mib="$((size >> 20))" \
    '/requests per second/ { gsub(":", "", $1); printf "  %s %dMiB: %.1f\n", $1, mib, $2 * s / 1e6 }'
done
