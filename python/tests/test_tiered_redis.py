"""TieredPromptCache's shared tier on a real Redis (the ctest fixture's single node)."""

import os
import uuid

import pytest

from test_tiered import MODEL, make_cache, state_of
from kvstore.mlx_lm import TieredPromptCache

CHUNK = 16


def _redis_url():
    url = os.environ.get("KVSTORE_TEST_REDIS_URL", "")
    env_file = os.environ.get("KVSTORE_TEST_REDIS_ENV", "")
    if not url and env_file and os.path.exists(env_file):
        with open(env_file) as f:
            for line in f:
                if line.startswith("KVSTORE_TEST_REDIS_URL="):
                    url = line.split("=", 1)[1].strip()
    return url


@pytest.fixture
def shared(tmp_path, monkeypatch):
    """A factory of TieredPromptCaches on one Redis key prefix of their own."""
    url = _redis_url()
    if not url:
        pytest.skip("no Redis: run through ctest (fixture redis_services_start, needs redis-server) "
                    "or set KVSTORE_TEST_REDIS_URL=redis://[USER:PASSWORD@]HOST:PORT")
    monkeypatch.delenv("KVSTORE_SHARED_SECRET", raising=False)
    prefix = "kvpytest:%d:%s:" % (os.getpid(), uuid.uuid4().hex[:8])
    made = []

    def make(name, **kwargs):
        if "redis_namespace" not in kwargs:  # the deprecated spelling
            kwargs.setdefault("redis_key_prefix", prefix)
        c = TieredPromptCache(directory=tmp_path / name, redis=url, redis_chunk_tokens=CHUNK, **kwargs)
        made.append(c)
        return c

    make.prefix = prefix
    yield make
    for c in made:
        c.close()


def test_two_servers_share_prefixes_through_redis(mlx_cache, mx, shared):
    tokens = list(range(1, 2 * CHUNK + 4))
    writer, reader = shared("a"), shared("b")
    writer.insert_cache(MODEL, tokens, make_cache(mlx_cache, mx, tokens, "kv"))
    writer.flush()
    assert writer.shared_stats()["chunks_written"] == 2  # whole chunks only

    reader.register_model(MODEL, make_cache(mlx_cache, mx, [1], "kv"))
    got, rest = reader.fetch_nearest_cache(MODEL, tokens + [99])
    assert rest == tokens[2 * CHUNK:] + [99]
    assert state_of(got) == state_of(make_cache(mlx_cache, mx, tokens[: 2 * CHUNK], "kv"))
    assert reader.shared_stats()["hits"] == 1 and reader.disk_stats()["entries"] == 0

    # The shared tier is asked only for more than the disk has.
    reader.insert_cache(MODEL, tokens, make_cache(mlx_cache, mx, tokens, "kv"))
    reader.flush()
    reader.trim_to(n_sequences=0)
    got, rest = reader.fetch_nearest_cache(MODEL, tokens + [99])
    assert rest == [99] and reader.shared_stats()["fetches"] == 1


def test_salts_get_namespaces_of_their_own(mlx_cache, mx, shared):
    tokens = list(range(1, 2 * CHUNK + 4))
    writer, reader = shared("a"), shared("b")
    writer.insert_cache(MODEL, tokens, make_cache(mlx_cache, mx, tokens, "kv"), salt="tenant-a")
    writer.flush()
    assert writer.shared_stats()["chunks_written"] == 2
    reader.register_model(MODEL, make_cache(mlx_cache, mx, [1], "kv"))
    for other in ({"salt": "tenant-b"}, {}):
        assert reader.fetch_nearest_cache(MODEL, tokens, **other) == (None, tokens)
    got, rest = reader.fetch_nearest_cache(MODEL, tokens, salt="tenant-a")
    assert rest == tokens[2 * CHUNK:]
    assert state_of(got) == state_of(make_cache(mlx_cache, mx, tokens[: 2 * CHUNK], "kv"))
    # The same prompt without a salt is written again, in the model's own namespace.
    writer.insert_cache(MODEL, tokens, make_cache(mlx_cache, mx, tokens, "kv"))
    writer.flush()
    assert writer.shared_stats()["chunks_written"] == 4


def test_another_configuration_or_secret_is_a_miss(mlx_cache, mx, shared):
    tokens = list(range(1, 2 * CHUNK + 1))
    writer = shared("a")
    writer.insert_cache(MODEL, tokens, make_cache(mlx_cache, mx, tokens, "kv"))
    writer.flush()

    quantized = shared("q")  # restarted with --kv-bits: chunks are keyed by fingerprint
    quantized.register_model(MODEL, make_cache(mlx_cache, mx, [1], "quantized"))
    assert quantized.fetch_nearest_cache(MODEL, tokens)[0] is None

    sealed = shared("s", redis_secret="s3cret")  # refuses the writer's unsealed chunks
    sealed.register_model(MODEL, make_cache(mlx_cache, mx, [1], "kv"))
    assert sealed.fetch_nearest_cache(MODEL, tokens)[0] is None


@pytest.mark.parametrize("secret", [None, "s3cret"])
def test_a_server_that_joins_is_served_from_its_first_request(mlx_cache, mx, shared, secret):
    tokens = list(range(1, 2 * CHUNK + 4))
    writer = shared("a", redis_secret=secret)
    writer.insert_cache(MODEL, tokens, make_cache(mlx_cache, mx, tokens, "kv"))
    writer.flush()

    # An empty directory, no register_model: the structure comes from the shared tier.
    fresh = shared("fresh", redis_secret=secret)
    got, rest = fresh.fetch_nearest_cache(MODEL, tokens + [99])
    assert rest == tokens[2 * CHUNK:] + [99]
    assert state_of(got) == state_of(make_cache(mlx_cache, mx, tokens[: 2 * CHUNK], "kv"))
    assert fresh.shared_stats()["hits"] == 1 and fresh.shared_stats()["models_found"] == 1

    # Another secret finds no structure (nor chunks): a miss without asking for chunks.
    stranger = shared("stranger", redis_secret="other")
    assert stranger.fetch_nearest_cache(MODEL, tokens)[0] is None
    assert stranger.shared_stats()["fetches"] == 0


def test_an_unreachable_redis_fails_at_construction(tmp_path):
    import kvstore

    with pytest.raises(kvstore.FileIOError):
        TieredPromptCache(redis="redis://127.0.0.1:1")


def test_the_secret_comes_from_the_environment_as_for_kvtool(mlx_cache, mx, shared, monkeypatch):
    tokens = list(range(1, 2 * CHUNK + 1))
    monkeypatch.setenv("KVSTORE_SHARED_SECRET", "from-env")
    writer = shared("a")  # no redis_secret: sealed with $KVSTORE_SHARED_SECRET
    writer.insert_cache(MODEL, tokens, make_cache(mlx_cache, mx, tokens, "kv"))
    writer.flush()
    monkeypatch.delenv("KVSTORE_SHARED_SECRET")
    for secret, served in (("from-env", True), ("other", False)):
        reader = shared("r-" + secret, redis_secret=secret)
        reader.register_model(MODEL, make_cache(mlx_cache, mx, [1], "kv"))
        assert (reader.fetch_nearest_cache(MODEL, tokens)[0] is not None) == served, secret


def test_the_old_parameter_name_still_names_the_key_prefix(mlx_cache, mx, shared):
    tokens = list(range(1, 2 * CHUNK + 1))
    with pytest.warns(DeprecationWarning):
        writer = shared("a", redis_namespace=shared.prefix)
    writer.insert_cache(MODEL, tokens, make_cache(mlx_cache, mx, tokens, "kv"))
    writer.flush()
    reader = shared("b")  # redis_key_prefix=shared.prefix
    reader.register_model(MODEL, make_cache(mlx_cache, mx, [1], "kv"))
    assert reader.fetch_nearest_cache(MODEL, tokens)[0] is not None


def test_a_refused_login_is_permission_denied(tmp_path):
    import kvstore

    url = _redis_url()
    if not url:
        pytest.skip("no Redis: run through ctest (fixture redis_services_start, needs redis-server)")
    node = url.rsplit("@", 1)[1]
    for bad, user in (("redis://default:not-the-password@" + node, "default"), ("REDIS://" + node, "default")):
        with pytest.raises(kvstore.PermissionDeniedError) as e:
            TieredPromptCache(redis=bad, directory=tmp_path / "d")
        assert isinstance(e.value, PermissionError) and e.value.exit_code == 2 and e.value.code == "PermissionDenied"
        assert str(e.value).startswith("redis: authentication failed for user %s at %s: " % (user, node))
        assert "not-the-password" not in str(e.value)
    with pytest.raises(kvstore.NotSupportedError, match="TLS"):
        TieredPromptCache(redis="rediss://" + node)
