"""TieredPromptCache's fetch and insert, as mlx_lm.server calls them (docs/performance.md).

    PYTHONPATH=build/python /usr/bin/python3 bench/python_tiered_bench.py [--tokens 2048] [--runs 30]

The cache is what mlx-lm's server inserts: 32 KVCache layers of [1, 8, TOKENS, 128] BF16
(TOKENS=2048 is 256 MiB) made by update_and_fetch, on the thread that calls the cache. Rows,
each timed on the calling thread (what the model thread spends), best and median of RUNS:
  insert: memory            insert_cache into a memory-only TieredPromptCache
  insert: + disk            insert_cache with a disk tier (the write itself is queued; the
                            bench waits for it with flush() outside the timed region)
  fetch: memory hit         fetch_nearest_cache of the inserted prompt + 1 token: a deep copy
  fetch: memory, LRUPromptCache  the same on mlx-lm's own LRUPromptCache (reference)
  fetch: disk hit           a memory miss served by the disk tier: load, verify, build MLX caches
The reference row runs in the same process, so ratios against it hold on a loaded machine.
Besides wall times the script prints the median CPU time of the calling thread
(time.thread_time): what the call itself costs the model thread, without the time it waits
for a core (the disk write runs on another thread at once, and on a busy machine competes
with the caller for the cores).
Works with any kvstore build that has kvstore.mlx_lm.TieredPromptCache (compare two builds
by pointing PYTHONPATH at each). Needs ../shared/mlx-ref (or KVSTORE_MLX_REF).
"""

import argparse
import os
import pathlib
import statistics
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
MLX_REF = pathlib.Path(os.environ.get("KVSTORE_MLX_REF") or REPO.parent / "shared" / "mlx-ref")
sys.path.insert(0, str(MLX_REF / "python"))

import mlx.core as mx  # noqa: E402
from mlx_lm.models import cache as mlx_cache  # noqa: E402

from kvstore.mlx_lm import TieredPromptCache  # noqa: E402

MODEL = ("bench-model", None, None)


def make_cache(tokens, seed, layers=32):
    caches = []
    for i in range(layers):
        c = mlx_cache.KVCache()
        k = mx.random.normal((1, 8, tokens, 128), key=mx.random.key(seed * 1000 + i)).astype(mx.bfloat16)
        c.update_and_fetch(k, k)
        caches.append(c)
    mx.eval([c.state for c in caches])
    return caches


def timed(fn):
    """((wall seconds, this thread's CPU seconds), fn())."""
    start, cpu = time.perf_counter(), time.thread_time()
    out = fn()
    return (time.perf_counter() - start, time.thread_time() - cpu), out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    times = {}
    add = times.setdefault
    prompt = list(range(1, args.tokens + 1))
    with tempfile.TemporaryDirectory() as tmp:
        caches = [make_cache(args.tokens, seed) for seed in range(2)]
        memory = TieredPromptCache(max_size=4)
        reference = mlx_cache.LRUPromptCache(max_size=4)
        reference.insert_cache(MODEL, prompt, caches[0])
        disk = TieredPromptCache(max_size=4, directory=os.path.join(tmp, "store"), disk_bytes=6 * (args.tokens << 17))
        for run in range(args.runs):
            tokens = [run + 1_000_000] + prompt[1:]  # a new key every run, as long as the caches
            c = caches[run % 2]
            add("insert: memory", []).append(timed(lambda: memory.insert_cache(MODEL, tokens, c))[0])
            add("insert: + disk", []).append(timed(lambda: disk.insert_cache(MODEL, tokens, c))[0])
            disk.flush()
            query = tokens + [7]
            t, (got, rest) = timed(lambda: memory.fetch_nearest_cache(MODEL, query))
            assert got is not None and rest == [7]
            add("fetch: memory hit", []).append(t)
            t, (got, rest) = timed(lambda: reference.fetch_nearest_cache(MODEL, prompt + [7]))
            assert got is not None and rest == [7]
            add("fetch: memory, LRUPromptCache", []).append(t)
            disk.trim_to(n_sequences=0)
            t, (got, rest) = timed(lambda: disk.fetch_nearest_cache(MODEL, query))
            assert got is not None and rest == [7], rest[:3]
            mx.eval([g.state for g in got])
            add("fetch: disk hit", []).append(t)
        disk.close()
    nbytes = sum(c.nbytes for c in caches[0])
    print(f"cache: 32 KVCache layers, {args.tokens} tokens, {nbytes / 2**20:.0f} MiB; {args.runs} runs; "
          f"load average {os.getloadavg()[0]:.1f}")
    for name, samples in times.items():
        wall = [w for w, _ in samples]
        cpu = [c for _, c in samples]
        print(f"{name:32s} best {min(wall) * 1e3:9.3f} ms   median {statistics.median(wall) * 1e3:9.3f} ms   "
              f"thread CPU median {statistics.median(cpu) * 1e3:9.3f} ms")


if __name__ == "__main__":
    main()
