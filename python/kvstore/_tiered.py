"""TieredPromptCache: mlx_lm.server's LRUPromptCache with a disk tier behind it."""

import copy
import json
import logging
import os
import queue
import threading
import weakref

from . import _kvstore
from ._mlx_bridge import caches_from_layers, layers_from_caches
from .errors import NotSupportedError

log = logging.getLogger("kvstore")

_INT64_MAX = (1 << 63) - 1


def model_fingerprint(model):
    """The disk-tier name of an mlx-lm model key, or None when it has no stable one.

    mlx_lm.server keys caches by a tuple such as (model_path, adapter_path,
    draft_model_path). Keys made of str, int, float, bool, None and tuples or lists of
    them are written as compact JSON ("kvstore-model/1:" + json), which is the same in
    every process; any other hashable is served from memory only.
    """

    def plain(x):
        if x is None or isinstance(x, (str, int, float, bool)):
            return x
        if isinstance(x, (tuple, list)):
            return [plain(v) for v in x]
        raise TypeError

    try:
        return "kvstore-model/1:" + json.dumps(plain(model), separators=(",", ":"))
    except (TypeError, ValueError):
        return None


class _DiskWriter:
    """Writes entries to the disk tier on one background thread, in order."""

    def __init__(self, store, max_pending=8):
        self._store = store
        self._queue = queue.Queue(maxsize=max_pending)
        self._thread = threading.Thread(target=self._run, name="kvstore-disk-writer", daemon=True)
        self._thread.start()

    def submit(self, model, tokens, layers):
        self._queue.put((model, tokens, layers))  # blocks while max_pending writes wait

    def flush(self):
        self._queue.join()

    def close(self):
        self._queue.put(None)
        self._thread.join()

    def _run(self):
        while True:
            job = self._queue.get()
            try:
                if job is None:
                    return
                self._store.put(*job)
            except Exception as e:  # a failed write loses a cache, never the server
                log.warning("kvstore: disk tier write failed: %s", e)
            finally:
                self._queue.task_done()


class TieredPromptCache:
    """A drop-in for mlx_lm.server's ``LRUPromptCache``, with a persistent disk tier.

    The memory tier is mlx-lm's LRUPromptCache policy (the same trie search, tiers by
    ``cache_type``, prefix removal and eviction; fetches return deep copies), so memory
    hits are exactly what LRUPromptCache returns. On a memory miss the disk tier
    (``directory``, at most ``disk_bytes``) serves the longest reusable prefix of the
    tokens (a stored prefix, or a longer trimmable entry trimmed to the common prefix),
    verified against its SHA-256 digests; a corrupt or unreadable file is a miss
    (logged), never an exception. Inserts go to memory at once and to disk on a
    background thread; ``close()`` (also on ``with`` exit and at interpreter exit)
    flushes them. A server restarted on the same directory serves its old prefixes.

    ``redis`` is reserved for the shared tier. Every method is thread-safe. MLX itself
    binds arrays to the stream of the thread that made them (MLX 0.32 raises "There is
    no Stream(cpu, 0) in current thread" elsewhere), so call it from the thread that
    runs the model, as mlx_lm.server does; the disk writer thread never touches MLX.
    """

    def __init__(self, max_size=10, max_bytes=1 << 63, *, directory=None, disk_bytes=16 << 30, redis=None):
        if redis is not None:
            raise NotSupportedError(
                "TieredPromptCache(redis=...): this build of kvstore has no Redis tier yet; "
                "use directory=... for a persistent tier"
            )
        self.max_size = max_size
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._memory = _kvstore.MemoryIndex(min(max_size, _INT64_MAX), min(max_bytes, _INT64_MAX))
        self._model_keys = {}
        self._disk = None
        self._writer = None
        if directory is not None:
            self._disk = _kvstore.DiskStore(os.fspath(directory), min(disk_bytes, _INT64_MAX))
            self._writer = _DiskWriter(self._disk)
        # Flushes and closes the disk tier on close(), when the object is collected, or
        # at interpreter exit, whichever comes first.
        self._finalizer = weakref.finalize(self, _close_tiers, self._writer, self._disk)

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
        return self._fetch_from_disk(model, tokens)

    def insert_cache(self, model, tokens, prompt_cache, *, cache_type="assistant"):
        """Store ``prompt_cache`` for (model, tokens); do not modify it afterwards."""
        nbytes = [c.nbytes for c in prompt_cache]
        trimmable = [bool(c.is_trimmable()) for c in prompt_cache]
        with self._lock:
            self._memory.insert(self._memory_key(model), tokens, prompt_cache, nbytes, trimmable, cache_type)
        fingerprint = model_fingerprint(model)
        if self._writer is None or fingerprint is None or len(tokens) == 0:
            return  # the disk tier serves no empty prefix
        try:
            layers = layers_from_caches(prompt_cache)  # evaluates MLX arrays on this thread
        except Exception as e:
            log.warning("kvstore: not writing a cache of %d layers to disk: %s", len(prompt_cache), e)
            return
        self._writer.submit(fingerprint, list(tokens), layers)

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

    # ---- the disk tier ----

    def disk_stats(self):
        """{"entries", "bytes", "corrupt_dropped", "mismatched_dropped"} of the disk tier,
        or None without one."""
        if self._disk is None:
            return None
        d = self._disk
        return {"entries": d.entries, "bytes": d.bytes, "corrupt_dropped": d.corrupt_dropped,
                "mismatched_dropped": d.mismatched_dropped}

    def flush(self):
        """Wait until every insert so far is on disk."""
        if self._writer is not None:
            self._writer.flush()

    def close(self):
        """Flush pending writes and release the directory. Idempotent."""
        self._writer = None
        self._disk = None
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

    def _fetch_from_disk(self, model, tokens):
        disk = self._disk
        fingerprint = model_fingerprint(model)
        if disk is None or fingerprint is None or len(tokens) == 0:
            return None, tokens
        try:
            hit = disk.fetch(fingerprint, list(tokens))
            if hit is not None:
                length, layers = hit
                return caches_from_layers(layers), (tokens[length:] if length < len(tokens) else [])
        except Exception as e:  # the server path never raises for the disk tier
            log.warning("kvstore: disk tier miss after an error: %s", e)
        return None, tokens


def _close_tiers(writer, disk):
    if writer is not None:
        writer.close()
    if disk is not None:
        disk.close()
