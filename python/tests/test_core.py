"""The core API without MLX: load, save, inspect, verify, convert, trim, tensors, errors."""

import json
import os
import shutil
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import kvstore
from conftest import FIXTURES, REPO, fixture_files, flatten, run_in_threads, sha256

F16 = FIXTURES / "kvcache_f16_4l.safetensors"
BF16 = FIXTURES / "kvcache_bf16_4l.safetensors"


def kv_layers(n=2, tokens=5, dtype=np.float16):
    rng = np.random.default_rng(7)
    return [
        ("KVCache", [rng.standard_normal((1, 2, tokens, 8)).astype(dtype) for _ in range(2)], "")
        for _ in range(n)
    ]


def test_every_fixture_loads_with_the_state_and_meta_state_mlx_lm_saved():
    files = fixture_files()
    assert len(files) == 19
    for path in files:
        side = json.loads(path.with_suffix(".json").read_text())
        f = kvstore.load(str(path))
        assert len(f.layers) == side["num_layers"], path.name
        assert f.metadata == side["user_metadata"], path.name
        for layer, want in zip(f.layers, side["layers"]):
            assert layer.class_name == want["class"], path.name
            assert layer.meta_state == json.loads(json.dumps(want["meta_state"])), path.name
            got = {name: (list(t.shape), sha256(t)) for name, t in flatten(layer.state)}
            assert got == {s["key"]: (s["shape"], s["sha256"]) for s in want["state"]}, path.name


def test_load_is_zero_copy_and_read_only():
    f = kvstore.load(str(F16))
    keys = f.layers[0].state[0]
    view = memoryview(keys)
    assert view.readonly and view.format == "e" and view.shape == keys.shape
    a = np.asarray(keys)
    assert not a.flags.writeable and not a.flags.owndata
    with pytest.raises(ValueError):
        a[0, 0, 0, 0] = 1
    np.testing.assert_array_equal(np.from_dlpack(keys), a)  # a legacy DLPack consumer: a copy
    # The views outlive the file object and the layer.
    del f
    assert np.asarray(keys).shape == (1, 2, 37, 64)


def _capsule(capsule):
    """(name, flags or None, data pointer) of a DLPack capsule, read with ctypes."""
    import ctypes

    api = ctypes.pythonapi
    api.PyCapsule_GetName.restype = ctypes.c_char_p
    api.PyCapsule_GetName.argtypes = [ctypes.py_object]
    api.PyCapsule_GetPointer.restype = ctypes.c_void_p
    api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    name = api.PyCapsule_GetName(capsule)
    p = api.PyCapsule_GetPointer(capsule, name)
    if name == b"dltensor_versioned":  # version, manager_ctx, deleter, flags, dl_tensor
        return name, ctypes.c_uint64.from_address(p + 24).value, ctypes.c_void_p.from_address(p + 32).value
    return name, None, ctypes.c_void_p.from_address(p).value


def test_dlpack_never_hands_out_writable_read_only_memory():
    keys = kvstore.load(str(F16)).layers[0].state[0]
    mapped = np.asarray(keys).__array_interface__["data"][0]
    # DLPack >= 1.0 consumers: zero-copy, flagged read-only.
    assert _capsule(keys.__dlpack__(max_version=(1, 0))) == (b"dltensor_versioned", 1, mapped)
    assert _capsule(keys.__dlpack__(max_version=(1, 2), copy=False)) == (b"dltensor_versioned", 1, mapped)
    # copy=True: a fresh writable copy, flagged as copied.
    name, flags, data = _capsule(keys.__dlpack__(max_version=(1, 0), copy=True))
    assert (name, flags) == (b"dltensor_versioned", 2) and data != mapped
    # Legacy consumers cannot be told "read-only": a copy, or BufferError with copy=False.
    name, flags, data = _capsule(keys.__dlpack__())
    assert name == b"dltensor" and data != mapped
    with pytest.raises(BufferError, match="read-only"):
        keys.__dlpack__(copy=False)
    with pytest.raises(BufferError, match="CPU"):
        keys.__dlpack__(dl_device=(2, 0))
    assert _capsule(keys.__dlpack__(dl_device=(1, 0), max_version=(1, 0)))[1] == 1


def test_a_dlpack_consumer_writing_to_a_loaded_tensor_does_not_crash(tmp_path):
    path = tmp_path / "mapped.safetensors"
    kvstore.save(str(path), kv_layers())  # kvstore's files load as views of a read-only mapping
    # What torch.from_dlpack(t) followed by an in-place op does with a legacy capsule.
    code = f"""
import ctypes, kvstore
t = kvstore.load({str(path)!r}).layers[0].state[0]
before = bytes(memoryview(t))
capsule = t.__dlpack__()
api = ctypes.pythonapi
api.PyCapsule_GetPointer.restype = ctypes.c_void_p
api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
data = ctypes.c_void_p.from_address(api.PyCapsule_GetPointer(capsule, b"dltensor")).value
ctypes.memset(data, 7, t.nbytes)
assert bytes(memoryview(t)) == before
"""
    done = subprocess.run([sys.executable, "-c", code], env=dict(os.environ))
    assert done.returncode == 0


def test_bf16_comes_out_as_uint16_bits_and_as_bfloat16_over_dlpack():
    t = kvstore.load(str(BF16)).layers[0].state[0]
    assert t.dtype == "BF16" and t.itemsize == 2
    bits = np.asarray(t)
    assert bits.dtype == np.uint16
    as_f32 = (bits.astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_array_equal(as_f32, np.asarray(t.astype("F32")))
    assert t.__dlpack_device__() == (1, 0)


def test_save_takes_numpy_buffers_and_dlpack_objects(tmp_path):
    class OnlyDLPack:  # neither numpy nor the buffer protocol
        def __init__(self, a):
            self.a = a

        def __dlpack__(self, stream=None):
            return self.a.__dlpack__()

        def __dlpack_device__(self):
            return self.a.__dlpack_device__()

    k = np.arange(40, dtype=np.float32).reshape(1, 1, 5, 8)
    v = np.ascontiguousarray(np.arange(80, dtype=np.float32).reshape(1, 1, 10, 8)[:, :, ::2, :])
    strided = np.arange(80, dtype=np.float32).reshape(1, 1, 10, 8)[:, :, ::2, :]
    bits = np.full((1, 1, 5, 8), 0x3F80, dtype=np.uint16)  # BF16 1.0
    layers = [
        ("KVCache", [k, memoryview(v)], ""),
        ("KVCache", [OnlyDLPack(k), strided], ""),
        ("KVCache", [kvstore.Tensor(bits, dtype="BF16"), kvstore.Tensor(bits, dtype="bf16")], ""),
    ]
    path = str(tmp_path / "x.safetensors")
    kvstore.save(path, layers, {"model": "m"})
    f = kvstore.load(path, verify=True)
    assert f.verified and f.metadata == {"model": "m"}
    np.testing.assert_array_equal(np.asarray(f.layers[0].state[0]), k)
    np.testing.assert_array_equal(np.asarray(f.layers[1].state[1]), v)
    np.testing.assert_array_equal(np.asarray(f.layers[0].state[1]), v)
    assert f.layers[2].state[0].dtype == "BF16"
    np.testing.assert_array_equal(np.asarray(f.layers[2].state[0].astype("F32")), np.ones((1, 1, 5, 8)))


def test_save_round_trips_loaded_layers_byte_for_byte(tmp_path):
    for path in fixture_files():
        out = str(tmp_path / path.name)
        f = kvstore.load(str(path))
        kvstore.save(out, f.layers, f.metadata, integrity=False)
        g = kvstore.load(out)
        assert [l.meta_state for l in g.layers] == [l.meta_state for l in f.layers]
        for a, b in zip(g.layers, f.layers):
            assert [(n, t.dtype, t.shape, t.tobytes()) for n, t in flatten(a.state)] == [
                (n, t.dtype, t.shape, t.tobytes()) for n, t in flatten(b.state)
            ]


@pytest.mark.parametrize("compress,codec", [(None, "zstd"), (True, "zstd"), (5, "zstd"), (True, "byteplane"),
                                            (True, "zstd-byteplane")])
def test_compressed_and_verified_files_round_trip(tmp_path, compress, codec):
    f = kvstore.load(BF16)  # os.PathLike works wherever a path goes
    out = tmp_path / "c.safetensors"
    kvstore.save(out, f, f.metadata, compress=compress, codec=codec)
    g = kvstore.load(out, verify=True)
    assert g.verified and g.compressed == (compress is not None)
    assert g.info["format"] == ("safetensors" if compress is None else "safetensors+" + ("zstd-byteplane" if "byteplane" in codec else "zstd"))
    for a, b in zip(g.layers, f.layers):
        assert a.state[0].tobytes() == b.state[0].tobytes()
    assert kvstore.verify(out)["bytes_hashed"] == sum(t.nbytes for l in f.layers for _, t in flatten(l.state))


def kvtool_path():
    kvtool = os.environ.get("KVSTORE_KVTOOL") or shutil.which("kvtool")
    if not kvtool:
        pytest.skip("kvtool not found (ctest sets KVSTORE_KVTOOL)")
    return kvtool


def kvtool_run(*args):
    """(exit code, stdout) of kvtool."""
    run = subprocess.run([kvtool_path(), *args], capture_output=True, text=True)
    return run.returncode, run.stdout


def kvtool_json(*args):
    return json.loads(kvtool_run(*args)[1])


def test_info_and_inspect_equal_kvtool_inspect_json(tmp_path):
    compressed = str(tmp_path / "z.safetensors")
    kvstore.save(compressed, kvstore.load(str(F16)).layers, compress=True)
    paths = [str(p) for p in fixture_files()] + [compressed]
    for path in paths:
        # A compressed file with digests is verified on load (as inspect --verify does).
        flags = ["--verify"] if path == compressed else []
        assert kvstore.load(path).info == kvtool_json("inspect", "--json", *flags, path), path
        try:
            verified = kvstore.inspect(path, verify=True)
        except kvstore.FailedPreconditionError as e:  # no digests: raised as kvtool exits 4, after the info
            verified = e.info
        assert verified == kvtool_json("inspect", "--json", "--verify", path), path
    golden = REPO / "tests" / "cli" / "golden" / "kvcache_f16_4l.json"
    cwd = os.getcwd()
    os.chdir(FIXTURES)
    try:
        assert kvstore.inspect("kvcache_f16_4l.safetensors") == json.loads(golden.read_text())
    finally:
        os.chdir(cwd)


def flip_byte(path, offset_from_end=10):
    data = bytearray(open(path, "rb").read())
    data[-offset_from_end] ^= 0xFF
    open(path, "wb").write(bytes(data))


def test_errors_follow_kvtool_exit_codes(tmp_path):
    path = str(tmp_path / "v.safetensors")
    kvstore.save(path, kv_layers())
    flip_byte(path)
    cases = [
        (lambda: kvstore.verify(path), kvstore.CorruptionError, ["verify", "-q", path]),
        (lambda: kvstore.inspect(path, verify=True), kvstore.CorruptionError, ["inspect", "--verify", path]),
        (lambda: kvstore.load(str(tmp_path / "missing")), FileNotFoundError, ["inspect", str(tmp_path / "missing")]),
        (lambda: kvstore.trim(path, path + ".t", -1), kvstore.InvalidArgumentError, ["trim", path, "-n", "-1", "-o", path + ".t"]),
    ]
    plain = str(tmp_path / "plain.safetensors")
    kvstore.save(plain, kv_layers(), integrity=False)
    cases.append((lambda: kvstore.verify(plain), kvstore.NotSupportedError, ["verify", "-q", plain]))
    garbage = tmp_path / "garbage.safetensors"
    garbage.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all}")
    cases.append((lambda: kvstore.load(str(garbage)), kvstore.CorruptionError, ["inspect", str(garbage)]))
    for call, exc, kvtool_args in cases:
        with pytest.raises(exc) as info:
            call()
        assert isinstance(info.value, kvstore.Error)
        assert kvtool_run(*kvtool_args)[0] == info.value.exit_code, kvtool_args
    with pytest.raises(kvstore.CorruptionError):
        kvstore.load(path, verify=True)
    assert kvstore.load(path) is not None  # no digest check without verify


def test_bad_arguments_are_invalid_argument_errors(tmp_path):
    out = str(tmp_path / "o.safetensors")
    bad = [
        ([("KVCache", [np.zeros((1, 1, 2, 4), np.float16)], "")], {}),  # one array for two
        ([("KVCache", [np.zeros((1, 1, 2, 4), np.float16)] * 2, "")], {"layout": "nope"}),
        ([("KVCache", [np.zeros((1, 1, 2, 4), np.float16)] * 2, "")], {"codec": "lz4"}),
        ([("KVCache", [np.zeros((1, 1, 2, 4), np.float16)] * 2, 7)], {}),
        ([("KVCache", [np.zeros((2,), dtype=">f4")] * 2, "")], {}),
        ([("KVCache", [np.zeros((1, 1, 2, 4), np.float16)] * 2, "")], {"metadata": {"a": 1}}),
    ]
    for layers, kwargs in bad:
        with pytest.raises((kvstore.InvalidArgumentError, kvstore.NotSupportedError)):
            kvstore.save(out, layers, **kwargs)
    with pytest.raises(kvstore.NotSupportedError):
        kvstore.save(out, [("NoSuchCache", [], "")])
    with pytest.raises(TypeError):
        kvstore.save(out, [("KVCache", [object(), object()], "")])
    assert not os.path.exists(out)


def test_every_bad_argument_is_an_invalid_argument_error(tmp_path):
    out = str(tmp_path / "o.safetensors")
    src = str(F16)
    layers = kv_layers()
    calls = [
        lambda: kvstore.save(out, layers, compress=2**70),
        lambda: kvstore.save(out, layers, compress=99),  # zstd stops at 22
        lambda: kvstore.save(out, layers, compress=-(2**40)),
        lambda: kvstore.save(out, None, {}),
        lambda: kvstore.save(out, 5),
        lambda: kvstore.convert(src, out, compress=2**70),
        lambda: kvstore.convert(src, out, compress=99),
        lambda: kvstore.convert(src, out, quantize=(2**70, 64)),
        lambda: kvstore.trim(src, out, 2**70),
        lambda: kvstore.trim(src, out, "7"),
        lambda: kvstore.trim(src, out, keep=-1),
    ]
    for i, call in enumerate(calls):
        with pytest.raises(kvstore.InvalidArgumentError) as e:
            call()
        assert isinstance(e.value, kvstore.errors.Error), i
        assert not os.path.exists(out), i
    assert kvstore._kvstore.ZSTD_LEVELS[1] == 22  # the range is libzstd's own
    kvstore.save(out, layers, compress=22)
    assert kvstore.load(out, verify=True).compressed


def bad_files(tmp_path):
    """Files kvstore refuses, one per kind of problem: name -> path."""
    k = np.zeros((1, 2, 4, 8), np.float16)
    files = {}

    def save(name, layers, **kw):
        files[name] = str(tmp_path / (name + ".safetensors"))
        kvstore.save(files[name], layers, **kw)

    # States mlx-lm cannot save (docs/format.md §5.8), with and without digests.
    short_window = [("RotatingKVCache", [k, k], ["0", "16", "8", "4"])]
    save("short-window", short_window)
    save("short-window-no-digests", short_window, integrity=False)
    save("rows-beyond-offset", [("RotatingKVCache", [k, k], ["0", "16", "3", "3"])])
    save("rotated-not-a-bool", [("BatchRotatingKVCache", [k, k, np.zeros(1, np.int32), np.zeros(1, np.int32)],
                                 ["4", "4", "4", "yes"])])
    save("flipped", kv_layers())
    flip_byte(files["flipped"])
    save("no-digests", kv_layers(), integrity=False)
    files["not-json"] = str(tmp_path / "not-json.safetensors")
    open(files["not-json"], "wb").write(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all}")
    files["truncated"] = str(tmp_path / "truncated.safetensors")
    open(files["truncated"], "wb").write(open(F16, "rb").read()[:-100])
    files["empty"] = str(tmp_path / "empty.safetensors")
    open(files["empty"], "wb").close()
    files["unknown-class"] = str(tmp_path / "unknown-class.safetensors")
    header = b'{"__metadata__":{"2.0":"NoSuchCache","0.0":""}}'
    open(files["unknown-class"], "wb").write(len(header).to_bytes(8, "little") + header)
    files["missing"] = str(tmp_path / "missing.safetensors")
    return files


def test_python_and_kvtool_classify_bad_files_alike(tmp_path):
    files = bad_files(tmp_path)
    assert len(files) == 11
    seen = set()
    for name, path in files.items():
        verify_code = kvtool_run("verify", "-q", path)[0]
        inspect_code = kvtool_run("inspect", path)[0]
        for what, call, code in [("load(verify=True)", lambda: kvstore.load(path, verify=True), verify_code),
                                 ("verify", lambda: kvstore.verify(path), verify_code),
                                 ("inspect", lambda: kvstore.inspect(path), inspect_code)]:
            if code == 0:
                kvstore.inspect(path)  # kvtool inspect lists what it cannot load without failing
                continue
            with pytest.raises(kvstore.Error) as e:
                call()
            assert e.value.exit_code == code, (name, what, e.value)
            seen.add(code)
    assert seen == {2, 3, 4}
    with pytest.raises(kvstore.CorruptionError, match="max_size - 1"):
        kvstore.load(files["short-window"], verify=True)


def test_the_source_tree_says_how_to_import_the_package():
    run = subprocess.run([sys.executable, "-c", "import kvstore"], cwd=REPO / "python", capture_output=True,
                         text=True, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert run.returncode != 0
    assert "source tree" in run.stderr and "PYTHONPATH=<build>/python" in run.stderr, run.stderr
    assert "No module named" not in run.stderr


def test_convert_and_trim_do_what_kvtool_does(tmp_path):
    src = str(F16)
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    kvtool = kvtool_path()
    runs = [
        (dict(compress=True), ["--compress"]),
        (dict(compress=True, codec="byteplane"), ["--codec", "byteplane"]),
        (dict(integrity=True), ["--integrity"]),
        (dict(integrity="xxh3"), ["--integrity=xxh3"]),
        (dict(quantize=(4, 64)), ["--quantize", "4:64"]),
        (dict(dtype="bf16"), ["--dtype", "bf16"]),
        (dict(layout="mlx-swift-lm"), ["--to", "mlx-swift-lm"]),
    ]
    for kwargs, flags in runs:
        kvstore.convert(src, ours, **kwargs)
        subprocess.run([kvtool, "convert", src, "-o", theirs, "-q", *flags], check=True)
        assert open(ours, "rb").read() == open(theirs, "rb").read(), flags
    assert kvstore.trim(src, ours, 7) == 7
    subprocess.run([kvtool, "trim", src, "-n", "7", "-o", theirs, "-q"], check=True)
    assert open(ours, "rb").read() == open(theirs, "rb").read()
    assert kvstore.trim(src, ours, keep=10) == 27
    assert kvstore.load(ours).layers[0].offset == 10
    kvstore.convert(src, ours, compress=True)
    kvstore.convert(ours, ours, compress=False)
    assert open(ours, "rb").read() == open(src, "rb").read()


def test_calls_are_thread_safe(tmp_path):
    noise = np.random.default_rng(1).standard_normal((1, 8, 1024, 128)).astype(np.float16)
    src = str(tmp_path / "src.safetensors")
    kvstore.save(src, [("KVCache", [noise, noise], "") for _ in range(4)])

    def work(i):
        for _ in range(5):
            out = str(tmp_path / f"o{i}.safetensors")
            kvstore.save(out, kvstore.load(src).layers, compress=True)
            assert kvstore.load(out, verify=True).verified
            assert kvstore.verify(src)["bytes_hashed"] == 4 * 2 * noise.nbytes
            kvstore.trim(src, out, 3)

    assert run_in_threads(work) == []


def test_the_gil_is_released_while_saving():
    noise = np.random.default_rng(2).standard_normal((1, 8, 4096, 128)).astype(np.float16)
    layers = [("KVCache", [noise, noise], "") for _ in range(4)]  # 32 MiB
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "big.safetensors")
        span = {}

        def save():
            span["start"] = time.perf_counter()
            kvstore.save(out, layers, compress=3, threads=1)
            span["end"] = time.perf_counter()

        t = threading.Thread(target=save)
        ticks = []
        t.start()
        while t.is_alive():
            ticks.append(time.perf_counter())
        t.join()
    inside = [x for x in ticks if span["start"] <= x <= span["end"]]
    duration = span["end"] - span["start"]
    gaps = [b - a for a, b in zip(inside, inside[1:])]
    # Holding the GIL would stop this thread for the whole call.
    assert duration > 0.05 and len(inside) > 100
    assert max(gaps) < duration / 2


def test_importing_the_drop_ins_does_not_import_mlx():
    code = "import sys, kvstore, kvstore.mlx_lm; print(any(m == 'mlx' or m.startswith('mlx.') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_save_writes_the_librarys_default_layout(tmp_path):
    # docs/compat.md: saves from scratch are for the release's ArraysCache layout, in C++
    # (SavePromptCacheOptions) and here alike; DEFAULT_LAYOUT is read from the C++ default.
    assert kvstore.DEFAULT_LAYOUT == "mlx-lm-0.31"
    layers = kvstore.load(str(FIXTURES / "arrayscache_basic.safetensors")).layers
    out = tmp_path / "a.safetensors"
    kvstore.save(out, layers)
    assert kvstore.inspect(out)["layout"] == kvstore.DEFAULT_LAYOUT
    kvstore.save(out, layers, layout="mlx-lm")
    assert kvstore.inspect(out)["layout"] == "mlx-lm"


def test_paths_starting_with_tilde_are_in_the_home_directory(tmp_path, monkeypatch):
    home, cwd = tmp_path / "home", tmp_path / "cwd"
    home.mkdir()
    cwd.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(cwd)
    kvstore.save("~/a.safetensors", kvstore.load(str(F16)).layers)
    assert kvstore.load("~/a.safetensors").path == str(home / "a.safetensors")
    assert kvstore.inspect("~/a.safetensors")["path"] == str(home / "a.safetensors")
    assert kvstore.verify("~/a.safetensors")["bytes_hashed"] > 0
    kvstore.convert("~/a.safetensors", "~/b.safetensors", compress=True)
    assert kvstore.trim("~/a.safetensors", "~/c.safetensors", 1) == 1
    assert sorted(p.name for p in home.iterdir()) == ["a.safetensors", "b.safetensors", "c.safetensors"]
    assert list(cwd.iterdir()) == []  # no directory named "~"
    assert kvstore._kvstore.expand_user("~") == str(home)
    with pytest.raises(kvstore.InvalidArgumentError, match="no user"):
        kvstore.load("~no-such-user-kvstore/a.safetensors")


def test_integrity_names_the_digest_algorithm(tmp_path):
    path = str(tmp_path / "x.safetensors")
    for integrity, algorithm in ((True, "sha256"), ("sha256", "sha256"), ("xxh3", "xxh3-128")):
        kvstore.save(path, kv_layers(), integrity=integrity, durable=False)
        assert kvstore.inspect(path)["integrity"]["algorithm"] == algorithm
        assert kvstore.verify(path)["bytes_hashed"] > 0
        assert kvstore.load(path, verify=True).metadata == {}
    # Each tensor's digest is what `xxhsum -H2` prints for its bytes.
    if shutil.which("xxhsum"):
        data = open(path, "rb").read()
        n = int.from_bytes(data[:8], "little")
        header = json.loads(data[8:8 + n])
        begin, end = header["0.0"]["data_offsets"]
        tensor = tmp_path / "tensor.bin"
        tensor.write_bytes(data[8 + n + begin:8 + n + end])
        printed = subprocess.run(["xxhsum", "-H2", str(tensor)], check=True, capture_output=True, text=True).stdout
        stored = json.loads(header["__metadata__"]["1.kvstore_digest_tensors"])["0.0"]
        assert printed.split()[0] == stored
    for bad in ("md5", 1, None):
        with pytest.raises(kvstore.InvalidArgumentError):
            kvstore.save(path, kv_layers(), integrity=bad)
    kvstore.save(path, kv_layers(), integrity="xxh3")
    flip_byte(path)
    with pytest.raises(kvstore.CorruptionError, match="XXH3-128 mismatch"):
        kvstore.load(path, verify=True)


def test_compressed_files_are_verified_on_load(tmp_path):
    for integrity in ("sha256", "xxh3"):
        plain, packed = str(tmp_path / "p.safetensors"), str(tmp_path / "z.safetensors")
        kvstore.save(plain, kv_layers(), integrity=integrity)
        flip_byte(plain)
        kvstore.convert(plain, packed, compress=True)  # container only: the digests are copied as they are
        with pytest.raises(kvstore.CorruptionError, match="mismatch"):
            kvstore.load(packed)


def test_layers_take_and_give_mlx_lm_032_full_state(tmp_path):
    # KVCache [keys, values, offset]: the whole 8-row buffers, 3 rows valid.
    k = np.arange(64, dtype=np.float16).reshape(1, 1, 8, 8)
    layer = kvstore.Layer.from_full_state("KVCache", [k, k + 1, 3])
    assert layer.class_name == "KVCache" and layer.offset == 3 and layer.meta_state == ""
    keys, values, offset = layer.full_state
    assert np.array_equal(np.asarray(keys), k) and type(offset) is int and offset == 3
    assert np.array_equal(np.asarray(layer.state[0]), k[:, :, :3])  # the old protocol: valid rows
    rotating = kvstore.Layer.from_full_state("RotatingKVCache", [k, k, 10, 2, 8, 4])  # wrapped
    assert rotating.full_state[2:] == [10, 2, 8, 4] and rotating.meta_state == ["2", "8", "10", "4"]
    nested = kvstore.Layer.from_full_state("CacheList", [[[k, k, 3], "KVCache"]])
    assert nested.full_state[0][1] == "KVCache" and nested.meta_state[0] == ["KVCache"]
    kvstore.save(tmp_path / "f.safetensors", [layer, rotating, nested])
    again = kvstore.load(tmp_path / "f.safetensors")
    assert [x.offset for x in again.layers[:2]] == [3, 10]


@pytest.mark.parametrize("state,error", [
    ([None, None, 3], kvstore.InvalidArgumentError),      # no buffers but an offset
    (["keys", "values", 3], kvstore.InvalidArgumentError),  # strings for arrays
    ("KVCache", kvstore.InvalidArgumentError),            # not a list
    (7, kvstore.InvalidArgumentError),
])
def test_an_impossible_full_state_is_refused(state, error):
    with pytest.raises(error):
        kvstore.Layer.from_full_state("KVCache", state)


def test_full_state_scalars_keep_their_python_type():
    k = np.zeros((1, 1, 8, 8), np.float16)
    for offset in (True, 9, -1, 2 ** 63, 3.0):  # a bool is not an offset; past the buffer; out of range
        with pytest.raises(kvstore.InvalidArgumentError):
            kvstore.Layer.from_full_state("KVCache", [k, k, offset])
    with pytest.raises(kvstore.NotSupportedError):
        kvstore.Layer.from_full_state("NoSuchCache", [k, k, 3])
    with pytest.raises(kvstore.InvalidArgumentError):
        kvstore.Layer("KVCache", [k, k, 3], "")  # scalars belong to the 0.32 state only
