#!/usr/bin/env bash
# End-to-end tests of the kvtool binary: output, exit codes, round trips.
#   kvtool_test.sh KVTOOL FIXTURES_DIR GOLDEN_DIR
set -uo pipefail
kvtool=$(realpath "$1") fixtures=$(realpath "$2") golden=$(realpath "$3")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
expect_exit() {  # expect_exit CODE MESSAGE_SUBSTRING -- args...
  local want=$1 msg=$2; shift 3
  local out rc
  out=$("$kvtool" "$@" 2>&1); rc=$?
  [[ $rc == "$want" ]] || fail "kvtool $* exited $rc, want $want: $out"
  [[ -z $msg || $out == *"$msg"* ]] || fail "kvtool $* printed '$out', want '$msg'"
}

f16=$fixtures/mlx-lm/kvcache_f16_4l.safetensors

# Golden output (human and JSON) for several fixtures.
for name in kvcache_f16_4l cachelist_kv_rotating quantized_b4_g64 arrayscache_basic; do
  ( cd "$fixtures/mlx-lm" && "$kvtool" inspect "$name.safetensors" ) > "$tmp/$name.txt" || fail "inspect $name"
  ( cd "$fixtures/mlx-lm" && "$kvtool" inspect --json "$name.safetensors" ) > "$tmp/$name.json" || fail "inspect --json $name"
  diff -u "$golden/$name.txt" "$tmp/$name.txt" || fail "inspect $name differs from golden"
  diff -u "$golden/$name.json" "$tmp/$name.json" || fail "inspect --json $name differs from golden"
done

# Exit codes and messages for every error class.
expect_exit 2 "does-not-exist" -- inspect "$tmp/does-not-exist.safetensors"
printf 'this is not a safetensors file at all' > "$tmp/text.safetensors"
expect_exit 3 "safetensors H2" -- inspect "$tmp/text.safetensors"
head -c 1000 "$f16" > "$tmp/truncated.safetensors"
expect_exit 3 "safetensors D3" -- inspect "$tmp/truncated.safetensors"
expect_exit 1 "" -- inspect
expect_exit 1 "" -- frobnicate
expect_exit 1 "" -- trim "$f16" -o "$tmp/x.safetensors"
expect_exit 4 "no digests" -- verify "$f16"
expect_exit 4 "not trimmable" -- trim "$fixtures/mlx-lm/arrayscache_basic.safetensors" -n 1 -o "$tmp/t.safetensors"

# Integrity: add digests, verify, corrupt one tensor byte, verify names it.
expect_exit 0 "" -- convert "$f16" -o "$tmp/d.safetensors" --integrity -q
expect_exit 0 "OK" -- verify "$tmp/d.safetensors"
cp "$tmp/d.safetensors" "$tmp/bad.safetensors"
size=$(stat -c %s "$tmp/bad.safetensors")
printf '\xff' | dd of="$tmp/bad.safetensors" bs=1 seek=$((size - 10)) conv=notrunc status=none
expect_exit 3 "digest mismatch in tensor" -- verify "$tmp/bad.safetensors"
expect_exit 3 "verification failed" -- inspect --verify "$tmp/bad.safetensors"

# Unknown layout.
python3 - "$tmp/v2.safetensors" <<'PY' || fail "python"
import json, struct, sys
h = json.dumps({"__metadata__": {"0.a": "x", "1.0": "KVCache"}, "0.0": {"dtype": "F16", "shape": [1], "data_offsets": [0, 2]}}).encode()
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + b"\0\0")
PY
expect_exit 4 "layout" -- inspect "$tmp/v2.safetensors"

# convert --compress then --decompress is byte-identical; zstd -d agrees.
expect_exit 0 "" -- convert "$f16" -o "$tmp/c.safetensors" --compress -q
"$kvtool" inspect "$tmp/c.safetensors" | grep "safetensors+zstd" > /dev/null || fail "compressed inspect"
expect_exit 0 "" -- convert "$tmp/c.safetensors" -o "$tmp/p.safetensors" --decompress -q
cmp "$f16" "$tmp/p.safetensors" || fail "compress/decompress round trip is not byte-identical"
if command -v zstd >/dev/null; then
  zstd -q -d -c "$tmp/c.safetensors" > "$tmp/z.safetensors" && cmp "$f16" "$tmp/z.safetensors" || fail "zstd -d"
fi

# In-place output (-o equal to the input).
cp "$f16" "$tmp/inplace.safetensors"
expect_exit 0 "" -- convert "$tmp/inplace.safetensors" -o "$tmp/inplace.safetensors" --integrity -q
expect_exit 0 "OK" -- verify "$tmp/inplace.safetensors"

# trim -n and --keep.
expect_exit 0 "" -- trim "$f16" -n 5 -o "$tmp/t.safetensors" -q
"$kvtool" inspect --json "$tmp/t.safetensors" | grep '"offset": 32' > /dev/null || fail "trim -n 5 did not leave 32 tokens"
expect_exit 0 "" -- trim "$tmp/t.safetensors" --keep 10 -o "$tmp/t.safetensors" -q
"$kvtool" inspect --json "$tmp/t.safetensors" | grep '"offset": 10' > /dev/null || fail "trim --keep 10"
expect_exit 0 "OK" -- verify "$tmp/t.safetensors"

# Quantize / dequantize / dtype conversions.
expect_exit 0 "loses precision" -- convert "$f16" -o "$tmp/q.safetensors" --quantize 4:64
"$kvtool" inspect --json "$tmp/q.safetensors" | grep '"class": "QuantizedKVCache"' > /dev/null || fail "--quantize"
expect_exit 0 "" -- convert "$tmp/q.safetensors" -o "$tmp/dq.safetensors" --dequantize --dtype f32 -q
"$kvtool" inspect --json "$tmp/dq.safetensors" | grep '"dtype": "F32"' > /dev/null || fail "--dequantize --dtype f32"
expect_exit 1 "--quantize takes" -- convert "$f16" -o "$tmp/bad.safetensors" --quantize 7

"$kvtool" --version | grep "kvtool" > /dev/null || fail "--version"
"$kvtool" --help > /dev/null || fail "--help"

if ((failures)); then echo "$failures failures"; exit 1; fi
echo "kvtool tests passed"
