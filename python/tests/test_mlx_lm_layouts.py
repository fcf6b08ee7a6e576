"""kvstore.mlx_lm follows the mlx-lm that is imported, for files of either mlx-lm layout.

Runs twice (ctest python_mlx_lm_layouts and python_mlx_lm_layouts_032): under mlx-ref's own
mlx-lm (d78bf58, the protocol with meta_state) and with KVSTORE_TEST_MLX_LM=0.32 under the
real mlx-lm 0.32 (full state, from_state(state)). Either way: every file mlx-lm 0.32 wrote
(fixtures/mlx-lm-0.32) and every file the old mlx-lm wrote (fixtures/mlx-lm) loads as that
mlx-lm's own classes with the content the file holds, and what save_prompt_cache writes
from that mlx-lm's objects loads in that mlx-lm's own load_prompt_cache with the same
content.
"""

import json

import pytest

import kvstore
from conftest import FIXTURES, MLX_LM_032, REPO
from kvstore import mlx_lm as kv
from mlx_lm_032 import (cache_module_032, content_problems, describe, forgive_old_rotated_misread, old_cache_module,
                        old_layers_problems, old_view, scalar_type_problems, user_metadata)

FIXTURES_032 = REPO / "fixtures" / "mlx-lm-0.32"
SHIPPED_032 = 27  # what fixtures/mlx-lm-0.32 ships; more may come, never fewer


def files_032():
    files = sorted(FIXTURES_032.glob("*.safetensors"))
    assert len(files) >= SHIPPED_032
    return files


def old_files():
    """(file, its sidecar): fixtures/mlx-lm and the v0.31.3 release's files, which hold
    the caches of their top-level twins."""
    files = sorted(FIXTURES.glob("*.safetensors")) + sorted((FIXTURES / "mlx-lm-v0.31.3").glob("*.safetensors"))
    assert len(files) >= 19 + 3
    return [(f, sidecar(FIXTURES / f.name)) for f in files]


def sidecar(path):
    return json.loads(path.with_suffix(".json").read_text())


def expect_content(got, side, path):
    """The loaded caches hold what the 0.32 sidecar says: as 0.32 objects, scalars and
    content; as old objects, the old view (when the old protocol expresses the state)."""
    assert [type(c).__name__ for c in got] == side["classes"], path
    if MLX_LM_032:
        assert content_problems(got, side["layers"], side["old_view"]) == [], path
    elif side["old_view"]["ok"]:
        # Through the old mlx-lm's own from_state, which reads rotated "False" as True.
        assert forgive_old_rotated_misread(old_view(got), side["old_view"])[0] == side["old_view"], path


def test_the_imported_mlx_lm_is_the_one_the_suite_names(mlx_cache):
    assert hasattr(mlx_cache.KVCache, "meta_state") != MLX_LM_032


def test_every_file_mlx_lm_032_wrote_loads_as_the_imported_mlx_lm_caches(mlx_cache):
    loaded = 0
    for path in files_032():
        side = sidecar(path)
        try:
            got, meta = kv.load_prompt_cache(path, return_metadata=True)
        except kvstore.Error as e:
            # Only a state the old protocol cannot hold (a None buffer) may be refused.
            assert not MLX_LM_032 and not side["old_view"]["ok"], f"{path.name}: {e}"
            continue
        assert all(type(c) is getattr(mlx_cache, type(c).__name__) for c in got), path
        assert meta == side["user_metadata"], path
        expect_content(got, side, path.name)
        if MLX_LM_032:  # what 0.32's own loader makes of the file
            want = [describe(c) for c in mlx_cache.load_prompt_cache(str(path))]
            assert content_problems(got, want, side["old_view"], raw=True) == [], path
            assert scalar_type_problems(got) == [], path
        loaded += 1
    assert loaded >= (SHIPPED_032 if MLX_LM_032 else SHIPPED_032 - 3)


def test_every_file_the_old_mlx_lm_wrote_loads_as_the_imported_mlx_lm_caches(mlx_cache):
    # Under 0.32, the caches saved before the upgrade, which 0.32's own loader cannot read.
    for path, side in old_files():
        got, meta = kv.load_prompt_cache(path, return_metadata=True)
        assert all(type(c) is getattr(mlx_cache, type(c).__name__) for c in got), path
        assert meta == side["user_metadata"], path
        assert old_layers_problems(got, side["layers"]) == [], path
        assert scalar_type_problems(got) == [], path


@pytest.mark.parametrize("integrity", [True, "xxh3", False])
def test_caches_saved_by_kvstore_load_in_the_imported_mlx_lm(mlx_cache, tmp_path, integrity):
    saved = 0
    for path in files_032():
        side = sidecar(path)
        if not MLX_LM_032 and not side["old_view"]["ok"]:
            continue  # no such objects in the old protocol (the test above)
        caches = mlx_cache.load_prompt_cache(str(path)) if MLX_LM_032 else kv.load_prompt_cache(path)
        out = tmp_path / f"{path.stem}.safetensors"
        kv.save_prompt_cache(out, caches, side["user_metadata"], integrity=integrity)
        assert kvstore.inspect(out)["layout"] == ("mlx-lm-0.32" if MLX_LM_032 else "mlx-lm"), path
        got, meta = mlx_cache.load_prompt_cache(str(out), return_metadata=True)
        assert user_metadata(meta) == side["user_metadata"], path
        expect_content(got, side, path.name)
        again = kv.load_prompt_cache(out, verify=integrity is not False)
        expect_content(again, side, path.name)
        saved += 1
    assert saved >= SHIPPED_032 - 3


def test_compressed_saves_of_either_protocol_round_trip(mlx_cache, tmp_path):
    for path in files_032()[:8]:
        side = sidecar(path)
        caches = kv.load_prompt_cache(path) if side["old_view"]["ok"] or MLX_LM_032 else None
        if caches is None:
            continue
        kv.save_prompt_cache(tmp_path / "c", caches, side["user_metadata"], compress=True)
        got, meta = kv.load_prompt_cache(tmp_path / "c.safetensors", return_metadata=True, verify=True)
        assert meta == side["user_metadata"]
        expect_content(got, side, path.name)


def test_the_old_caches_saved_for_the_other_mlx_lm_load_there(mlx_cache, tmp_path):
    # layout= writes the other mlx-lm's files from the imported one's objects.
    other, layout = (old_cache_module(), "mlx-lm") if MLX_LM_032 else (cache_module_032(), "mlx-lm-0.32")
    for path, side in old_files()[:19]:
        caches = kv.load_prompt_cache(path)
        out = tmp_path / f"{path.stem}.safetensors"
        kv.save_prompt_cache(out, caches, side["user_metadata"], layout=layout)
        got, meta = other.load_prompt_cache(str(out), return_metadata=True)
        assert user_metadata(meta) == side["user_metadata"], path
        assert old_layers_problems(got, side["layers"]) == [], path


def test_objects_of_either_protocol_save_whatever_mlx_lm_is_imported(mlx_cache, mx, tmp_path):
    # A 0.32 object and an old one in one list: each saved through its own protocol.
    new, old = cache_module_032(), old_cache_module()
    k = mx.arange(2 * 5 * 8, dtype=mx.float16).reshape(1, 2, 5, 8)
    caches = [new.KVCache(), old.KVCache(), new.RotatingKVCache(max_size=4, keep=1)]
    for c in caches:
        c.update_and_fetch(k, k + 1)
    kv.save_prompt_cache(tmp_path / "mixed", caches)
    got = kv.load_prompt_cache(tmp_path / "mixed.safetensors")
    assert [type(c) for c in got] == [mlx_cache.KVCache, mlx_cache.KVCache, mlx_cache.RotatingKVCache]
    assert old_view(got) == old_view(caches)


def test_a_032_object_with_an_impossible_state_is_an_invalid_argument(mlx_cache, mx, tmp_path):
    new = cache_module_032()
    c = new.KVCache()
    c.update_and_fetch(mx.ones((1, 1, 3, 8)), mx.ones((1, 1, 3, 8)))
    for offset in ("3", 3.0, 300, -1, True):
        c.offset = offset
        with pytest.raises(kvstore.InvalidArgumentError):
            kv.save_prompt_cache(tmp_path / "bad", [c])
    assert not (tmp_path / "bad.safetensors").exists()


def test_a_disk_tier_written_under_the_other_mlx_lm_serves_this_one(mlx_cache, mx, tmp_path):
    # An mlx_lm.server upgraded to 0.32 (or back) keeps its store: same model fingerprint,
    # the entries come back as the imported mlx-lm's caches.
    other = old_cache_module() if MLX_LM_032 else cache_module_032()
    model, tokens = ("models/demo", None, None), [1, 2, 3, 4, 5]

    def make(module, n):
        c = module.KVCache()
        k = mx.arange(n * 4, dtype=mx.float16).reshape(1, 1, n, 4)
        c.update_and_fetch(k, k + 1)
        return [c]

    with kv.TieredPromptCache(directory=tmp_path / "store") as cache:
        cache.insert_cache(model, tokens, make(other, len(tokens)))
    with kv.TieredPromptCache(directory=tmp_path / "store") as restarted:
        restarted.register_model(model, make(mlx_cache, 1))
        got, rest = restarted.fetch_nearest_cache(model, tokens + [9])
    assert rest == [9] and type(got[0]) is mlx_cache.KVCache
    assert old_view(got) == old_view(make(other, len(tokens)))
