"""Drop-in replacements for mlx-lm's prompt-cache functions.

``save_prompt_cache`` / ``load_prompt_cache`` take and return real mlx-lm cache objects
(built with ``cls.from_state(state, meta_state)`` as mlx-lm does) and add verified
(SHA-256) and compressed files. ``TieredPromptCache`` replaces ``LRUPromptCache`` in
``mlx_lm.server`` with a memory tier that behaves like it plus persistent disk and Redis tiers.

MLX and mlx-lm are imported on first use; importing this module needs neither.
"""

import os

from . import _kvstore
from ._mlx_bridge import cache_module, caches_from_layers, layers_from_caches, layout_for
from ._tiered import TieredPromptCache
from .errors import Error

__all__ = ["save_prompt_cache", "load_prompt_cache", "TieredPromptCache"]


def save_prompt_cache(file_name, cache, metadata={}, *, compress=None, codec="zstd", integrity=True,
                      durable=True):
    """Save a prompt cache (a list of mlx-lm cache objects) to a file.

    Without ``compress`` the file is one mlx-lm's own ``load_prompt_cache`` reads (for
    ArraysCache, in the layout of the mlx-lm that is imported). ``integrity`` adds
    digests as metadata mlx-lm ignores: True or "sha256" (SHA-256, for files exchanged),
    "xxh3" (XXH3-128, at memory speed, for caches), False for none; ``compress`` (True or
    a zstd level) writes a seekable zstd container (``codec="byteplane"`` for a better
    ratio on 16-bit floats) that only kvstore reads. Like ``mx.save_safetensors``,
    ".safetensors" is appended to a name without it. The write is atomic: temp file,
    fsync, rename with ``durable=True``; temp file + rename with ``durable=False`` (a
    crash may then lose or tear the file, which a verified load refuses).
    """
    file_name = _kvstore.expand_user(os.fspath(file_name))
    if not file_name.endswith(".safetensors"):
        file_name += ".safetensors"
    layers = layers_from_caches(cache)
    _kvstore.save(
        file_name,
        layers,
        dict(metadata),
        compress=compress,
        codec=codec,
        integrity=integrity,
        layout=layout_for(layers),
        durable=durable,
    )


def load_prompt_cache(file_name, return_metadata=False, *, verify=False):
    """Load a prompt cache written by mlx-lm, mlx-swift-lm or kvstore (plain or compressed).

    Returns a list of mlx-lm cache objects, and the user metadata dict when
    ``return_metadata``. ``verify`` checks the file's digests first, with the algorithm
    the file declares (CorruptionError naming the tensor on a mismatch); a compressed
    file with digests is checked whatever ``verify`` says.

    A plain mlx-lm-layout ``.safetensors`` file (without ArraysCache layers, whose layout
    depends on the mlx-lm version) is checked by kvstore from its header (and, with
    ``verify``, its digests) and then read by mlx-lm's own ``load_prompt_cache`` from the
    same open file: MLX's reader fills MLX memory straight from the file, which no copy
    through kvstore can beat.
    Everything else is read by kvstore and copied into MLX once.
    """
    path = _kvstore.expand_user(os.fspath(file_name))
    loaded = _load_through_mlx(path, verify)
    if loaded is not None:
        cache, metadata = loaded
    else:
        loaded = _kvstore.load(path, verify=verify)
        cache, metadata = caches_from_layers(loaded.layers), loaded.metadata
    if return_metadata:
        return cache, metadata
    return cache


def _load_through_mlx(path, verify=False):
    """(cache, metadata) read by mlx-lm's own loader when kvstore's header check says it
    reads the file exactly as kvstore would (and, with ``verify``, its digests match),
    else None.

    The file is opened once: the header and digests are checked through that descriptor
    and mlx-lm reads the same open file, so a file atomically replaced meanwhile is never
    loaded unchecked. A file rewritten in place meanwhile (its size or mtime changed) is read
    again by kvstore instead.
    """
    if not path.endswith(".safetensors"):
        return None  # mx.load picks the format from the name
    try:
        f = open(path, "rb")
    except OSError:
        return None  # kvstore's loader raises the error, naming the path
    with f:
        before = os.fstat(f.fileno())
        try:
            if not _mlx_reads_it("/dev/fd/%d" % f.fileno(), verify):
                return None
        except (Error, OSError):
            return None  # kvstore's loader raises it again, naming the path
        cache, metadata = cache_module().load_prompt_cache(f, return_metadata=True)
        if _changed(before, os.fstat(f.fileno())):
            return None
    return cache, {k: v for k, v in metadata.items() if not _kvstore.is_kvstore_metadata_key(k)}


def _changed(a, b):
    return (a.st_dev, a.st_ino, a.st_size, a.st_mtime_ns) != (b.st_dev, b.st_ino, b.st_size, b.st_mtime_ns)


def _mlx_reads_it(path, verify=False):
    """True when the imported mlx-lm loads `path` exactly as kvstore would (header checked;
    with ``verify`` every digest too: a mismatch raises, and kvstore's own load then
    raises it again naming the path)."""
    info = _kvstore.inspect(path, verify=verify)  # the header: safetensors rules, layout, classes
    if info["compression"] is not None or info["layout"] != "mlx-lm" or "unsupported" in info:
        return False
    if not info["layers"]:
        return False  # mlx-lm's loader cannot unpack a file of no layers; kvstore returns []
    if not info.get("valid", True):
        return False

    def plain(layer):
        return layer["class"] not in ("ArraysCache", "MambaCache") and not layer.get("errors") and all(
            plain(c) for c in layer["children"])

    module = cache_module()
    return all(plain(layer) and hasattr(module, layer["class"]) for layer in info["layers"])
