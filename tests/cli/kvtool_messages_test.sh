#!/usr/bin/env bash
# kvtool's messages and verdicts: diff of caches that do not line up.
#   kvtool_messages_test.sh KVTOOL FIXTURES_DIR
set -uo pipefail
kvtool=$(realpath "$1") fixtures=$(realpath "$2")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
# run ARGS...: sets $out (stdout), $err (stderr) and $rc.
run() {
  out=$("$kvtool" "$@" 2> "$tmp/stderr"); rc=$?
  err=$(cat "$tmp/stderr")
}
f16=$fixtures/mlx-lm/kvcache_f16_4l.safetensors

# ---- diff: caches of different token counts are not comparable, never identical.
"$kvtool" trim "$f16" -n 17 -o "$tmp/short.safetensors" -q || fail "trim"
run diff "$f16" "$tmp/short.safetensors"
[[ $rc == 3 ]] || fail "diff of different token counts exited $rc"
[[ $out == *"0     KVCache              KVCache                         -            -  not comparable: state.0: F16[1, 2, 37, 64] vs F16[1, 2, 20, 64]"* ]] ||
  fail "diff row: $out"
[[ $out == *$'\n'"4 layers compared, 0 identical, 4 not comparable" ]] || fail "diff summary: $out"
[[ $err == "kvtool: $f16 and $tmp/short.safetensors do not line up: 4 of 4 layers are not comparable (they hold 37 and 20 tokens)" ]] ||
  fail "diff error: $err"
run diff --json "$f16" "$tmp/short.safetensors"
[[ $rc == 3 ]] || fail "diff --json of different token counts exited $rc"
python3 - "$out" << 'PY' || fail "diff --json: $out"
import json, sys
d = json.loads(sys.argv[1])
assert d["comparable"] is False and d["identical_layers"] == 0 and d["not_comparable_layers"] == 4, d
assert d["tokens_a"] == 37 and d["tokens_b"] == 20 and d["max_abs_error"] is None, d
for layer in d["layers"]:
    assert layer["comparable"] is False and layer["identical"] is False, layer
    assert layer["max_abs_error"] is None and layer["values"] is None, layer
PY
# Comparable files keep their figures; the same file is identical.
run diff --json "$f16" "$f16"
[[ $rc == 0 && $out == *'"comparable": true'* && $out == *'"identical_layers": 4'* && $out == *'"max_abs_error": 0'* ]] ||
  fail "diff --json of a file with itself ($rc): $out"

if ((failures)); then echo "$failures failures"; exit 1; fi
echo "kvtool message tests passed"
