#!/usr/bin/env bash
# prompt_cache_sim with its shared tier on real Redis servers: server
# processes sharing a single node and a 3-master cluster, then the faults:
# a Redis node killed and restarted mid-run (single node and cluster),
# values corrupted behind the servers' back (SETRANGE), Redis out of memory
# and evicting, a server process SIGKILLed mid-insert, and tenants that must
# never share a prefix. Every run must end with 0 mismatches and 0 corrupt served.
#   sim_redis_test.sh SIM shared   on the servers of scripts/redis-services.sh (the
#                                  ctest fixture, KVSTORE_TEST_REDIS_ENV), own key prefix
#   sim_redis_test.sh SIM faults   on private servers started here (they are killed,
#                                  corrupted and reconfigured)
set -uo pipefail
sim=$1 mode=${2:-shared}
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=$(mktemp -d)
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
password=${KVSTORE_REDIS_PASSWORD:-kvstore-test}
cli() { local port=$1; shift; redis-cli -p "$port" -a "$password" --no-auth-warning "$@"; }
check() {  # check OUTPUT_FILE: zero mismatches and corrupt entries served, no error
  grep -q '^mismatches: 0$' "$1" || fail "mismatches in $(cat "$1")"
  grep -q '^corrupt_served: 0$' "$1" || fail "corrupt served in $(cat "$1")"
  grep -q '^errors: 0$' "$1" || fail "errors in $(cat "$1")"
}
field() { sed -n "s/.*[ ;] *\([0-9][0-9]*\) $2.*/\1/p" "$1" | head -1; }  # field FILE WORDS: the count before WORDS
setting() {
  local v=${!1:-}
  [[ -z $v && -n ${KVSTORE_TEST_REDIS_ENV:-} ]] && v=$(sed -n "s/^$1=//p" "$KVSTORE_TEST_REDIS_ENV")
  echo "$v"
}
args=(--threads 2 --chunk-tokens 16 --secret sim-secret --system-tokens 96 --turn-tokens 24)

if [[ $mode == shared ]]; then
  trap 'rm -rf "$dir"' EXIT
  url=$(setting KVSTORE_TEST_REDIS_URL) cluster=$(setting KVSTORE_TEST_REDIS_CLUSTER_URL)
  if [[ -z $url || -z $cluster ]]; then
    echo "SKIP: KVSTORE_TEST_REDIS_URL is not set: run scripts/redis-services.sh start (ctest does)"
    exit 77
  fi
  prefix="simtest:$$:"
  for target in "$url" "$cluster"; do
    "$sim" "${args[@]}" --redis "$target" --key-prefix "$prefix" --processes 3 --requests 300 \
      --metrics "$dir/run.prom" > "$dir/run.out" || fail "run on $target exited non-zero: $(cat "$dir/run.out")"
    check "$dir/run.out"
    # The three workers' counters, summed by the parent.
    [[ $(awk '$1 == "kvstore_prompt_cache_fetches_total" { print $2 }' "$dir/run.prom") == 300 ]] ||
      fail "metrics: fetches_total is not the 300 requests: $(head -3 "$dir/run.prom")"
    grep -Eq '^shared_hits: [1-9][0-9]* tokens ' "$dir/run.out" || fail "no shared hits: $(cat "$dir/run.out")"
    grep -Eq '^dedup: 0\.[0-9]+$' "$dir/run.out" || fail "no dedup: $(cat "$dir/run.out")"
    grep -q 'processes 3' "$dir/run.out" || fail "not 3 processes"
  done
  # Tenants across three server processes: they reuse their own prefixes, never
  # another tenant's; without salts the workers' cross-tenant hits reach the parent's sum.
  "$sim" "${args[@]}" --redis "$url" --key-prefix "${prefix}tenants:" --processes 3 --requests 300 --tenants 3 \
    > "$dir/tenants.out" || fail "tenants run exited non-zero: $(cat "$dir/tenants.out")"
  check "$dir/tenants.out"
  grep -q '^cross_tenant_hits: 0$' "$dir/tenants.out" || fail "cross-tenant hits: $(cat "$dir/tenants.out")"
  grep -Eq '^hit_rate: [1-9]' "$dir/tenants.out" || fail "no hits: $(cat "$dir/tenants.out")"
  "$sim" "${args[@]}" --redis "$url" --key-prefix "${prefix}unsalted:" --processes 3 --requests 300 --tenants 3 \
    --unsalted-tenants > "$dir/unsalted.out"; rc=$?
  [[ $rc == 1 ]] && grep -Eq '^cross_tenant_hits: [1-9]' "$dir/unsalted.out" ||
    fail "unsalted tenants (exit $rc): $(cat "$dir/unsalted.out")"
  # A worker that fails says why, in the parent's message (its store
  # cannot be created: /dev/null is no directory).
  "$sim" "${args[@]}" --redis "$url" --key-prefix "$prefix" --processes 1 --requests 10 --store /dev/null/store \
    > "$dir/worker.out" 2>&1 && fail "a failing worker went unnoticed: $(cat "$dir/worker.out")"
  grep -Eq '^prompt_cache_sim: worker 0 \(pid [0-9]+\) exited with status 2 and no report: prompt_cache_sim: .*/dev/null' \
    "$dir/worker.out" || fail "worker failure message: $(cat "$dir/worker.out")"
  # Chunks spread over every master of the cluster.
  IFS=, read -ra ports <<< "$(setting KVSTORE_TEST_REDIS_CLUSTER_PORTS)"
  for p in "${ports[@]}"; do
    n=$(cli "$p" --scan --pattern "${prefix}v2/*/c/*" | wc -l)
    ((n > 0)) || fail "no chunks on cluster node $p"
  done
  for target in "$url" "$cluster"; do
    for p in ${target##*:} "${ports[@]}"; do cli "$p" --scan --pattern "${prefix}*" | xargs -r -n 100 \
      redis-cli -p "$p" -a "$password" --no-auth-warning unlink > /dev/null 2>&1; done
  done
  if ((failures)); then echo "$failures failures"; exit 1; fi
  echo "prompt_cache_sim on Redis (single node and cluster) passed"
  exit 0
fi

# ---- faults: private servers ----
export KVSTORE_REDIS_PORT_BASE=${KVSTORE_SIM_REDIS_PORT_BASE:-$((20000 + RANDOM % 20000))}
trap 'bash "$root/scripts/redis-services.sh" stop "$dir/services" > /dev/null; rm -rf "$dir"' EXIT
bash "$root/scripts/redis-services.sh" start "$dir/services" > "$dir/services.log" 2>&1 ||
  { echo "FAIL: cannot start Redis: $(cat "$dir/services.log")"; exit 1; }
url=$(sed -n 's/^KVSTORE_TEST_REDIS_URL=//p' "$dir/services/env")
cluster=$(sed -n 's/^KVSTORE_TEST_REDIS_CLUSTER_URL=//p' "$dir/services/env")
single_port=${url##*:}

restart() {  # restart NODE: SIGKILL, then started again on the same port
  bash "$root/scripts/redis-services.sh" restart "$dir/services" "$1" > "$dir/restart.log" 2>&1 ||
    fail "$1 did not come back: $(cat "$dir/restart.log")"
}

# A killed and restarted node, mid-run: fetches and inserts fail fast while
# it is down (misses, counted), and the servers use it again when it is back.
for node in single cluster1; do
  target=$url
  [[ $node == cluster1 ]] && target=$cluster
  "$sim" "${args[@]}" --redis "$target" --processes 3 --requests 1000000 --seconds 4 > "$dir/kill.out" &
  pid=$!
  sleep 1.5
  restart "$node"
  wait "$pid" || fail "$node: run exited non-zero: $(cat "$dir/kill.out")"
  check "$dir/kill.out"
  errors=$(field "$dir/kill.out" "backend errors")
  ((${errors:-0} > 0)) || fail "$node: no backend errors while the node was down: $(grep '^shared' "$dir/kill.out")"
  grep -Eq '^shared_hits: [1-9]' "$dir/kill.out" || fail "$node: no shared hits"
done

# Values corrupted behind the servers' back, during the run.
"$sim" "${args[@]}" --redis "$url" --processes 3 --requests 1000000 --seconds 4 --metrics "$dir/setrange.prom" \
  > "$dir/setrange.out" &
pid=$!
for round in $(seq 30); do
  sleep 0.1
  cli "$single_port" --scan --pattern 'kvstore:v2/*/c/*' | shuf -n 3 | while read -r key; do
    cli "$single_port" setrange "$key" $((RANDOM % 2000)) "garbage$round" > /dev/null
  done
done
wait "$pid" || fail "setrange: run exited non-zero: $(cat "$dir/setrange.out")"
check "$dir/setrange.out"
refused=$(( $(field "$dir/setrange.out" corrupt) + $(field "$dir/setrange.out" forged) +
            $(field "$dir/setrange.out" mismatched) + 0 ))
((refused > 0)) || fail "setrange: nothing refused: $(grep '^shared' "$dir/setrange.out")"
refused_metric=$(awk 'index($1, "kvstore_prompt_cache_refused_total{tier=\"shared\"") == 1 { s += $2 } END { print s + 0 }' \
  "$dir/setrange.prom")
((refused_metric == refused)) || fail "setrange: refused_total says $refused_metric, the summary $refused"

# Out of memory: maxmemory far below the working set, allkeys-lru evicting.
cli "$single_port" flushall > /dev/null
cli "$single_port" config set maxmemory 2mb > /dev/null
cli "$single_port" config set maxmemory-policy allkeys-lru > /dev/null
"$sim" "${args[@]}" --redis "$url" --processes 3 --requests 600 --systems 6 --conversations 24 > "$dir/oom.out" ||
  fail "oom: run exited non-zero: $(cat "$dir/oom.out")"
check "$dir/oom.out"
evicted=$(cli "$single_port" info stats | tr -d '\r' | sed -n 's/^evicted_keys://p')
((${evicted:-0} > 0)) || fail "oom: nothing evicted"
cli "$single_port" config set maxmemory 1gb > /dev/null

# A server process SIGKILLed mid-insert: the others go on; what it wrote is
# served, correct, to the next run.
cli "$single_port" flushall > /dev/null
"$sim" "${args[@]}" --redis "$url" --processes 3 --requests 1000000 --seconds 3 > "$dir/sigkill.out" &
pid=$!
for _ in $(seq 50); do grep -q '^processes: ' "$dir/sigkill.out" 2>/dev/null && break; sleep 0.1; done
victim=$(sed -n 's/^processes: 3 started (pids \([0-9]*\) .*/\1/p' "$dir/sigkill.out")
sleep 1.5
[[ -n $victim ]] && kill -9 "$victim"
wait "$pid" || fail "sigkill: run exited non-zero: $(cat "$dir/sigkill.out")"
check "$dir/sigkill.out"
grep -q '^processes_lost: 1$' "$dir/sigkill.out" || fail "sigkill: no process lost: $(head -3 "$dir/sigkill.out")"
"$sim" "${args[@]}" --redis "$url" --processes 2 --requests 200 > "$dir/after.out" ||
  fail "after sigkill: run exited non-zero: $(cat "$dir/after.out")"
check "$dir/after.out"
grep -Eq '^shared_hits: [1-9]' "$dir/after.out" || fail "after sigkill: nothing reused"

if ((failures)); then echo "$failures failures"; exit 1; fi
echo "prompt_cache_sim Redis fault cases passed"
