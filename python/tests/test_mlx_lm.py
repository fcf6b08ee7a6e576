"""kvstore.mlx_lm against the real MLX and mlx-lm cache code in ../shared/mlx-ref."""

import json
import os
import types

import pytest

import kvstore
from conftest import FIXTURES, REPO, fixture_files, flatten, sha256
from mlx_lm_v031 import release_arrays_cache
from kvstore import _mlx_bridge
from kvstore.mlx_lm import load_prompt_cache, save_prompt_cache


def kvstore_keys_removed(metadata):
    return {k: v for k, v in metadata.items() if not k.startswith("kvstore_")}


def assert_same_caches(mx, got, want):
    assert [type(c).__name__ for c in got] == [type(c).__name__ for c in want]
    assert [c.meta_state for c in got] == [c.meta_state for c in want]
    for a, b in zip(got, want):
        fa, fb = flatten(a.state), flatten(b.state)
        assert [n for n, _ in fa] == [n for n, _ in fb]
        for (name, x), (_, y) in zip(fa, fb):
            if x is None or y is None:
                assert x is None and y is None, name
                continue
            assert (x.dtype, x.shape) == (y.dtype, y.shape), name
            assert mx.array_equal(x, y).item(), name


def test_every_fixture_class_saved_by_kvstore_loads_in_mlx_lm(mlx_cache, mx, tmp_path):
    files = fixture_files()
    assert len(files) == 19
    classes = set()
    for path in files:
        want, metadata = mlx_cache.load_prompt_cache(str(path), return_metadata=True)
        classes |= {type(c).__name__ for c in want}
        for integrity in (True, "xxh3", False):
            out = tmp_path / f"{path.stem}.{integrity}.safetensors"
            save_prompt_cache(str(out), want, metadata, integrity=integrity, durable=integrity is not False)
            got, got_metadata = mlx_cache.load_prompt_cache(str(out), return_metadata=True)
            assert_same_caches(mx, got, want)
            if integrity is True:
                assert set(got_metadata) - set(metadata) == {
                    "kvstore_format", "kvstore_sha256_tensors", "kvstore_sha256_header"}
            if integrity == "xxh3":  # the disk tier's digests: mlx-lm ignores them too
                assert set(got_metadata) - set(metadata) == {
                    "kvstore_format", "kvstore_digest_algorithm", "kvstore_digest_tensors", "kvstore_digest_header"}
                assert_same_caches(mx, load_prompt_cache(str(out), verify=True), want)
            assert kvstore_keys_removed(got_metadata) == metadata
    assert classes == {"KVCache", "RotatingKVCache", "QuantizedKVCache", "ChunkedKVCache", "ArraysCache",
                       "CacheList", "BatchKVCache", "BatchRotatingKVCache"}


def test_files_mlx_lm_saves_load_in_kvstore_identically(mlx_cache, mx, tmp_path):
    for path in fixture_files():
        want, metadata = mlx_cache.load_prompt_cache(str(path), return_metadata=True)
        out = str(tmp_path / path.name)
        mlx_cache.save_prompt_cache(out, want, metadata)
        got, got_metadata = load_prompt_cache(out, return_metadata=True)
        assert_same_caches(mx, got, want)
        assert got_metadata == metadata
        # The same through kvstore's reader (what compressed, verified and ArraysCache files take).
        assert_same_caches(mx, _mlx_bridge.caches_from_layers(kvstore.load(out).layers), want)


def test_plain_files_are_checked_before_mlx_reads_them(mlx_cache, mx, tmp_path):
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all}")
    with pytest.raises(kvstore.CorruptionError):
        load_prompt_cache(bad)
    out = tmp_path / "ours.safetensors"
    save_prompt_cache(out, live_caches(mlx_cache, mx)[:3], {"m": "1"})
    assert load_prompt_cache(out, return_metadata=True)[1] == {"m": "1"}  # digests not user metadata


def race_mlx_read(monkeypatch, writer):
    """Runs writer(call number) just before each mx.load of kvstore.mlx_lm: between kvstore's
    header check and MLX's read of the file by path. Returns the list of paths read."""
    real = kvstore.mlx_lm._mlx_load
    reads = []

    def load(path):
        writer(len(reads))
        reads.append(path)
        return real(path)

    monkeypatch.setattr(kvstore.mlx_lm, "_mlx_load", load)
    return reads


def one_kv_cache(mlx_cache, mx, value, tokens=2):
    c = mlx_cache.KVCache()
    k = mx.full((1, 1, tokens, 8), value, dtype=mx.float16)
    c.update_and_fetch(k, k)
    return [c]


def test_a_file_replaced_after_its_check_is_checked_again(mlx_cache, mx, tmp_path, monkeypatch):
    checked, other = tmp_path / "p.safetensors", tmp_path / "other.safetensors"
    caches = live_caches(mlx_cache, mx)[:3]
    save_prompt_cache(checked, caches, {"m": "checked"}, integrity="xxh3")
    replacement = one_kv_cache(mlx_cache, mx, 2.0)
    save_prompt_cache(other, replacement, {"m": "replacement"}, integrity="xxh3")
    # An atomic replace between the check and the read: MLX reads another header than the
    # one checked, so its read is thrown away and the new file checked and read.
    reads = race_mlx_read(monkeypatch, lambda n: n == 0 and os.replace(other, checked))
    got, metadata = load_prompt_cache(checked, return_metadata=True, verify=True)
    assert len(reads) == 2 and metadata == {"m": "replacement"}
    assert_same_caches(mx, got, replacement)


def test_a_replacement_kvstore_refuses_is_never_served(mlx_cache, mx, tmp_path, monkeypatch):
    checked, bad = tmp_path / "p.safetensors", tmp_path / "bad.safetensors"
    save_prompt_cache(checked, live_caches(mlx_cache, mx)[:3])
    rot = mlx_cache.RotatingKVCache(max_size=32, keep=4)
    k = mx.zeros((1, 1, 8, 8))
    rot.update_and_fetch(k, k)
    rot.keep = 40  # keep > max_size: mlx-lm loads it, kvstore's header check refuses it
    mlx_cache.save_prompt_cache(str(bad), [rot])
    mlx_cache.load_prompt_cache(str(bad))
    reads = race_mlx_read(monkeypatch, lambda n: os.replace(bad, checked) if n == 0 else None)
    with pytest.raises(kvstore.CorruptionError, match="keep"):
        load_prompt_cache(checked)
    assert len(reads) == 1


def test_tensor_bytes_rewritten_in_place_after_the_check_fail_a_verified_load(mlx_cache, mx, tmp_path, monkeypatch):
    path = tmp_path / "p.safetensors"
    caches = one_kv_cache(mlx_cache, mx, 1.0, tokens=64)
    save_prompt_cache(path, caches, {"m": "1"}, integrity="xxh3")

    def flip_last_byte(_):
        with open(path, "r+b") as f:  # same header, one tensor byte changed, same inode
            f.seek(-1, os.SEEK_END)
            b = f.read(1)
            f.seek(-1, os.SEEK_END)
            f.write(bytes([b[0] ^ 0x40]))

    race_mlx_read(monkeypatch, flip_last_byte)
    with pytest.raises(kvstore.CorruptionError, match=r"p\.safetensors: tensor '0\.1': XXH3-128 mismatch"):
        load_prompt_cache(path, verify=True)


def test_bytes_rewritten_while_mlx_reads_lazily_fail_a_verified_load(mlx_cache, mx, tmp_path, monkeypatch):
    path = tmp_path / "p.safetensors"
    save_prompt_cache(path, one_kv_cache(mlx_cache, mx, 1.0, tokens=64), integrity="xxh3")
    real = kvstore.mlx_lm._mlx_load

    def load_then_rewrite(p):
        arrays, metadata = real(p)  # header read; MLX reads the tensors when they are evaluated
        with open(path, "r+b") as f:
            f.seek(-2, os.SEEK_END)
            f.write(b"\x00\x7c")  # the last F16 element becomes +inf in place
        return arrays, metadata

    monkeypatch.setattr(kvstore.mlx_lm, "_mlx_load", load_then_rewrite)
    with pytest.raises(kvstore.CorruptionError, match="XXH3-128 mismatch"):
        load_prompt_cache(path, verify=True)


def test_a_file_that_keeps_changing_is_refused(mlx_cache, mx, tmp_path, monkeypatch):
    path, a, b = (tmp_path / n for n in ("p.safetensors", "a.safetensors", "b.safetensors"))
    save_prompt_cache(path, one_kv_cache(mlx_cache, mx, 1.0, tokens=2))
    save_prompt_cache(a, one_kv_cache(mlx_cache, mx, 1.0, tokens=3))
    save_prompt_cache(b, one_kv_cache(mlx_cache, mx, 1.0, tokens=4))

    def swap(n):  # a writer replaces the file before every read: never the header checked
        src = a if n % 2 == 0 else b
        with open(src, "rb") as f, open(tmp_path / "t.safetensors", "wb") as out:
            out.write(f.read())
        os.replace(tmp_path / "t.safetensors", path)

    reads = race_mlx_read(monkeypatch, swap)
    with pytest.raises(kvstore.CorruptionError, match="changed while it was read, 3 times"):
        load_prompt_cache(path)
    assert len(reads) == 3


def test_plain_mlx_lm_files_are_read_by_mlx_by_path(mlx_cache, mx, tmp_path, monkeypatch):
    path = tmp_path / "p.safetensors"
    caches = live_caches(mlx_cache, mx)[:3]
    mlx_cache.save_prompt_cache(str(path), caches, {"m": "1"})
    reads = race_mlx_read(monkeypatch, lambda n: None)
    got, metadata = load_prompt_cache(path, return_metadata=True)
    assert reads == [str(path)] and metadata == {"m": "1"}
    assert_same_caches(mx, got, caches)


def live_caches(mlx_cache, mx):
    """Caches grown by mlx-lm itself (partly filled buffers, BF16, quantized, rotated)."""
    k = mx.random.normal((1, 2, 300, 64)).astype(mx.bfloat16)
    kv, rot, quant = mlx_cache.KVCache(), mlx_cache.RotatingKVCache(max_size=64, keep=4), mlx_cache.QuantizedKVCache(64, 4)
    for c in (kv, rot, quant):
        c.update_and_fetch(k, k)
        for i in range(3):
            c.update_and_fetch(k[:, :, i : i + 1], k[:, :, i : i + 1])
    arrays = mlx_cache.ArraysCache(2)
    arrays[0] = mx.ones((1, 3, 16), dtype=mx.float32)
    arrays[1] = mx.zeros((1, 4, 8), dtype=mx.bfloat16)
    return [kv, rot, quant, arrays, mlx_cache.CacheList(mlx_cache.KVCache(), mlx_cache.ArraysCache(1))]


def test_live_caches_round_trip_both_ways(mlx_cache, mx, tmp_path):
    caches = live_caches(mlx_cache, mx)
    caches[4].caches[0].update_and_fetch(mx.ones((1, 1, 3, 8)), mx.ones((1, 1, 3, 8)))
    caches[4].caches[1][0] = mx.ones((1, 2))
    ours, theirs = str(tmp_path / "ours.safetensors"), str(tmp_path / "theirs.safetensors")
    save_prompt_cache(ours, caches, {"model": "live"})
    mlx_cache.save_prompt_cache(theirs, caches, {"model": "live"})
    assert_same_caches(mx, mlx_cache.load_prompt_cache(ours), mlx_cache.load_prompt_cache(theirs))
    assert_same_caches(mx, load_prompt_cache(theirs), mlx_cache.load_prompt_cache(theirs))
    assert load_prompt_cache(ours, return_metadata=True)[1] == {"model": "live"}


@pytest.mark.parametrize("compress,codec", [(True, "zstd"), (9, "zstd"), (True, "byteplane")])
def test_compressed_and_verified_files_round_trip(mlx_cache, mx, tmp_path, compress, codec):
    caches = live_caches(mlx_cache, mx)[:4]
    out = str(tmp_path / "c.safetensors")
    save_prompt_cache(out, caches, {"k": "v"}, compress=compress, codec=codec)
    got, metadata = load_prompt_cache(out, return_metadata=True, verify=True)
    assert metadata == {"k": "v"}
    plain = str(tmp_path / "plain.safetensors")
    mlx_cache.save_prompt_cache(plain, caches)
    assert_same_caches(mx, got, mlx_cache.load_prompt_cache(plain))
    # mlx-lm refuses the compressed container loudly instead of misreading it.
    with pytest.raises(Exception):
        mlx_cache.load_prompt_cache(out)


def test_corrupt_files_fail_verification(mlx_cache, mx, tmp_path):
    out = str(tmp_path / "v.safetensors")
    save_prompt_cache(out, live_caches(mlx_cache, mx)[:1])
    data = bytearray(open(out, "rb").read())
    data[-3] ^= 0x01
    open(out, "wb").write(bytes(data))
    with pytest.raises(kvstore.CorruptionError, match=r"v\.safetensors: tensor '[0-9.]+': SHA-256 mismatch: "
                       r"expected [0-9a-f]{16}\.\.\., found [0-9a-f]{16}\.\.\.$"):
        load_prompt_cache(out, verify=True)


def test_names_get_the_safetensors_suffix_like_mx_save_safetensors(mlx_cache, mx, tmp_path):
    save_prompt_cache(str(tmp_path / "noext"), live_caches(mlx_cache, mx)[:1])
    assert (tmp_path / "noext.safetensors").is_file()


def legacy_module(mlx_cache):
    """The imported mlx-lm as v0.31 had it: ArraysCache.state is the flat slot list."""
    module = types.ModuleType("legacy_mlx_lm_cache")
    module.__dict__.update({k: v for k, v in vars(mlx_cache).items() if not k.startswith("__")})
    module.ArraysCache = release_arrays_cache(mlx_cache)
    return module


def test_arrays_cache_follows_the_imported_mlx_lm(mlx_cache, mx, tmp_path):
    assert _mlx_bridge.arrays_state_form(mlx_cache) == _mlx_bridge.ARRAYS_TRIPLE
    legacy = legacy_module(mlx_cache)
    assert _mlx_bridge.arrays_state_form(legacy) == _mlx_bridge.ARRAYS_FLAT
    # Both file layouts load into the legacy classes with the flat state...
    for path in (FIXTURES / "arrayscache_basic.safetensors", FIXTURES / "mlx-lm-v0.31.3" / "arrayscache_basic.safetensors"):
        side = json.loads(path.with_suffix(".json").read_text())
        (cache,) = _mlx_bridge.caches_from_layers(kvstore.load(str(path)).layers, module=legacy)
        assert isinstance(cache.state, list) and len(cache.state) == 2
        want = {s["key"]: s["sha256"] for s in side["layers"][0]["state"]}
        assert [sha256(memoryview(kvstore.Tensor(x))) for x in cache.state] == [
            want.get("0.0", want.get("0")), want.get("0.1", want.get("1"))]
    # ... and a legacy cache goes out in the library's form.
    layers = _mlx_bridge.layers_from_caches([cache], module=legacy)
    assert [t.shape for t in layers[0][1][0]] == [tuple(x.shape) for x in cache.state]
    if "mlx-lm-0.31" in getattr(kvstore._kvstore, "LAYOUTS", ()):
        assert _mlx_bridge.layout_for(layers, module=legacy) == "mlx-lm-0.31"
        out = tmp_path / "legacy.safetensors"
        kvstore.save(out, layers, layout="mlx-lm-0.31")
        names = [t["name"] for t in kvstore.inspect(out)["layers"][0]["tensors"]]
        assert sorted(names) == ["0.0", "0.1"]  # the release's flat slot list
        (back,) = _mlx_bridge.caches_from_layers(kvstore.load(out).layers, module=legacy)
        assert [bytes(memoryview(x)) for x in back.state] == [bytes(memoryview(x)) for x in cache.state]
    else:  # this build cannot write the v0.31 layout: refuse rather than write a misread file
        with pytest.raises(kvstore.NotSupportedError, match="ArraysCache"):
            _mlx_bridge.layout_for(layers, module=legacy)
    kv_only = _mlx_bridge.layers_from_caches([mlx_cache.KVCache.from_state([mx.ones((1, 1, 2, 4))] * 2, "")], module=legacy)
    assert _mlx_bridge.layout_for(kv_only, module=legacy) == "mlx-lm"


def test_legacy_mamba_cache_loads_as_an_arrays_cache(mlx_cache, mx):
    path = FIXTURES / "mlx-lm-v0.30.5-19-gb77ec6b9" / "mambacache_kv.safetensors"
    caches = load_prompt_cache(str(path))
    assert "ArraysCache" in [type(c).__name__ for c in caches]


def _round_trips_both_ways(mlx_cache, mx, tmp_path, caches, name):
    """Ours writes -> mlx-lm reads, mlx-lm writes -> ours reads (both readers), bit for bit."""
    ours, theirs = str(tmp_path / f"{name}.ours.safetensors"), str(tmp_path / f"{name}.theirs.safetensors")
    save_prompt_cache(ours, caches, {"case": name})
    mlx_cache.save_prompt_cache(theirs, caches, {"case": name})
    want = mlx_cache.load_prompt_cache(theirs)
    assert_same_caches(mx, mlx_cache.load_prompt_cache(ours), want)
    for verify in (False, True):
        assert_same_caches(mx, load_prompt_cache(theirs, verify=False), want)
        assert_same_caches(mx, load_prompt_cache(ours, verify=verify), want)
    return ours, theirs


def test_batch_caches_with_per_row_vectors_of_another_length_round_trip(mlx_cache, mx, tmp_path):
    # mlx-lm's own tests build these: left_padding for 2 rows, then an update of 4.
    kv = mx.arange(4 * 4 * 7 * 4, dtype=mx.float32).reshape(4, 4, 7, 4)
    batch = mlx_cache.BatchKVCache(left_padding=[1, 2])
    batch.update_and_fetch(kv, kv)
    rotating = mlx_cache.BatchRotatingKVCache(max_size=10, left_padding=[1, 2])
    rotating.update_and_fetch(kv, kv)
    for name, cache in (("batch", batch), ("batch-rotating", rotating)):
        ours, theirs = _round_trips_both_ways(mlx_cache, mx, tmp_path, [cache], name)
        for path in (ours, theirs):
            assert kvstore.inspect(path)["valid"]
            layer = kvstore.load(path).layers[0]
            assert [t.shape for t in layer.state] == [(4, 4, 7, 4), (4, 4, 7, 4), (2,), (2,)]


def test_states_mlx_lm_writes_at_the_edges_pass(mlx_cache, mx, tmp_path):
    def rotating(max_size, keep, *updates):
        c = mlx_cache.RotatingKVCache(max_size=max_size, keep=keep)
        for n in updates:
            x = mx.ones((1, 2, n, 8), dtype=mx.float16)
            c.update_and_fetch(x, x)
        return c

    cases = {
        # a 0-token update after the window overflowed: offset 10 > 7 rows = max_size - 1 (L17's bound)
        "zero-token-update": rotating(8, 0, 10, 0),
        # keep == max_size: _idx counts on past the buffer (L8 allows _idx up to offset)
        "keep-equals-max-size": rotating(2, 2, 1, 1, 1, 1),
        "wrapped": rotating(8, 4, 5, 1, 1, 1, 1, 1, 1),
        "concat-past-window": rotating(8, 0, 6, 5, 3),
    }
    assert len(cases) == 4
    for name, cache in cases.items():
        ours, theirs = _round_trips_both_ways(mlx_cache, mx, tmp_path, [cache], name)
        for path in (ours, theirs):
            assert kvstore.inspect(path)["valid"], (name, kvstore.inspect(path))


def test_every_file_mlx_lm_wrote_passes_validation():
    roots = [REPO / "fixtures", REPO.parent / "shared" / "fixtures"]
    files = [p for root in roots if root.is_dir() for p in sorted(root.rglob("*.safetensors"))
             if "traces" not in p.parts and "model" not in p.parts]  # not prompt caches
    # 24 mlx-lm prompt caches and 3 llama.cpp conversions in fixtures/ and in ../shared/fixtures,
    # and the 27 files of mlx-lm 0.32 in fixtures/mlx-lm-0.32.
    assert len(files) == 27 * sum(root.is_dir() for root in roots) + 27
    for path in files:
        info = kvstore.inspect(str(path))
        assert info["valid"], (path, info)
        kvstore.load(str(path))


def test_an_empty_prompt_cache_loads_as_an_empty_list_on_every_path(mlx_cache, tmp_path):
    ours, theirs = str(tmp_path / "ours.safetensors"), str(tmp_path / "theirs.safetensors")
    save_prompt_cache(ours, [], {"model": "none"})
    mlx_cache.save_prompt_cache(theirs, [], {"model": "none"})
    with pytest.raises(ValueError):
        mlx_cache.load_prompt_cache(theirs)  # mlx-lm saves it but cannot load it
    for path in (ours, theirs):
        for verify in (False, True):
            if verify and path == theirs:
                continue  # mlx-lm writes no digests
            assert load_prompt_cache(path, verify=verify) == []
            assert load_prompt_cache(path, return_metadata=True, verify=verify) == ([], {"model": "none"})


def test_a_list_of_non_caches_is_an_invalid_argument(mlx_cache, tmp_path):
    for bad in ([1, 2], None, [mlx_cache.KVCache(), "x"]):
        with pytest.raises(kvstore.InvalidArgumentError):
            save_prompt_cache(str(tmp_path / "x.safetensors"), bad)
    assert not (tmp_path / "x.safetensors").exists()
