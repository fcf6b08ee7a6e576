#!/usr/bin/env bash
# Kills a process that keeps re-writing a prompt-cache file with SIGKILL at
# random moments: the file must always be a complete old or new version
# (verified digests), and temp files of dead writers are removed by the next
# write.   crash_test.sh WRITER KVTOOL [RUNS=50] [MODE]
# MODE "fast": the writer saves as the disk tier does (XXH3-128, no fsync).
set -uo pipefail
writer=$1 kvtool=$2 runs=${3:-50} mode=${4:-}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
path=$dir/cache.safetensors
"$writer" "$path" once $mode || { echo "initial write failed"; exit 1; }
failures=0
for ((i = 0; i < runs; i++)); do
  "$writer" "$path" $mode &
  pid=$!
  sleep "0.$(printf '%03d' $((RANDOM % 120)))"
  kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  if ! "$kvtool" verify -q "$path"; then
    echo "run $i: file does not verify"; failures=$((failures + 1)); continue
  fi
  version=$("$kvtool" inspect --json "$path" | grep '"version"' | tr -d ' ",' | cut -d: -f2)
  if [[ $version != A && $version != B ]]; then
    echo "run $i: unexpected version '$version'"; failures=$((failures + 1))
  fi
  temps=$(find "$dir" -name 'cache.safetensors.kvtmp-*' | wc -l)
  if ((temps > 1)); then echo "run $i: $temps temp files left"; failures=$((failures + 1)); fi
done
"$writer" "$path" once $mode || failures=$((failures + 1))
temps=$(find "$dir" -name 'cache.safetensors.kvtmp-*' | wc -l)
if ((temps != 0)); then echo "$temps stray temp files after a clean write"; failures=$((failures + 1)); fi
if ((failures)); then echo "$failures failures"; exit 1; fi
echo "crash test: $runs kills, file always complete"
