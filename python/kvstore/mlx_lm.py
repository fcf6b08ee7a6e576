"""Drop-in replacements for mlx-lm's prompt-cache functions.

``save_prompt_cache`` / ``load_prompt_cache`` take and return real mlx-lm cache objects
(built with ``cls.from_state(state, meta_state)`` as mlx-lm does) and add verified
(SHA-256) and compressed files. ``TieredPromptCache`` replaces ``LRUPromptCache`` in
``mlx_lm.server`` with a memory tier that behaves like it plus persistent disk and Redis tiers.

MLX and mlx-lm are imported on first use; importing this module needs neither.
"""

import os

from . import _kvstore
from ._mlx_bridge import cache_module, caches_from_layers, layers_from_caches, layout_for, mx
from ._tiered import TieredPromptCache, stop_on_sigterm
from .errors import CorruptionError, Error

__all__ = ["save_prompt_cache", "load_prompt_cache", "TieredPromptCache", "stop_on_sigterm"]


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
    ``return_metadata``. ``verify`` checks the file's digests before anything is returned,
    with the algorithm the file declares (CorruptionError naming the tensor on a mismatch);
    a compressed file with digests is checked whatever ``verify`` says.

    A plain mlx-lm-layout ``.safetensors`` file (without ArraysCache layers, whose layout
    depends on the mlx-lm version) has its header checked by kvstore in a mapping and is
    then read by MLX's own loader by path, which fills MLX memory straight from the file
    (no copy through kvstore can beat it); with ``verify`` the arrays MLX read are hashed
    in MLX memory on all cores, so the bytes returned are exactly the bytes verified. What
    MLX read is served only when its header is the one kvstore checked: a file replaced or
    rewritten meanwhile is read again, and refused (CorruptionError) when it keeps changing.
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


# Attempts at reading a file that changes between kvstore's header check and MLX's read.
_MLX_READ_ATTEMPTS = 3


def _load_through_mlx(path, verify=False):
    """(cache, metadata) read by MLX's own loader when kvstore's header check says mlx-lm
    reads the file exactly as kvstore would, else None (kvstore's own loader reads it).

    MLX reads by path, so the file it reads may not be the one checked (replaced or
    rewritten in between): its metadata, tensor names, dtypes and shapes must be the
    checked header's, and with ``verify`` the bytes in MLX memory must match the digests;
    otherwise the read is repeated.
    """
    if not path.endswith(".safetensors"):
        return None  # mx.load picks the format from the name
    for _ in range(_MLX_READ_ATTEMPTS):
        try:
            checked = _kvstore.open_for_mlx(path)
        except Error:
            return None  # kvstore's loader raises it again, naming the path
        if not checked.mlx_readable or (verify and not checked.has_digests):
            return None
        module = cache_module()
        if not all(hasattr(module, c) for c in checked.classes):
            return None
        try:
            arrays, metadata = _mlx_load(path)
        except (RuntimeError, ValueError, OSError):
            return None  # kvstore's loader reads it, with kvstore's errors
        if not checked.same_header(metadata, arrays):
            continue  # another file than the one checked
        if verify:
            mx().eval(list(arrays.values()))
            checked.verify_copy(arrays)  # CorruptionError naming the tensor
        return _caches_from_mlx(module, arrays, metadata)
    raise CorruptionError(f"{path}: the file changed while it was read, {_MLX_READ_ATTEMPTS} times")


def _mlx_load(path):
    """mx.load's (arrays, metadata) of a .safetensors file (tests wrap it to race a writer)."""
    return mx().load(path, return_metadata=True)


def _caches_from_mlx(module, arrays, metadata):
    """mlx-lm's load_prompt_cache after its mx.load: caches by cls.from_state, and the user
    metadata without kvstore's own entries."""
    from mlx.utils import tree_unflatten

    states = tree_unflatten(list(arrays.items()))
    info, user, classes = tree_unflatten(list(metadata.items()))
    cache = [getattr(module, c).from_state(state, meta) for c, state, meta in zip(classes, states, info)]
    return cache, {k: v for k, v in user.items() if not _kvstore.is_kvstore_metadata_key(k)}
