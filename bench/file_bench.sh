#!/usr/bin/env bash
# File-level throughput of kvtool against the reference tools on the same
# bytes, in one run (docs/performance.md):
#   cp / cp + sync (plain save), openssl dgst -sha256 (verify), xxhsum -H2
#   (verify of an XXH3 file),
#   zstd -T0 -3 (compress), zstd -d (decompress).
#   bench/file_bench.sh [BUILD_DIR] [TOKENS=8192] [DIR=$TMPDIR]
# TOKENS=8192 gives a 1 GiB cache (32 layers of [1, 8, T, 128] BF16 keys and
# values ~ N(0, 1)). Every command runs $RUNS times (default 3), next to its
# reference, in rounds over all commands; the best (minimum) wall time is
# reported, the median next to it. Before each run the previous output is removed,
# `kvstore_touch_memory` writes $TOUCH_GIB GiB (default 2; 0 = off, see
# bench/touch_memory.cc) and `sync` flushes dirty pages, so every command
# starts from the same state. On a VM that reports free pages to its host
# (virtio-balloon free page reporting), the script, when run as root, asks
# the guest to keep freed memory for 100 s before reporting it
# (/sys/module/page_reporting/parameters/min_free_ms) and restores the old
# value on exit; KVBENCH_KEEP_VM_SETTINGS=1 leaves it alone.
# The *_replace rows write over the output their own command wrote in the
# previous round (the first round over a copy of the input), with no memory
# touched before: a user re-running a command over its output. The script
# ends with the three write ratios of docs/performance.md, new path and
# replace. ONLY=writes runs only the rows those need.
set -euo pipefail
build=${1:-build}
tokens=${2:-8192}
dir=$(mktemp -d "${3:-${TMPDIR:-/tmp}}/kvbench.XXXXXX")
reporting=/sys/module/page_reporting/parameters/min_free_ms
old_reporting=
if [[ -w $reporting && ${KVBENCH_KEEP_VM_SETTINGS:-0} != 1 ]]; then
  old_reporting=$(cat "$reporting")
  echo 100000 > "$reporting" && echo "note: free page reporting delayed to 100 s for the run (was ${old_reporting} ms)"
fi
cleanup() {
  rm -rf "$dir"
  if [[ -n $old_reporting ]]; then echo "$old_reporting" > "$reporting"; fi
}
trap cleanup EXIT
runs=${RUNS:-3}
touch_gib=${TOUCH_GIB:-2}
kvtool=$(realpath "$build/apps/kvtool/kvtool")
make=$build/bench/kvstore_make_cache
toucher=$build/bench/kvstore_touch_memory

now() { date +%s.%N; }
# once NAME OUTPUT CMD... : one timed run of CMD, "NAME seconds peak_rss_kib"
once() {
  local name=$1 output=$2; shift 2
  if [[ $name == *_replace ]]; then
    [[ -e $output ]] || cp "$dir/in.safetensors" "$output"
  else
    rm -f "$output"
    if ((touch_gib > 0)); then "$toucher" "$touch_gib"; fi
  fi
  sync
  local t0 t1
  t0=$(now)
  /usr/bin/time -f "%M" -o "$dir/rss" "$@" > /dev/null 2>&1
  t1=$(now)
  printf '%s %.4f %s\n' "$name" "$(echo "$t1 - $t0" | bc -l)" "$(cat "$dir/rss")" >> "$dir/runs"
}
# pair NAME_A OUT_A "CMD A" NAME_B OUT_B "CMD B": queues a command and its
# reference; run_pairs runs every queued pair once per round, $runs rounds,
# so that a slow spell of the machine hits one run of a command, not all.
pairs=()
pair() { pairs+=("$1" "$2" "$3" "$4" "$5" "$6"); }
run_pairs() {
  for ((r = 0; r < runs; r++)); do
    for ((p = 0; p < ${#pairs[@]}; p += 6)); do
      once "${pairs[p]}" "${pairs[p + 1]}" bash -c "${pairs[p + 2]}"
      once "${pairs[p + 3]}" "${pairs[p + 4]}" bash -c "${pairs[p + 5]}"
    done
  done
}

# Warm up: back enough memory for the whole run once (slow on a cold VM).
if ((touch_gib > 0)); then "$toucher" $((touch_gib * 3)); fi
"$make" "$dir/in.safetensors" "$tokens"
"$make" "$dir/small.safetensors" 128
bytes=$(stat -c %s "$dir/in.safetensors")
echo "file: $bytes bytes ($tokens tokens x 32 layers), $runs runs each: best (median)"
cat "$dir/in.safetensors" > /dev/null  # page cache
if [[ ${ONLY:-} != writes ]]; then
  "$kvtool" convert "$dir/in.safetensors" -o "$dir/digests.safetensors" --integrity -q
  "$kvtool" convert "$dir/in.safetensors" -o "$dir/xxh3.safetensors" --integrity=xxh3 -q
  cat "$dir/xxh3.safetensors" > /dev/null  # page cache warm, as for the reference
  "$kvtool" convert "$dir/in.safetensors" -o "$dir/bp.safetensors" --codec byteplane -q
fi
zstd -q -T0 -3 -f "$dir/in.safetensors" -o "$dir/ref.zst"
"$kvtool" convert "$dir/in.safetensors" -o "$dir/c.safetensors" --compress=3 -q
k=$kvtool d=$dir
: > "$dir/runs"
write_pairs() {
  pair cp "$d/o1" "cp $d/in.safetensors $d/o1" \
       save "$d/o2" "$k convert $d/in.safetensors -o $d/o2 --integrity -q"
  pair cp_sync "$d/o1" "cp $d/in.safetensors $d/o1 && sync $d/o1" \
       copy "$d/o2" "$k convert $d/in.safetensors -o $d/o2 -q"
  pair zstd_d "$d/o1" "zstd -q -d -f $d/ref.zst -o $d/o1" \
       decompress "$d/o2" "$k convert $d/c.safetensors -o $d/o2 --decompress -q"
  pair cp_replace "$d/r1" "cp $d/in.safetensors $d/r1" \
       copy_replace "$d/r2" "$k convert $d/in.safetensors -o $d/r2 -q"
  pair cp_sync_replace "$d/r3" "cp $d/in.safetensors $d/r3 && sync $d/r3" \
       save_replace "$d/r4" "$k convert $d/in.safetensors -o $d/r4 --integrity -q"
  pair zstd_d_replace "$d/r5" "zstd -q -d -f $d/ref.zst -o $d/r5" \
       decompress_replace "$d/r6" "$k convert $d/c.safetensors -o $d/r6 --decompress -q"
}
# Best and median time, max RSS per command: "name best rss median".
summarize() {
  sort -k1,1 -k2,2n "$dir/runs" | awk '
    { n[$1]++; t[$1, n[$1]] = $2; if ($3 > rss[$1]) rss[$1] = $3 }
    END { for (c in n) printf "%s %.4f %d %.4f\n", c, t[c, 1], rss[c], t[c, int((n[c] + 1) / 2)] }' \
    | sort > "$dir/results"
  cat "$dir/results"
}
# The three write ratios (docs/performance.md), best and median, to a new
# path and over an existing output.
write_ratios() {
  echo "write ratios, best (median); load average $(cut -d' ' -f1-3 /proc/loadavg):"
  awk '{ t[$1] = $2; m[$1] = $4 }
    function row(label, ref, ours, goal) {
      printf "  %-44s new %.2fx (%.2fx)  replace %.2fx (%.2fx)  goal >= %s\n", label,
             t[ref] / t[ours], m[ref] / m[ours], t[ref "_replace"] / t[ours "_replace"],
             m[ref "_replace"] / m[ours "_replace"], goal
    }
    END {
      row("convert (plain) vs cp:", "cp", "copy", "0.8")
      row("convert --integrity vs cp + sync:", "cp_sync", "save", "1.0")
      row("convert --decompress vs zstd -d:", "zstd_d", "decompress", "1.5")
    }' "$dir/results"
}
if [[ ${ONLY:-} == writes ]]; then
  write_pairs
  run_pairs
  summarize
  write_ratios
  exit 0
fi
write_pairs
pair openssl "$d/none" "openssl dgst -sha256 $d/digests.safetensors" \
     verify "$d/none" "$k verify -q $d/digests.safetensors"
pair xxhsum "$d/none" "xxhsum -H2 $d/xxh3.safetensors" \
     verify_xxh3 "$d/none" "$k verify -q $d/xxh3.safetensors"
pair zstd "$d/o1" "zstd -q -T0 -3 -f $d/in.safetensors -o $d/o1" \
     compress "$d/o2" "$k convert $d/in.safetensors -o $d/o2 --compress=3 -q"
pair byteplane "$d/o1" "$k convert $d/in.safetensors -o $d/o1 --codec byteplane -q" \
     byteplane_d "$d/o2" "$k convert $d/bp.safetensors -o $d/o2 --decompress -q"
pair trim "$d/o1" "$k trim $d/digests.safetensors -n 1024 -o $d/o1 -q" \
     quantize "$d/o2" "$k convert $d/digests.safetensors -o $d/o2 --quantize 4 -q"
pair swift "$d/o1" "$k convert $d/digests.safetensors -o $d/o1 --to mlx-swift-lm -q" \
     compressed_trim "$d/o2" "$k trim $d/c.safetensors -n 1024 -o $d/o2 -q"
pair inspect_big "$d/none" "$k inspect $d/in.safetensors" \
     inspect_small "$d/none" "$k inspect $d/small.safetensors"
pair inspect_compressed "$d/none" "$k inspect $d/c.safetensors" \
     version "$d/none" "$k --version"
run_pairs

summarize
echo "(ratios below use the best times; with the medians instead:)"
awk '{ m[$1] = $4 } END {
  printf "  median save/cp %.2fx, save/cp+sync %.2fx, copy/cp %.2fx, verify %.2fx, verify xxh3 %.2fx, compress %.2fx, decompress %.2fx\n",
    m["cp"] / m["save"], m["cp_sync"] / m["save"], m["cp"] / m["copy"], m["openssl"] / m["verify"],
    m["xxhsum"] / m["verify_xxh3"],
    m["zstd"] / m["compress"], m["zstd_d"] / m["decompress"] }' "$dir/results"

awk -v bytes="$bytes" -v zref="$(stat -c %s "$dir/ref.zst")" -v zours="$(stat -c %s "$dir/c.safetensors")" \
    -v zbp="$(stat -c %s "$dir/bp.safetensors")" -v zin="$(stat -c %s "$dir/c.safetensors")" '
  { t[$1] = $2; rss[$1] = $3 }
  END {
    mib = 1048576
    printf "\nratios (higher is better for kvstore):\n"
    printf "  save (convert --integrity: SHA-256; fsync only over a file) vs cp:      %.2fx  (goal >= 0.8)\n", t["cp"] / t["save"]
    printf "  save vs cp + sync:                                   %.2fx\n", t["cp_sync"] / t["save"]
    printf "  copy (convert, plain -> plain, kernel copy) vs cp:          %.2fx\n", t["cp"] / t["copy"]
    printf "  copy vs cp + sync:                                    %.2fx\n", t["cp_sync"] / t["copy"]
    printf "  verify vs openssl dgst -sha256:                       %.2fx  (goal >= 1.6)\n", t["openssl"] / t["verify"]
    printf "  verify (XXH3 file) vs xxhsum -H2:                     %.2fx  (goal >= 1.0)\n", t["xxhsum"] / t["verify_xxh3"]
    printf "  compress vs zstd -T0 -3:                              %.2fx  (goal >= 0.9)\n", t["zstd"] / t["compress"]
    printf "  compressed size vs zstd -3:                           %.3f   (goal within 2%%)\n", zours / zref
    printf "  decompress vs zstd -d:                                %.2fx  (goal >= 1.5)\n", t["zstd_d"] / t["decompress"]
    printf "  byte-plane: ratio %.3fx (zstd -3: %.3fx), compress %.2fx and decompress %.2fx of zstd\n",
           bytes / zbp, bytes / zref, t["zstd"] / t["byteplane"], t["zstd_d"] / t["byteplane_d"]
    printf "  trim -n 1024 / --quantize 4 / --to mlx-swift-lm / trim of the compressed file: %.2f / %.2f / %.2f / %.2f s\n",
           t["trim"], t["quantize"], t["swift"], t["compressed_trim"]
    printf "  inspect 1 GiB vs 16 MiB file:                         %.2fx time (goal <= 2)\n", t["inspect_big"] / t["inspect_small"]
    printf "  inspect compressed vs --version:                      %.2fx time (goal <= 2)\n", t["inspect_compressed"] / t["version"]
    # RSS counts the resident pages of the mapped input: subtract its size.
    printf "  peak RSS beyond the mapped input (MiB, goal < 128): save %d, copy %d, compress %d, decompress %d, trim %d, quantize %d, swift %d, compressed trim %d\n",
           (rss["save"] * 1024 - bytes) / mib, (rss["copy"] * 1024 - bytes) / mib, (rss["compress"] * 1024 - bytes) / mib,
           (rss["decompress"] * 1024 - zin) / mib, (rss["trim"] * 1024 - bytes) / mib, (rss["quantize"] * 1024 - bytes) / mib,
           (rss["swift"] * 1024 - bytes) / mib, (rss["compressed_trim"] * 1024 - zin) / mib
  }' "$dir/results"
write_ratios
