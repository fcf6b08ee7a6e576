#!/bin/sh
# pip_install_test.sh PYTHON REPO TARGET: installs the repository with pip
# (no build isolation, no index, no network) into TARGET and uses it.
set -eu
python=$1 repo=$2 target=$3
rm -rf "$target"
"$python" -m pip install "$repo" --no-build-isolation --no-index --no-deps --quiet --target "$target"
cd "$target"
PYTHONPATH="$target" "$python" - "$target" "$repo" <<'PY'
import os, sys
target, repo = sys.argv[1], sys.argv[2]
import kvstore, kvstore.mlx_lm
assert kvstore.__file__.startswith(target), kvstore.__file__
f = kvstore.load(os.path.join(repo, "fixtures", "mlx-lm", "kvcache_f16_4l.safetensors"))
assert len(f.layers) == 4 and f.layers[0].class_name == "KVCache"
print("pip install: 1 passed, 0 failed")
PY
