#!/usr/bin/env bash
# The shared tier's figures (docs/performance.md): sealed chunk put/get
# (encode, AES-256-GCM, checks, rebuild) against raw puts/gets of values of the
# same byte sizes through the same backend on the same Redis; fetch latency
# p50/p99 of a 32k-token, 32-layer cache from Redis and from the disk tier;
# dedup of the simulation when 10 conversations share an 8k-token system
# prompt. Starts its own Redis (scripts/redis-services.sh, ports from 47479
# unless KVSTORE_REDIS_PORT_BASE says otherwise) and stops it.
#   bash bench/shared_tier_bench.sh [BUILD_DIR] [REPETITIONS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
reps=${2:-5}
for p in bench/kvstore_bench apps/prompt_cache_sim/prompt_cache_sim; do
  [[ -x "$build/$p" ]] || { echo "shared_tier_bench: build $(basename "$p") first" >&2; exit 1; }
done

dir=$(mktemp -d)
trap 'bash "$root/scripts/redis-services.sh" stop "$dir/services" >/dev/null; rm -rf "$dir"' EXIT
KVSTORE_REDIS_PORT_BASE=${KVSTORE_REDIS_PORT_BASE:-47479} KVSTORE_REDIS_MAXMEMORY=4gb \
  bash "$root/scripts/redis-services.sh" start "$dir/services" >/dev/null
url=$(grep '^KVSTORE_TEST_REDIS_URL=' "$dir/services/env" | cut -d= -f2-)

export KVSTORE_BENCH_REDIS_URL=$url
"$build/bench/kvstore_bench" \
  --benchmark_filter='BM_(SharedPutChunks|RawPutSameSizes|SharedGetChunks|RawGetSameSizes)/|BM_RawHiredis(Set|Get)/(1048576|8388608)' \
  --benchmark_repetitions="$reps" --benchmark_report_aggregates_only=true > "$dir/throughput.txt"
"$build/bench/kvstore_bench" --benchmark_filter='BM_(Shared|Disk)FetchLatency/' > "$dir/latency.txt"

# name -> MB/s (10^6 bytes/s) of the median.
rate() {  # rate NAME[/ARG]
  awk -v n="$1" '$1 ~ "^" n "/" && /_median/ {
    for (i = 2; i <= NF; ++i) if ($i ~ /^bytes_per_second=/) r = substr($i, 18);
    u = substr(r, length(r) - 2, 1); v = substr(r, 1, length(r) - 3) + 0;
    if (u == "G") v *= 1024; if (u == "k") v /= 1024;
    printf "%.1f", v * 1.048576 }' "$dir/throughput.txt"
}
ms() { awk -v n="$1" -v s="$2" '$1 ~ "^" n "/" && $1 ~ "_" s "$" { print $2 }' "$dir/latency.txt"; }

echo "redis single node on loopback; 16 chunks of 256 tokens x 32 layers x 1 head x 64 dims F16 (2 MiB a chunk)"
echo "chunks sealed: AES-256-GCM under a secret (the default of this bench), no digests inside the envelope"
echo "median of $reps runs, MB/s (10^6 bytes/s)"
ps=$(rate BM_SharedPutChunks) rs=$(rate BM_RawPutSameSizes) pg=$(rate BM_SharedGetChunks) rg=$(rate BM_RawGetSameSizes)
printf '%-24s %10s %10s %7s\n' "" chunks raw ratio
printf '%-24s %10s %10s %7.2f\n' "put (SET NX)" "$ps" "$rs" "$(awk -v a="$ps" -v b="$rs" 'BEGIN { print a / b }')"
printf '%-24s %10s %10s %7.2f\n' "get" "$pg" "$rg" "$(awk -v a="$pg" -v b="$rg" 'BEGIN { print a / b }')"
echo "raw hiredis (blocking, one value a call; bench/redis_bench.cc) in the same run, MB/s:"
for size in 1048576 8388608; do
  printf '  %dMiB: SET %s, GET %s\n' "$((size >> 20))" "$(rate "BM_RawHiredisSet/$size")" "$(rate "BM_RawHiredisGet/$size")"
done
echo "fetch of a 32k-token, 32-layer cache (256 MiB), 30 fetches: ms"
printf '%-24s %10s %10s\n' "" p50 p99
printf '%-24s %10s %10s\n' "shared tier (redis)" "$(ms BM_SharedFetchLatency p50)" "$(ms BM_SharedFetchLatency p99)"
printf '%-24s %10s %10s\n' "disk tier (page cache)" "$(ms BM_DiskFetchLatency p50)" "$(ms BM_DiskFetchLatency p99)"

echo "dedup: 10 conversations sharing an 8k-token system prompt, 256-token chunks"
for p in 1 4; do
  "$build/apps/prompt_cache_sim/prompt_cache_sim" --redis "$url" --key-prefix "dedup$p:" --processes "$p" \
    --threads 1 --requests 40 --systems 1 --system-tokens 8192 --conversations 10 --turns 1 --branches 1 \
    --turn-tokens 512 --tail-tokens 0 --chunk-tokens 256 > "$dir/dedup.out"
  printf '  %d process(es): %s, %s, %s\n' "$p" "$(grep '^dedup:' "$dir/dedup.out")" \
    "$(grep '^shared_hits:' "$dir/dedup.out")" "$(grep '^mismatches:' "$dir/dedup.out")"
done
