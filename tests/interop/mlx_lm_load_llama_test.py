"""The mlx-lm files kvtool makes from llama.cpp state files load in the real
mlx-lm (load_prompt_cache) and hold mlx-lm's own cache within the fixtures'
tolerances; the loaded caches keep working (update_and_fetch appends).

    mlx_lm_load_llama_test.py KVTOOL FIXTURES_DIR REPO_DIR

MLX and mlx-lm come from $KVSTORE_MLX_REF or REPO_DIR/../shared/mlx-ref; when
neither is usable the test is skipped (exit code 77) with the reason.
"""
import json
import os
import subprocess
import sys
import tempfile

SKIP = 77


def find_mlx_ref(repo):
    for path in (os.environ.get("KVSTORE_MLX_REF"), os.path.join(repo, "..", "shared", "mlx-ref")):
        if path and os.path.isdir(os.path.join(path, "python", "mlx")):
            return os.path.realpath(path)
    return None


def main():
    kvtool, fixtures, repo = sys.argv[1], os.path.join(sys.argv[2], "llama.cpp"), sys.argv[3]
    ref = find_mlx_ref(repo)
    if ref is None:
        print("SKIP: no mlx-ref (set KVSTORE_MLX_REF or provide ../shared/mlx-ref)")
        return SKIP
    sys.path.insert(0, os.path.join(ref, "python"))
    try:
        import mlx.core as mx
        from mlx_lm.models.cache import load_prompt_cache, save_prompt_cache
    except Exception as e:  # a missing BLAS runtime, another Python version, ...
        print(f"SKIP: mlx-ref at {ref} does not import here: {e}")
        return SKIP

    checked = 0
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in sorted(os.listdir(fixtures)):
            case_dir = os.path.join(fixtures, case)
            if not os.path.isdir(case_dir):
                continue
            expected = json.load(open(os.path.join(case_dir, "expected.json")))
            own, own_md = load_prompt_cache(os.path.join(case_dir, "mlx_cache.safetensors"), return_metadata=True)
            for name, info in expected["llama_cpp_files"].items():
                out = os.path.join(tmp, f"{case}_{name}.safetensors")
                subprocess.run([kvtool, "convert", os.path.join(case_dir, name), "-o", out,
                                "--model", os.path.join(case_dir, "model"), "-q"], check=True)
                cache, md = load_prompt_cache(out, return_metadata=True)
                checked += 1
                where = f"{case}/{name}"
                if md.get("tokens") != own_md["tokens"]:
                    failures.append(f"{where}: tokens metadata {md.get('tokens')!r}")
                for layer, (got, want) in enumerate(zip(cache, own)):
                    if type(got).__name__ != "KVCache" or got.offset != want.offset:
                        failures.append(f"{where} layer {layer}: {type(got).__name__} offset {got.offset}")
                        continue
                    if got.keys.dtype != want.keys.dtype or got.keys.shape != want.keys.shape:
                        failures.append(f"{where} layer {layer}: {got.keys.dtype} {got.keys.shape}")
                        continue
                    k_err = mx.max(mx.abs(got.keys.astype(mx.float32) - want.keys.astype(mx.float32))).item()
                    v_err = mx.max(mx.abs(got.values.astype(mx.float32) - want.values.astype(mx.float32))).item()
                    if k_err > info["tolerance_k"] or v_err > info["tolerance_v"]:
                        failures.append(f"{where} layer {layer}: k err {k_err}, v err {v_err}")
                    # The cache keeps working: one more position appended.
                    k, v = got.state
                    step = mx.zeros((1, k.shape[1], 1, k.shape[3]), dtype=k.dtype)
                    keys, _ = got.update_and_fetch(step, step)
                    if keys.shape[2] != want.offset + 1:
                        failures.append(f"{where} layer {layer}: update_and_fetch gave {keys.shape}")
                # mlx-lm re-saves an F16 copy with the metadata it loaded; converting
                # that file back gives llama.cpp's bytes exactly.
                f16 = os.path.join(tmp, "f16.safetensors")
                subprocess.run([kvtool, "convert", os.path.join(case_dir, name), "-o", f16, "--model",
                                os.path.join(case_dir, "model"), "--dtype", "f16", "-q"], check=True)
                cache, md = load_prompt_cache(f16, return_metadata=True)
                resaved = os.path.join(tmp, "resaved.safetensors")
                save_prompt_cache(resaved, cache, md)
                back = os.path.join(tmp, "back.ggsq")
                subprocess.run([kvtool, "convert", resaved, "-o", back, "--to", "llama.cpp", "--model",
                                os.path.join(case_dir, "model"), "-q"], check=True)
                if open(back, "rb").read() != open(os.path.join(case_dir, name), "rb").read():
                    failures.append(f"{where}: mlx-lm's re-saved cache does not convert back to the same bytes")
    for f in failures:
        print("FAIL:", f)
    if checked == 0:
        print("FAIL: no llama.cpp fixture files found")
        return 1
    print(f"mlx-lm loaded {checked} converted caches")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
