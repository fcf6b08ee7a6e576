"""TieredPromptCache: mlx_lm.server's LRUPromptCache with disk and Redis tiers behind it."""

import copy
import logging
import os
import queue
import threading
import warnings
import weakref

from . import _kvstore
from ._mlx_bridge import caches_from_layers, layers_from_caches
from ._model_id import model_id
from ._model_structures import StoredStructures

log = logging.getLogger("kvstore")

_INT64_MAX = (1 << 63) - 1


class _TierWriter:
    """Writes entries to the disk and shared tiers on one background thread, in order."""

    def __init__(self, tiers, max_pending=8):
        self._tiers = tiers  # [(name, tier with put(model, tokens, layers))]
        self._queue = queue.Queue(maxsize=max_pending)
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kvstore-tier-writer", daemon=True)
        self._thread.start()

    def submit(self, model, tokens, layers):
        # Blocks while max_pending writes wait; after close() (another thread, or
        # interpreter exit) the write is dropped instead of waiting for ever.
        while not self._closed.is_set():
            try:
                self._queue.put((model, tokens, layers), timeout=0.1)
                return
            except queue.Full:
                continue
        log.warning("kvstore: a persistent-tier write after close() was dropped")

    def flush(self):
        self._queue.join()

    def close(self):
        if self._closed.is_set():
            return
        self._closed.set()
        self._queue.put(None)  # the writer drains what was queued before it
        self._thread.join()

    def _run(self):
        while True:
            job = self._queue.get()
            try:
                if job is None:
                    return
                for name, tier in self._tiers:
                    try:
                        tier(*job)
                    except Exception as e:  # a failed write loses a cache, never the server
                        log.warning("kvstore: %s tier write failed: %s", name, e)
            finally:
                self._queue.task_done()


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

    The memory tier is mlx-lm's LRUPromptCache policy (the same trie search, tiers by
    ``cache_type``, prefix removal and eviction; fetches return deep copies), so memory
    hits are exactly what LRUPromptCache returns. On a memory miss the disk tier
    (``directory``, at most ``disk_bytes``) and then the shared tier (``redis``, a
    ``redis://[USER:PASSWORD@]HOST:PORT`` URL) serve the longest reusable prefix of the
    tokens (a stored prefix, or on disk a longer trimmable entry trimmed to the common
    prefix), verified before use; a corrupt, unreadable or unreachable entry is a miss
    (logged or counted), never an exception. Inserts go to memory at once and to the
    persistent tiers on a background thread; ``close()`` (also on ``with`` exit and at
    interpreter exit) flushes them. A server restarted on the same directory serves its
    old prefixes.

    The persistent tiers key every entry by a model fingerprint: the model key's stable
    name plus the structure of the caches the model produces (class, dtype, KV heads,
    head dims, quantization, window per layer). The structure is learned from this
    process's inserts for that model, or declared with ``register_model``; with a
    directory, the structure last learned is kept there (``kvstore-models.json``), so a
    restarted server serves its old prefixes from its first request. Entries written for
    another structure than the one in use are refused, never served; new weights at the
    same path are another model. A server restarted with other cache options
    (``--kv-bits``, ``--max-kv-size``) should call ``register_model`` before serving:
    until its first insert it would otherwise be served the previous structure's caches
    (the K/V of the same weights and tokens, in the previous cache classes).

    Every method is thread-safe. MLX itself binds arrays to the stream of the thread that
    made them (MLX 0.32 raises "There is no Stream(cpu, 0) in current thread"
    elsewhere), so call it from the thread that runs the model, as mlx_lm.server does;
    the writer thread never touches MLX.
    """

    def __init__(self, max_size=10, max_bytes=1 << 63, *, directory=None, disk_bytes=16 << 30, redis=None,
                 redis_key_prefix="kvstore:", redis_secret=None, redis_chunk_tokens=256, redis_namespace=None):
        redis_key_prefix = _deprecated_alias("redis_namespace", redis_namespace, "redis_key_prefix",
                                             redis_key_prefix, "kvstore:")
        if redis_secret is None:
            redis_secret = os.environ.get(_kvstore.SHARED_SECRET_ENV)  # as kvtool and prompt_cache_sim
        self.max_size = max_size
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._memory = _kvstore.MemoryIndex(min(max_size, _INT64_MAX), min(max_bytes, _INT64_MAX))
        self._model_keys = {}
        self._model_ids = {}  # model key -> stable name (or None), taken once per process
        self._fingerprints = {}  # stable name -> the ModelFingerprint the model produces now
        self._unknown_model_misses = 0
        self._chunk_tokens = redis_chunk_tokens
        self._disk = self._shared = self._writer = self._stored_structures = None
        tiers = []
        if directory is not None:
            directory = _kvstore.expand_user(os.fspath(directory))  # "~/.cache/..." is the home's
            self._disk = _kvstore.DiskStore(directory, min(disk_bytes, _INT64_MAX))
            self._stored_structures = StoredStructures(directory)
            tiers.append(("disk", self._disk.put))
        if redis is not None:
            try:
                self._shared = _kvstore.SharedTier(os.fspath(redis), redis_key_prefix, redis_secret,
                                                   redis_chunk_tokens)
            except BaseException:
                _close_tiers(None, self._disk, None)
                raise
            tiers.append(("shared", self._shared.insert))
        if tiers:
            self._writer = _TierWriter(tiers)
        # Flushes and closes the tiers on close(), when the object is collected, or at
        # interpreter exit, whichever comes first.
        self._finalizer = weakref.finalize(self, _close_tiers, self._writer, self._disk, self._shared)

    # ---- LRUPromptCache's interface ----

    def __len__(self):
        with self._lock:
            return len(self._memory)

    @property
    def nbytes(self):
        with self._lock:
            return self._memory.nbytes

    def fetch_nearest_cache(self, model, tokens):
        """(a private copy of the nearest cache or None, the tokens still to process)."""
        with self._lock:
            entry, entry_tokens, n_remaining = self._memory.fetch(self._memory_key(model), tokens)
        if entry is not None:
            cache = copy.deepcopy(entry)
            prefix = len(tokens) - n_remaining
            if entry_tokens > prefix:  # a longer entry, trimmed to the common prefix
                for c in cache:
                    c.trim(entry_tokens - prefix)
            return cache, (tokens[prefix:] if n_remaining else [])
        return self._fetch_persistent(model, tokens)

    def insert_cache(self, model, tokens, prompt_cache, *, cache_type="assistant"):
        """Store ``prompt_cache`` for (model, tokens); do not modify it afterwards."""
        nbytes = [c.nbytes for c in prompt_cache]
        trimmable = [bool(c.is_trimmable()) for c in prompt_cache]
        with self._lock:
            self._memory.insert(self._memory_key(model), tokens, prompt_cache, nbytes, trimmable, cache_type)
        writer = self._writer  # once: close() on another thread may clear it
        if writer is None or len(tokens) == 0:
            return  # the persistent tiers serve no empty prefix
        found = self._fingerprint_of(model, prompt_cache)
        if found is not None:
            fingerprint, layers = found
            writer.submit(fingerprint, list(tokens), layers)

    def trim_to(self, *, n_sequences=None, n_bytes=None):
        """Evict from memory until at most n_sequences entries and n_bytes remain."""
        with self._lock:
            self._memory.trim_to(
                None if n_sequences is None else min(n_sequences, _INT64_MAX),
                None if n_bytes is None else min(n_bytes, _INT64_MAX),
            )

    def stats_by_type(self):
        with self._lock:
            return self._memory.stats_by_type()

    # ---- the persistent tiers ----

    def register_model(self, model, prompt_cache):
        """Declare that ``model`` (the key passed to fetch/insert) now produces caches shaped
        like ``prompt_cache`` (a cache it made, holding at least one token), so the
        persistent tiers serve it before this process has inserted anything.
        Returns the ModelFingerprint, or None when the key has no stable name."""
        found = self._fingerprint_of(model, prompt_cache, strict=True)
        return None if found is None else found[0]

    def disk_stats(self):
        """{"entries", "bytes", "corrupt_dropped", "mismatched_dropped",
        "fingerprint_refused", "last_refusal", "unknown_model_misses"} of the disk tier,
        or None without one."""
        if self._disk is None:
            return None
        d = self._disk
        return {"entries": d.entries, "bytes": d.bytes, "corrupt_dropped": d.corrupt_dropped,
                "mismatched_dropped": d.mismatched_dropped, "fingerprint_refused": d.fingerprint_refused,
                "last_refusal": d.last_refusal, "unknown_model_misses": self._unknown_model_misses}

    def shared_stats(self):
        """The shared tier's counters (fetches, hits, corrupt, forged, mismatched,
        backend_errors, chunks_written, ...), or None without one."""
        return None if self._shared is None else self._shared.stats()

    def flush(self):
        """Wait until every insert so far is in the persistent tiers."""
        writer = self._writer
        if writer is not None:
            writer.flush()

    def close(self):
        """Flush pending writes and release the directory and connections. Idempotent."""
        self._writer = self._disk = self._shared = None
        self._finalizer()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _memory_key(self, model):
        # Exactly the dict equality mlx-lm's trie uses for models.
        key = self._model_keys.get(model)
        if key is None:
            key = self._model_keys.setdefault(model, "m%d" % len(self._model_keys))
        return key

    def _model_id(self, model):
        with self._lock:
            if model not in self._model_ids:
                self._model_ids[model] = model_id(model)
            return self._model_ids[model]

    def _fingerprint_of(self, model, prompt_cache, strict=False):
        """(fingerprint, layers) of a cache ``model`` made, remembered as what it produces
        now; None when the model has no stable name or the cache no shapes (not strict)."""
        name = self._model_id(model)
        if name is None:
            return None
        try:
            layers = layers_from_caches(prompt_cache)  # evaluates MLX arrays on this thread
            fingerprint = _kvstore.ModelFingerprint.of(name, layers)
        except Exception as e:
            if strict:
                raise
            log.warning("kvstore: not storing a cache of %d layers persistently: %s", len(prompt_cache), e)
            return None
        with self._lock:
            self._fingerprints[name] = fingerprint
        if self._stored_structures is not None:
            self._stored_structures.remember(name, fingerprint)
        return fingerprint, layers

    def _fetch_persistent(self, model, tokens):
        disk, shared = self._disk, self._shared
        if (disk is None and shared is None) or len(tokens) == 0:
            return None, tokens
        name = self._model_id(model)
        with self._lock:
            fingerprint = self._fingerprints.get(name) if name is not None else None
        if fingerprint is None and name is not None and self._stored_structures is not None:
            # What the model made when it last inserted (before a restart).
            fingerprint = self._stored_structures.get(name)
        if fingerprint is None:
            with self._lock:
                self._unknown_model_misses += 1
            return None, tokens  # nothing says what this model's caches look like
        tokens_list = list(tokens)
        best = _ask("disk", lambda: disk.fetch(fingerprint, tokens_list)) if disk is not None else None
        have = best[0] if best else 0
        if shared is not None and len(tokens) // self._chunk_tokens * self._chunk_tokens > have:
            # The shared tier holds whole chunks only: asked when it could beat the disk.
            longer = _ask("shared", lambda: shared.fetch(fingerprint, tokens_list, best[0] if best else 0))
            best = longer or best
        if best is None:
            return None, tokens
        length, layers = best
        try:
            return caches_from_layers(layers), (tokens[length:] if length < len(tokens) else [])
        except Exception as e:
            log.warning("kvstore: persistent tier miss after an error: %s", e)
            return None, tokens


def _ask(tier, fetch):
    """A tier's hit, or None: the server path never raises for a persistent tier."""
    try:
        return fetch()
    except Exception as e:
        log.warning("kvstore: %s tier miss after an error: %s", tier, e)
        return None


def _close_tiers(writer, disk, shared):
    if writer is not None:
        writer.close()
    if disk is not None:
        disk.close()
    if shared is not None:
        shared.close()
