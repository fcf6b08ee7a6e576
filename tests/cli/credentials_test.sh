#!/usr/bin/env bash
# No password of a Redis URL is ever printed: every path of kvtool,
# prompt_cache_sim and the Python package that can show a URL runs with a
# distinctive password (URLs that parse and URLs that do not, in any scheme
# case, misplaced on the command line, against no server, and against the
# ctest fixture's Redis with a user of our own: logins that succeed, wrong
# passwords, none), and all their output is searched for it. Each run's exit
# code and message are checked too, so the search cannot pass vacuously.
#   credentials_test.sh KVTOOL SIM
# Environment: KVSTORE_TEST_REDIS_ENV or KVSTORE_TEST_REDIS_URL (the server
# part; skipped without), KVSTORE_TEST_PYTHON and KVSTORE_TEST_PYTHONPATH
# (the Python part; skipped when the package was not built).
set -uo pipefail
kvtool=$(realpath "$1") sim=$(realpath "$2")
source "$(dirname "$0")/testlib.sh"
pw="Pw$$-x7Leak" wrong="Wrong$$-q9Leak"
log=$tmp/all.log
user="leaktest$$" url="" port=""
cleanup() {
  [[ -n $port ]] && redis-cli -p "$port" -a "$admin_pw" --no-auth-warning acl deluser "$user" > /dev/null 2>&1
  rm -rf "$tmp"
}
trap cleanup EXIT

# run WANT_CODE WANT_TEXT -- command...: appends its output to the log.
run() {
  local want=$1 text=$2 out rc
  shift 3
  out=$("$@" 2>&1 < /dev/null); rc=$?
  printf '%s\n' "$out" >> "$log"
  [[ $want == any || $rc == "$want" ]] || fail "$* exited $rc, want $want: $out"
  [[ -z $text || $out == *"$text"* ]] || fail "$*: '$out', want '$text'"
}

# ---- No server: URLs that cannot connect or do not parse ----
dead="127.0.0.1:1"  # nothing listens on port 1: refused at once
for u in "redis://user:$pw@$dead" "REDIS://user:$pw@$dead" "Redis://:$pw@$dead"; do
  run 2 "redis $dead: connect" -- "$kvtool" ls "$u"
  run 2 "redis $dead: connect" -- "$kvtool" ls "$u" --json
  run 2 "redis $dead: connect" -- "$kvtool" ls "$u" --namespace abc
  run 2 "redis $dead: connect" -- "$kvtool" inspect "$u" --key k --verify --json
  run 1 "needs --key" -- "$kvtool" inspect "$u"
  run 2 "redis $dead: connect" -- "$sim" --redis "$u" --processes 2 --requests 4
  run 2 "redis $dead: connect" -- "$sim" --redis "$u" --worker 0 --requests 4
done
run 4 "TLS (rediss://) is not supported" -- "$kvtool" ls "rediss://user:$pw@$dead"
run 4 "TLS (rediss://) is not supported" -- "$kvtool" inspect "REDISS://user:$pw@$dead" --key k
run 2 "TLS (rediss://) is not supported" -- "$sim" --redis "rediss://user:$pw@$dead"
run 2 "redis [::1]:1: " -- "$kvtool" ls "redis://user:$pw@[::1]:1"
for u in "redis://user:$pw@127.0.0.1" "redis://user:$pw@$dead/0" "redis://user:$pw:$dead" "redis://$pw@$dead" \
         "redis://user:$pw@ho\$t:1" "redis://user:$pw@[$pw]:1" "redis://user:$pw@127.0.0.1:9$pw" \
         "redis://user:%zz$pw@$dead" "redis://user:$pw @$dead"; do
  run 1 "redis url: " -- "$kvtool" ls "$u"
  run 1 "redis url: " -- "$kvtool" inspect "$u" --key k
  run 2 "redis url: " -- "$sim" --redis "$u" --processes 2
done
# A URL where the parser does not expect one is quoted back by it.
run 1 "was not expected" -- "$kvtool" ls "$tmp" "redis://user:$pw@$dead"
run 1 "was not expected" -- "$kvtool" inspect "redis://user:$pw@$dead" "redis://user:$pw@$dead"
run 1 "unknown command" -- "$kvtool" "redis://user:$pw@$dead"
run 1 "was not expected" -- "$sim" "redis://user:$pw@$dead"
run 1 "" -- "$sim" --redis "redis://user:$pw@$dead" --processes many

# ---- A server: the fixture's single node, a user of our own ----
setting() {
  local v=${!1:-}
  [[ -z $v && -n ${KVSTORE_TEST_REDIS_ENV:-} && -f $KVSTORE_TEST_REDIS_ENV ]] &&
    v=$(sed -n "s/^$1=//p" "$KVSTORE_TEST_REDIS_ENV")
  echo "$v"
}
admin_url=$(setting KVSTORE_TEST_REDIS_URL)
if [[ -n $admin_url ]] && command -v redis-cli > /dev/null; then
  admin_pw=${admin_url#redis://*:} admin_pw=${admin_pw%@*}
  port=${admin_url##*:}
  redis-cli -p "$port" -a "$admin_pw" --no-auth-warning acl setuser "$user" on ">$pw" '~*' '+@all' > /dev/null ||
    fail "cannot create the Redis user"
  url="redis://$user:$pw@127.0.0.1:$port"
  node="127.0.0.1:$port" prefix="leaktest:$$:"
  run 0 "shared_hits: " -- "$sim" --redis "$url" --key-prefix "$prefix" --processes 2 --requests 40 --secret s
  run 0 "namespaces under" -- "$kvtool" ls "$url" --prefix "$prefix"
  run 0 '"store": "redis 127.0.0.1' -- "$kvtool" ls "$url" --prefix "$prefix" --json
  ns=$("$kvtool" ls "$url" --prefix "$prefix" --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["namespaces"][0]["namespace"])')
  run 0 "inspect a chunk: kvtool inspect redis://$user:***@$node --key '$prefix" -- \
    "$kvtool" ls "$url" --prefix "$prefix" --namespace "$ns"
  run 0 '"root"' -- "$kvtool" ls "$url" --prefix "$prefix" --namespace "$ns" --json
  key=$("$kvtool" ls "$url" --prefix "$prefix" --namespace "$ns" | sed -n "s/.*  \($prefix[^ ]*\)$/\1/p" | head -1)
  [[ -n $key ]] || fail "ls --namespace shows no key: $("$kvtool" ls "$url" --prefix "$prefix" --namespace "$ns")"
  # The key ls shows is one inspect takes.
  run 0 "verified: the seal opens" -- "$kvtool" inspect "$url" --key "$key" --verify --secret s
  run 0 '"verified": true' -- "$kvtool" inspect "$url" --key "$key" --verify --secret s --json
  run 1 "inspect redis://$user:***@$node needs --key" -- "$kvtool" inspect "$url"
  # Refused logins: the I/O exit code, the user and the node named.
  for u in "redis://$user:$wrong@$node" "REDIS://$user:$wrong@$node"; do
    run 2 "redis: authentication failed for user $user at $node: WRONGPASS" -- "$kvtool" ls "$u"
    run 2 "authentication failed for user $user at $node" -- "$kvtool" inspect "$u" --key "$key"
    run 2 "authentication failed for user $user at $node" -- "$sim" --redis "$u" --processes 2 --requests 4
  done
  run 2 "authentication failed for user default at $node: NOAUTH" -- "$kvtool" ls "redis://$node"
  # The simulator refuses a bad login before any worker starts: one message, no workers.
  "$sim" --redis "redis://$user:$wrong@$node" --processes 3 --requests 4 > "$tmp/sim.out" 2>&1
  cat "$tmp/sim.out" >> "$log"
  [[ $(grep -c 'authentication failed' "$tmp/sim.out") == 1 && $(grep -c '^processes:' "$tmp/sim.out") == 0 ]] ||
    fail "sim with a wrong password: $(cat "$tmp/sim.out")"
  redis-cli -p "$port" -a "$admin_pw" --no-auth-warning --scan --pattern "$prefix*" |
    xargs -r -n 100 redis-cli -p "$port" -a "$admin_pw" --no-auth-warning unlink > /dev/null
else
  echo "SKIP: the server part (no Redis: run through ctest, whose fixture starts one, or set KVSTORE_TEST_REDIS_URL)"
fi

# ---- Python ----
python=${KVSTORE_TEST_PYTHON:-python3}
if [[ -n ${KVSTORE_TEST_PYTHONPATH:-} ]] && PYTHONPATH=$KVSTORE_TEST_PYTHONPATH "$python" -c 'import kvstore._kvstore' 2> /dev/null; then
  PYTHONPATH=$KVSTORE_TEST_PYTHONPATH "$python" - "$pw" "$wrong" "$url" "$tmp" >> "$log" 2>&1 <<'PY' ||
import logging, sys, traceback
import kvstore
from kvstore import _kvstore
from kvstore.mlx_lm import TieredPromptCache

logging.basicConfig(level=logging.DEBUG, stream=sys.stdout)
pw, wrong, good, tmp = sys.argv[1:5]
node = good.rsplit("@", 1)[1] if good else ""
cases = [("redis://user:%s@127.0.0.1:1" % pw, kvstore.errors.FileIOError),
         ("REDIS://user:%s@127.0.0.1:1" % pw, kvstore.errors.FileIOError),
         ("rediss://user:%s@127.0.0.1:1" % pw, kvstore.errors.NotSupportedError),
         ("redis://user:%s@127.0.0.1" % pw, kvstore.errors.InvalidArgumentError),
         ("redis://user:%s:127.0.0.1:1" % pw, kvstore.errors.InvalidArgumentError),
         ("redis://%s@127.0.0.1:1" % pw, kvstore.errors.InvalidArgumentError)]
if good:
    user = good.split("//", 1)[1].split(":", 1)[0]
    cases.append(("redis://%s:%s@%s" % (user, wrong, node), kvstore.errors.PermissionDeniedError))
failed = 0
for url, expected in cases:
    for make in (lambda u: _kvstore.SharedTier(u), lambda u: TieredPromptCache(redis=u, directory=tmp + "/d")):
        try:
            made = make(url)
        except kvstore.errors.Error as e:
            print(type(e).__name__, e.exit_code, repr(e), str(e), e.args)
            traceback.print_exc(file=sys.stdout)
            if not isinstance(e, expected):
                print("FAIL: %s raised %s, want %s" % (url.replace(pw, "PW").replace(wrong, "WRONG"),
                                                        type(e).__name__, expected.__name__))
                failed += 1
        else:
            print("FAIL: no error for", url.replace(pw, "PW"))
            made.close()
            failed += 1
if good:
    tier = TieredPromptCache(redis=good, directory=tmp + "/ok")
    print(repr(tier._shared), tier.shared_stats())
    tier.close()
sys.exit(1 if failed else 0)
PY
    fail "the Python part: $(grep FAIL "$log")"
  grep -q "PermissionDeniedError 2\|^FileIOError 2" "$log" || fail "the Python part printed no error"
else
  echo "SKIP: the Python part (the package is not built: KVSTORE_TEST_PYTHONPATH=${KVSTORE_TEST_PYTHONPATH:-})"
fi

if grep -n -e "$pw" -e "$wrong" "$log"; then
  fail "a password was printed (lines above)"
fi
runs=$(grep -c . "$log")
((runs > 50)) || fail "only $runs lines of output were searched"
finish "credentials (no password in $runs lines of output)"
