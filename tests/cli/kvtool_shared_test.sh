#!/usr/bin/env bash
# kvtool ls / inspect on a shared tier in Redis (the ctest fixture's single
# node): namespaces, chains, one chunk, sealed chunks with and without the
# right secret, an unsealed chunk dumped from Redis read as a file, exit codes.
#   kvtool_shared_test.sh KVTOOL SIM
set -uo pipefail
kvtool=$1 sim=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
url=${KVSTORE_TEST_REDIS_URL:-}
[[ -z $url && -n ${KVSTORE_TEST_REDIS_ENV:-} ]] && url=$(sed -n 's/^KVSTORE_TEST_REDIS_URL=//p' "$KVSTORE_TEST_REDIS_ENV")
[[ -n $url ]] || { echo "SKIP: KVSTORE_TEST_REDIS_URL is not set: run scripts/redis-services.sh start (ctest does)"; exit 77; }
password=${url#redis://*:}; password=${password%@*}
port=${url##*:}
cli() { redis-cli -p "$port" -a "$password" --no-auth-warning "$@"; }
prefix="clitest:$$:"

"$sim" --redis "$url" --key-prefix "$prefix" --processes 2 --requests 60 --secret cli-secret > "$dir/sim.out" ||
  fail "sim: $(cat "$dir/sim.out")"

"$sim" --redis "$url" --key-prefix "${prefix}plain:" --processes 1 --requests 20 > "$dir/sim-plain.out" ||
  fail "sim unsealed: $(cat "$dir/sim-plain.out")"

"$kvtool" ls "$url" --key-prefix "$prefix" --secret cli-secret > "$dir/ls.out"; rc=$?
[[ $rc == 0 ]] || fail "ls exit $rc"
grep -Eq '^[0-9a-f]{32}  sim-model +4 +16 +[1-9][0-9]* +0$' "$dir/ls.out" || fail "ls: $(cat "$dir/ls.out")"
grep -q "^1 namespaces under \"$prefix\" on redis 127.0.0.1:$port$" "$dir/ls.out" || fail "ls summary: $(cat "$dir/ls.out")"
# Without the secret the namespace is there, its model is not.
"$kvtool" ls "$url" --key-prefix "$prefix" > "$dir/ls-sealed.out" || fail "ls without the secret"
grep -Eq '^[0-9a-f]{32}  \(sealed: give the secret to read it\) +- +0 +[1-9][0-9]* +0$' "$dir/ls-sealed.out" ||
  fail "ls without the secret: $(cat "$dir/ls-sealed.out")"
ns=$("$kvtool" ls "$url" --key-prefix "$prefix" --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["namespaces"][0]["namespace"])')
[[ ${#ns} == 32 ]] || fail "ls --json namespace: $ns"
"$kvtool" ls "$url" --key-prefix "$prefix" --namespace "$ns" --secret cli-secret > "$dir/chains.out" || fail "ls --namespace exit"
# The deprecated spelling --prefix still works, with a note on stderr; not with --key-prefix.
"$kvtool" ls "$url" --prefix "$prefix" --secret cli-secret > "$dir/old.out" 2> "$dir/old.err" && cmp -s "$dir/ls.out" "$dir/old.out" &&
  grep -q '^kvtool: note: --prefix is deprecated: use --key-prefix$' "$dir/old.err" || fail "ls --prefix: $(cat "$dir/old.err")"
"$kvtool" ls "$url" --prefix "$prefix" --key-prefix "$prefix" > /dev/null 2>&1; rc=$?
[[ $rc == 1 ]] || fail "ls --prefix --key-prefix: exit $rc"
grep -Eq '^[1-9][0-9]* chains in namespace' "$dir/chains.out" || fail "chains: $(cat "$dir/chains.out")"

key=$(cli --scan --pattern "${prefix}v2/$ns/c/*" | head -1)
"$kvtool" inspect "$url" --key "$key" --verify --secret cli-secret > "$dir/inspect.out"; rc=$?
[[ $rc == 0 ]] || fail "inspect --verify exit $rc: $(cat "$dir/inspect.out")"
grep -q '^kind: rows, chunk [0-9]*: tokens [0-9]*-[0-9]*$' "$dir/inspect.out" || fail "inspect kind: $(cat "$dir/inspect.out")"
grep -Eq '^sealed: AES-256-GCM, [0-9]+ bytes$' "$dir/inspect.out" || fail "inspect sealed: $(cat "$dir/inspect.out")"
grep -q '^verified: the seal opens (AES-256-GCM tag) and the chunk is its key.s$' "$dir/inspect.out" || fail "inspect verified"
grep -Eq '^0 +0 +KVCache +F16\[1, 2, 16, 16\] F16\[1, 2, 16, 16\]$' "$dir/inspect.out" || fail "inspect layers: $(cat "$dir/inspect.out")"
"$kvtool" inspect "$url" --key "$key" --verify --secret wrong > /dev/null 2> "$dir/err"; rc=$?
[[ $rc == 3 ]] && grep -q 'the seal does not verify' "$dir/err" || fail "wrong secret: exit $rc $(cat "$dir/err")"
# The secret from a file or the environment, kept out of ps; not both flags.
printf 'cli-secret\n' > "$dir/secret"
"$kvtool" inspect "$url" --key "$key" --verify --secret-file "$dir/secret" > "$dir/inspect.out" ||
  fail "--secret-file: $(cat "$dir/inspect.out")"
grep -q '^verified: the seal opens' "$dir/inspect.out" || fail "--secret-file verified"
KVSTORE_SHARED_SECRET=cli-secret "$kvtool" inspect "$url" --key "$key" --verify > "$dir/inspect.out" ||
  fail "KVSTORE_SHARED_SECRET: $(cat "$dir/inspect.out")"
grep -q '^verified: the seal opens' "$dir/inspect.out" || fail "KVSTORE_SHARED_SECRET verified"
# Without the secret: sealed, its size, nothing of its contents; --verify cannot check it (3).
env -u KVSTORE_SHARED_SECRET "$kvtool" inspect "$url" --key "$key" > "$dir/inspect.out" ||
  fail "no secret: $(cat "$dir/inspect.out")"
grep -Eqx 'sealed: AES-256-GCM, [0-9]+ bytes \(its contents need the secret: give --secret-file F or set KVSTORE_SHARED_SECRET\)' \
  "$dir/inspect.out" || fail "no secret: not shown as sealed: $(cat "$dir/inspect.out")"
grep -q 'KVCache\|writer' "$dir/inspect.out" && fail "no secret: contents shown: $(cat "$dir/inspect.out")"
env -u KVSTORE_SHARED_SECRET "$kvtool" inspect "$url" --key "$key" --verify > /dev/null 2> "$dir/err"; rc=$?
[[ $rc == 3 ]] && grep -q 'its check needs the secret' "$dir/err" || fail "no secret --verify: exit $rc $(cat "$dir/err")"
env -u KVSTORE_SHARED_SECRET "$kvtool" inspect "$url" --key "$key" --json |
  python3 -c 'import json, sys; j = json.load(sys.stdin); assert j["sealed"] and not j["opened"] and j["value_bytes"] > 0, j' ||
  fail "no secret: --json sealed"
"$kvtool" inspect "$url" --key "$key" --verify --secret-file "$dir/secret" --json |
  python3 -c 'import json, sys; j = json.load(sys.stdin); assert j["verified"] is True and j["seal_checked"] is True, j' ||
  fail "secret: --json seal_checked"
KVSTORE_SHARED_SECRET=wrong "$kvtool" inspect "$url" --key "$key" --verify > /dev/null 2>&1; rc=$?
[[ $rc == 3 ]] || fail "wrong KVSTORE_SHARED_SECRET: exit $rc"
"$kvtool" inspect "$url" --key "$key" --verify --secret a --secret-file "$dir/secret" > /dev/null 2> "$dir/err"; rc=$?
[[ $rc == 1 ]] && grep -q 'give one' "$dir/err" || fail "--secret and --secret-file: exit $rc $(cat "$dir/err")"
"$kvtool" inspect "$url" --key "$key" --verify --secret-file "$dir/none" > /dev/null 2> "$dir/err"; rc=$?
[[ $rc == 2 ]] || fail "missing --secret-file: exit $rc $(cat "$dir/err")"
# A sealed chunk copied under another chunk's key: its envelope is bound to the key (3).
other=$(cli --scan --pattern "${prefix}v2/$ns/c/*" | grep -v "^$key\$" | head -1)
cli --raw get "$key" | head -c -1 | cli -x set "$other" > /dev/null
"$kvtool" inspect "$url" --key "$other" --verify --secret cli-secret > /dev/null 2> "$dir/err"; rc=$?
[[ $rc == 3 ]] && grep -q "the seal does not verify" "$dir/err" || fail "copied sealed chunk: exit $rc $(cat "$dir/err")"

# Unsealed chunks: a valid chunk copied under another chunk's key verifies
# only if its chain hash is the key's: exit 3, naming both.
pns=$("$kvtool" ls "$url" --key-prefix "${prefix}plain:" --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["namespaces"][0]["namespace"])')
pkey=$(cli --scan --pattern "${prefix}plain:v2/$pns/c/*" | head -1)
other=$(cli --scan --pattern "${prefix}plain:v2/$pns/c/*" | grep -v "^$pkey\$" | head -1)
cli --raw get "$pkey" | head -c -1 | cli -x set "$other" > /dev/null
env -u KVSTORE_SHARED_SECRET "$kvtool" inspect "$url" --key "$other" --verify > /dev/null 2> "$dir/err"; rc=$?
[[ $rc == 3 ]] && grep -q "the value's chain hash ${pkey##*/} is not the key's ${other##*/}" "$dir/err" ||
  fail "copied chunk: exit $rc $(cat "$dir/err")"
# A LIST where a chunk should be: a corrupt value (exit 3), not a permission error.
cli del "$other" > /dev/null && cli rpush "$other" x > /dev/null
"$kvtool" inspect "$url" --key "$other" --verify > /dev/null 2> "$dir/err"; rc=$?
[[ $rc == 3 ]] && grep -q 'holds another type than a byte string' "$dir/err" || fail "a LIST: exit $rc $(cat "$dir/err")"
# A planted header: terminal escapes in its writer and namespace are
# printed as \xNN, and an index whose token span overflows int64 is said so.
python3 - "$dir/hostile" <<'PY'
import json, struct, sys
meta = {"kvstore_chunk_format": "kvstore-chunk/2", "kvstore_chunk_kind": "rows",
        "kvstore_chunk_namespace": "\x1b[31mns", "kvstore_chunk_index": "9223372036854775807",
        "kvstore_chunk_tokens": "16", "kvstore_chunk_token_ids": "", "kvstore_chunk_chain": "c",
        "kvstore_chunk_parent": "", "kvstore_chunk_layers": "", "kvstore_chunk_writer": "\x1b]0;pwned\x07evil"}
header = json.dumps({"__metadata__": {"1." + k: v for k, v in meta.items()}}).encode()
open(sys.argv[1], "wb").write(struct.pack("<Q", len(header)) + header)
PY
cli -x set "${prefix}hostile" < "$dir/hostile" > /dev/null
"$kvtool" inspect "$url" --key "${prefix}hostile" > "$dir/hostile.out" 2>&1; rc=$?
grep -q $'\x1b' "$dir/hostile.out" && fail "hostile strings printed raw: $(cat -v "$dir/hostile.out")"
grep -qF 'writer: \x1b]0;pwned\x07evil' "$dir/hostile.out" || fail "hostile writer: $(cat -v "$dir/hostile.out")"
grep -qF 'namespace: \x1b[31mns' "$dir/hostile.out" || fail "hostile namespace: $(cat -v "$dir/hostile.out")"
grep -q '^kind: rows, chunk 9223372036854775807: tokens beyond int64$' "$dir/hostile.out" ||
  fail "hostile index (exit $rc): $(cat -v "$dir/hostile.out")"
"$kvtool" inspect "$url" --key "${prefix}nope" > /dev/null 2> "$dir/err"; rc=$?
[[ $rc == 2 ]] || fail "missing key: exit $rc $(cat "$dir/err")"
"$kvtool" inspect "$url" > /dev/null 2> "$dir/err"; rc=$?
[[ $rc == 1 ]] && grep -q 'needs --key' "$dir/err" || fail "no --key: exit $rc $(cat "$dir/err")"
# An unsealed chunk dumped from Redis is a prompt-cache file (redis-cli --raw adds a newline).
cli --raw get "$pkey" | head -c -1 > "$dir/chunk.safetensors"
"$kvtool" verify "$dir/chunk.safetensors" > /dev/null || fail "dumped chunk does not verify"
"$kvtool" inspect "$dir/chunk.safetensors" | grep -q 'kvstore_chunk_format kvstore-chunk/2' || fail "dumped chunk inspect"
# Edited behind the tool's back: the header still reads, verification fails (3).
cli setrange "$pkey" $(($(cli strlen "$pkey") - 10)) garbage > /dev/null  # in the last tensor
env -u KVSTORE_SHARED_SECRET "$kvtool" inspect "$url" --key "$pkey" --verify > /dev/null 2> "$dir/err"; rc=$?
[[ $rc == 3 ]] && grep -Eq "^kvtool: $pkey: (the header|tensor '[0-9.]+'): XXH3-128 mismatch: expected " "$dir/err" ||
  fail "corrupted chunk: exit $rc $(cat "$dir/err")"
# An edit to a sealed chunk's ciphertext: the seal does not open (3).
cli setrange "$key" 100 garbage > /dev/null
"$kvtool" inspect "$url" --key "$key" --verify --secret cli-secret > /dev/null 2> "$dir/err"; rc=$?
[[ $rc == 3 ]] && grep -q "the seal does not verify" "$dir/err" || fail "corrupted sealed chunk: exit $rc $(cat "$dir/err")"

cli --scan --pattern "${prefix}*" | xargs -r -n 100 redis-cli -p "$port" -a "$password" --no-auth-warning unlink > /dev/null
if ((failures)); then echo "$failures failures"; exit 1; fi
echo "kvtool on a shared tier passed"
