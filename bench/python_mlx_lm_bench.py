"""kvstore.mlx_lm against mlx-lm's own functions, in one script (docs/performance.md).

    PYTHONPATH=build/python /usr/bin/python3 bench/python_mlx_lm_bench.py [--tokens 8192] [--runs 5]

The cache is mlx-lm's: 32 KVCache layers of [1, 8, TOKENS, 128] BF16 keys and values
~ N(0, 1) (TOKENS=8192 is 1 GiB), saved by mlx-lm's save_prompt_cache. Each round runs,
on the same warm input file:
  mlx-lm        load_prompt_cache + save_prompt_cache (mlx_lm.models.cache); no fsync
  mlx-lm+fsync  the same, then fsync of the output: the durability kvstore's save has
  kvstore       kvstore.mlx_lm.load_prompt_cache + save_prompt_cache(integrity=True)
  kvstore-v     the same from a kvstore-written input, loaded with verify=True
  kvstore-x     from an XXH3 input loaded with verify=True, saved with integrity="xxh3",
                durable=False (the cache's path; compared with mlx-lm)
  kvstore-x+fsync  the same saved with durable=True (compared with mlx-lm+fsync)
and the two halves alone (load: the arrays evaluated in MLX memory; save: of caches already
in MLX memory). The rows above replace the output file of the round before, as a server
re-saving a conversation does; "new: mlx-lm" and "new: kvstore-x" are the round trips to a
path where no file is (the old one removed before the timer starts). It prints the best (minimum) and median wall times and mlx-lm / this. It
also times kvstore.load (buffers only) of the 1 GiB file against a one-layer file, to
show that it costs O(header). Needs ../shared/mlx-ref (or KVSTORE_MLX_REF) and numpy.

As bench/file_bench.sh does (docs/performance.md): before every timed run the script writes
TOUCH_GIB GiB of memory (default 3) and syncs dirty pages, and, run as root on a VM that
reports free pages to its host, delays that reporting to 100 s for its duration (restored at
exit; KVBENCH_KEEP_VM_SETTINGS=1 leaves it alone): the first write to a page the host took
back costs microseconds, which would otherwise dominate any run that allocates 1 GiB.
"""

import argparse
import gc
import json
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

import kvstore  # noqa: E402
import kvstore.mlx_lm  # noqa: E402


def make_input(path, tokens, layers=32):
    caches = []
    for i in range(layers):
        c = mlx_cache.KVCache()
        k = mx.random.normal((1, 8, tokens, 128), key=mx.random.key(2 * i)).astype(mx.bfloat16)
        v = mx.random.normal((1, 8, tokens, 128), key=mx.random.key(2 * i + 1)).astype(mx.bfloat16)
        c.state = (k, v)
        caches.append(c)
    mx.eval([c.state for c in caches])
    mlx_cache.save_prompt_cache(path, caches, {"model": "bench"})
    return sum(c.nbytes for c in caches)


PAGE_REPORTING = "/sys/module/page_reporting/parameters/min_free_ms"


def delay_page_reporting():
    """Returns the old setting to restore, or None when left alone."""
    if os.environ.get("KVBENCH_KEEP_VM_SETTINGS") == "1" or not os.access(PAGE_REPORTING, os.W_OK):
        return None
    old = open(PAGE_REPORTING).read().strip()
    with open(PAGE_REPORTING, "w") as f:
        f.write("100000")
    print(f"note: free page reporting delayed to 100 s for the run (was {old} ms)")
    return old


def touch_memory():
    import numpy as np

    gib = float(os.environ.get("TOUCH_GIB", "3"))
    if gib > 0:
        block = np.ones(int(gib * 2**30), dtype=np.uint8)  # writes every page
        del block
    os.sync()


def timed(fn, before=None):
    gc.collect()
    if before is not None:
        before()
    touch_memory()
    start = time.perf_counter()
    fn()
    elapsed = time.perf_counter() - start
    gc.collect()
    return elapsed


# glibc returns freed blocks of 8+ MiB to the system (mmap threshold, heap trimming), so
# whether an MLX array lands on pages already backed depends on which row ran before; on
# this VM a first touch costs ~30 us per page (about 8 s per GiB), far more than any read or
# hash. Every row gets reused memory instead: blocks up to 32 MiB from the heap, never trimmed.
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(1 << 40)}


def main():
    if os.environ.get("KVBENCH_KEEP_MALLOC") != "1" and any(os.environ.get(k) != v for k, v in MALLOC_ENV.items()):
        os.execve(sys.executable, [sys.executable] + sys.argv, {**os.environ, **MALLOC_ENV})
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--dir", default=None)
    parser.add_argument("--only", default=None,
                        help="run only the rows whose names start with this (e.g. 'load:'), with their references")
    args = parser.parse_args()
    old_reporting = delay_page_reporting()
    try:
        run(args)
    finally:
        if old_reporting is not None:
            with open(PAGE_REPORTING, "w") as f:
                f.write(old_reporting)


def run(args):
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        src, src_kv = os.path.join(d, "in.safetensors"), os.path.join(d, "in-kvstore.safetensors")
        nbytes = make_input(src, args.tokens)
        kvstore.mlx_lm.save_prompt_cache(src_kv, mlx_cache.load_prompt_cache(src), {"model": "bench"})
        src_x = os.path.join(d, "in-xxh3.safetensors")
        kvstore.mlx_lm.save_prompt_cache(src_x, mlx_cache.load_prompt_cache(src), {"model": "bench"}, integrity="xxh3")
        out = os.path.join(d, "out.safetensors")
        out_new = os.path.join(d, "out-new.safetensors")

        def remove_new():
            if os.path.exists(out_new):
                os.unlink(out_new)

        def reference():
            mlx_cache.save_prompt_cache(out, mlx_cache.load_prompt_cache(src))

        def reference_fsync():
            reference()
            fd = os.open(out, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)

        in_memory = mlx_cache.load_prompt_cache(src)
        mx.eval([c.state for c in in_memory])

        def ours():
            kvstore.mlx_lm.save_prompt_cache(out, kvstore.mlx_lm.load_prompt_cache(src), integrity=True)

        def ours_verified():
            kvstore.mlx_lm.save_prompt_cache(out, kvstore.mlx_lm.load_prompt_cache(src_kv, verify=True), integrity=True)

        def ours_xxh3(durable):
            kvstore.mlx_lm.save_prompt_cache(out, kvstore.mlx_lm.load_prompt_cache(src_x, verify=True),
                                             integrity="xxh3", durable=durable)

        fns = {
            "mlx-lm": reference,
            "mlx-lm+fsync": reference_fsync,
            "kvstore": ours,
            "kvstore-v": ours_verified,
            "kvstore-x": lambda: ours_xxh3(False),
            "kvstore-x+fsync": lambda: ours_xxh3(True),
            "load: mlx-lm": lambda: mx.eval([c.state for c in mlx_cache.load_prompt_cache(src)]),
            "load: kvstore": lambda: mx.eval([c.state for c in kvstore.mlx_lm.load_prompt_cache(src)]),
            "load: kvstore-v": lambda: mx.eval([c.state for c in kvstore.mlx_lm.load_prompt_cache(src_kv, verify=True)]),
            "load: kvstore-x": lambda: mx.eval([c.state for c in kvstore.mlx_lm.load_prompt_cache(src_x, verify=True)]),
            "new: mlx-lm": lambda: mlx_cache.save_prompt_cache(out_new, mlx_cache.load_prompt_cache(src)),
            "new: kvstore-x": lambda: kvstore.mlx_lm.save_prompt_cache(
                out_new, kvstore.mlx_lm.load_prompt_cache(src_x, verify=True), integrity="xxh3", durable=False),
            "save: mlx-lm": lambda: mlx_cache.save_prompt_cache(out, in_memory),
            "save: kvstore": lambda: kvstore.mlx_lm.save_prompt_cache(out, in_memory, integrity=True),
            "save: kvstore-x": lambda: kvstore.mlx_lm.save_prompt_cache(out, in_memory, integrity="xxh3",
                                                                        durable=False),
        }
        if args.only:
            fns = {name: fn for name, fn in fns.items()
                   if name.startswith(args.only) or name in ("mlx-lm", "load: mlx-lm", "save: mlx-lm", "new: mlx-lm")
                   or (name == "mlx-lm+fsync" and "fsync" in args.only)}
        runs = {name: [] for name in fns}
        load_before = _load_average()
        for fn in fns.values():  # warm-up: page cache and MLX allocator
            fn()
        for _ in range(args.runs):
            for name, fn in fns.items():
                runs[name].append(timed(fn, remove_new if name.startswith("new:") else None))
        print(f"cache: 32 x KVCache [1, 8, {args.tokens}, 128] BF16 = {nbytes / 2**30:.2f} GiB; "
              f"{args.runs} rounds; seconds (best / median)")
        for name, times in runs.items():
            base = "mlx-lm+fsync" if name.endswith("+fsync") else "mlx-lm"
            ref_name = base if ":" not in name else name.split(":")[0] + ": mlx-lm"
            if ref_name not in runs:
                continue
            ref, ref_median = min(runs[ref_name]), statistics.median(runs[ref_name])
            print(f"  {name:16s} {min(times):6.3f} / {statistics.median(times):6.3f}   "
                  f"mlx-lm/this {ref / min(times):4.2f}x (medians {ref_median / statistics.median(times):4.2f}x)")
        print(f"load average before / after the rounds: {load_before} / {_load_average()}")

        if args.only:
            return
        small = os.path.join(d, "small.safetensors")
        kvstore.save(small, [kvstore.load(src_kv).layers[0]])
        for label, path in (("kvstore-written", src_kv), ("one layer", small), ("mlx-lm-written", src)):
            t = min(timed(lambda: kvstore.load(path)) for _ in range(args.runs))
            print(f"  kvstore.load (buffers) {label:15s} {os.path.getsize(path) / 2**20:7.0f} MiB  "
                  f"{t * 1e3:7.2f} ms  ({misaligned(path)} tensors misaligned in the file)")


def _load_average():
    return " ".join(open("/proc/loadavg").read().split()[:3])


def misaligned(path):
    """Tensors whose data does not start at a multiple of their element size (MLX pads nothing)."""
    sizes = {"BF16": 2, "F16": 2, "F32": 4, "I32": 4, "U32": 4}
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
    return sum(1 for name, t in header.items()
               if name != "__metadata__" and (8 + n + t["data_offsets"][0]) % sizes.get(t["dtype"], 1))


if __name__ == "__main__":
    main()
