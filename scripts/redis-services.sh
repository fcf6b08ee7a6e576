#!/usr/bin/env bash
# Starts and stops the Redis servers that the tests, the simulation and the
# benchmarks use: one single node and a 3-master Redis Cluster, all on
# loopback, password-protected, in a scratch directory.
#
#   scripts/redis-services.sh start [DIR]   start (restarting what DIR holds), write DIR/env
#   scripts/redis-services.sh stop  [DIR]   stop every server of DIR and remove DIR
#   scripts/redis-services.sh restart DIR NODE
#                                           SIGKILL one server (single, cluster1..3) and
#                                           start it again, same port, data dir and options
#
# DIR defaults to ${TMPDIR:-/tmp}/kvstore-redis-$UID. DIR/env holds, one
# KEY=VALUE a line (source it, or let the tests read it via KVSTORE_TEST_REDIS_ENV):
#   KVSTORE_TEST_REDIS_URL           redis://default:PASSWORD@127.0.0.1:PORT (single node)
#   KVSTORE_TEST_REDIS_CLUSTER_URL   redis://default:PASSWORD@127.0.0.1:PORT (a cluster node)
#   KVSTORE_TEST_REDIS_CLUSTER_PORTS the three cluster ports, comma-separated
#   KVSTORE_TEST_REDIS_SERVER        the redis-server binary (tests start private servers)
# Settings (environment):
#   KVSTORE_REDIS_PORT_BASE  first port tried (default 46379); busy ports are skipped,
#                            and cluster nodes also need PORT+10000 free (their bus)
#   KVSTORE_REDIS_MAXMEMORY  maxmemory of each server (default 1gb)
#   KVSTORE_REDIS_POLICY     maxmemory-policy (default allkeys-lru)
#   KVSTORE_REDIS_PASSWORD   the default user's password (default kvstore-test)
set -euo pipefail

cmd=${1:-}
dir=${2:-${TMPDIR:-/tmp}/kvstore-redis-$(id -u)}
port_base=${KVSTORE_REDIS_PORT_BASE:-46379}
maxmemory=${KVSTORE_REDIS_MAXMEMORY:-1gb}
policy=${KVSTORE_REDIS_POLICY:-allkeys-lru}
password=${KVSTORE_REDIS_PASSWORD:-kvstore-test}

die() { echo "redis-services: $*" >&2; exit 1; }

stop_all() {
  [[ -d "$dir" ]] || return 0
  local pids=()
  for f in "$dir"/*/redis.pid; do
    [[ -f "$f" ]] && pids+=("$(cat "$f")")
  done
  for pid in "${pids[@]}"; do kill -CONT "$pid" 2>/dev/null || true; kill "$pid" 2>/dev/null || true; done
  for _ in $(seq 50); do
    local alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    ((alive)) || break
    sleep 0.1
  done
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  rm -rf "$dir"
}

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

ping() { redis-cli -h 127.0.0.1 -p "$1" -a "$password" --no-auth-warning ping 2>/dev/null; }

# start_node NAME PORT [extra redis-server args...]: 0 once it answers PING,
# 1 when it exited (typically: the port or its bus port was taken).
start_node() {
  local name=$1 port=$2
  shift 2
  local d="$dir/$name"
  rm -rf "$d" && mkdir -p "$d"
  local args=(--port "$port" --bind 127.0.0.1 --dir "$d" --save '' --appendonly no \
    --daemonize no --logfile "$d/redis.log" --requirepass "$password" --masterauth "$password" \
    --maxmemory "$maxmemory" --maxmemory-policy "$policy" --enable-debug-command local "$@")
  printf '%s\0' "$port" "${args[@]}" > "$d/args"  # for restart
  run_node "$d" "$port" "${args[@]}"
}

# run_node DIR PORT ARGS...: starts redis-server ARGS; 0 once it answers PING.
run_node() {
  local d=$1 port=$2
  shift 2
  setsid redis-server "$@" </dev/null >/dev/null 2>&1 &
  local pid=$!
  echo "$pid" > "$d/redis.pid"
  for _ in $(seq 100); do
    [[ "$(ping "$port")" == PONG ]] && return 0
    kill -0 "$pid" 2>/dev/null || { rm -f "$d/redis.pid"; return 1; }
    sleep 0.05
  done
  die "$d on port $port did not answer PING (log: $d/redis.log)"
}

# restart NODE: SIGKILL, then the same command line again (a cluster node
# keeps its nodes.conf in its directory, so it rejoins the cluster).
restart_node() {
  local d="$dir/$1" args pid
  [[ -f "$d/args" && -f "$d/redis.pid" ]] || die "no node $1 in $dir"
  mapfile -d '' args < "$d/args"
  pid=$(cat "$d/redis.pid")
  kill -KILL "$pid" 2>/dev/null || true
  # Gone, or a zombie whose parent (the starting script) has exited.
  while [[ -r /proc/$pid/stat && $(cut -d' ' -f3 "/proc/$pid/stat") != Z ]]; do sleep 0.05; done
  for _ in $(seq 100); do port_busy "${args[0]}" || break; sleep 0.05; done
  run_node "$d" "${args[@]}" || die "$1 did not start again (log: $d/redis.log)"
  echo "redis-services: restarted $1 on port ${args[0]}"
}

# start_on_free_port NAME VAR [args...]: starts NAME on the next free port
# (from $next_port) and stores the port in VAR.
next_port=$port_base
start_on_free_port() {
  local name=$1 var=$2
  shift 2
  for _ in $(seq 200); do
    local p=$next_port
    next_port=$((next_port + 1))
    port_busy "$p" && continue
    [[ "$*" == *cluster-enabled* ]] && port_busy $((p + 10000)) && continue
    if start_node "$name" "$p" "$@"; then
      printf -v "$var" '%s' "$p"
      return 0
    fi
  done
  die "no free port for $name from $port_base on"
}

start_all() {
  command -v redis-server >/dev/null && command -v redis-cli >/dev/null ||
    die "redis-server and redis-cli are needed (scripts/setup-deps.sh installs them)"
  stop_all
  mkdir -p "$dir"
  local single c1 c2 c3
  start_on_free_port single single
  local cluster_args=(--cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 2000)
  start_on_free_port cluster1 c1 "${cluster_args[@]}"
  start_on_free_port cluster2 c2 "${cluster_args[@]}"
  start_on_free_port cluster3 c3 "${cluster_args[@]}"
  redis-cli -a "$password" --no-auth-warning --cluster create 127.0.0.1:"$c1" 127.0.0.1:"$c2" \
    127.0.0.1:"$c3" --cluster-replicas 0 --cluster-yes > "$dir/cluster-create.log" 2>&1 ||
    { cat "$dir/cluster-create.log" >&2; die "redis-cli --cluster create failed"; }
  for p in "$c1" "$c2" "$c3"; do
    local ok=0
    for _ in $(seq 200); do
      if redis-cli -p "$p" -a "$password" --no-auth-warning cluster info 2>/dev/null |
          grep -q '^cluster_state:ok'; then
        ok=1
        break
      fi
      sleep 0.05
    done
    ((ok)) || die "cluster node $p is not ok after 10 s (logs in $dir)"
  done
  cat > "$dir/env" <<EOF
KVSTORE_TEST_REDIS_URL=redis://default:$password@127.0.0.1:$single
KVSTORE_TEST_REDIS_CLUSTER_URL=redis://default:$password@127.0.0.1:$c1
KVSTORE_TEST_REDIS_CLUSTER_PORTS=$c1,$c2,$c3
KVSTORE_TEST_REDIS_SERVER=$(command -v redis-server)
EOF
  echo "redis-services: single node on $single, cluster on $c1 $c2 $c3; settings in $dir/env"
  cat "$dir/env"
}

case "$cmd" in
  start) start_all ;;
  stop) stop_all; echo "redis-services: stopped ($dir)" ;;
  restart) restart_node "${3:?node name}" ;;
  *) die "usage: $0 start|stop [DIR] | restart DIR NODE" ;;
esac
