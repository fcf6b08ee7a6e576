"""TieredPromptCache: mlx_lm.server's LRUPromptCache with disk and Redis tiers behind it."""

import copy
import itertools
import logging
import os
import signal
import warnings
import weakref

from . import _kvstore
from ._mlx_bridge import caches_from_layers, layers_from_caches
from .errors import FailedPreconditionError

log = logging.getLogger("kvstore")

_INT64_MAX = (1 << 63) - 1


def _deprecated_alias(old_name, old_value, name, value, default):
    """`value`, or the value given under a parameter's old name (with a DeprecationWarning)."""
    if old_value is None:
        return value
    if value != default:
        raise TypeError(f"give {name} or its deprecated alias {old_name}, not both")
    warnings.warn(f"{old_name} is deprecated: it is {name}", DeprecationWarning, stacklevel=3)
    return old_value


class TieredPromptCache:
    """A drop-in for mlx_lm.server's ``LRUPromptCache``, with persistent tiers behind it.

    A binding of kvstore's C++ tier coordinator (``ServerPromptCache``), which decides
    between the tiers for C++ servers too. Its memory tier runs mlx-lm's LRUPromptCache
    policy (the same trie search, tiers by ``cache_type``, prefix removal and eviction;
    fetches return deep copies), so memory hits are exactly what LRUPromptCache returns.
    When memory holds no prefix, or a shorter one, the disk tier (``directory``, at most
    ``disk_bytes``) and then the shared tier (``redis``, a
    ``redis://[USER:PASSWORD@]HOST:PORT`` URL; asked only when whole chunks of
    ``redis_chunk_tokens`` could serve more than memory and disk) serve the longest
    reusable prefix of the tokens (a stored prefix, or a longer trimmable entry trimmed to
    the common prefix), verified before use, leaving at least one token to process (what
    mlx_lm.server needs to generate); a corrupt, unreadable or
    unreachable entry is a miss (logged or counted), never an exception. Inserts go to
    memory at once and are queued in C++ for the persistent tiers (at most
    ``disk_queue`` caches wait for each of them; a full queue drops the write and counts
    it); ``flush()`` waits for them, ``close()`` (also on ``with`` exit, when the object
    is collected, and at interpreter exit) flushes and releases the directory and the
    connections. A server restarted on the same directory serves its old prefixes.
    ``metrics_text()`` (and ``kvstore.metrics.PromptCacheCollector``) report every
    counter in the Prometheus text format.

    The persistent tiers key every entry by a model fingerprint: the model key's stable
    name plus the structure of the caches the model produces (class, dtype, KV heads,
    head dims, quantization, window per layer). The structure is learned from this
    process's inserts for that model, or declared with ``register_model``; with a
    directory, the structure last learned is kept there (``kvstore-models.json``), so a
    restarted server serves its old prefixes from its first request; with ``redis``, a
    server that knows no structure for a model takes the one the fleet published in the
    shared tier (sealed like the chunks), so a server that joins is served from its first
    request too. Entries written for
    another structure than the one in use are refused, never served; new weights at the
    same path are another model. A server restarted with other cache options
    (``--kv-bits``, ``--max-kv-size``) should call ``register_model`` before serving:
    until its first insert it would otherwise be served the previous structure's caches
    (the K/V of the same weights and tokens, in the previous cache classes). Which
    fingerprint a model key is served under is decided in C++ (``kvstore::ModelRegistry``,
    include/kvstore/model_registry.h), as for a C++ server.

    Every method is thread-safe, and the GIL is released while the tiers work. MLX
    binds arrays to the stream of the thread that made them (MLX 0.32 raises "There is
    no Stream(cpu, 0) in current thread" elsewhere), so call it from the thread that
    runs the model, as mlx_lm.server does: copies and conversions to MLX happen on the
    calling thread, and the C++ writers never touch MLX objects, only the buffers they
    view.
    """

    def __init__(self, max_size=10, max_bytes=1 << 63, *, directory=None, disk_bytes=16 << 30, redis=None,
                 redis_key_prefix="kvstore:", redis_secret=None, redis_chunk_tokens=256, disk_queue=64,
                 redis_namespace=None):
        """A cache of at most ``max_size`` entries and ``max_bytes`` bytes in memory, as
        LRUPromptCache(max_size, max_bytes).

        directory: the disk tier's folder (``~`` expanded), holding at most ``disk_bytes``,
        which servers of one machine may share; redis: the shared tier's
        ``redis://[USER:PASSWORD@]HOST:PORT`` URL (default: the KVSTORE_REDIS_URL
        environment variable; unset or empty: none),
        its keys under ``redis_key_prefix``, sealed with ``redis_secret`` (default: the
        KVSTORE_SHARED_SECRET environment variable) in chunks of ``redis_chunk_tokens``;
        disk_queue: how many inserts may wait for each persistent tier (disk, Redis). ``redis_namespace`` is a deprecated
        alias of ``redis_key_prefix``. Raises as kvstore does when a tier cannot be opened
        (e.g. PermissionDeniedError when Redis refuses the login).
        """
        redis_key_prefix = _deprecated_alias("redis_namespace", redis_namespace, "redis_key_prefix",
                                             redis_key_prefix, "kvstore:")
        if redis is None:
            redis = os.environ.get(_kvstore.REDIS_URL_ENV) or None  # unset or empty: no shared tier
        if redis_secret is None:
            redis_secret = os.environ.get(_kvstore.SHARED_SECRET_ENV)  # as kvtool and prompt_cache_sim
        self.max_size = max_size
        self.max_bytes = max_bytes
        self._model_keys = {}  # model key -> the memory tier's key ("m<n>")
        self._key_numbers = itertools.count()
        self._disk = self._shared = None
        if directory is not None:
            directory = _kvstore.expand_user(os.fspath(directory))  # "~/.cache/..." is the home's
            self._disk = _kvstore.DiskStore(directory, min(disk_bytes, _INT64_MAX))
        if redis is not None:
            try:
                self._shared = _kvstore.SharedTier(os.fspath(redis), redis_key_prefix, redis_secret,
                                                   redis_chunk_tokens, async_insert=False)  # the coordinator queues
            except BaseException:
                _close(None, self._disk, None)
                raise
        self._persistent = self._disk is not None or self._shared is not None
        self._core = _kvstore.ServerPromptCache(min(max_size, _INT64_MAX), min(max_bytes, _INT64_MAX),
                                                policy="mlx-lm", disk=self._disk, shared=self._shared,
                                                disk_queue=disk_queue, directory=directory)
        # Flushes and closes the tiers on close(), when the object is collected, or at
        # interpreter exit, whichever comes first.
        self._finalizer = weakref.finalize(self, _close, self._core, self._disk, self._shared)

    # ---- LRUPromptCache's interface ----

    def __len__(self):
        """The number of entries in the memory tier."""
        return len(self._core)

    @property
    def nbytes(self):
        """Bytes of the caches in the memory tier (their nbytes)."""
        return self._core.nbytes

    def fetch_nearest_cache(self, model, tokens, *, salt=None):
        """(a private copy of the nearest cache or None, the tokens still to process).

        ``salt`` (str or bytes, keyword-only; vLLM's ``cache_salt``): only entries inserted
        with the same salt are served, from every tier. None: entries inserted without one."""
        hit = self._core.fetch(self._memory_key(model), model, tokens, _salt_bytes(salt))
        disk = self._disk
        if disk is not None:
            _log_dropped(disk)
        if hit is None:
            return None, tokens
        entry, entry_tokens, layers, reused, tier = hit
        rest = tokens[reused:] if reused < len(tokens) else []
        if entry is not None:
            cache = copy.deepcopy(entry)
            if entry_tokens > reused:  # a longer entry, trimmed to the common prefix
                for c in cache:
                    c.trim(entry_tokens - reused)
            return cache, rest
        try:
            return caches_from_layers(layers), rest
        except Exception as e:
            log.warning("kvstore: %s tier miss after an error: %s", tier, e)
            return None, tokens

    def insert_cache(self, model, tokens, prompt_cache, *, cache_type="assistant", salt=None):
        """Store ``prompt_cache`` for (model, tokens); do not modify it afterwards.

        ``salt``: the tenant's salt (see fetch_nearest_cache); the entry serves that salt only."""
        salt = _salt_bytes(salt)
        key = self._memory_key(model)
        nbytes = sum(c.nbytes for c in prompt_cache)
        trimmable = all(c.is_trimmable() for c in prompt_cache)  # mlx-lm's can_trim_prompt_cache
        layers = None
        if self._persistent and len(tokens) > 0:  # the persistent tiers serve no empty prefix
            try:
                layers = layers_from_caches(prompt_cache)  # evaluates MLX arrays on this thread
            except Exception as e:
                log.warning("kvstore: not storing a cache of %d layers persistently: %s", len(prompt_cache), e)
        why = self._core.insert(key, model, tokens, prompt_cache, min(nbytes, _INT64_MAX), trimmable,
                                cache_type, layers, salt)
        if why is not None:
            log.warning("kvstore: not storing a cache of %d layers persistently: %s", len(prompt_cache), why)

    def trim_to(self, *, n_sequences=None, n_bytes=None):
        """Evict from memory until at most n_sequences entries and n_bytes remain."""
        self._core.trim_to(
            None if n_sequences is None else min(n_sequences, _INT64_MAX),
            None if n_bytes is None else min(n_bytes, _INT64_MAX),
        )

    def stats_by_type(self):
        """{cache_type: {"n_sequences", "n_bytes"}} of the memory tier, as LRUPromptCache's."""
        return self._core.stats_by_type()

    # ---- the persistent tiers ----

    def register_model(self, model, prompt_cache):
        """Declare that ``model`` (the key passed to fetch/insert) now produces caches shaped
        like ``prompt_cache`` (a cache it made, holding at least one token), so the
        persistent tiers serve it before this process has inserted anything.
        Returns the ModelFingerprint, or None when the key has no stable name."""
        return self._core.register_model(model, layers_from_caches(prompt_cache))

    def disk_stats(self, *, indexed=False):
        """{"entries", "bytes", "corrupt_dropped", "mismatched_dropped",
        "fingerprint_refused", "last_refusal", "unknown_model_misses"} of the disk tier,
        or None without one. A disk tier indexes its directory in the background after
        it opens (fetches find their prefixes meanwhile), so "entries" and "bytes" count
        what is indexed so far; indexed=True waits until the whole directory is."""
        d = self._disk
        if d is None:
            return None
        if indexed:
            d.open_entries  # waits for the indexing
        return {"entries": d.entries, "bytes": d.bytes, "corrupt_dropped": d.corrupt_dropped,
                "mismatched_dropped": d.mismatched_dropped, "fingerprint_refused": d.fingerprint_refused,
                "last_refusal": d.last_refusal, "unknown_model_misses": self._core.unknown_model_fetches()}

    def shared_stats(self):
        """The shared tier's counters (fetches, hits, corrupt, forged, mismatched,
        backend_errors, chunks_written, ...), or None without one."""
        shared = self._shared
        return None if shared is None else shared.stats()

    def metrics_text(self):
        """Every counter of the tiers in the Prometheus text exposition format
        (kvstore/prompt_cache_metrics.h lists the families)."""
        return self._core.metrics_text()

    def flush(self):
        """Wait until every insert so far is in the persistent tiers."""
        self._core.flush()

    def close(self):
        """Flush pending writes and release the directory and connections. Idempotent;
        the memory tier stays usable (later inserts are not persisted, counted as drops)."""
        disk, self._disk, self._shared = self._disk, None, None
        if disk is not None:
            _log_dropped(disk)
        self._finalizer()

    def __enter__(self):
        """The cache itself; leaving the ``with`` block closes it."""
        return self

    def __exit__(self, *exc):
        """close(): flush pending writes and release the tiers."""
        self.close()

    def _memory_key(self, model):
        # Exactly the dict equality mlx-lm's trie uses for models.
        key = self._model_keys.get(model)
        if key is None:
            key = self._model_keys.setdefault(model, "m%d" % next(self._key_numbers))
        return key


def _salt_bytes(salt):
    """The salt as bytes for the binding (str: UTF-8); None stays None. The salt itself is
    never logged or stored: the tiers keep keys derived from it. "" and b"" raise
    InvalidArgumentError (a ValueError)."""
    if salt is None or isinstance(salt, bytes):
        return salt
    if isinstance(salt, str):
        return salt.encode()
    raise TypeError("salt must be str, bytes or None, not %s" % type(salt).__name__)


def stop_on_sigterm():
    """Make SIGTERM stop this process as Ctrl-C does, so that the writes still queued
    for the persistent tiers are not lost.

    Python runs no cleanup when SIGTERM kills it: the caches a TieredPromptCache has
    queued for the disk and Redis (at most ``disk_queue`` each; usually the last response's)
    are lost. After this call SIGTERM raises KeyboardInterrupt in the main thread, which
    mlx_lm.server handles by shutting its HTTP server down and joining its generation
    thread; the interpreter then exits, and its exit hooks flush and close every
    TieredPromptCache. Call it from the main thread (Python's rule for signal handlers).
    Returns the handler it replaced.
    """
    return signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)


def _raise_keyboard_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def _log_dropped(disk):
    """Log the files the disk tier removed as corrupt or mismatched since the last call."""
    try:
        notes = disk.take_dropped()
    except FailedPreconditionError:  # closed by another thread meanwhile
        return
    for note in notes:
        log.warning("kvstore: disk tier removed a bad entry: %s", note)


def _close(core, disk, shared):
    if core is not None:
        core.close()  # flushes the queued writes first
    if disk is not None:
        disk.close()
    if shared is not None:
        shared.close()
