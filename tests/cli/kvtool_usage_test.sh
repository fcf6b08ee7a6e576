#!/usr/bin/env bash
# kvtool's usage errors and small messages: every usage error is
# "kvtool: <what was wrong and what was expected>" with exit 1 (CLI11's
# included), an unknown command is named with a suggestion, --compress[=LEVEL]
# never takes IN as its level, empty option values are refused, --help shows
# what docs/cli.md documents (redis:// for ls and inspect), a corrupt input
# given with --model is reported as corrupt, and summaries say what they wrote.
#   kvtool_usage_test.sh KVTOOL FIXTURES_DIR SOURCE_DIR
set -uo pipefail
kvtool=$(realpath "$1") fixtures=$(realpath "$2") source=$(realpath "$3")
source "$(dirname "$0")/testlib.sh"
# usage_error MESSAGE_SUBSTRING -- args: exit 1, the first line starts with
# "kvtool: " and holds the message; nothing on stdout.
usage_error() {
  local msg=$1; shift 2
  local out err rc
  out=$("$kvtool" "$@" 2> "$tmp/err"); rc=$?
  err=$(cat "$tmp/err")
  [[ $rc == 1 ]] || fail "kvtool $* exited $rc, want 1: $err"
  [[ -z $out ]] || fail "kvtool $* printed on stdout: $out"
  [[ $(head -1 "$tmp/err") == "kvtool: "*"$msg"* ]] || fail "kvtool $*: '$err', want 'kvtool: ...$msg...'"
}
f16=$fixtures/mlx-lm/kvcache_f16_4l.safetensors
slot=$fixtures/llama.cpp/llama_f32_d16/slot_np2.bin
model=$fixtures/llama.cpp/llama_f32_d16/model

# Commands: unknown, missing.
usage_error "unknown command 'inspectt' (did you mean 'inspect'?); the commands are inspect, verify, convert, trim, diff, ls" \
  -- inspectt x
usage_error "unknown command 'frobnicate'; the commands are inspect, verify" -- frobnicate
usage_error "a command is required: inspect, verify, convert, trim, diff, ls" --
# CLI11's own errors carry the prefix too.
usage_error "IN is required" -- convert
usage_error "--output is required" -- convert "$f16"
usage_error "Could not convert: --threads = many" -- convert "$f16" -o "$tmp/x" --threads many
usage_error "The following argument was not expected: extra" -- inspect "$f16" extra
usage_error "--bogus" -- inspect "$f16" --bogus

# --compress[=LEVEL]: the level is attached, so IN after --compress is IN.
expect_exit 0 "" -- convert --compress "$f16" -o "$tmp/c.safetensors" -q
"$kvtool" inspect "$tmp/c.safetensors" | grep -q "safetensors+zstd" || fail "convert --compress IN -o OUT did not compress"
expect_exit 0 "" -- convert "$f16" -o "$tmp/c19.safetensors" --compress=19 -q
"$kvtool" inspect "$tmp/c19.safetensors" | grep -q "safetensors+zstd" || fail "--compress=19 did not compress"
usage_error "--compress takes its level after '=': --compress=19" -- convert "$f16" -o "$tmp/x" --compress 19
usage_error "--compress=fast: the level must be a number (--compress[=LEVEL]" -- convert "$f16" -o "$tmp/x" --compress=fast
# --integrity[=ALG] likewise: the algorithm is attached, and one written after a space is named.
usage_error "--integrity takes its algorithm after '=': --integrity=xxh3 (a separate argument would be read as a file)" \
  -- convert "$f16" -o "$tmp/x" --integrity xxh3
expect_exit 0 "" -- convert --integrity "$f16" -o "$tmp/i.safetensors" -q
[[ ! -e $tmp/x ]] || fail "a refused conversion wrote its output"
# --help and docs/cli.md write it the same way.
"$kvtool" convert --help | grep -q -- '--compress\[=LEVEL\]' || fail "convert --help does not show --compress[=LEVEL]"
grep -q -- '--compress\[=LEVEL\]' "$source/docs/cli.md" || fail "docs/cli.md does not show --compress[=LEVEL]"

# --sync / --no-sync (the fsyncs themselves: atomic_write_test's DurabilitySyncsAsAsked).
usage_error "--sync excludes --no-sync" -- convert "$f16" -o "$tmp/x" --sync --no-sync
usage_error "--sync excludes --no-sync" -- trim "$f16" -n 1 -o "$tmp/x" --sync --no-sync
expect_exit 0 "" -- convert "$f16" -o "$tmp/s.safetensors" --sync -q
expect_exit 0 "" -- trim "$tmp/s.safetensors" -n 1 -o "$tmp/s.safetensors" --no-sync -q
[[ $("$kvtool" inspect "$tmp/s.safetensors" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["layers"][0]["offset"])') == \
   $(($("$kvtool" inspect "$f16" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["layers"][0]["offset"])') - 1)) ]] ||
  fail "trim --no-sync over its input did not trim it"

# Empty values are refused, not taken for the default.
usage_error "--kv-type: must not be empty" -- convert "$f16" -o "$tmp/x" --to llama.cpp --model "$model" --kv-type ""
usage_error "--to: must not be empty" -- convert "$f16" -o "$tmp/x" --to ""
usage_error "--dtype: must not be empty" -- convert "$f16" -o "$tmp/x" --dtype ""
usage_error "--output: must not be empty" -- trim "$f16" -n 1 -o ""

# The layouts: --help and docs/cli.md name mlx-lm 0.32's, for convert and trim.
for cmd in convert trim; do
  "$kvtool" $cmd --help | grep -q -- 'mlx-lm-0.32' || fail "$cmd --help does not name mlx-lm-0.32"
done
grep -q -- '--to mlx-lm-0.32|mlx-lm-0.31|mlx-lm|mlx-swift-lm' "$source/docs/cli.md" || fail "docs/cli.md does not name the layouts"
grep -q -- 'kvtool trim FILE (-n N | --keep N) -o OUT \[--to LAYOUT\]' "$source/docs/cli.md" || fail "docs/cli.md: trim --to"
usage_error "--to must be mlx-lm-0.32, mlx-lm-0.31, mlx-lm or mlx-swift-lm" -- trim "$f16" -n 1 -o "$tmp/t" --to mlx-lm-9

# --help says where a redis:// URL is taken.
"$kvtool" --help | grep -q 'redis://' || fail "kvtool --help does not mention redis://"
"$kvtool" ls --help | grep -q 'DIR.*redis://\|redis://.*shared tier' || fail "ls --help does not mention redis://"
"$kvtool" inspect --help | grep -q 'redis://' || fail "inspect --help does not mention redis://"

# An input that is neither a llama.cpp state nor a prompt-cache file, given
# with --model: its own error (3 corrupt, 2 missing), not the flags'.
: > "$tmp/empty.safetensors"
printf 'GGUF this is not a cache' > "$tmp/magic.safetensors"
for bad in empty magic; do
  out=$("$kvtool" convert "$tmp/$bad.safetensors" -o "$tmp/x" --model "$model" 2>&1); rc=$?
  [[ $rc == 3 && $out == "kvtool: $tmp/$bad.safetensors"* ]] || fail "--model with a $bad input ($rc): $out"
done
expect_exit 2 "$tmp/none.safetensors" -- convert "$tmp/none.safetensors" -o "$tmp/x" --model "$model"
expect_exit 1 "apply to llama.cpp conversions only" -- convert "$f16" -o "$tmp/x" --model "$model"

# A config.json whose torch_dtype is no float type is refused, not ignored.
mkdir "$tmp/int8"
sed 's/"torch_dtype": *"[a-z0-9]*"/"torch_dtype": "int8"/' "$model/config.json" > "$tmp/int8/config.json"
grep -q '"torch_dtype": "int8"' "$tmp/int8/config.json" || fail "could not make the int8 config: $(cat "$model/config.json")"
expect_exit 4 '"torch_dtype" "int8" is not a float type' -- convert "$slot" -o "$tmp/x" --model "$tmp/int8"

# Summaries: a compressed llama.cpp conversion says so; ls counts in the singular.
expect_exit 0 ", mlx-lm, zstd, 2 layers, 20 tokens" -- convert "$slot" -o "$tmp/s.safetensors" --model "$model" --compress
expect_exit 0 ", mlx-lm, zstd-byteplane, 2 layers" -- convert "$slot" -o "$tmp/s.safetensors" --model "$model" \
  --compress --codec byteplane
mkdir "$tmp/one"
cp "$f16" "$tmp/one/"
echo hello > "$tmp/one/notes.txt"
expect_exit 0 "1 cache file, 1 other file (--all lists them)" -- ls "$tmp/one"

finish "kvtool usage tests"
