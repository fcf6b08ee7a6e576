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

# Unknown layout (a hand-made header: "0.a" is not an mlx-lm meta key).
write_st "$tmp/v2.safetensors" '{"__metadata__":{"0.a":"x","1.0":"KVCache"},"0.0":{"dtype":"F16","shape":[1],"data_offsets":[0,2]}}' 2
expect_exit 4 "layout" -- inspect "$tmp/v2.safetensors"
write_st "$tmp/cls.safetensors" '{"__metadata__":{"0.0":"","2.0":"NoSuchCache"},"0.0":{"dtype":"F16","shape":[1],"data_offsets":[0,2]}}' 2
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

# Byte-plane codec: a byte-exact container, refused loudly once `zstd -d` unpacks it.
expect_exit 0 "" -- convert "$f16" -o "$tmp/bp.safetensors" --compress --codec byteplane -q
"$kvtool" inspect "$tmp/bp.safetensors" | grep "safetensors+zstd-byteplane" > /dev/null || fail "byteplane inspect"
expect_exit 0 "" -- convert "$tmp/bp.safetensors" -o "$tmp/bp.plain" --decompress -q
cmp "$f16" "$tmp/bp.plain" || fail "byteplane round trip is not byte-identical"
if command -v zstd >/dev/null; then
  zstd -q -d -c "$tmp/bp.safetensors" > "$tmp/bp.zstd-d"
  [[ $(head -c 4 "$tmp/bp.zstd-d") == KVBP ]] || fail "zstd -d of a byteplane file does not start with its magic"
  expect_exit 3 "H2" -- inspect "$tmp/bp.zstd-d"
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
[[ $out == *"2 cache files, 1 other files"* ]] || fail "ls summary: $out"
"$kvtool" ls --json "$tmp/dir" | grep '"name": "notes.txt"' > /dev/null || fail "ls --json skipped"

# Corrupt input: a conversion that re-writes checks the input's digests.
expect_exit 3 "tensor" -- convert "$tmp/bad.safetensors" -o "$tmp/x.safetensors" --to mlx-swift-lm
[[ ! -e $tmp/x.safetensors ]] || fail "a failed conversion left an output"

# No progress bar drawn when stderr is not a terminal.
"$kvtool" convert "$f16" -o "$tmp/np.safetensors" --integrity 2> "$tmp/err" || fail "convert"
grep -q $'\r' "$tmp/err" && fail "progress drawn into a pipe"
[[ $(cat "$tmp/err") == "kvtool: wrote "* ]] || fail "convert summary: $(cat "$tmp/err")"

"$kvtool" --version | grep "kvtool" > /dev/null || fail "--version"
"$kvtool" --help > /dev/null || fail "--help"

if ((failures)); then echo "$failures failures"; exit 1; fi
echo "kvtool tests passed"
