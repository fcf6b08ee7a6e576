#!/usr/bin/env bash
# prompt_cache_sim under ctest: a short run, a SIGKILLed run recovered on
# the same store, a corrupted store file, and a second owner refused.
#   sim_test.sh SIM short      a short run (also run under TSan)
#   sim_test.sh SIM recovery   SIGKILL + restart, manifest, corruption, second owner
set -uo pipefail
sim=$1 mode=${2:-short}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
check() {  # check OUTPUT_FILE: zero mismatches and corrupt entries served
  grep -q '^mismatches: 0$' "$1" || fail "mismatches in $(cat "$1")"
  grep -q '^corrupt_served: 0$' "$1" || fail "corrupt served in $(cat "$1")"
}

if [[ $mode == short ]]; then
  "$sim" --threads 2 --requests 300 --seed 1 > "$dir/short.out" || fail "short run exited non-zero"
  check "$dir/short.out"
  grep -q '^hit_rate: ' "$dir/short.out" || fail "no hit_rate line"
  if ((failures)); then echo "$failures failures"; exit 1; fi
  echo "prompt_cache_sim short run passed"
  exit 0
fi

# Killed mid-run, then restarted on the same store directory.
"$sim" --threads 2 --requests 100000 --store "$dir/store" --max-entries 8 --seed 2 > "$dir/killed.out" &
pid=$!
sleep 1.5
kill -9 "$pid"; wait "$pid" 2>/dev/null
"$sim" --threads 2 --requests 200 --store "$dir/store" --max-entries 8 --seed 3 > "$dir/recovered.out" ||
  fail "recovered run exited non-zero: $(cat "$dir/recovered.out")"
check "$dir/recovered.out"
grep -q 'disk [1-9]' "$dir/recovered.out" || fail "no disk hits after recovery: $(cat "$dir/recovered.out")"

# After a clean run the manifest indexes the entries without reading them.
"$sim" --threads 1 --requests 5 --store "$dir/store" --max-entries 8 --seed 4 > "$dir/manifest.out" || fail "manifest run"
grep -Eq '\(([1-9][0-9]*) from the manifest\)' "$dir/manifest.out" || fail "manifest not used: $(head -1 "$dir/manifest.out")"

# A corrupted entry is dropped or refused, never served.
victim=$(ls "$dir/store"/*.safetensors | head -1)
size=$(stat -c %s "$victim")
printf '\x55' | dd of="$victim" bs=1 seek=$((size - 7)) conv=notrunc status=none
head -c 100 "$(ls "$dir/store"/*.safetensors | tail -1)" > "$dir/store/truncated.safetensors"
"$sim" --threads 2 --requests 200 --store "$dir/store" --max-entries 8 --seed 2 > "$dir/corrupt.out" ||
  fail "run over a corrupted store exited non-zero: $(cat "$dir/corrupt.out")"
check "$dir/corrupt.out"
grep -q 'dropped truncated.safetensors' "$dir/corrupt.out" || fail "truncated file not reported"

# A second process on the same directory is refused with a clear error.
"$sim" --threads 1 --requests 100000 --store "$dir/store" > /dev/null &
pid=$!
sleep 0.5
out=$("$sim" --threads 1 --requests 10 --store "$dir/store" 2>&1); rc=$?
kill -9 "$pid"; wait "$pid" 2>/dev/null
[[ $rc == 2 && $out == *"held by another process"* ]] || fail "second owner: rc=$rc out=$out"

if ((failures)); then echo "$failures failures"; exit 1; fi
echo "prompt_cache_sim tests passed"
