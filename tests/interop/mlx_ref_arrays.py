"""kvtool's two mlx-lm ArraysCache layouts, read by mlx-lm itself.

mlx-ref holds the current mlx-lm, whose ArraysCache state is [slots,
left_padding, lengths]. The 0.31.x release (what `pip install mlx-lm` gives)
differs only in that state: its getter returns the slot list and its setter
takes one; the `release` context below gives mlx-ref's ArraysCache that
behaviour to stand for the release.

Every ArraysCache fixture (both versions, and a CacheList with an ArraysCache
child) is converted with `--to mlx-lm` and `--to mlx-lm-0.31`; each reader
must get exactly the fixture's slots from the file written for it, and must
not get them from the other one (the current mlx-lm fails loudly, the release
misreads silently: why conversions keep their input's layout).

usage: mlx_ref_arrays.py KVTOOL FIXTURES_DIR WORK_DIR
"""
import contextlib
import hashlib
import json
import os
import subprocess
import sys

import mlx.core as mx
from mlx_lm.models import cache as mlx_cache

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what)


def digest(a):
    if a.dtype == mx.bfloat16:
        a = a.view(mx.uint16)
    return hashlib.sha256(bytes(memoryview(a))).hexdigest()


@contextlib.contextmanager
def release():
    current = mlx_cache.ArraysCache.state
    mlx_cache.ArraysCache.state = property(lambda self: self.cache, lambda self, v: setattr(self, "cache", v))
    try:
        yield
    finally:
        mlx_cache.ArraysCache.state = current


def arrays_caches(caches):
    for c in caches:
        if isinstance(c, mlx_cache.CacheList):
            yield from arrays_caches(c.caches)
        elif isinstance(c, mlx_cache.ArraysCache):
            yield c


def slots_read(path):
    """The slot digests of every ArraysCache mlx-lm reads from `path`, or the error it raises."""
    try:
        caches = mlx_cache.load_prompt_cache(path)
    except Exception as e:  # what a user would see
        return repr(e)
    out = []
    for c in arrays_caches(caches):
        slots = c.cache if isinstance(c.cache, list) else [c.cache]
        out.append([digest(s) if isinstance(s, mx.array) else type(s).__name__ for s in slots])
    return out


def sidecar_slots(sidecar):
    """The slot digests of every ArraysCache the fixture's writer read back (its sidecar)."""
    out = []

    def walk(layer):
        if layer["class"] in ("ArraysCache", "MambaCache"):
            keys = [s["key"] for s in layer["state"]]
            nested = any("." in k for k in keys)  # current: "0.k", "1", "2"; release: "k"
            out.append([s["sha256"] for s in layer["state"] if not nested or s["key"].startswith("0.")])
        for child in layer.get("children", []):
            walk(child)

    for layer in sidecar["reload"]["layers"]:
        walk(layer)
    return out


def main(kvtool, fixtures, work):
    inputs = {}
    for name in ("arrayscache_basic", "mlx-lm-v0.31.3/arrayscache_basic",
                 "mlx-lm-v0.30.5-19-gb77ec6b9/arrayscache_basic", "cachelist_arrays_kv"):
        path = os.path.join(fixtures, "mlx-lm", name)
        inputs[path + ".safetensors"] = sidecar_slots(json.load(open(path + ".json")))
    check([len(s) for s in inputs[path + ".safetensors"]] == [2, 2], "the CacheList fixture has two 2-slot children")
    for name, want in inputs.items():
        src = name
        for target in ("mlx-lm", "mlx-lm-0.31"):
            out = os.path.join(work, target + ".safetensors")
            subprocess.run([kvtool, "convert", src, "-o", out, "--to", target, "-q"], check=True)
            current = slots_read(out)
            with release():
                released = slots_read(out)
            if target == "mlx-lm":
                check(current == want, f"{name} --to {target}: the current mlx-lm read {current}")
                check(released != want, f"{name} --to {target}: the release read the slots right (expected a misread)")
            else:
                check(released == want, f"{name} --to {target}: the release read {released}")
                check(isinstance(current, str), f"{name} --to {target}: the current mlx-lm read {current}")
    print(f"{len(inputs)} inputs x 2 targets x 2 readers checked")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
