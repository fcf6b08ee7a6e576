#!/usr/bin/env bash
# Quick start, command 1: install what is missing, build, and inspect a
# prompt-cache file written by the real mlx-lm.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup-deps.sh"
"$root/scripts/build.sh" "$root/build"
"$root/build/apps/kvtool/kvtool" inspect "$root/fixtures/mlx-lm/kvcache_f16_4l.safetensors"
