"""Loads every file write_interop_files wrote with the real mlx-lm (../shared/mlx-ref)
and compares each layer's class, meta_state and state with the manifest.

    check_interop.py OUT_DIR EXPECTED_FILES

Files in the v0.31 release's layout ("flat_arrays") are loaded with mlx-lm's ArraysCache
as the release has it (state = the flat slot list), patched into the module for the call.

Exits 77 (ctest: skipped) with the reason when mlx-ref is absent or does not import.
Prints one line per failure and ends with "N passed, M failed".
"""

import hashlib
import json
import os
import pathlib
import sys

from mlx_lm_032 import leaves as flat_leaves  # the tree walk, mlx.utils.tree_flatten's names
from mlx_lm_v031 import release_arrays_cache

SKIP = 77


def mlx_ref_python():
    repo = pathlib.Path(__file__).resolve().parents[2]
    root = pathlib.Path(os.environ.get("KVSTORE_MLX_REF") or repo.parent / "shared" / "mlx-ref")
    return root / "python"


def leaves(tree):
    """[name, dtype, shape, sha256] of each array of a state tree ([name, None] for None)."""
    names = {"float16": "F16", "bfloat16": "BF16", "float32": "F32", "uint32": "U32", "int32": "I32"}
    out = []
    for name, leaf in flat_leaves(tree):
        if leaf is None:
            out.append([name, None])
            continue
        dtype = str(leaf.dtype).rsplit(".", 1)[-1]
        out.append([name, names.get(dtype, dtype), list(leaf.shape),
                    hashlib.sha256(memoryview(leaf).cast("B")).hexdigest()])
    return out


def load(module, path, flat_arrays):
    if not flat_arrays:
        return module.load_prompt_cache(path, return_metadata=True)

    current = module.ArraysCache
    module.ArraysCache = release_arrays_cache(module)
    try:
        return module.load_prompt_cache(path, return_metadata=True)
    finally:
        module.ArraysCache = current


def main():
    out_dir, expected = pathlib.Path(sys.argv[1]), int(sys.argv[2])
    path = mlx_ref_python()
    if not (path / "mlx_lm" / "models" / "cache.py").is_file():
        print(f"SKIP: mlx-ref not found at {path.parent} (set KVSTORE_MLX_REF)")
        return SKIP
    sys.path.insert(0, str(path))
    try:
        import mlx_lm.models.cache as cache_module
    except Exception as e:
        print(f"SKIP: mlx-ref does not import with {sys.executable}: {e}")
        return SKIP
    manifest = json.loads((out_dir / "manifest.json").read_text())
    passed = failed = 0
    for entry in manifest:
        try:
            cache, metadata = load(cache_module, str(out_dir / entry["file"]), entry["flat_arrays"])
            got = [{"class": type(c).__name__, "meta_state": json.loads(json.dumps(c.meta_state)),
                    "state": leaves(c.state)} for c in cache]
            user = {k: v for k, v in metadata.items() if not k.startswith("kvstore_")}
            assert user == entry["metadata"], f"metadata {user}"
            assert got == entry["layers"], "layers differ"
            passed += 1
        except Exception as e:
            failed += 1
            print(f"FAIL {entry['file']}: {e}")
    if len(manifest) != expected:
        failed += 1
        print(f"FAIL: the manifest lists {len(manifest)} files, expected {expected}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
