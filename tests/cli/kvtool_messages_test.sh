#!/usr/bin/env bash
# kvtool's messages and verdicts: diff of caches that do not line up, escaped
# file bytes in human output (into a pipe and on a terminal), files that are
# not safetensors named by their first bytes, one wording for a digest
# mismatch (verify, inspect --verify) and for a file without digests.
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

# ---- Terminal escapes: metadata and file names are anyone's bytes.
evil=$'evil\e[2J\a.safetensors'
mkdir "$tmp/dir"
# A one-token KVCache whose metadata holds terminal escapes, a backslash and a C1 control.
python3 - "$tmp/dir/$evil" << 'PY'
import json, struct, sys
kv = {"dtype": "F16", "shape": [1, 1, 1, 2]}
header = json.dumps({"__metadata__": {"0.0": "", "2.0": "KVCache", "1.note": "\x1b]0;owned\x07\x1b[31mred\\back",
                                      "1.k\x9b1m": "v"},
                     "0.0": dict(kv, data_offsets=[0, 4]), "0.1": dict(kv, data_offsets=[4, 8])}).encode()
open(sys.argv[1], "wb").write(struct.pack("<Q", len(header)) + header + bytes(8))
PY
want_meta='  note                 \x1b]0;owned\x07\x1b[31mred\x5cback'
want_key='  k\xc2\x9b1m'
for where in pipe terminal; do
  if [[ $where == pipe ]]; then
    "$kvtool" inspect "$tmp/dir/$evil" > "$tmp/inspect.out" || fail "inspect of the evil file"
    "$kvtool" ls "$tmp/dir" > "$tmp/ls.out" || fail "ls"
  elif command -v script > /dev/null; then
    script -qec "'$kvtool' inspect '$tmp/dir/$evil'" /dev/null < /dev/null | tr -d '\r' > "$tmp/inspect.out"
    script -qec "'$kvtool' ls '$tmp/dir'" /dev/null < /dev/null | tr -d '\r' > "$tmp/ls.out"
  else
    echo "SKIP: escapes on a terminal (no 'script' command)"
    continue
  fi
  grep -q $'[\e\a]' "$tmp/inspect.out" "$tmp/ls.out" && fail "$where: raw control characters printed"
  grep -qF -- "$want_meta" "$tmp/inspect.out" || fail "$where: metadata value not escaped: $(cat -v "$tmp/inspect.out")"
  grep -qF -- "$want_key" "$tmp/inspect.out" || fail "$where: metadata key not escaped: $(cat -v "$tmp/inspect.out")"
  grep -qF -- 'evil\x1b[2J\x07.safetensors: safetensors, layout mlx-lm' "$tmp/inspect.out" || fail "$where: inspect path"
  grep -qF -- 'evil\x1b[2J\x07.safetensors' "$tmp/ls.out" || fail "$where: ls name: $(cat -v "$tmp/ls.out")"
done
# --json stays exact: the parsed strings are the bytes of the file.
"$kvtool" inspect --json "$tmp/dir/$evil" > "$tmp/inspect.json" || fail "inspect --json"
"$kvtool" ls --json "$tmp/dir" > "$tmp/ls.json" || fail "ls --json"
python3 - "$tmp/inspect.json" "$tmp/ls.json" << 'PY' || fail "--json is not exact"
import json, sys
info = json.load(open(sys.argv[1]))
assert info["metadata"]["note"] == "\x1b]0;owned\x07\x1b[31mred\\back", info["metadata"]
assert info["metadata"]["k\x9b1m"] == "v", info["metadata"]
assert info["path"].endswith("evil\x1b[2J\x07.safetensors"), info["path"]
ls = json.load(open(sys.argv[2]))
assert [f["name"] for f in ls["files"]] == ["evil\x1b[2J\x07.safetensors"], ls
PY

# ---- Not a safetensors file: named by its first bytes, with the command that handles it.
not_st() {  # not_st EXIT FILE WHAT
  run inspect "$2"
  [[ $rc == "$1" ]] || fail "inspect $2 exited $rc, want $1: $err"
  [[ $err == "kvtool: $2: not a safetensors file: it looks like $3"* ]] || fail "inspect $2: $err"
}
if command -v zstd > /dev/null; then
  "$kvtool" convert "$f16" -o "$tmp/bp.safetensors" --compress --codec byteplane -q || fail "byteplane"
  zstd -q -d -c "$tmp/bp.safetensors" > "$tmp/bp.plain"
  not_st 3 "$tmp/bp.plain" "a byte-plane compressed prompt cache unpacked by \`zstd -d\`, which cannot undo the byte planes"
  zstd -q -c "$f16" > "$tmp/f16.safetensors.zst"
  not_st 3 "$tmp/f16.safetensors.zst" "zstd-compressed data as the zstd tool writes it (kvstore's compressed files end with a seek table); decompress it with \`zstd -d $tmp/f16.safetensors.zst\` first"
  zstd -q -d -c "$tmp/f16.safetensors.zst" | cmp - "$f16" || fail "the advice does not give the file back"
else
  echo "SKIP: zstd cases (no 'zstd' command)"
fi
gzip -c "$f16" > "$tmp/f16.safetensors.gz"
not_st 3 "$tmp/f16.safetensors.gz" "gzip-compressed data; decompress it with \`gzip -d $tmp/f16.safetensors.gz\` first"
llama=$fixtures/llama.cpp/llama_f32_d16
not_st 3 "$llama/model/model.gguf" "a GGUF model file, not a cache"
not_st 3 "$llama/model/config.json" "JSON text, not a cache"
run verify "$llama/seq_fa1.ggsq"
[[ $rc == 4 && $err == "kvtool: $llama/seq_fa1.ggsq: not a safetensors file: it looks like a llama.cpp sequence-state (slot) file; \`kvtool inspect $llama/seq_fa1.ggsq\` shows it and \`kvtool convert $llama/seq_fa1.ggsq -o OUT --model MODEL\` converts it (docs/llama-cpp.md)" ]] ||
  fail "verify of a slot file ($rc): $err"
# Other commands and ls --all say the same.
run diff "$tmp/f16.safetensors.gz" "$f16"
[[ $rc == 3 && $err == *"not a safetensors file: it looks like gzip"* ]] || fail "diff of a gzip file ($rc): $err"
mkdir "$tmp/mixed" && cp "$tmp/f16.safetensors.gz" "$tmp/mixed/"
run ls --all "$tmp/mixed"
[[ $out == *"f16.safetensors.gz"*"(not a cache file: $tmp/mixed/f16.safetensors.gz: not a safetensors file: it looks like gzip"* ]] ||
  fail "ls --all: $out"

# ---- Verification: one message per mismatch, the same from verify and inspect --verify.
"$kvtool" convert "$f16" -o "$tmp/d.safetensors" --integrity -q || fail "convert --integrity"
cp "$tmp/d.safetensors" "$tmp/bad.safetensors"
size=$(stat -c %s "$tmp/bad.safetensors")
printf '\xff' | dd of="$tmp/bad.safetensors" bs=1 seek=$((size - 10)) conv=notrunc status=none
run verify "$tmp/bad.safetensors"
[[ $rc == 3 ]] || fail "verify of a corrupt file exited $rc"
verify_err=$err
[[ $verify_err =~ ^kvtool:\ $tmp/bad.safetensors:\ tensor\ \'3.1\':\ SHA-256\ mismatch:\ expected\ [0-9a-f]{16}\.\.\.,\ found\ [0-9a-f]{16}\.\.\.$ ]] ||
  fail "verify message: $verify_err"
# The expected digest is the one the file stores.
stored=$(python3 -c 'import json,struct,sys
b=open(sys.argv[1],"rb").read(); n=struct.unpack("<Q",b[:8])[0]
print(json.loads(json.loads(b[8:8+n])["__metadata__"]["1.kvstore_sha256_tensors"])["3.1"][:16])' "$tmp/bad.safetensors")
[[ $verify_err == *"expected $stored..., found "* ]] || fail "verify does not quote the stored digest $stored: $verify_err"
run inspect --verify "$tmp/bad.safetensors"
[[ $rc == 3 && $err == "$verify_err" ]] || fail "inspect --verify ($rc) says '$err', verify says '$verify_err'"
[[ $out == *"integrity sha256 MISMATCH"* ]] || fail "inspect --verify table: $out"
# A file without digests: inspect --verify exits 4 with verify's note, after its output.
run verify "$f16"
verify_err=$err
[[ $rc == 4 && $verify_err == *"kvtool: $f16: the file carries no digests to verify (write it with kvstore, or run 'kvtool convert $f16 -o OUT --integrity' to add them)" ]] ||
  fail "verify without digests ($rc): $verify_err"
run inspect --verify "$f16"
[[ $rc == 4 && $err == "kvtool: $f16: the file carries no digests to verify"* && $verify_err == *"$err" ]] ||
  fail "inspect --verify without digests ($rc): $err"
[[ $out == *"integrity none"* ]] || fail "inspect --verify without digests printed: $out"
run inspect --verify --json "$f16"
[[ $rc == 4 && $out == *'"integrity": null'* ]] || fail "inspect --verify --json without digests ($rc)"
run inspect "$f16"
[[ $rc == 0 && -z $err ]] || fail "inspect without --verify ($rc): $err"

if ((failures)); then echo "$failures failures"; exit 1; fi
echo "kvtool message tests passed"
