#!/usr/bin/env bash
# prompt_cache_sim under ctest: a short run, a SIGKILLed run recovered on
# the same store, a corrupted store file, two processes sharing one store, and store
# files or manifest lines that disagree with their keys.
#   sim_test.sh SIM short      a short run, three servers sharing a chunk tier (also run under TSan), and
#                              three tenants that never share a prefix
#   sim_test.sh SIM recovery   SIGKILL + restart, manifest, corruption, two processes sharing
#   sim_test.sh SIM faults     edited manifest tokens, a renamed file, swapped files
set -uo pipefail
sim=$1 mode=${2:-short}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
check() {  # check OUTPUT_FILE: zero mismatches and corrupt entries served
  grep -q '^mismatches: 0$' "$1" || fail "mismatches in $(cat "$1")"
  grep -q '^corrupt_served: 0$' "$1" || fail "corrupt served in $(cat "$1")"
  grep -q '^cross_tenant_hits: 0$' "$1" || fail "cross-tenant hits in $(cat "$1")"
}
metric() { awk -v n="$2" '$1 == n { print $2 }' "$1"; }  # metric FILE 'NAME{LABELS}': its value
metric_sum() { awk -v n="$2" 'index($1, n) == 1 { s += $2 } END { print s + 0 }' "$1"; }  # over NAME's series
# check_metrics PROM OUT REQUESTS: the --metrics file agrees with the summary.
check_metrics() {
  [[ -s $1 ]] || { fail "no metrics file $1"; return; }
  (($(grep -c '^# TYPE kvstore_prompt_cache_' "$1") >= 14)) || fail "families missing: $(grep '^# TYPE' "$1")"
  [[ $(metric "$1" kvstore_prompt_cache_fetches_total) == "$3" ]] || fail "fetches_total != $3: $(head -3 "$1")"
  local hits
  hits=$(sed -n 's/^hits: \([0-9]*\) .*/\1/p' "$2")
  [[ $(metric_sum "$1" 'kvstore_prompt_cache_hits_total{') == "$hits" ]] || fail "hits_total != $hits"
  [[ $(metric_sum "$1" kvstore_prompt_cache_fetch_duration_seconds_count) == "$3" ]] || fail "histogram count != $3"
  [[ $(metric "$1" 'kvstore_prompt_cache_fetch_duration_seconds_bucket{result="miss",le="+Inf"}') == \
     $(metric "$1" 'kvstore_prompt_cache_fetch_duration_seconds_count{result="miss"}') ]] || fail "+Inf bucket != count"
}

if [[ $mode == short ]]; then
  "$sim" --threads 2 --requests 300 --seed 1 --metrics "$dir/short.prom" > "$dir/short.out" ||
    fail "short run exited non-zero"
  check "$dir/short.out"
  grep -q '^hit_rate: ' "$dir/short.out" || fail "no hit_rate line"
  # Hits are counted in requests, shared_hits in tokens: each line says so.
  grep -Eq '^hits: [0-9]+ requests \(disk [0-9]+, shared tier [0-9]+\)$' "$dir/short.out" ||
    fail "hits line: $(grep '^hits' "$dir/short.out")"
  # A bad --redis URL is reported once, before any worker process starts.
  "$sim" --redis redis://127.0.0.1 --processes 3 --requests 10 > "$dir/badurl.out" 2>&1; rc=$?
  [[ $rc == 2 && $(grep -c 'redis url: the port is missing' "$dir/badurl.out") == 1 ]] &&
    ! grep -q '^processes:' "$dir/badurl.out" || fail "bad --redis URL (exit $rc): $(cat "$dir/badurl.out")"
  check_metrics "$dir/short.prom" "$dir/short.out" 300
  "$sim" --threads 1 --requests 5 --metrics "$dir/no/such/dir/m.prom" > /dev/null 2>&1
  [[ $? == 2 ]] || fail "an unwritable metrics file did not fail the run"
  # Three servers sharing a sealed chunk tier, each with its own memory.
  "$sim" --threads 2 --requests 300 --seed 1 --processes 3 --chunk-tokens 16 --secret s \
    --metrics "$dir/shared.prom" > "$dir/shared.out" || fail "shared run exited non-zero: $(cat "$dir/shared.out")"
  check "$dir/shared.out"
  check_metrics "$dir/shared.prom" "$dir/shared.out" 300
  (($(metric "$dir/shared.prom" 'kvstore_prompt_cache_hits_total{tier="shared"}') > 0)) || fail "no shared-tier hits counted"
  grep -Eq '^shared_hits: [1-9][0-9]* tokens ' "$dir/shared.out" || fail "no shared hits: $(cat "$dir/shared.out")"
  grep -Eq '^dedup: 0\.[0-9]+$' "$dir/shared.out" || fail "no dedup line: $(cat "$dir/shared.out")"
  # Three tenants over three servers with disk and shared tiers: each tenant
  # reuses its own prefixes, never another's, and no salt is written anywhere.
  tenants=(--threads 2 --requests 300 --seed 1 --processes 3 --chunk-tokens 16 --tenants 3)
  "$sim" "${tenants[@]}" --store "$dir/tenants" --metrics "$dir/tenants.prom" > "$dir/tenants.out" 2>&1 ||
    fail "tenants run exited non-zero: $(cat "$dir/tenants.out")"
  check "$dir/tenants.out"
  [[ $(metric "$dir/tenants.prom" prompt_cache_sim_cross_tenant_hits) == 0 ]] || fail "metrics: $(tail -3 "$dir/tenants.prom")"
  grep -Eq '^hit_rate: [1-9]' "$dir/tenants.out" || fail "no hits: $(cat "$dir/tenants.out")"
  ! grep -rqF 'prompt_cache_sim tenant' "$dir/tenants" "$dir/tenants.out" || fail "a tenant salt was written"
  # The same tenants without salts share prefixes: the check sees it and the run fails.
  "$sim" "${tenants[@]}" --unsalted-tenants --metrics "$dir/unsalted.prom" > "$dir/unsalted.out" 2>&1; rc=$?
  [[ $rc == 1 ]] && grep -Eq '^cross_tenant_hits: [1-9]' "$dir/unsalted.out" ||
    fail "unsalted tenants (exit $rc): $(cat "$dir/unsalted.out")"
  [[ $(metric "$dir/unsalted.prom" prompt_cache_sim_cross_tenant_hits) == \
     $(sed -n 's/^cross_tenant_hits: //p' "$dir/unsalted.out") ]] || fail "metrics: $(tail -3 "$dir/unsalted.prom")"
  if ((failures)); then echo "$failures failures"; exit 1; fi
  echo "prompt_cache_sim short run passed"
  exit 0
fi

# Live manifest entries whose file exists: "file bytes token_count tokens", sorted.
entries() {
  awk '$1 == "+" { e[$2] = $3 " " $5 } $1 == "-" { delete e[$2] } END { for (f in e) print f, e[f] }' "$1/MANIFEST" |
    while read -r f b t; do [[ -f $1/$f ]] && echo "$f $b $(awk -F, '{ print NF }' <<< "$t") $t"; done | sort
}
# set_field STORE FILE FIELD VALUE: sets a field of FILE's "+" lines in the manifest.
set_field() {
  awk -v f="$2" -v i="$3" -v v="$4" '$1 == "+" && $2 == f { $i = v } { print }' "$1/MANIFEST" > "$1/MANIFEST.new" &&
    mv "$1/MANIFEST.new" "$1/MANIFEST"
}
swap() { mv "$1" "$1.swap" && mv "$2" "$1" && mv "$1.swap" "$2"; }
# fault NAME: a fresh copy of the base store in $dir/NAME.
fault() { rm -rf "${dir:?}/$1" && cp -r "$dir/base" "$dir/$1"; }
# The fault runs: no memory tier (every fetch reaches the disk) and prompts
# without a new message, so that the system prompts' own entries are served.
# System prompts of 24 tokens: shorter than one lookup granule (32), their
# entries are kept beside the longer ones that extend them (a longer,
# trimmable entry supersedes its stored prefixes of 32 tokens or more).
fault_args=(--threads 1 --requests 100 --max-entries 0 --tail-tokens 0 --seed 5 --system-tokens 24)
# run NAME: the base run's traffic again on $dir/NAME.
run() {
  "$sim" "${fault_args[@]}" --store "$dir/$1" --metrics "$dir/$1.prom" > "$dir/$1.out" ||
    fail "$1: run exited non-zero: $(cat "$dir/$1.out")"
  check "$dir/$1.out"
}

if [[ $mode == faults ]]; then
  "$sim" "${fault_args[@]}" --store "$dir/base" > "$dir/base.out" || fail "base run"
  mapfile -t systems < <(entries "$dir/base" | awk '$3 == 24')  # the shared system prompts
  ((${#systems[@]} >= 2)) || { echo "FAIL: ${#systems[@]} system-prompt entries in the base store"; exit 1; }
  read -r s1_file s1_bytes _ s1_tokens <<< "${systems[0]}"
  read -r s2_file s2_bytes _ _ <<< "${systems[1]}"

  # Edited manifest: a longer entry's line claims the first system prompt's
  # tokens, whose own file is gone. The line is ignored, the file read.
  fault edited
  read -r long_file _ < <(entries "$dir/edited" | awk -v p="$s1_tokens," '$3 > 24 && index($4, p) == 1')
  [[ -n $long_file ]] || fail "edited: no entry extends the system prompt"
  rm "$dir/edited/$s1_file"
  set_field "$dir/edited" "$long_file" 5 "$s1_tokens"
  run edited
  grep -Eq ' [1-9][0-9]* manifest lines ignored' "$dir/edited.out" || fail "edited: line not ignored: $(head -1 "$dir/edited.out")"

  # A file renamed to a name its key does not give: dropped at open.
  fault renamed
  mv "$dir/renamed/$s1_file" "$dir/renamed/00000000deadbeef.safetensors"
  run renamed
  grep -q '^  dropped 00000000deadbeef.safetensors: ' "$dir/renamed.out" || fail "renamed: not dropped: $(head -3 "$dir/renamed.out")"

  # Two entries' files exchanged, the manifest sizes made to agree: caught
  # when loaded, counted, never served.
  fault swapped
  swap "$dir/swapped/$s1_file" "$dir/swapped/$s2_file"
  set_field "$dir/swapped" "$s1_file" 3 "$s2_bytes"
  set_field "$dir/swapped" "$s2_file" 3 "$s1_bytes"
  run swapped
  grep -Eq ' [1-9][0-9]* mismatched dropped' "$dir/swapped.out" || fail "swapped: not counted: $(grep '^disk' "$dir/swapped.out")"
  (($(metric "$dir/swapped.prom" 'kvstore_prompt_cache_refused_total{tier="disk",reason="wrong_key"}') > 0)) ||
    fail "swapped: no wrong_key refusal in the metrics"

  # The same exchange without a manifest: both names disagree at open.
  fault swapped_scan
  swap "$dir/swapped_scan/$s1_file" "$dir/swapped_scan/$s2_file"
  rm "$dir/swapped_scan/MANIFEST"
  run swapped_scan
  # The scan drops both, unless a fetch reaches one first (the store indexes in the background
  # while the run's fetches find entries by name): that one is refused when loaded, counted as
  # mismatched, and never served (check).
  scan_dropped=$(grep -c -e "^  dropped $s1_file: " -e "^  dropped $s2_file: " "$dir/swapped_scan.out")
  if ((scan_dropped < 2)) && ! grep -Eq ' [1-9][0-9]* mismatched dropped' "$dir/swapped_scan.out"; then
    fail "swapped_scan: not both dropped: $(head -4 "$dir/swapped_scan.out"; grep '^disk' "$dir/swapped_scan.out")"
  fi

  if ((failures)); then echo "$failures failures"; exit 1; fi
  echo "prompt_cache_sim fault cases passed"
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
grep -Eq '\(([1-9][0-9]*) from the manifest, 0 manifest lines ignored\)' "$dir/manifest.out" || fail "manifest not used: $(head -1 "$dir/manifest.out")"

# A corrupted entry is dropped or refused, never served.
files=("$dir/store"/*.safetensors)
((${#files[@]} >= 2)) || fail "${#files[@]} store files after the manifest run"
size=$(stat -c %s "${files[0]}")
printf '\x55' | dd of="${files[0]}" bs=1 seek=$((size - 7)) conv=notrunc status=none
head -c 100 "${files[-1]}" > "$dir/store/truncated.safetensors"
"$sim" --threads 2 --requests 200 --store "$dir/store" --max-entries 8 --seed 2 > "$dir/corrupt.out" ||
  fail "run over a corrupted store exited non-zero: $(cat "$dir/corrupt.out")"
check "$dir/corrupt.out"
grep -q 'dropped truncated.safetensors' "$dir/corrupt.out" || fail "truncated file not reported"

# Two processes share the directory: both run their bit-exact checks to the
# end, each serving from disk (prompt_cache_store_sharing_test covers what
# one serves of the other's entries).
"$sim" --threads 2 --requests 300 --store "$dir/store" --max-entries 8 --seed 5 > "$dir/share1.out" 2>&1 &
pid=$!
"$sim" --threads 2 --requests 300 --store "$dir/store" --max-entries 8 --seed 6 > "$dir/share2.out" 2>&1 ||
  fail "second process on the store: $(cat "$dir/share2.out")"
wait "$pid" || fail "first process on a shared store: $(cat "$dir/share1.out")"
for out in "$dir/share1.out" "$dir/share2.out"; do
  check "$out"
  grep -q 'disk [1-9]' "$out" || fail "no disk hits in a shared store: $(cat "$out")"
done

if ((failures)); then echo "$failures failures"; exit 1; fi
echo "prompt_cache_sim tests passed"
