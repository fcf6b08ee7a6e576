#!/usr/bin/env bash
# kvtool on llama.cpp sequence-state files: inspect (golden output), convert
# both ways on every fixture file, exact round trips, and every refusal's
# exit code and message.
#   kvtool_llama_test.sh KVTOOL FIXTURES_DIR GOLDEN_DIR
set -uo pipefail
kvtool=$(realpath "$1") fixtures=$(realpath "$2")/llama.cpp golden=$(realpath "$3")
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
poke() {  # poke FILE OFFSET BYTE_ESCAPE: overwrite one byte
  printf "$3" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none
}
# The structure kvtool reports, without the path.
structure() { "$kvtool" inspect --json "$1" | grep -v '"path"'; }

# Golden inspect output (human and JSON) for a -np 2 slot file and a transposed-V file.
for name in llama_f32_d16/slot_np2.bin qwen2_bf16_d32/seq_fa0.ggsq; do
  base=$(echo "$name" | tr / _)
  ( cd "$fixtures" && "$kvtool" inspect "$name" ) > "$tmp/$base.txt" || fail "inspect $name"
  ( cd "$fixtures" && "$kvtool" inspect --json "$name" ) > "$tmp/$base.json" || fail "inspect --json $name"
  diff -u "$golden/llama_$base.txt" "$tmp/$base.txt" || fail "inspect $name differs from golden"
  diff -u "$golden/llama_$base.json" "$tmp/$base.json" || fail "inspect --json $name differs from golden"
done

# Every llama.cpp file of every case: to mlx-lm and back gives the same bytes
# (F16 kept), with the model from config.json or from the GGUF; from mlx-lm's
# own cache, the server settings of that file give its exact structure.
files=0
for f in "$fixtures"/*/*.ggsq "$fixtures"/*/*.bin; do
  [[ -e $f ]] || continue
  files=$((files + 1))
  case_dir=$(dirname "$f") name=$(basename "$f")
  for model in "$case_dir/model" "$case_dir/model/model.gguf"; do
    expect_exit 0 "" -- convert "$f" -o "$tmp/m.safetensors" --model "$model" --dtype f16 -q
    expect_exit 0 "" -- convert "$tmp/m.safetensors" -o "$tmp/back.ggsq" --to llama.cpp --model "$model" -q
    cmp -s "$f" "$tmp/back.ggsq" || fail "$name via mlx-lm ($model) is not byte-identical"
  done
  settings=$(structure "$f" | tr -d ' \n')
  n_stream=$(echo "$settings" | grep -o '"n_stream":[0-9]*' | cut -d: -f2)
  stream=0
  [[ $settings == *'"index":1,"cells":20'* ]] && stream=1
  fa=on
  [[ $settings == *'"v_trans":1'* ]] && fa=off
  expect_exit 0 "" -- convert "$case_dir/mlx_cache.safetensors" -o "$tmp/own.ggsq" --to llama.cpp \
    --model "$case_dir/model" --flash-attn $fa --n-stream "$n_stream" --stream $stream -q
  diff <(structure "$f" | grep -v '"file_bytes"') <(structure "$tmp/own.ggsq" | grep -v '"file_bytes"') > /dev/null ||
    fail "mlx-lm's cache converted for $name has another structure"
  [[ $(stat -c %s "$f") == $(stat -c %s "$tmp/own.ggsq") ]] || fail "mlx-lm's cache converted for $name has another size"
done
((files >= 7)) || fail "found $files llama.cpp fixture files"

f32=$fixtures/llama_f32_d16
# Container and integrity options apply to the mlx-lm side; the layout too.
expect_exit 0 "mlx-lm, zstd, 2 layers, 20 tokens, F32 from llama.cpp f16, flash-attn on, stream 1 of 2, K pairs" -- \
  convert "$f32/slot_np2.bin" -o "$tmp/c.safetensors" --model "$f32/model" --compress --integrity
"$kvtool" inspect "$tmp/c.safetensors" | grep "safetensors+zstd" > /dev/null || fail "--compress ignored"
expect_exit 0 "OK" -- verify "$tmp/c.safetensors"
expect_exit 0 "" -- convert "$tmp/c.safetensors" -o "$tmp/c.bin" --to llama.cpp --model "$f32/model" -q
cmp -s "$f32/slot_np2.bin" "$tmp/c.bin" || fail "slot file via compressed F32 mlx-lm is not byte-identical"
expect_exit 0 "" -- convert "$f32/seq_fa1.ggsq" -o "$tmp/s.safetensors" --model "$f32/model" --to mlx-swift-lm -q
"$kvtool" inspect --json "$tmp/s.safetensors" | grep '"layout": "mlx-swift-lm"' > /dev/null || fail "--to mlx-swift-lm"
d128=$fixtures/llama_f16_d128
expect_exit 0 "loses precision" -- convert "$d128/seq_fa1.ggsq" -o "$tmp/q.safetensors" --model "$d128/model" --quantize 4:32
echo '[1, 2, 3]' > "$tmp/tokens.json"
expect_exit 1 "3 tokens (option) but 20 cells" -- convert "$f32/seq_fa1.ggsq" -o "$tmp/x" --model "$f32/model" --tokens "$tmp/tokens.json"
cp "$f32/tokens.json" "$tmp/t20.json"
expect_exit 0 "20 tokens (option)" -- convert "$f32/mlx_cache.safetensors" -o "$tmp/x.ggsq" --to llama.cpp --model "$f32/model" --tokens "$tmp/t20.json"

# Usage errors.
expect_exit 1 "needs --model" -- convert "$f32/seq_fa1.ggsq" -o "$tmp/x"
expect_exit 1 "needs --model" -- convert "$f32/mlx_cache.safetensors" -o "$tmp/x" --to llama.cpp
expect_exit 1 "--kv-type must be f16, bf16 or f32" -- convert "$f32/mlx_cache.safetensors" -o "$tmp/x" --to llama.cpp --model "$f32/model" --kv-type q8_0
expect_exit 1 "--flash-attn must be on or off" -- convert "$f32/mlx_cache.safetensors" -o "$tmp/x" --to llama.cpp --model "$f32/model" --flash-attn auto
expect_exit 1 "--stream needs --n-stream" -- convert "$f32/mlx_cache.safetensors" -o "$tmp/x" --to llama.cpp --model "$f32/model" --stream 1
expect_exit 1 "stream 2 is not below n_stream 2" -- convert "$f32/mlx_cache.safetensors" -o "$tmp/x" --to llama.cpp --model "$f32/model" --n-stream 2 --stream 2
expect_exit 1 "do not apply to --to llama.cpp" -- convert "$f32/mlx_cache.safetensors" -o "$tmp/x" --to llama.cpp --model "$f32/model" --compress
expect_exit 1 "apply to --to llama.cpp" -- convert "$f32/seq_fa1.ggsq" -o "$tmp/x" --model "$f32/model" --kv-type f16
expect_exit 1 "apply to llama.cpp conversions only" -- convert "$f32/mlx_cache.safetensors" -o "$tmp/x" --model "$f32/model"
expect_exit 1 "--to must be mlx-lm-0.32, mlx-lm-0.31, mlx-lm, mlx-swift-lm or llama.cpp" -- convert "$f32/seq_fa1.ggsq" -o "$tmp/x" --to gguf
expect_exit 1 "n_head_kv 2 x head_dim 32 = 64" -- convert "$f32/seq_fa1.ggsq" -o "$tmp/x" --model "$fixtures/qwen2_bf16_d32/model"
expect_exit 2 "does-not-exist" -- convert "$f32/seq_fa1.ggsq" -o "$tmp/x" --model "$tmp/does-not-exist"
[[ ! -e $tmp/x ]] || fail "a failed conversion left an output"

# Refusals by name (exit 4) and corrupt files (exit 3).
cp "$f32/seq_fa1.ggsq" "$tmp/q8.ggsq"
poke "$tmp/q8.ggsq" 348 '\x08'
expect_exit 4 "K type q8_0" -- inspect "$tmp/q8.ggsq"
expect_exit 4 "quantized KV caches are not" -- convert "$tmp/q8.ggsq" -o "$tmp/x" --model "$f32/model"
cp "$f32/seq_fa1.ggsq" "$tmp/shifted.ggsq"
poke "$tmp/shifted.ggsq" 100 '\x14'  # cell 0 now holds position 20: positions 1..20
"$kvtool" inspect "$tmp/shifted.ggsq" | grep "note: cannot be converted: .*positions start at 1" > /dev/null || fail "inspect note"
expect_exit 4 "positions start at 1, not 0 (a shifted context" -- convert "$tmp/shifted.ggsq" -o "$tmp/x" --model "$f32/model"
cp "$f32/seq_fa1.ggsq" "$tmp/v3.ggsq"
poke "$tmp/v3.ggsq" 4 '\x03'
expect_exit 4 "version 3 (only version 2" -- inspect "$tmp/v3.ggsq"
head -c 2000 "$f32/seq_fa1.ggsq" > "$tmp/cut.ggsq"
expect_exit 3 "llama.cpp state: stream 0 layer 1 K data" -- inspect "$tmp/cut.ggsq"
cat "$f32/seq_fa1.ggsq" <(printf 'x') > "$tmp/trailing.ggsq"
expect_exit 3 "1 trailing bytes" -- convert "$tmp/trailing.ggsq" -o "$tmp/x" --model "$f32/model"
expect_exit 4 "no digests" -- inspect --verify "$f32/seq_fa1.ggsq"
slot_note="not a safetensors file: it looks like a llama.cpp sequence-state (slot) file; \`kvtool inspect $f32/seq_fa1.ggsq\` shows it"
expect_exit 4 "$slot_note" -- verify "$f32/seq_fa1.ggsq"
expect_exit 4 "$slot_note" -- trim "$f32/seq_fa1.ggsq" -n 1 -o "$tmp/x"
sed 's/"llama"/"gemma2"/' "$f32/model/config.json" > "$tmp/config.json"
expect_exit 4 "'gemma2' uses sliding-window attention" -- convert "$f32/seq_fa1.ggsq" -o "$tmp/x" --model "$tmp/config.json"
sed 's/"llama"/"mystery"/' "$f32/model/config.json" > "$tmp/config.json"
expect_exit 4 "'mystery' is not in the RoPE pairing table" -- convert "$f32/seq_fa1.ggsq" -o "$tmp/x" --model "$tmp/config.json"
expect_exit 4 "quantized caches are not supported" -- convert "$tmp/q.safetensors" -o "$tmp/x" --to llama.cpp --model "$d128/model"
[[ ! -e $tmp/x ]] || fail "a refused conversion left an output"

if ((failures)); then echo "$failures failures"; exit 1; fi
echo "kvtool llama.cpp tests passed ($files fixture files)"
