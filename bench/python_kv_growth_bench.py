"""mlx-lm's KVCache step growth, for BM_KVCacheGrowth (docs/performance.md).

    python3 bench/python_kv_growth_bench.py [--contexts 32768 131072] [--runs 7]

Times the real mlx-lm KVCache.update_and_fetch (../shared/mlx-ref, or KVSTORE_MLX_REF) for
the one-token append that crosses a 256-token step on a cache holding CONTEXT tokens of
[1, 8, CONTEXT, 128] F16 keys and values: mlx-lm allocates a step of zeros and concatenates
the history with it, then writes the token; mx.eval forces the lazy graph. Each run restores
a full cache first (cache.state = (keys, values), which shares the arrays), untimed, as
kvstore_bench's BM_KVCacheGrowth does. Prints every run's time, the median and the spread.
"""

import argparse
import os
import pathlib
import statistics
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
MLX_REF = pathlib.Path(os.environ.get("KVSTORE_MLX_REF") or REPO.parent / "shared" / "mlx-ref")
sys.path.insert(0, str(MLX_REF / "python"))

import mlx.core as mx  # noqa: E402
from mlx_lm.models import cache as mlx_cache  # noqa: E402


def growth_ms(context, runs):
    full = mx.full((1, 8, context, 128), 1.0, dtype=mx.float16)
    step = mx.ones((1, 8, 1, 128), dtype=mx.float16)
    mx.eval(full, step)
    times = []
    for _ in range(runs):
        cache = mlx_cache.KVCache()
        cache.state = (full, full)
        start = time.perf_counter()
        keys, values = cache.update_and_fetch(step, step)
        mx.eval(keys, values, cache.keys, cache.values)
        times.append((time.perf_counter() - start) * 1e3)
        assert cache.keys.shape[2] == context + mlx_cache.KVCache.step, cache.keys.shape
        del keys, values, cache
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contexts", type=int, nargs="+", default=[32768, 131072])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    print(f"mlx {mx.__version__}, cache.py from {MLX_REF}")
    for context in args.contexts:
        times = growth_ms(context, args.runs)
        print(f"mlx-lm KVCache growth at {context} tokens: median {statistics.median(times):.1f} ms, "
              f"min {min(times):.1f}, max {max(times):.1f} ({', '.join(f'{t:.1f}' for t in times)})")


if __name__ == "__main__":
    main()
