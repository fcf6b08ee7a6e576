"""TieredPromptCache against mlx-lm's own LRUPromptCache (mlx-ref), plus its disk tier."""

import json
import logging
import os
import random
import shutil
import signal
import subprocess
import sys

import pytest

import kvstore
from conftest import MLX_PATHS, MLX_REF_PYTHON, apply_documented_server_diff, flatten, run_in_threads
from kvstore.mlx_lm import TieredPromptCache
from mlx_lm_032 import to_old

MODEL = ("models/demo", None, None)  # mlx_lm.server's model key shape


def make_cache(mlx_cache, mx, tokens, kind):
    """A cache whose keys encode the tokens, so a served cache shows what it covers."""
    n = len(tokens)
    k = (mx.array(tokens, dtype=mx.float16).reshape(1, 1, n, 1) * mx.ones((1, 1, 1, 4), dtype=mx.float16))
    if kind == "kv":
        layers = [mlx_cache.KVCache(), mlx_cache.KVCache()]
    elif kind == "rotating":  # not trimmable once full
        layers = [mlx_cache.RotatingKVCache(max_size=6, keep=2)]
    else:
        layers = [mlx_cache.QuantizedKVCache(group_size=32, bits=8)]
        k = mx.concatenate([k] * 8, axis=-1)
    for c in layers:
        if n:
            c.update_and_fetch(k, k)
    return layers


def state_of(cache):
    """Class, meta_state and state, in the old protocol whatever mlx-lm made the objects
    (mlx-lm 0.32's full state as the old classes give it: buffers cut to the valid rows)."""
    if cache is None:
        return None
    out = []
    for c in cache:
        if not hasattr(c, "meta_state"):
            c = to_old(c)
        leaves = [(name, None if x is None else (str(x.dtype), tuple(x.shape), bytes(memoryview(x))))
                  for name, x in flatten(c.state)]
        out.append((type(c).__name__, c.meta_state, leaves))
    return out


def recorded_sequence(seed=11, steps=240):
    """insert / fetch / trim_to calls over prompts that share prefixes."""
    rng = random.Random(seed)
    stems = [[1, 2, 3, 4], [1, 2, 9], [7, 8], [5]]
    prompts = []
    for _ in range(10):
        p = list(rng.choice(stems)) + [rng.randrange(1, 20) for _ in range(rng.randrange(0, 6))]
        prompts.append(p)
    ops = []
    for _ in range(steps):
        r = rng.random()
        p = rng.choice(prompts)
        model = MODEL if rng.random() < 0.85 else ("models/other", None, None)
        if r < 0.45:
            ops.append(("insert", model, p, rng.choice(["kv", "kv", "rotating", "quantized"]),
                        rng.choice(["assistant", "user", "system"])))
        elif r < 0.95:
            q = p[: rng.randrange(0, len(p) + 1)] + ([rng.randrange(1, 20)] if rng.random() < 0.5 else [])
            ops.append(("fetch", model, q))
        else:
            ops.append(("trim_to", rng.choice([None, 3, 5]), rng.choice([None, 4000, 100000])))
    return ops


def run(ops, lru, mlx_cache, mx, on_fetch):
    for op in ops:
        if op[0] == "insert":
            _, model, tokens, kind, cache_type = op
            lru.insert_cache(model, tokens, make_cache(mlx_cache, mx, tokens, kind), cache_type=cache_type)
        elif op[0] == "fetch":
            cache, rest = lru.fetch_nearest_cache(op[1], op[2])
            on_fetch(op, cache, rest)
        else:
            lru.trim_to(n_sequences=op[1], n_bytes=op[2])


def reference_results(mlx_cache, mx, ops, max_size, max_bytes):
    ref = mlx_cache.LRUPromptCache(max_size=max_size, max_bytes=max_bytes)
    results = []
    run(ops, ref, mlx_cache, mx, lambda op, c, rest: results.append((state_of(c), list(rest), len(ref), ref.nbytes)))
    return results


@pytest.mark.parametrize("max_size,max_bytes", [(10, 1 << 63), (4, 1 << 63), (50, 3000)])
def test_memory_tier_matches_mlx_lm_lru_prompt_cache(mlx_cache, mx, max_size, max_bytes):
    ops = recorded_sequence()
    want = reference_results(mlx_cache, mx, ops, max_size, max_bytes)
    assert sum(1 for s, *_ in want if s is not None) > 20  # the sequence exercises hits
    got = []
    ours = TieredPromptCache(max_size=max_size, max_bytes=max_bytes)
    run(ops, ours, mlx_cache, mx, lambda op, c, rest: got.append((state_of(c), list(rest), len(ours), ours.nbytes)))
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g == w, f"fetch #{i}"


def test_disk_tier_serves_misses_and_survives_a_restart(mlx_cache, mx, tmp_path):
    ops = recorded_sequence(seed=5)
    want = reference_results(mlx_cache, mx, ops, 3, 1 << 63)
    inserted, kinds = {}, {}
    for op in ops:
        if op[0] == "insert":
            # Every version: with writes behind, disk may still hold an earlier one.
            inserted.setdefault((op[1], tuple(op[2])), []).append(state_of(make_cache(mlx_cache, mx, op[2], op[3])))
            kinds[(op[1], tuple(op[2]))] = op[3]
    got, disk_hits = [], [0]

    def check(op, cache, rest):
        got.append((state_of(cache), list(rest)))

    with TieredPromptCache(max_size=3, directory=tmp_path / "store") as ours:
        run(ops, ours, mlx_cache, mx, check)
    for (g_state, g_rest), (w_state, w_rest, _, _), op in zip(got, want, [o for o in ops if o[0] == "fetch"]):
        if w_state is not None and len(g_rest) == len(w_rest):
            assert (g_state, g_rest) == (w_state, w_rest)  # memory hits are mlx-lm's
        elif g_state is not None:  # a disk hit, longer than memory's: the cache inserted for what it covers
            assert w_state is None or len(g_rest) < len(w_rest)
            assert len(g_rest) >= 1  # a persistent hit leaves a token to process
            disk_hits[0] += 1
            covered = op[2][: len(op[2]) - len(g_rest)]
            # An entry inserted for those tokens, or a longer one trimmed to them.
            assert g_state in inserted.get((op[1], tuple(covered)), []) + [
                state_of(make_cache(mlx_cache, mx, covered, kinds[(model, tokens)]))
                for (model, tokens) in inserted if model == op[1] and tokens[: len(covered)] == tuple(covered)]
        else:
            assert w_state is None
    assert disk_hits[0] > 0

    # A new process on the same directory serves the old prefixes, once it knows what
    # the model's caches look like.
    with TieredPromptCache(max_size=3, directory=tmp_path / "store") as restarted:
        assert len(restarted) == 0 and restarted.disk_stats(indexed=True)["entries"] > 0
        hits = 0
        for (model, tokens), states in inserted.items():
            restarted.register_model(model, make_cache(mlx_cache, mx, [1], kinds[(model, tokens)]))
            cache, rest = restarted.fetch_nearest_cache(model, list(tokens) + [99])
            if cache is not None and rest == [99]:
                hits += 1
                assert state_of(cache) == states[-1]  # close() flushed every write
        assert hits >= len(inserted) // 2  # the disk budget keeps most of them


def store_kv_prompts(mlx_cache, mx, tmp_path):
    """(directory, prompts): three KVCache prompts of MODEL written by a closed process."""
    store = tmp_path / "store"
    prompts = [list(range(1, n)) for n in (5, 8, 12)]
    with TieredPromptCache(directory=store) as cache:
        for p in prompts:
            cache.insert_cache(MODEL, p, make_cache(mlx_cache, mx, p, "kv"))
    return store, prompts


def test_the_documented_server_diff_applies_to_mlx_lm_server(tmp_path):
    """docs/python.md's diff for mlx_lm.server applies to the real server.py, as written."""
    server = MLX_REF_PYTHON / "mlx_lm" / "server.py"
    if not server.is_file():
        pytest.skip(f"mlx-lm's server.py not found at {server} (set KVSTORE_MLX_REF to mlx-ref's folder)")
    if shutil.which("patch") is None:
        pytest.skip("patch(1) is not installed")
    (tmp_path / "mlx_lm").mkdir()
    shutil.copy(server, tmp_path / "mlx_lm" / "server.py")
    done = apply_documented_server_diff(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    patched = (tmp_path / "mlx_lm" / "server.py").read_text()
    assert "LRUPromptCache(model_provider" not in patched and "TieredPromptCache(" in patched
    compile(patched, "server.py", "exec")


def test_every_hit_leaves_a_token_to_process(mlx_cache, mx, tmp_path):
    """mlx_lm.server processes the remainder of every fetch (generate.py's
    insert_segments takes its last token): an empty remainder kills its
    generation thread. After a restart the disk holds the whole prompt (the
    prompt and its completion, for a regenerate; or the prompt itself), so its
    hit is trimmed by one token, as LRUPromptCache trims a longer entry; a
    model that cannot trim is served a shorter entry (the end of the system
    prompt, which mlx_lm.server inserts at the end of that segment)."""
    store = tmp_path / "store"
    prompt, stored_whole = list(range(1, 41)), list(range(200, 230))
    conversation = prompt + list(range(100, 120))
    system, chat = list(range(300, 310)), list(range(300, 330))
    rotating_model = ("models/rotating", None, None)
    with TieredPromptCache(directory=store) as cache:
        cache.insert_cache(MODEL, conversation, make_cache(mlx_cache, mx, conversation, "kv"))
        cache.insert_cache(MODEL, stored_whole, make_cache(mlx_cache, mx, stored_whole, "kv"))
        cache.insert_cache(rotating_model, system, make_cache(mlx_cache, mx, system, "rotating"), cache_type="system")
        cache.insert_cache(rotating_model, chat, make_cache(mlx_cache, mx, chat, "rotating"))
    with TieredPromptCache(directory=store) as restarted:
        # The disk tier indexes in the background after a restart; until then a fetch finds
        # only the entries whose tokens are prefixes of its prompt (by name), not the longer
        # conversation `prompt` is served from.
        restarted.disk_stats(indexed=True)
        for tokens in (prompt, stored_whole):
            got, rest = restarted.fetch_nearest_cache(MODEL, tokens)
            assert got is not None and rest == tokens[-1:]
            assert state_of(got) == state_of(make_cache(mlx_cache, mx, tokens[:-1], "kv"))
        got, rest = restarted.fetch_nearest_cache(rotating_model, chat)
        assert rest == chat[len(system):]
        assert state_of(got) == state_of(make_cache(mlx_cache, mx, system, "rotating"))
        assert len(restarted) == 0  # the persistent tiers' hits are served, not kept, as mlx-lm would


def test_the_longest_prefix_wins_whichever_tier_holds_it(mlx_cache, mx, tmp_path):
    """After a restart and one unrelated request (which shares the first token, as
    every prompt shares BOS), memory has a one-token hit for an old conversation:
    the disk's whole conversation is served instead."""
    store = tmp_path / "store"
    conversation = list(range(1, 61))
    with TieredPromptCache(directory=store) as cache:
        cache.insert_cache(MODEL, conversation, make_cache(mlx_cache, mx, conversation, "kv"))
    with TieredPromptCache(directory=store) as restarted:
        unrelated = [1, 500, 501]
        restarted.insert_cache(MODEL, unrelated, make_cache(mlx_cache, mx, unrelated, "kv"))
        got, rest = restarted.fetch_nearest_cache(MODEL, conversation + [7, 8])
        assert rest == [7, 8]
        assert state_of(got) == state_of(make_cache(mlx_cache, mx, conversation, "kv"))
        # Memory's own hit when the disk holds nothing longer: mlx-lm's answer.
        got, rest = restarted.fetch_nearest_cache(MODEL, unrelated + [9])
        assert rest == [9] and state_of(got) == state_of(make_cache(mlx_cache, mx, unrelated, "kv"))


def test_persistent_tiers_refuse_caches_of_another_model_configuration(mlx_cache, mx, tmp_path):
    store, prompts = store_kv_prompts(mlx_cache, mx, tmp_path)

    # Restarted with --kv-bits or --max-kv-size: the model now makes other caches.
    for kind in ("quantized", "rotating"):
        with TieredPromptCache(directory=store) as restarted:
            restarted.register_model(MODEL, make_cache(mlx_cache, mx, [1], kind))
            for p in prompts:
                got, rest = restarted.fetch_nearest_cache(MODEL, p + [99])
                assert got is None and rest == p + [99]
            stats = restarted.disk_stats(indexed=True)
            assert stats["fingerprint_refused"] >= len(prompts)
            assert "another model configuration" in stats["last_refusal"]
            assert stats["entries"] == len(prompts)  # kept for the configuration that wrote them

    # The structure is also learned from the model's own inserts.
    with TieredPromptCache(directory=store) as restarted:
        restarted.insert_cache(MODEL, [50, 51], make_cache(mlx_cache, mx, [50, 51], "quantized"))
        got, rest = restarted.fetch_nearest_cache(MODEL, prompts[1])
        assert got is None and rest == prompts[1]
        assert restarted.disk_stats()["fingerprint_refused"] >= 1

    # The configuration that wrote them is served.
    with TieredPromptCache(directory=store) as restarted:
        restarted.register_model(MODEL, make_cache(mlx_cache, mx, [1], "kv"))
        got, rest = restarted.fetch_nearest_cache(MODEL, prompts[-1] + [99])
        assert rest == [99] and state_of(got) == state_of(make_cache(mlx_cache, mx, prompts[-1], "kv"))


def test_a_restart_serves_old_prefixes_from_the_first_request(mlx_cache, mx, tmp_path):
    # The plain drop-in: nothing but fetch/insert, and a new process on the same directory.
    store, prompts = store_kv_prompts(mlx_cache, mx, tmp_path)
    assert (store / "kvstore-models.json").exists()
    with TieredPromptCache(directory=store) as restarted:
        got, rest = restarted.fetch_nearest_cache(MODEL, prompts[-1] + [99])
        assert rest == [99] and state_of(got) == state_of(make_cache(mlx_cache, mx, prompts[-1], "kv"))
        assert restarted.disk_stats()["unknown_model_misses"] == 0
        # Another model key has no stored structure: a counted miss.
        got, rest = restarted.fetch_nearest_cache(("other-model", None, None), prompts[-1])
        assert got is None and restarted.disk_stats()["unknown_model_misses"] == 1

    # A broken or hostile models file is ignored: misses, never an exception.
    for text in (b"{not json", b'{"version": 1, "models": {"x": "{}"}}', b"[]", b"\xff" * 100):
        (store / "kvstore-models.json").write_bytes(text)
        with TieredPromptCache(directory=store) as restarted:
            got, rest = restarted.fetch_nearest_cache(MODEL, prompts[-1])
            assert got is None and rest == prompts[-1]

    # A structure stored for one model name is never used for another.
    with TieredPromptCache(directory=store) as cache:
        cache.insert_cache(MODEL, prompts[0], make_cache(mlx_cache, mx, prompts[0], "kv"))
    doc = json.loads((store / "kvstore-models.json").read_text())
    (name, fp_json), = doc["models"].items()
    doc["models"] = {name + "-renamed": fp_json}
    (store / "kvstore-models.json").write_text(json.dumps(doc))
    with TieredPromptCache(directory=store) as restarted:
        got, rest = restarted.fetch_nearest_cache(MODEL, prompts[-1])
        assert got is None and rest == prompts[-1]


def test_new_weights_at_the_same_path_are_another_model(mlx_cache, mx, tmp_path):
    weights = tmp_path / "model"
    weights.mkdir()
    (weights / "model.safetensors").write_bytes(b"old weights")
    model = (str(weights), None, None)
    tokens = [1, 2, 3, 4]
    with TieredPromptCache(directory=tmp_path / "store") as cache:
        cache.insert_cache(model, tokens, make_cache(mlx_cache, mx, tokens, "kv"))
    with TieredPromptCache(directory=tmp_path / "store") as same:
        same.register_model(model, make_cache(mlx_cache, mx, [1], "kv"))
        assert same.fetch_nearest_cache(model, tokens + [5])[1] == [5]
    (weights / "model.safetensors").write_bytes(b"new weights, same path")
    with TieredPromptCache(directory=tmp_path / "store") as updated:
        updated.register_model(model, make_cache(mlx_cache, mx, [1], "kv"))
        got, rest = updated.fetch_nearest_cache(model, tokens + [5])
        assert got is None and rest == tokens + [5]


def test_a_copy_of_the_model_at_another_path_is_the_same_model(mlx_cache, mx, tmp_path):
    # Each machine of a fleet downloads its own copy: the identity is the files' content.
    copies = []
    for where in ("a/model", "b/elsewhere/model"):
        d = tmp_path / where
        d.mkdir(parents=True)
        (d / "model.safetensors").write_bytes(b"the same weights")
        (d / "config.json").write_text('{"model_type": "llama"}')
        copies.append((str(d), None, None))
    tokens = [1, 2, 3, 4]
    with TieredPromptCache(directory=tmp_path / "store") as cache:
        cache.insert_cache(copies[0], tokens, make_cache(mlx_cache, mx, tokens, "kv"))
    assert (tmp_path / "store" / "kvstore-model-digests.json").exists()
    with TieredPromptCache(directory=tmp_path / "store") as other:
        got, rest = other.fetch_nearest_cache(copies[1], tokens + [5])
        assert rest == [5] and state_of(got) == state_of(make_cache(mlx_cache, mx, tokens, "kv"))


def test_corrupt_files_on_disk_are_misses(mlx_cache, mx, tmp_path, caplog):
    store = tmp_path / "store"
    with TieredPromptCache(directory=store) as cache:
        for n in range(3, 8):
            cache.insert_cache(MODEL, list(range(n)), make_cache(mlx_cache, mx, list(range(n)), "kv"))
    files = sorted(p for p in store.iterdir() if p.suffix == ".safetensors")
    assert len(files) == 5
    for i, f in enumerate(files):
        data = bytearray(f.read_bytes())
        if i == 0:
            data = data[: len(data) // 2]  # truncated
        else:
            data[-5] ^= 0x40  # a flipped bit in tensor data
        f.write_bytes(bytes(data))
    caplog.set_level(logging.WARNING, logger="kvstore")
    with TieredPromptCache(directory=store) as cache:
        cache.register_model(MODEL, make_cache(mlx_cache, mx, [1], "kv"))
        for n in range(3, 8):
            got, rest = cache.fetch_nearest_cache(MODEL, list(range(n)))
            assert got is None and rest == list(range(n))
        stats = cache.disk_stats()
        assert stats["entries"] == 0
        assert stats["corrupt_dropped"] + len(cache._disk.open_dropped) >= 5
    # Each removed file is logged once on the kvstore logger, with why.
    logged = [r.getMessage() for r in caplog.records if r.name == "kvstore" and "removed a bad entry" in r.getMessage()]
    assert sorted(m.split("removed a bad entry: ")[1].split(":")[0] for m in logged) == [f.name for f in files]
    assert not any(f.exists() for f in files)


def test_writes_are_flushed_at_interpreter_exit(mlx_cache, mx, tmp_path):
    store = tmp_path / "store"
    code = f"""
import sys
sys.path[:0] = {[str(p) for p in MLX_PATHS]!r}
import mlx.core as mx
from mlx_lm.models.cache import KVCache
from kvstore.mlx_lm import TieredPromptCache
c = KVCache(); c.update_and_fetch(mx.ones((1, 1, 4, 8)), mx.ones((1, 1, 4, 8)))
cache = TieredPromptCache(directory={str(store)!r})
cache.insert_cache(("m", None), [1, 2, 3, 4], [c])
"""  # no close(): the atexit hook flushes
    subprocess.run([sys.executable, "-c", code], check=True, env=dict(os.environ))
    with TieredPromptCache(directory=store) as cache:
        sample = mlx_cache.KVCache()
        sample.update_and_fetch(mx.ones((1, 1, 1, 8)), mx.ones((1, 1, 1, 8)))
        cache.register_model(("m", None), [sample])
        got, rest = cache.fetch_nearest_cache(("m", None), [1, 2, 3, 4, 5])
        assert got is not None and rest == [5] and got[0].offset == 4


def test_sigterm_stops_like_ctrl_c_and_the_queued_writes_are_flushed(mlx_cache, mx, tmp_path):
    """Python runs no cleanup on SIGTERM; stop_on_sigterm() turns it into KeyboardInterrupt,
    which mlx_lm.server handles by stopping (serve_forever's except), and the exit hooks flush."""
    store = tmp_path / "store"
    code = f"""
import sys, time
sys.path[:0] = {[str(p) for p in MLX_PATHS]!r}
import mlx.core as mx
from mlx_lm.models.cache import KVCache
from kvstore.mlx_lm import TieredPromptCache, stop_on_sigterm
cache = TieredPromptCache(directory={str(store)!r})
stop_on_sigterm()
for n in range(1, 9):
    c = KVCache(); c.update_and_fetch(mx.ones((1, 8, 512 * n, 64)), mx.ones((1, 8, 512 * n, 64)))
    cache.insert_cache(("m", None), [n] + list(range(512 * n - 1)), [c])  # no entry a prefix of another
try:
    print("ready", flush=True)  # inside the try: SIGTERM may come at once
    while True:  # mlx_lm.server's httpd.serve_forever()
        time.sleep(0.05)
except KeyboardInterrupt:
    print("stopped", flush=True)  # httpd.shutdown(); response_generator.stop_and_join()
"""
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=dict(os.environ))
    assert child.stdout.readline() == "ready\n"
    child.send_signal(signal.SIGTERM)
    out, _ = child.communicate(timeout=120)
    assert child.returncode == 0 and out == "stopped\n"
    with TieredPromptCache(directory=store) as cache:
        assert cache.disk_stats(indexed=True)["entries"] == 8


def test_a_collected_cache_flushes_into_a_directory_another_cache_shares(mlx_cache, mx, tmp_path):
    import gc

    cache = TieredPromptCache(directory=tmp_path / "store")
    with TieredPromptCache(directory=tmp_path / "store") as other:  # opened first: shared, not refused
        cache.insert_cache(MODEL, [1, 2, 3], make_cache(mlx_cache, mx, [1, 2, 3], "kv"))
        del cache
        gc.collect()  # flushes the queued write
        # The model's structure comes from the directory's models file, written by the other.
        got, rest = other.fetch_nearest_cache(MODEL, [1, 2, 3, 4])
        assert rest == [4] and got[0].offset == 3


class NumpyKVCache:
    """A KVCache-shaped cache over numpy arrays: MLX binds its arrays to one thread."""

    def __init__(self, tokens):
        import numpy as np

        k = np.repeat(np.array(tokens, dtype=np.float16).reshape(1, 1, -1, 1), 4, axis=3)
        self.keys, self.values, self.offset = k, k + 1, len(tokens)

    state = property(lambda self: (self.keys[:, :, : self.offset], self.values[:, :, : self.offset]))
    meta_state = ""
    nbytes = property(lambda self: self.keys.nbytes + self.values.nbytes)

    def is_trimmable(self):
        return True

    def trim(self, n):
        n = min(self.offset, n)
        self.offset -= n
        return n


NumpyKVCache.__name__ = "KVCache"  # what the disk tier records as the class


def test_concurrent_use(mlx_cache, mx, tmp_path):
    rng = random.Random(3)
    prompts = sorted({tuple([1, 2] + [rng.randrange(5) for _ in range(rng.randrange(1, 5))]) for _ in range(12)})
    with TieredPromptCache(max_size=100, directory=tmp_path / "store") as cache:
        for p in prompts:
            cache.insert_cache(MODEL, list(p), [NumpyKVCache(p)])

        def worker(seed):
            rng = random.Random(seed)
            for _ in range(200):
                tokens = list(rng.choice(prompts))
                if rng.random() < 0.3:
                    cache.insert_cache(MODEL, tokens, [NumpyKVCache(tokens)])
                    continue
                got, rest = cache.fetch_nearest_cache(MODEL, tokens + [9])
                covered = len(tokens) + 1 - len(rest)
                assert got is not None and covered >= 2
                assert got[0].offset == covered
                assert got[0].state[0][0, 0, :, 0].tolist() == tokens[:covered]

        assert run_in_threads(worker) == []
    with TieredPromptCache(directory=tmp_path / "store") as restarted:  # MLX on this thread only
        restarted.register_model(MODEL, [NumpyKVCache([1])])
        for p in prompts:
            got, rest = restarted.fetch_nearest_cache(MODEL, list(p) + [9])
            assert rest == [9] and bytes(memoryview(got[0].state[0])) == NumpyKVCache(p).keys.tobytes()


def test_interface_details(mlx_cache, mx, tmp_path):
    with pytest.raises(kvstore.InvalidArgumentError, match="port"):
        TieredPromptCache(redis="redis://127.0.0.1:70000")
    cache = TieredPromptCache(max_size=2)
    with pytest.raises(KeyError):
        cache.insert_cache(MODEL, [1, 2], make_cache(mlx_cache, mx, [1, 2], "kv"), cache_type="tool")
    with pytest.raises(TypeError):
        cache.insert_cache(["unhashable"], [1], [])
    other_model = object()  # hashable but with no stable name: memory only
    cache.insert_cache(other_model, [1, 2, 3], make_cache(mlx_cache, mx, [1, 2, 3], "kv"))
    assert cache.fetch_nearest_cache(other_model, [1, 2, 3])[1] == []
    assert cache.stats_by_type()["assistant"]["n_sequences"] == 1
    cache.trim_to(n_sequences=0)
    assert len(cache) == 0 and cache.nbytes == 0
    assert kvstore.mlx_lm.TieredPromptCache is TieredPromptCache
    digests = kvstore._kvstore.ModelContentDigests("")
    assert digests.model_id(("a", None, None)) == 'kvstore-model/3:["a",null,null]'
    assert digests.model_id(other_model) is None


def test_writes_after_close_are_dropped_never_raised_or_blocked(mlx_cache, mx, tmp_path):
    # close() may run on another thread (or at interpreter exit) while the model thread
    # still inserts: an insert then stays in memory, and its persistent write is dropped
    # (counted) instead of blocking on a queue nobody reads.
    import threading

    cache = TieredPromptCache(directory=tmp_path / "store")
    closer = threading.Thread(target=cache.close)
    closer.start()
    closer.join()
    done = threading.Event()

    def late_writes():
        for i in range(100):  # more than the disk queue holds
            cache.insert_cache(MODEL, [i, i + 1], [NumpyKVCache([i, i + 1])])
        done.set()

    threading.Thread(target=late_writes, daemon=True).start()
    assert done.wait(10), "a write after close() blocked"
    cache.insert_cache(MODEL, [1, 2, 3], make_cache(mlx_cache, mx, [1, 2, 3], "kv"))
    got, rest = cache.fetch_nearest_cache(MODEL, [1, 2, 3])
    assert got is not None and rest == []
    drops = [line for line in cache.metrics_text().splitlines()
             if line.startswith('kvstore_prompt_cache_write_queue_drops_total{tier="disk"}')]
    assert drops == ['kvstore_prompt_cache_write_queue_drops_total{tier="disk"} 101']


def test_the_package_starts_no_thread_and_keeps_no_queue():
    import ast
    import pathlib

    sources = sorted(pathlib.Path(kvstore.__file__).parent.glob("*.py"))
    assert len(sources) >= 6  # the package as shipped: a loop that finds fewer tests nothing
    for path in sources:
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module] if isinstance(node, ast.ImportFrom) else [])
            assert not {"threading", "queue"} & {n.split(".")[0] for n in names if n}, (path.name, names)


def test_metrics_count_every_tier_and_the_collector_exports_them(mlx_cache, mx, tmp_path):
    prometheus_client = pytest.importorskip("prometheus_client")
    from kvstore.metrics import PromptCacheCollector

    store, prompts = store_kv_prompts(mlx_cache, mx, tmp_path)
    with TieredPromptCache(directory=store) as cache:
        cache.fetch_nearest_cache(MODEL, prompts[-1] + [99])  # disk
        cache.insert_cache(MODEL, prompts[0], make_cache(mlx_cache, mx, prompts[0], "kv"))
        cache.fetch_nearest_cache(MODEL, prompts[0] + [99])  # memory
        cache.fetch_nearest_cache(MODEL, [77, 78])  # miss
        cache.flush()
        registry = prometheus_client.CollectorRegistry()
        registry.register(PromptCacheCollector(cache))
        value = registry.get_sample_value
        assert value("kvstore_prompt_cache_fetches_total") == 3
        assert value("kvstore_prompt_cache_hits_total", {"tier": "memory"}) == 1
        assert value("kvstore_prompt_cache_hits_total", {"tier": "disk"}) == 1
        assert value("kvstore_prompt_cache_misses_total", {"tier": "disk"}) == 1
        assert value("kvstore_prompt_cache_tokens_served_total", {"tier": "disk"}) == len(prompts[-1])
        assert value("kvstore_prompt_cache_writes_total", {"tier": "disk"}) == 1
        assert value("kvstore_prompt_cache_bytes_written_total", {"tier": "disk"}) > 0
        assert value("kvstore_prompt_cache_entries", {"tier": "disk"}) == len(prompts)
        assert value("kvstore_prompt_cache_fetch_duration_seconds_count", {"result": "miss"}) == 1
        assert value("kvstore_prompt_cache_fetch_duration_seconds_bucket", {"result": "disk", "le": "+Inf"}) == 1
        text = prometheus_client.generate_latest(registry).decode()
        assert "# TYPE kvstore_prompt_cache_fetch_duration_seconds histogram" in text
        assert cache.metrics_text().count("# HELP ") == text.count("# HELP ")


def test_the_package_and_its_metrics_import_without_prometheus_client():
    code = """
import sys
sys.modules["prometheus_client"] = None  # as if not installed
import kvstore, kvstore.mlx_lm, kvstore.metrics
c = kvstore.mlx_lm.TieredPromptCache()
assert "kvstore_prompt_cache_fetches_total 0" in c.metrics_text()
try:
    kvstore.metrics.PromptCacheCollector(c).collect()
except ImportError:
    print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, env=dict(os.environ))
    assert out.stdout.strip() == "ok"


def test_the_gil_is_released_while_the_disk_tier_works(mlx_cache, mx, tmp_path):
    # With a switch interval far longer than the test, a Python thread that yields after
    # every step runs only while the main thread has released the GIL itself. It must make
    # progress during fetches that load and verify 40 MB from disk.
    import threading
    import time

    import numpy as np

    tokens = list(range(1, 20001))
    big = NumpyKVCache([1])
    big.keys = np.ones((1, 1, len(tokens), 512), dtype=np.float16)
    big.values, big.offset = big.keys, len(tokens)
    with TieredPromptCache(directory=tmp_path / "store") as cache:
        cache.insert_cache(MODEL, tokens, [big])
        cache.flush()
        cache.trim_to(n_sequences=0)
        ticks, stop, started = [0], threading.Event(), threading.Event()

        def count():
            started.set()
            while not stop.is_set():
                ticks[0] += 1
                time.sleep(1e-4)  # hands the GIL back

        interval = sys.getswitchinterval()
        counter = threading.Thread(target=count)
        counter.start()
        started.wait()
        sys.setswitchinterval(1000)
        try:
            during = 0
            key = cache._memory_key(MODEL)
            for _ in range(3):
                before = ticks[0]
                hit = cache._core.fetch(key, MODEL, tokens + [5])  # the coordinator's call alone
                during += ticks[0] - before
                assert hit[3] == len(tokens) and hit[4] == "disk"
        finally:
            sys.setswitchinterval(interval)
            stop.set()
            counter.join()
        assert during > 0


def test_a_directory_under_tilde_is_in_the_home_directory(tmp_path, monkeypatch):
    # docs/python.md's example: directory="~/.cache/mlx-lm/prompt-caches"
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    with TieredPromptCache(directory="~/.cache/prompt-caches") as cache:
        assert cache.disk_stats()["entries"] == 0
    assert (tmp_path / "home" / ".cache" / "prompt-caches").is_dir()
    assert not (tmp_path / "~").exists()


def test_redis_namespace_is_a_deprecated_alias_of_redis_key_prefix():
    with pytest.warns(DeprecationWarning, match="redis_namespace is deprecated: it is redis_key_prefix"):
        TieredPromptCache(redis_namespace="mine:").close()
    with pytest.raises(TypeError, match="not both"):
        TieredPromptCache(redis_key_prefix="a:", redis_namespace="b:")


def test_an_empty_redis_secret_is_refused_not_taken_for_none(tmp_path):
    # Nothing listens on port 1: a secret that passes the check fails to connect instead.
    url = "redis://127.0.0.1:1"
    for make in (lambda: TieredPromptCache(directory=tmp_path / "d", redis=url, redis_secret=""),
                 lambda: kvstore._kvstore.SharedTier(url, secret="")):
        with pytest.raises(kvstore.InvalidArgumentError, match="empty secret") as e:
            make()
        assert isinstance(e.value, kvstore.errors.Error)
    for secret in (None, "s"):
        with pytest.raises(kvstore.FileIOError):
            TieredPromptCache(redis=url, redis_secret=secret)


def test_salts_never_share_a_prefix_in_memory_or_on_disk(mlx_cache, mx, tmp_path, caplog):
    secret = "salt-of-tenant-a-XYZZY"
    prompt = list(range(1, 40))
    longer = prompt + [99]
    with TieredPromptCache(directory=tmp_path / "store") as cache:
        cache.insert_cache(MODEL, prompt, make_cache(mlx_cache, mx, prompt, "kv"), salt=secret)
        assert state_of(cache.fetch_nearest_cache(MODEL, longer, salt=secret)[0]) is not None
        assert cache.fetch_nearest_cache(MODEL, longer, salt=secret.encode())[1] == [99]  # bytes: the same salt
        for other in ({"salt": "tenant-b"}, {}):  # another tenant, and requests without a salt
            assert cache.fetch_nearest_cache(MODEL, longer, **other) == (None, longer)
            assert cache.fetch_nearest_cache(MODEL, prompt[:1], **other) == (None, prompt[:1])
        # mlx-lm's signature is unchanged: an unsalted entry serves unsalted requests only.
        cache.insert_cache(MODEL, longer, make_cache(mlx_cache, mx, longer, "kv"), cache_type="assistant")
        assert cache.fetch_nearest_cache(MODEL, longer)[1] == []
        assert cache.fetch_nearest_cache(MODEL, longer, salt="tenant-b") == (None, longer)
    with TieredPromptCache(directory=tmp_path / "store") as restarted:  # the disk tier
        restarted.register_model(MODEL, make_cache(mlx_cache, mx, [1], "kv"))
        hit, rest = restarted.fetch_nearest_cache(MODEL, longer, salt=secret)
        assert rest == [99] and restarted.metrics_text().count('tier="disk"} 1') >= 1
        assert state_of(hit) == state_of(make_cache(mlx_cache, mx, prompt, "kv"))
        assert restarted.fetch_nearest_cache(MODEL, longer, salt="tenant-b") == (None, longer)
    for root, _, files in os.walk(tmp_path / "store"):
        for name in files:
            assert secret not in name
            with open(os.path.join(root, name), "rb") as f:
                assert secret.encode() not in f.read(), name
    assert secret not in caplog.text


def test_an_empty_salt_is_refused_and_a_salt_is_never_echoed(mlx_cache, mx):
    cache = TieredPromptCache()
    kv = make_cache(mlx_cache, mx, [1, 2], "kv")
    for empty in ("", b""):
        with pytest.raises(kvstore.InvalidArgumentError, match="tenant salt: empty"):
            cache.insert_cache(MODEL, [1, 2], kv, salt=empty)
        with pytest.raises(ValueError):
            cache.fetch_nearest_cache(MODEL, [1, 2], salt=empty)
    assert len(cache) == 0  # nothing stored by the refused insert
    with pytest.raises(TypeError, match="salt must be str, bytes or None, not int") as e:
        cache.fetch_nearest_cache(MODEL, [1, 2], salt=12345)
    assert "12345" not in str(e.value)
    with pytest.raises(TypeError):
        cache.fetch_nearest_cache(MODEL, [1, 2], "positional-salt")  # keyword-only
