#!/usr/bin/env bash
# End-to-end tests of the kvtool binary: output, exit codes, round trips.
#   kvtool_test.sh KVTOOL FIXTURES_DIR GOLDEN_DIR
set -uo pipefail
kvtool=$(realpath "$1") fixtures=$(realpath "$2") golden=$(realpath "$3")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
# write_st FILE HEADER_JSON DATA_BYTES: a safetensors file with that header and zero data.
write_st() {
  local n=${#2} hex i
  hex=$(printf '%016x' "$n")
  { for ((i = 14; i >= 0; i -= 2)); do printf "\\x${hex:i:2}"; done; printf '%s' "$2"; head -c "$3" /dev/zero; } > "$1"
}
expect_exit() {  # expect_exit CODE MESSAGE_SUBSTRING -- args...
  local want=$1 msg=$2; shift 3
  local out rc
  out=$("$kvtool" "$@" 2>&1); rc=$?
  [[ $rc == "$want" ]] || fail "kvtool $* exited $rc, want $want: $out"
  [[ -z $msg || $out == *"$msg"* ]] || fail "kvtool $* printed '$out', want '$msg'"
}

f16=$fixtures/mlx-lm/kvcache_f16_4l.safetensors

# Golden output (human and JSON) for several fixtures.
# (golden name: the fixture's path under fixtures/mlx-lm, '/' spelled '.')
for name in kvcache_f16_4l cachelist_kv_rotating cachelist_arrays_kv quantized_b4_g64 arrayscache_basic \
            mlx-lm-v0.31.3/arrayscache_basic; do
  g=${name//\//.}
  ( cd "$fixtures/mlx-lm" && "$kvtool" inspect "$name.safetensors" ) > "$tmp/$g.txt" || fail "inspect $name"
  ( cd "$fixtures/mlx-lm" && "$kvtool" inspect --json "$name.safetensors" ) > "$tmp/$g.json" || fail "inspect --json $name"
  diff -u "$golden/$g.txt" "$tmp/$g.txt" || fail "inspect $name differs from golden"
  diff -u "$golden/$g.json" "$tmp/$g.json" || fail "inspect --json $name differs from golden"
done

# mlx-lm 0.32's layout: a fixture converted for it is inspected as such (golden), says which
# mlx-lm loads it, converts back with the same content, and trims keep it.
"$kvtool" convert "$fixtures/mlx-lm/cachelist_kv_rotating.safetensors" -o "$tmp/mlx-lm-0.32.cachelist_kv_rotating.safetensors" \
  --to mlx-lm-0.32 -q || fail "convert --to mlx-lm-0.32"
( cd "$tmp" && "$kvtool" inspect mlx-lm-0.32.cachelist_kv_rotating.safetensors ) > "$tmp/m032.txt" || fail "inspect 0.32"
( cd "$tmp" && "$kvtool" inspect --json mlx-lm-0.32.cachelist_kv_rotating.safetensors ) > "$tmp/m032.json" || fail "inspect --json 0.32"
diff -u "$golden/mlx-lm-0.32.cachelist_kv_rotating.txt" "$tmp/m032.txt" || fail "inspect of a 0.32 file differs from golden"
diff -u "$golden/mlx-lm-0.32.cachelist_kv_rotating.json" "$tmp/m032.json" || fail "inspect --json of a 0.32 file differs from golden"
expect_exit 0 "" -- convert "$tmp/mlx-lm-0.32.cachelist_kv_rotating.safetensors" -o "$tmp/back.safetensors" --to mlx-lm -q
out=$("$kvtool" diff "$fixtures/mlx-lm/cachelist_kv_rotating.safetensors" "$tmp/back.safetensors" --max-error 0) ||
  fail "0.32 round trip: diff"
[[ $out == *"identical, max abs error 0"* && $out != *"meta state differs"* ]] || fail "0.32 round trip changed values: $out"
expect_exit 0 "" -- trim "$fixtures/mlx-lm/kvcache_f16_4l.safetensors" -n 2 -o "$tmp/t032.safetensors" --to mlx-lm-0.32 -q
"$kvtool" inspect --json "$tmp/t032.safetensors" | grep -q '"layout": "mlx-lm-0.32"' || fail "trim --to mlx-lm-0.32"
expect_exit 0 "" -- trim "$tmp/t032.safetensors" -n 2 -o "$tmp/t032b.safetensors" -q
"$kvtool" inspect --json "$tmp/t032b.safetensors" | grep -q '"layout": "mlx-lm-0.32"' || fail "trim keeps mlx-lm-0.32"
"$kvtool" inspect "$fixtures/mlx-lm/kvcache_f16_no_user_metadata.safetensors" |
  grep -q '^warning: mlx-lm >= 0.32 would load this file as an empty cache' || fail "inspect: no [] warning"
out=$("$kvtool" verify "$fixtures/mlx-lm/kvcache_f16_no_user_metadata.safetensors" 2>&1)  # exit 4: no digests
[[ $out == *"kvtool: warning: "*"mlx-lm >= 0.32 would load this file as an empty cache"* ]] || fail "verify: no [] warning"

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

# Header-only validation: inspect prints all it can read, then names the first
# impossible layer and its rule (exit 3; 4 for a class kvstore does not know);
# a re-writing or container-only convert refuses the file too.
write_st "$tmp/cls.safetensors" '{"__metadata__":{"0.0":"","2.0":"NoSuchCache"},"0.0":{"dtype":"F16","shape":[1],"data_offsets":[0,2]}}' 2
# rot_header KEEP MAX_SIZE OFFSET IDX [EXTRA_METADATA]: a RotatingKVCache over F16[1, 1, 4, 2] keys/values.
rot_header() {
  printf '{"__metadata__":{"0.0.0":"%s","0.0.1":"%s","0.0.2":"%s","0.0.3":"%s",%s"2.0":"RotatingKVCache"},%s}' \
    "$1" "$2" "$3" "$4" "${5:-}" '"0.0":{"dtype":"F16","shape":[1,1,4,2],"data_offsets":[0,16]},"0.1":{"dtype":"F16","shape":[1,1,4,2],"data_offsets":[16,32]}'
}
keep_rule="layer 0 (RotatingKVCache): RotatingKVCache: meta_state needs max_size >= 1 and 0 <= keep <= max_size, got keep 9, max_size 4"
write_st "$tmp/keep.safetensors" "$(rot_header 9 4 4 4)" 32
out=$("$kvtool" inspect "$tmp/keep.safetensors" 2>&1); rc=$?
[[ $rc == 3 ]] || fail "inspect of an impossible layer exited $rc"
[[ $out == *'0     RotatingKVCache               4  F16[1, 1, 4, 2] x2'* ]] || fail "inspect did not print the table first: $out"
[[ $out == *"error: $keep_rule"* && $out == *"kvtool: $tmp/keep.safetensors: $keep_rule" ]] || fail "inspect: $out"
out=$("$kvtool" inspect --json "$tmp/keep.safetensors" 2> /dev/null); rc=$?
[[ $rc == 3 && $out == *'"valid": false'* && $out == *'"errors": ['*'"RotatingKVCache: meta_state needs max_size >= 1'* ]] ||
  fail "inspect --json of an impossible layer ($rc): $out"
"$kvtool" inspect --json "$f16" | grep '"valid": true' > /dev/null || fail "inspect --json valid"
expect_exit 4 "layer 0 (NoSuchCache): unknown cache class \"NoSuchCache\"" -- inspect "$tmp/cls.safetensors"
out=$("$kvtool" inspect --json "$tmp/cls.safetensors" 2> /dev/null)
[[ $out == *'"valid": true'*'"unsupported": "unknown cache class \"NoSuchCache\""'* ]] || fail "inspect --json of an unknown class: $out"
expect_exit 3 "$keep_rule" -- convert "$tmp/keep.safetensors" -o "$tmp/x.safetensors" --integrity
expect_exit 3 "$keep_rule" -- convert "$tmp/keep.safetensors" -o "$tmp/x.safetensors" --compress
[[ ! -e $tmp/x.safetensors ]] || fail "a refused conversion left an output"
# One file per kind of rule (the library's tests cover every rule).
while IFS='|' read -r header message; do
  write_st "$tmp/h.safetensors" "$header" 32
  expect_exit 3 "layer 0 ($message" -- inspect "$tmp/h.safetensors"
done << 'HOSTILE'
{"__metadata__":{"0.0.0":"0","0.0.1":"abc","0.0.2":"4","0.0.3":"4","2.0":"RotatingKVCache"},"0.0":{"dtype":"F16","shape":[1,1,4,2],"data_offsets":[0,16]},"0.1":{"dtype":"F16","shape":[1,1,4,2],"data_offsets":[16,32]}}|RotatingKVCache): RotatingKVCache: meta_state field max_size "abc" is not an integer
{"__metadata__":{"0.0.0":"0","0.0.1":"100000000000000000000","0.0.2":"4","0.0.3":"4","2.0":"RotatingKVCache"},"0.0":{"dtype":"F16","shape":[1,1,4,2],"data_offsets":[0,16]},"0.1":{"dtype":"F16","shape":[1,1,4,2],"data_offsets":[16,32]}}|RotatingKVCache): RotatingKVCache: meta_state field max_size "100000000000000000000" is not an integer in the int64 range
{"__metadata__":{"0.0.0":"0","0.0.1":"4","0.0.2":"4","0.0.3":"5","2.0":"RotatingKVCache"},"0.0":{"dtype":"F16","shape":[1,1,4,2],"data_offsets":[0,16]},"0.1":{"dtype":"F16","shape":[1,1,4,2],"data_offsets":[16,32]}}|RotatingKVCache): RotatingKVCache: meta_state offset 4 / _idx 5 out of range for 4 buffered rows
{"__metadata__":{"0.0":"","2.0":"KVCache"},"0.0":{"dtype":"F16","shape":[1,4,4],"data_offsets":[0,32]}}|KVCache): KVCache: state must be a list of 2 arrays (keys, values), got 1 entries
{"__metadata__":{"0.0":"","2.0":"KVCache"},"0.0":{"dtype":"F16","shape":[1,2,4],"data_offsets":[0,16]},"0.1":{"dtype":"F16","shape":[1,1,4,2],"data_offsets":[16,32]}}|KVCache): KVCache: keys F16[1, 2, 4] and values F16[1, 1, 4, 2] must have rank 4 [B, H, S, D]
{"__metadata__":{"0.0":"","2.0":"KVCache"},"0.0":{"dtype":"F16","shape":[1,1,4,2],"data_offsets":[0,16]},"0.1":{"dtype":"F16","shape":[1,2,2,2],"data_offsets":[16,32]}}|KVCache): KVCache: keys F16[1, 1, 4, 2] and values F16[1, 2, 2, 2] disagree in dimension 1
{"__metadata__":{"0.0.0":"2","0.0.1":"64","0.0.2":"7","2.0":"QuantizedKVCache"},"0.0.0":{"dtype":"U32","shape":[1,1,2,1],"data_offsets":[0,8]},"0.0.1":{"dtype":"F16","shape":[1,1,2,1],"data_offsets":[8,12]},"0.0.2":{"dtype":"F16","shape":[1,1,2,1],"data_offsets":[12,16]},"0.1.0":{"dtype":"U32","shape":[1,1,2,1],"data_offsets":[16,24]},"0.1.1":{"dtype":"F16","shape":[1,1,2,1],"data_offsets":[24,28]},"0.1.2":{"dtype":"F16","shape":[1,1,2,1],"data_offsets":[28,32]}}|QuantizedKVCache): QuantizedKVCache: meta_state bits 7 / group size 64 are not supported
HOSTILE
# verify checks the structure as well as the digests: digests that match do
# not make an impossible layer loadable. with_digests KEEP FILE writes
# rot_header with correct kvstore digests.
with_digests() {
  local canonical hd td
  canonical='{"metadata":{"0.0.0":"'$1'","0.0.1":"4","0.0.2":"4","0.0.3":"4","1.kvstore_format":"kvstore/1","2.0":"RotatingKVCache"},"tensors":{"0.0":{"dtype":"F16","shape":[1,1,4,2]},"0.1":{"dtype":"F16","shape":[1,1,4,2]}}}'
  hd=$(printf '%s' "$canonical" | sha256sum | cut -c1-64)
  td=$(head -c 16 /dev/zero | sha256sum | cut -c1-64)
  write_st "$2" "$(rot_header "$1" 4 4 4 '"1.kvstore_format":"kvstore/1","1.kvstore_sha256_header":"'"$hd"'","1.kvstore_sha256_tensors":"{\"0.0\":\"'"$td"'\",\"0.1\":\"'"$td"'\"}",')" 32
}
with_digests 1 "$tmp/good-digests.safetensors"
expect_exit 0 "OK (1 layers well formed, 32 B verified)" -- verify "$tmp/good-digests.safetensors"
with_digests 9 "$tmp/bad-layer.safetensors"
expect_exit 3 "kvtool: $tmp/bad-layer.safetensors: $keep_rule" -- verify "$tmp/bad-layer.safetensors"
[[ $("$kvtool" verify "$tmp/bad-layer.safetensors" 2>&1) != *"SHA-256 mismatch"* ]] || fail "the digests of bad-layer do not match"
# Without digests, verify reports the structure first: 3 when broken, 4 only for the missing digests.
expect_exit 3 "$keep_rule" -- verify "$tmp/keep.safetensors"
out=$("$kvtool" verify "$f16" 2>&1); rc=$?
[[ $rc == 4 && $out == *"kvcache_f16_4l.safetensors: 4 layers well formed"*"carries no digests"* ]] || fail "verify without digests ($rc): $out"
expect_exit 4 "0 layers well formed, 1 that kvstore cannot load not checked" -- verify "$tmp/cls.safetensors"

# Integrity: add digests, verify, corrupt one tensor byte, verify names it.
expect_exit 0 "" -- convert "$f16" -o "$tmp/d.safetensors" --integrity -q
expect_exit 0 "OK" -- verify "$tmp/d.safetensors"
cp "$tmp/d.safetensors" "$tmp/bad.safetensors"
size=$(stat -c %s "$tmp/bad.safetensors")
printf '\xff' | dd of="$tmp/bad.safetensors" bs=1 seek=$((size - 10)) conv=notrunc status=none
expect_exit 3 "$tmp/bad.safetensors: tensor '3.1': SHA-256 mismatch: expected " -- verify "$tmp/bad.safetensors"
expect_exit 3 "$tmp/bad.safetensors: tensor '3.1': SHA-256 mismatch: expected " -- inspect --verify "$tmp/bad.safetensors"

# Unknown layout (a hand-made header: "0.a" is not an mlx-lm meta key).
write_st "$tmp/v2.safetensors" '{"__metadata__":{"0.a":"x","1.0":"KVCache"},"0.0":{"dtype":"F16","shape":[1],"data_offsets":[0,2]}}' 2
expect_exit 4 "layout" -- inspect "$tmp/v2.safetensors"
expect_exit 4 "unknown cache class" -- convert "$tmp/cls.safetensors" -o "$tmp/x.safetensors" --integrity

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
# --dtype takes any spelling the library knows (kvstore::ParseDTypeAlias), of the dtypes a cast writes.
expect_exit 0 "may round values" -- convert "$f16" -o "$tmp/bf.safetensors" --dtype bfloat16
"$kvtool" inspect --json "$tmp/bf.safetensors" | grep '"dtype": "BF16"' > /dev/null || fail "--dtype bfloat16"
expect_exit 1 "--dtype must be f16, bf16 or f32" -- convert "$f16" -o "$tmp/bad.safetensors" --dtype f64

# mlx-lm -> mlx-swift-lm -> mlx-lm keeps every tensor byte (diff --max-error 0
# compares values; identical layers are reported as such).
for name in kvcache_f16_4l cachelist_kv_rotating cachelist_arrays_kv quantized_b4_g64 arrayscache_basic; do
  src=$fixtures/mlx-lm/$name.safetensors
  expect_exit 0 "" -- convert "$src" -o "$tmp/$name.swift" --to mlx-swift-lm -q
  "$kvtool" inspect --json "$tmp/$name.swift" | grep '"layout": "mlx-swift-lm"' > /dev/null || fail "$name: not swift"
  expect_exit 0 "" -- convert "$tmp/$name.swift" -o "$tmp/$name.back" --to mlx-lm -q
  "$kvtool" inspect --json "$tmp/$name.back" | grep '"layout": "mlx-lm"' > /dev/null || fail "$name: not mlx-lm"
  out=$("$kvtool" diff "$src" "$tmp/$name.back" --max-error 0) || fail "$name: diff after the round trip"
  [[ $out == *"identical, max abs error 0"* && $out != *"meta state differs"* ]] || fail "$name: round trip changed values: $out"
done
# Golden output for a Swift-layout file (metas as Swift stores them).
( cd "$tmp" && cp cachelist_arrays_kv.swift cachelist_arrays_kv.swift.safetensors &&
  "$kvtool" inspect cachelist_arrays_kv.swift.safetensors > swift.txt &&
  "$kvtool" inspect --json cachelist_arrays_kv.swift.safetensors > swift.json ) || fail "inspect swift"
diff -u "$golden/cachelist_arrays_kv.swift.txt" "$tmp/swift.txt" || fail "inspect of a Swift file differs from golden"
diff -u "$golden/cachelist_arrays_kv.swift.json" "$tmp/swift.json" || fail "inspect --json of a Swift file differs from golden"
expect_exit 4 "no mlx-swift-lm equivalent" -- convert "$fixtures/mlx-lm/batch_kvcache.safetensors" -o "$tmp/b.swift" --to mlx-swift-lm
expect_exit 0 "" -- trim "$tmp/kvcache_f16_4l.swift" -n 5 -o "$tmp/ts.swift" -q
"$kvtool" inspect --json "$tmp/ts.swift" | grep '"layout": "mlx-swift-lm"' > /dev/null || fail "trim changed the layout"
"$kvtool" inspect --json "$tmp/ts.swift" | grep '"offset": 32' > /dev/null || fail "trim of a Swift file"

# ArraysCache layouts of the current mlx-lm and of its 0.31 release: inspect
# names them, a conversion keeps its input's unless --to names the other, and
# the release's fixture and the current one convert into each other's layers.
release=$fixtures/mlx-lm/mlx-lm-v0.31.3/arrayscache_basic.safetensors
current=$fixtures/mlx-lm/arrayscache_basic.safetensors
"$kvtool" inspect "$release" | grep "layout mlx-lm-0.31," > /dev/null || fail "inspect of a 0.31 file"
expect_exit 0 "(3.3 KiB, mlx-lm-0.31)" -- convert "$release" -o "$tmp/r.safetensors" --integrity
"$kvtool" inspect --json "$tmp/r.safetensors" | grep '"layout": "mlx-lm-0.31"' > /dev/null || fail "convert changed the layout"
expect_exit 0 "mlx-lm)" -- convert "$release" -o "$tmp/c.safetensors" --to mlx-lm
expect_exit 0 "mlx-lm-0.31)" -- convert "$current" -o "$tmp/r2.safetensors" --to mlx-lm-0.31
for pair in "$release:$tmp/r2.safetensors" "$current:$tmp/c.safetensors"; do
  out=$("$kvtool" diff "${pair%%:*}" "${pair##*:}" --max-error 0) || fail "diff $pair"
  [[ $out == *"1 identical, max abs error 0"* ]] || fail "ArraysCache layouts do not convert into each other: $out"
done
"$kvtool" inspect "$tmp/r2.safetensors" --tensors | grep -E '^ +0\.1 +F32 +\[1, 4, 16, 8\]' > /dev/null || fail "0.31 tensor names"
expect_exit 0 "" -- convert "$fixtures/mlx-lm/cachelist_arrays_kv.safetensors" -o "$tmp/cl.safetensors" --to mlx-lm-0.31 -q
"$kvtool" inspect --json "$tmp/cl.safetensors" | grep '"name": "0.0.1"' > /dev/null || fail "CacheList child in the 0.31 layout"
expect_exit 1 "--to must be mlx-lm-0.32, mlx-lm-0.31, mlx-lm, mlx-swift-lm or llama.cpp" -- convert "$current" -o "$tmp/x.safetensors" --to mlx-lm-legacy
# The 0.31 layout has no room for an ArraysCache's left padding.
write_st "$tmp/padded.safetensors" '{"__metadata__":{"0.0":"","2.0":"ArraysCache"},"0.0.0":{"dtype":"F32","shape":[1,2],"data_offsets":[0,8]},"0.1":{"dtype":"I32","shape":[1],"data_offsets":[8,12]},"0.2":{"dtype":"F32","shape":[0],"data_offsets":[12,12]}}' 12
expect_exit 4 "layer 0 (ArraysCache) cannot be saved: ArraysCache left_padding I32[1] cannot be stored in mlx-lm 0.31's layout" \
  -- convert "$tmp/padded.safetensors" -o "$tmp/x.safetensors" --to mlx-lm-0.31
expect_exit 0 "" -- convert "$tmp/padded.safetensors" -o "$tmp/padded-digests.safetensors" --integrity -q

# Byte-plane codec: a byte-exact container, refused loudly once `zstd -d` unpacks it.
expect_exit 0 "" -- convert "$f16" -o "$tmp/bp.safetensors" --compress --codec byteplane -q
"$kvtool" inspect "$tmp/bp.safetensors" | grep "safetensors+zstd-byteplane" > /dev/null || fail "byteplane inspect"
expect_exit 0 "" -- convert "$tmp/bp.safetensors" -o "$tmp/bp.plain" --decompress -q
cmp "$f16" "$tmp/bp.plain" || fail "byteplane round trip is not byte-identical"
# The codec's name as inspect prints it is a --codec too (kvstore::ParseZstdCodec), at the same default level.
expect_exit 0 "" -- convert "$f16" -o "$tmp/bp2.safetensors" --codec zstd-byteplane -q
cmp "$tmp/bp.safetensors" "$tmp/bp2.safetensors" || fail "--codec zstd-byteplane differs from --codec byteplane"
expect_exit 1 "--codec must be zstd or byteplane" -- convert "$f16" -o "$tmp/bad.safetensors" --codec lz4
if command -v zstd >/dev/null; then
  zstd -q -d -c "$tmp/bp.safetensors" > "$tmp/bp.zstd-d"
  [[ $(head -c 4 "$tmp/bp.zstd-d") == KVBP ]] || fail "zstd -d of a byteplane file does not start with its magic"
  expect_exit 3 "not a safetensors file: it looks like a byte-plane compressed prompt cache unpacked by \`zstd -d\`" \
    -- inspect "$tmp/bp.zstd-d"
fi

# diff: a quantized conversion differs, within a bound; JSON has the figures.
expect_exit 3 "beyond --max-error" -- diff "$f16" "$tmp/q.safetensors" --max-error 0
expect_exit 0 "4 layers compared" -- diff "$f16" "$tmp/q.safetensors" --max-error 1
"$kvtool" diff --json "$f16" "$tmp/q.safetensors" | grep '"max_abs_error"' > /dev/null || fail "diff --json"
expect_exit 3 "layers" -- diff "$f16" "$fixtures/mlx-lm/rotating_wrapped.safetensors"

# ls: cache files of a directory, the rest counted.
mkdir "$tmp/dir"
cp "$f16" "$tmp/bp.safetensors" "$tmp/dir/"
echo hello > "$tmp/dir/notes.txt"
out=$("$kvtool" ls "$tmp/dir") || fail "ls"
[[ $out == *"bp.safetensors"*"safetensors+zstd-byteplane"* && $out == *"kvcache_f16_4l.safetensors"* ]] || fail "ls rows: $out"
[[ $out == *"2 cache files, 1 other file (--all lists them)"* ]] || fail "ls summary: $out"
"$kvtool" ls --json "$tmp/dir" | grep '"name": "notes.txt"' > /dev/null || fail "ls --json skipped"

# Corrupt input: a conversion that re-writes checks the input's digests.
expect_exit 3 "tensor" -- convert "$tmp/bad.safetensors" -o "$tmp/x.safetensors" --to mlx-swift-lm
[[ ! -e $tmp/x.safetensors ]] || fail "a failed conversion left an output"

# No progress bar drawn when stderr is not a terminal.
"$kvtool" convert "$f16" -o "$tmp/np.safetensors" --integrity 2> "$tmp/err" || fail "convert"
grep -q $'\r' "$tmp/err" && fail "progress drawn into a pipe"
[[ $(cat "$tmp/err") == "kvtool: wrote "* ]] || fail "convert summary: $(cat "$tmp/err")"

# On a terminal the bar is drawn (at least its final state) and erased before
# the summary, which therefore starts its own line.
if command -v script > /dev/null; then
  script -qec "'$kvtool' convert '$f16' -o '$tmp/tty.safetensors' --integrity" /dev/null > "$tmp/tty" < /dev/null ||
    fail "convert on a terminal"
  tty=$(cat "$tmp/tty")
  [[ $tty == *"convert ["*"100%"* ]] || fail "no progress bar on a terminal: $tty"
  [[ $tty == *$'\r\e[Kkvtool: wrote '* ]] || fail "the summary runs on after the progress bar: $(od -c "$tmp/tty" | tail -5)"
else
  echo "SKIP: progress bar on a terminal (no 'script' command)"
fi

# "~" in a path the shell left alone (quoted, after "--output=") is the home
# directory, never a directory named "~".
mkdir -p "$tmp/home" "$tmp/cwd"
cp "$f16" "$tmp/home/in.safetensors"
( cd "$tmp/cwd" && HOME="$tmp/home" "$kvtool" inspect '~/in.safetensors' > /dev/null &&
  HOME="$tmp/home" "$kvtool" convert '~/in.safetensors' --output='~/out.safetensors' --compress -q &&
  HOME="$tmp/home" "$kvtool" ls '~' > /dev/null ) || fail "paths starting with ~"
[[ -f $tmp/home/out.safetensors && ! -e $tmp/cwd/~ ]] || fail "~ not expanded: $(ls -A "$tmp/cwd")"
expect_exit 1 'no user "no-such-user-kvstore"' -- inspect '~no-such-user-kvstore/x.safetensors'

"$kvtool" --version | grep "kvtool" > /dev/null || fail "--version"
"$kvtool" --help > /dev/null || fail "--help"

if ((failures)); then echo "$failures failures"; exit 1; fi
echo "kvtool tests passed"
