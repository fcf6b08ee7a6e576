#!/usr/bin/env bash
# kvtool's outputs: only a regular file is replaced. Devices, FIFOs, sockets,
# directories, links to them and dangling links are refused (exit 2) by every
# command that writes, before a temp file exists; a link to a regular file is
# followed. A write interrupted by SIGTERM or SIGINT leaves no temp file, and
# a file-size limit is an error naming OUT. Device nodes are our own
# (mknod, when allowed): the machine's /dev/null is never risked.
#   kvtool_outputs_test.sh KVTOOL FIXTURES_DIR
set -uo pipefail
kvtool=$(realpath "$1") fixtures=$(realpath "$2")
source "$(dirname "$0")/testlib.sh"
f16=$fixtures/mlx-lm/kvcache_f16_4l.safetensors
slot=$fixtures/llama.cpp/llama_f32_d16/slot_np2.bin
model=$fixtures/llama.cpp/llama_f32_d16/model
mlx_cache=$fixtures/llama.cpp/llama_f32_d16/mlx_cache.safetensors
temps() { find "$tmp" -name '*.kvtmp-*'; }
node() { stat -c '%F %d:%i %t:%T' "$1"; }  # type, identity and device numbers

# refused OUT WHAT: every writing command refuses OUT with exit 2 and a
# message naming it and WHAT; OUT stays the same node; no temp file appears.
refused() {
  local out=$1 what=$2 before msg rc
  before=$(node "$out")
  for cmd in "convert $f16 --compress" "convert $f16 --integrity" "trim $f16 -n 1" \
             "convert $slot --model $model" "convert $mlx_cache --to llama.cpp --model $model"; do
    # shellcheck disable=SC2086  # cmd is split on purpose
    msg=$(timeout 20 "$kvtool" $cmd -o "$out" -q 2>&1); rc=$?
    [[ $rc == 2 ]] || fail "$cmd -o $out exited $rc (want 2): $msg"
    [[ $msg == "kvtool: $out"*"$what"* ]] || fail "$cmd -o $out: '$msg', want it to name $out and '$what'"
  done
  [[ $(node "$out") == "$before" ]] || fail "$out was replaced: $before -> $(node "$out")"
  [[ -z $(temps) ]] || fail "temp files left: $(temps)"
  rm -f $(temps)
}

mkfifo "$tmp/fifo"
refused "$tmp/fifo" ": not a regular file (FIFO); refusing to replace it"
mkdir "$tmp/dir"
refused "$tmp/dir" ": not a regular file (directory); refusing to replace it"
python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' "$tmp/sock"
refused "$tmp/sock" ": not a regular file (socket); refusing to replace it"
if mknod "$tmp/null" c 1 3 2> /dev/null && mknod "$tmp/full" c 1 7; then
  refused "$tmp/null" ": not a regular file (character device); refusing to replace it"
  # /dev/full: refused before a byte is written, so the node is kept (a
  # write that runs out of space is the library's test, with injected ENOSPC).
  refused "$tmp/full" ": not a regular file (character device); refusing to replace it"
else
  echo "SKIP: device nodes (mknod needs CAP_MKNOD); the FIFO, socket and directory cases ran"
fi
ln -s fifo "$tmp/to-fifo"
refused "$tmp/to-fifo" " (a symbolic link): not a regular file (FIFO)"
ln -s missing "$tmp/dangling"
refused "$tmp/dangling" ": a symbolic link to a missing file; refusing to create a file through it"
[[ ! -e $tmp/missing ]] || fail "a file was created through a dangling link"

# A link to a regular file: the file it names is replaced, the link stays.
mkdir "$tmp/real" "$tmp/links"
cp "$f16" "$tmp/real/out.safetensors"
ln -s ../real/out.safetensors "$tmp/links/out.safetensors"
"$kvtool" convert "$f16" -o "$tmp/links/out.safetensors" --integrity -q || fail "convert through a link"
[[ -L $tmp/links/out.safetensors && $(readlink "$tmp/links/out.safetensors") == ../real/out.safetensors ]] ||
  fail "the link was replaced"
"$kvtool" verify "$tmp/real/out.safetensors" > /dev/null || fail "the link's target was not replaced"
[[ -z $(temps) ]] || fail "temp files left: $(temps)"

# I/O errors name OUT, not the temp file.
msg=$("$kvtool" convert "$f16" -o "$tmp/nodir/out.safetensors" --integrity 2>&1); rc=$?
[[ $rc == 2 && $msg == "kvtool: open '$tmp/nodir/out.safetensors': No such file or directory" ]] ||
  fail "missing directory ($rc): $msg"

# A file-size limit (ulimit -f, in KiB here): an error naming OUT, exit 2,
# the temp file removed and OUT as it was (not a SIGXFSZ death).
echo old > "$tmp/limited.safetensors"
msg=$(ulimit -f 32; "$kvtool" convert "$f16" -o "$tmp/limited.safetensors" --integrity -q 2>&1); rc=$?
[[ $rc == 2 && $msg == "kvtool: write '$tmp/limited.safetensors': File too large" ]] ||
  fail "file-size limit ($rc): $msg"
[[ $(cat "$tmp/limited.safetensors") == old && -z $(temps) ]] || fail "file-size limit left $(temps)"
rm -f $(temps)

# SIGTERM and SIGINT during a write: kvtool dies of the signal, leaving OUT
# as it was and no temp file. The process is stopped once its temp file
# exists, so the signal surely arrives mid-write. (A background command of a
# script starts with SIGINT ignored, which kvtool keeps: python resets it.)
rm -f $(temps)
head -c $((24 << 20)) /dev/urandom > "$tmp/noise"
printf -v header '{"__metadata__":{"0.0":"","2.0":"KVCache"},"0.0":{"dtype":"F16","shape":[1,8,%d,128],"data_offsets":[0,%d]},"0.1":{"dtype":"F16","shape":[1,8,%d,128],"data_offsets":[%d,%d]}}' \
  $((6 << 10)) $((12 << 20)) $((6 << 10)) $((12 << 20)) $((24 << 20))
n=${#header} hex=$(printf '%016x' "$n")
{ for ((i = 14; i >= 0; i -= 2)); do printf "\\x${hex:i:2}"; done; printf '%s' "$header"; cat "$tmp/noise"; } > "$tmp/big.safetensors"
rm "$tmp/noise"
for sig in TERM INT; do
  echo old > "$tmp/out.safetensors"
  python3 -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])' \
    "$kvtool" convert "$tmp/big.safetensors" -o "$tmp/out.safetensors" --compress=19 --threads 1 -q &
  pid=$!
  for _ in $(seq 2000); do [[ -n $(temps) ]] && break; sleep 0.01; done
  kill -STOP "$pid" 2> /dev/null
  if [[ -z $(temps) ]]; then
    fail "SIG$sig: no temp file while kvtool ran (it ended first?)"
    kill -CONT "$pid" 2> /dev/null
    wait "$pid"
    continue
  fi
  kill -"$sig" "$pid"
  kill -CONT "$pid"
  wait "$pid"; rc=$?
  [[ $rc == $((128 + $(kill -l "$sig"))) ]] || fail "SIG$sig: kvtool exited $rc"
  [[ -z $(temps) ]] || fail "SIG$sig left a temp file: $(temps)"
  [[ $(cat "$tmp/out.safetensors") == old ]] || fail "SIG$sig changed OUT"
  rm -f $(temps)
done

finish "kvtool output tests"
