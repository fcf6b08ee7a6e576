"""Where kvstore.mlx_lm's save of a 1 GiB cache spends its time (docs/performance.md).

    PYTHONPATH=build/python /usr/bin/python3 bench/python_save_phases.py [--tokens 8192] [--runs 3]

The cache of bench/python_mlx_lm_bench.py (32 KVCache layers of [1, 8, TOKENS, 128] BF16),
in MLX memory. Times, best and median of RUNS: mlx-lm's save_prompt_cache with and without
an fsync of the output; handing the caches to the library (layers_from_caches); the
library's save without digests (write, fsync, rename) and with them (plus SHA-256).
Needs ../shared/mlx-ref (or KVSTORE_MLX_REF).
"""

import argparse
import gc
import os
import pathlib
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
MLX_REF = pathlib.Path(os.environ.get("KVSTORE_MLX_REF") or REPO.parent / "shared" / "mlx-ref")
sys.path.insert(0, str(MLX_REF / "python"))

import mlx.core as mx  # noqa: E402
from mlx_lm.models import cache as mlx_cache  # noqa: E402

from kvstore import _kvstore  # noqa: E402
from kvstore._mlx_bridge import layers_from_caches, layout_for  # noqa: E402


def timed(name, fn, runs):
    times = []
    for _ in range(runs):
        gc.collect()
        os.sync()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    times.sort()
    print(f"  {name:<42} {times[0]:6.3f} / {times[len(times) // 2]:6.3f} s", flush=True)


def fsync(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    caches = []
    for i in range(32):
        c = mlx_cache.KVCache()
        c.state = tuple(mx.random.normal((1, 8, args.tokens, 128), key=mx.random.key(2 * i + j)).astype(mx.bfloat16)
                        for j in range(2))
        caches.append(c)
    mx.eval([c.state for c in caches])
    print(f"save phases, {sum(c.nbytes for c in caches) / 2**30:.2f} GiB; seconds (best / median)")
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        out = os.path.join(d, "out.safetensors")
        timed("mlx-lm save_prompt_cache", lambda: mlx_cache.save_prompt_cache(out, caches), args.runs)
        timed("mlx-lm save_prompt_cache + fsync", lambda: (mlx_cache.save_prompt_cache(out, caches), fsync(out)),
              args.runs)
        timed("layers_from_caches", lambda: layers_from_caches(caches), args.runs)
        layers = layers_from_caches(caches)
        for integrity in (False, True):
            timed(f"kvstore save, integrity={integrity}",
                  lambda: _kvstore.save(out, layers, {}, integrity=integrity, layout=layout_for(layers)), args.runs)


if __name__ == "__main__":
    main()
