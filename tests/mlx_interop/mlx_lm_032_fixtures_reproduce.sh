#!/usr/bin/env bash
# fixtures/mlx-lm-0.32 is what make_mlx_lm_032_fixtures.py writes with the real
# mlx-lm 0.32 (../shared/mlx-ref, or $KVSTORE_MLX_REF): the same files, byte for
# byte. Skips (exit 77), saying why, without mlx-ref or a Python that imports it.
#   mlx_lm_032_fixtures_reproduce.sh PYTHON
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
ref=${KVSTORE_MLX_REF:-$repo/../shared/mlx-ref}
python=${1:-python3}
if [[ ! -f $ref/python-mlx-lm-0.32/mlx_lm/models/cache.py ]]; then
  echo "SKIP: no mlx-lm 0.32 at $ref/python-mlx-lm-0.32 (set KVSTORE_MLX_REF to a copy of mlx-ref)"
  exit 77
fi
export PYTHONPATH=$ref/python-mlx-lm-0.32:$ref/python PYTHONDONTWRITEBYTECODE=1
if ! why=$("$python" -c 'import mlx.core' 2>&1); then
  echo "SKIP: $python cannot import mlx-ref's MLX: $why"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$python" "$here/make_mlx_lm_032_fixtures.py" "$tmp" || exit 1
cp "$repo/fixtures/mlx-lm-0.32/README.md" "$tmp/"
diff -r "$repo/fixtures/mlx-lm-0.32" "$tmp" && echo "fixtures/mlx-lm-0.32: $(ls "$tmp" | wc -l) files as the generator writes them"
