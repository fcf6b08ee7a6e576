#!/usr/bin/env bash
# Files kvtool writes, read by the real mlx-lm (../shared/mlx-ref, or the
# directory in $KVSTORE_MLX_REF). Skips (exit 77), saying why, when mlx-ref
# or a Python that can import it is missing.
#   mlx_ref_test.sh KVTOOL FIXTURES_DIR
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ref=${KVSTORE_MLX_REF:-$here/../../../shared/mlx-ref}
if [[ ! -d $ref/python/mlx_lm ]]; then
  echo "SKIP: no mlx-ref at $ref (set KVSTORE_MLX_REF to a copy of it)"
  exit 77
fi
python=${KVSTORE_TEST_PYTHON:-$(command -v python3 || true)}
if [[ -z $python ]] || ! why=$(PYTHONPATH=$ref/python "$python" -c 'import mlx.core' 2>&1); then
  echo "SKIP: python3 cannot import mlx-ref's MLX (it needs CPython 3.11 and libopenblas0-pthread): ${why:-no python3}"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
PYTHONPATH=$ref/python "$python" "$here/mlx_ref_arrays.py" "$(realpath "$1")" "$(realpath "$2")" "$tmp"
