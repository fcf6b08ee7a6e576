"""The real mlx_lm.server with docs/python.md's integration, over HTTP on loopback.

A tiny random Llama (2 layers, written with MLX) and mlx-ref's stand-in tokenizer; the
server's own code is mlx-ref's, patched with the diff docs/python.md shows. Greedy answers
are compared with the unpatched server's; a restart must serve from disk on its first
request and after other traffic; a prompt the disk holds whole (a regenerate after a
restart) must be answered, not hang; a SIGKILL and corrupt entries leave clean misses, and
the corrupt entries are logged. Two servers on one directory both run and serve each
other's entries; two servers on one Redis with a secret, with the model at two paths
(separate copies, as two machines have), share through it.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

import kvstore
from conftest import MLX_REF, MLX_REF_PYTHON, apply_documented_server_diff

STUBS = MLX_REF / "stubs"
PACKAGE = os.path.dirname(os.path.dirname(kvstore.__file__))  # the kvstore under test
CHARS = "".join(chr(c) for c in range(32, 127)) + "\n"
CONFIG = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "intermediate_size": 128,
          "num_attention_heads": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-5,
          "vocab_size": 3 + len(CHARS), "tie_word_embeddings": True}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, mlx_cache, mx):
    if not (MLX_REF_PYTHON / "mlx_lm" / "server.py").is_file() or not (STUBS / "transformers").is_dir():
        pytest.skip(f"mlx-lm's server.py or the stubs not found in {MLX_REF}")
    if shutil.which("patch") is None:
        pytest.skip("patch(1) is not installed")
    from mlx.utils import tree_flatten
    from mlx_lm.models import llama

    d = tmp_path_factory.mktemp("model")
    mx.random.seed(7)
    model = llama.Model(llama.ModelArgs.from_dict(CONFIG))
    mx.save_safetensors(str(d / "model.safetensors"), dict(tree_flatten(model.parameters())))
    (d / "config.json").write_text(json.dumps(CONFIG))
    (d / "e2e_tokenizer.json").write_text(json.dumps(
        {"type": "char", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
         "specials": ["<unk>", "<s>", "</s>"], "chars": CHARS, "chat_template": "e2e-simple"}))
    return d


@pytest.fixture(scope="module")
def patched_package(tmp_path_factory, model_dir):
    """A copy of mlx-ref's mlx_lm package with docs/python.md's diff applied to server.py."""
    root = tmp_path_factory.mktemp("patched")
    shutil.copytree(MLX_REF_PYTHON / "mlx_lm", root / "mlx_lm")
    done = apply_documented_server_diff(root)
    assert done.returncode == 0, done.stdout + done.stderr
    return root


class Server:
    def __init__(self, model_dir, pythonpath, home, **env_vars):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(map(str, pythonpath)), HOME=str(home), **env_vars)
        self.log = open(home / f"server-{self.port}.log", "w")
        self.proc = subprocess.Popen([sys.executable, "-m", "mlx_lm.server", "--model", str(model_dir),
                                      "--host", "127.0.0.1", "--port", str(self.port)],
                                     env=env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.output()
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.2)
        raise AssertionError("server did not start: " + self.output())

    def output(self):
        if not self.log.closed:
            self.log.flush()
        return open(self.log.name).read()

    def chat(self, messages):
        """(answer, cached prompt tokens, prompt tokens) of a greedy completion; fails after 60 s
        (a hang)."""
        body = json.dumps({"messages": messages, "max_tokens": 6, "temperature": 0.0}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/v1/chat/completions", body,
                                     {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                reply = json.loads(r.read())
        except Exception as e:
            raise AssertionError(f"{e}; server output:\n{self.output()}")
        usage = reply["usage"]
        cached = usage.get("prompt_tokens_details", {}).get("cached_tokens", 0)
        return reply["choices"][0]["message"]["content"], cached, usage["prompt_tokens"]

    def stop(self):
        self.proc.terminate()  # the patched server flushes its queued writes (stop_on_sigterm)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


SYSTEM = {"role": "system", "content": "You are a tiny random model. " * 8}


def conversation(topic, turns):
    msgs = [SYSTEM]
    for i in range(turns):
        msgs.append({"role": "user", "content": f"Tell me about {topic}, part {i}. " * 4})
        if i + 1 < turns:
            msgs.append({"role": "assistant", "content": f"Here is part {i} about {topic}."})
    return msgs


REQUESTS = [conversation("tides", 1), conversation("tides", 1), conversation("moss", 1), conversation("tides", 2)]


def test_the_patched_server_answers_as_the_unpatched_one_and_restarts_warm(model_dir, patched_package, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    plain = Server(model_dir, [STUBS, MLX_REF_PYTHON], home)
    try:
        want = [plain.chat(m)[0] for m in REQUESTS]
    finally:
        plain.stop()

    ours = Server(model_dir, [STUBS, patched_package, PACKAGE, MLX_REF_PYTHON], home)
    try:
        got = [ours.chat(m) for m in REQUESTS]
    finally:
        ours.stop()
    assert [answer for answer, _, _ in got] == want
    assert got[1][1] == got[1][2] - 1  # the repeated prompt: all but its last token from memory
    store = home / ".cache" / "mlx-lm" / "prompt-caches"
    keys, disk_bytes, distinct_kv_bytes = _stored_keys(store)
    assert keys
    # A prompt and then prompt + completion (and the server's checkpoints inside a prompt)
    # cost one entry: no stored key is a prefix (of >= 32 tokens) of another.
    for k in keys:
        assert not any(len(k) >= 32 and o != k and o[:len(k)] == k for o in keys), "a stored prefix was kept"
    print(f"disk tier: {len(keys)} entries, {disk_bytes} bytes for {distinct_kv_bytes} KV bytes of distinct "
          f"tokens ({disk_bytes / distinct_kv_bytes:.2f}x)")
    # Entries that share a prefix share its bytes (delta entries on a base).
    assert disk_bytes <= 1.5 * distinct_kv_bytes

    # A restart: the first request is served from disk, as is an old conversation after
    # unrelated traffic; a prompt the disk holds whole (the regenerate) is answered.
    again = Server(model_dir, [STUBS, patched_package, PACKAGE, MLX_REF_PYTHON], home)
    try:
        first = again.chat(REQUESTS[0])
        other = again.chat(conversation("glaciers", 1))
        later = again.chat(REQUESTS[3])
        regenerate = again.chat(REQUESTS[2])
    finally:
        again.stop()
    assert first[0] == want[0] and first[1] == first[2] - 1  # the disk held it whole (prompt + answer)
    assert other[1] > 0  # the shared system prompt, from memory
    assert later[0] == want[3] and later[1] > first[2]  # the disk's first turn, after other traffic
    assert regenerate[0] == want[2] and regenerate[1] == regenerate[2] - 1

    # SIGKILL right after a response, then every entry corrupted: answers are unchanged,
    # the corrupt entries are misses, removed and logged on the kvstore logger.
    killed = Server(model_dir, [STUBS, patched_package, PACKAGE, MLX_REF_PYTHON], home)
    try:
        assert killed.chat(REQUESTS[3])[0] == want[3]
    finally:
        killed.proc.kill()
        killed.proc.wait()
        killed.log.close()
    entries = sorted(store.glob("*.safetensors"))
    for f in entries:
        data = bytearray(f.read_bytes())
        data[-3] ^= 0x40  # a tensor byte: the digests fail
        f.write_bytes(bytes(data))
    last = Server(model_dir, [STUBS, patched_package, PACKAGE, MLX_REF_PYTHON], home)
    try:
        answer = last.chat(REQUESTS[3])
        log = last.output()
    finally:
        last.stop()
    assert answer[0] == want[3]
    assert "kvstore: disk tier removed a bad entry" in log


def _stored_keys(store):
    """(the token keys of the disk tier's entries, their files' bytes, the KV bytes of the
    distinct tokens they hold: a token position counts once however many entries hold it,
    at the KV bytes per token of a whole entry)."""
    keys, disk_bytes, per_token = [], 0, 0
    for f in store.glob("*.safetensors"):
        info = kvstore.inspect(str(f))
        tokens = tuple(int(t) for t in info["metadata"]["kvstore_tokens"].split(","))
        keys.append(tokens)
        disk_bytes += info["file_bytes"]
        if "kvstore_base" not in info["metadata"]:  # a delta entry holds only the rows after its base's
            per_token = info["tensor_bytes"] / len(tokens)
    ordered = sorted(keys)
    shared = 0  # trie nodes counted twice: the common prefix of neighbours in sorted order
    for a, b in zip(ordered, ordered[1:]):
        n = 0
        while n < min(len(a), len(b)) and a[n] == b[n]:
            n += 1
        shared += n
    distinct = sum(map(len, keys)) - shared
    return keys, disk_bytes, int(distinct * per_token)


def _patched(patched_package):
    return [STUBS, patched_package, PACKAGE, MLX_REF_PYTHON]


def _wait_for_entries(store, at_least, timeout=20):
    """Waits until `store` holds `at_least` entries (the writes are queued after a response)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if store.is_dir() and len(list(store.glob("*.safetensors"))) >= at_least:
            time.sleep(0.5)  # the manifest line follows the rename
            return
        time.sleep(0.1)
    raise AssertionError(f"fewer than {at_least} entries in {store} after {timeout} s")


def test_two_servers_on_one_directory_both_run_and_share(model_dir, patched_package, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    store = home / ".cache" / "mlx-lm" / "prompt-caches"
    a = Server(model_dir, _patched(patched_package), home)
    try:
        b = Server(model_dir, _patched(patched_package), home)  # the same directory, at once
        try:
            first = a.chat(REQUESTS[0])
            _wait_for_entries(store, 1)
            shared = b.chat(REQUESTS[0])  # B's first request: A's entry, from disk
            assert shared[0] == first[0] and shared[1] == shared[2] - 1, (first, shared)
            entries = len(list(store.glob("*.safetensors")))
            other = b.chat(conversation("moss", 1))
            _wait_for_entries(store, entries + 1)
            back = a.chat(conversation("moss", 1))  # and the other way
            assert back[0] == other[0] and back[1] == back[2] - 1, (other, back)
        finally:
            b.stop()
    finally:
        a.stop()


def test_two_servers_on_one_redis_with_a_secret_share_across_model_paths(model_dir, patched_package, tmp_path):
    from test_tiered_redis import _redis_url

    url = _redis_url()
    if not url:
        pytest.skip("no Redis: run through ctest (fixture redis_services_start, needs redis-server) "
                    "or set KVSTORE_TEST_REDIS_URL")
    # Two machines: each its own home (disk tier) and its own copy of the model, at
    # another path with other mtimes; one Redis, one secret (a fresh one: its own keys).
    copy = tmp_path / "elsewhere" / "model"
    shutil.copytree(model_dir, copy)
    env = {"KVSTORE_REDIS_URL": url, "KVSTORE_SHARED_SECRET": "fleet secret " + os.urandom(8).hex()}
    homes = [tmp_path / "home-a", tmp_path / "home-b"]
    for h in homes:
        h.mkdir()
    prompt = conversation("tides", 1)
    a = Server(model_dir, _patched(patched_package), homes[0], **env)
    b = Server(copy, _patched(patched_package), homes[1], **env)
    try:
        first = a.chat(prompt)
        a.stop()  # drains its queued writes, to Redis too
        shared = b.chat(prompt)
    finally:
        b.stop()
        if a.proc.poll() is None:
            a.stop()
    assert shared[0] == first[0]
    assert shared[1] >= 256, shared  # at least one whole chunk from Redis (B's disk is empty)
    assert url not in a.output() + b.output()  # the URL carries no password here, but never logged
