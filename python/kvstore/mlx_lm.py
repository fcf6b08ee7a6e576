"""Drop-in replacements for mlx-lm's prompt-cache functions.

``save_prompt_cache`` / ``load_prompt_cache`` take and return real mlx-lm cache objects
and add verified (SHA-256) and compressed files. They follow the mlx-lm that is
imported: caches of either protocol are saved (up to 0.31: ``state`` + ``meta_state``;
0.32: the full ``state``), files of either layout load, as that mlx-lm's own classes
built with its own ``from_state``, and a plain save is a file that mlx-lm loads.
``TieredPromptCache`` replaces ``LRUPromptCache`` in ``mlx_lm.server`` with a memory tier
that behaves like it plus persistent disk and Redis tiers.

MLX and mlx-lm are imported on first use; importing this module needs neither.
"""

import os

from . import _kvstore
from ._mlx_bridge import cache_module, caches_from_layers, full_state_protocol, layers_from_caches, layout_for, mx
from ._tiered import TieredPromptCache, stop_on_sigterm
from .errors import CorruptionError, Error

__all__ = ["save_prompt_cache", "load_prompt_cache", "TieredPromptCache", "stop_on_sigterm"]


def save_prompt_cache(file_name, cache, metadata={}, *, compress=None, codec="zstd", integrity=True,
                      durable=True, layout=None):
    """Save a prompt cache (a list of mlx-lm cache objects, of mlx-lm 0.32 or earlier) to a file.

    Without ``compress`` the file is one the imported mlx-lm's own ``load_prompt_cache``
    reads: ``layout`` None picks its layout ("mlx-lm-0.32" for mlx-lm 0.32, else
    "mlx-lm", or "mlx-lm-0.31" for ArraysCache under the v0.31 release); name one of
    ``kvstore._kvstore.LAYOUTS`` to write another mlx-lm's. ``integrity`` adds
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
        layout=layout or layout_for(layers),
        durable=durable,
    )


def load_prompt_cache(file_name, return_metadata=False, *, verify=False):
    """Load a prompt cache written by mlx-lm (0.32 or earlier), mlx-swift-lm or kvstore
    (plain or compressed).

    Returns a list of cache objects of the imported mlx-lm's classes, rebuilt through its
    own ``from_state`` whichever mlx-lm layout the file has (so mlx-lm 0.32 gets the
    caches of files saved under 0.31, which its own loader cannot read), and the user
    metadata dict when ``return_metadata``. ``verify`` checks the file's digests before anything is returned,
    with the algorithm the file declares (CorruptionError naming the tensor on a mismatch);
    a compressed file with digests is checked whatever ``verify`` says.

    Under mlx-lm up to 0.31, a plain file in its layout (without ArraysCache layers, whose
    layout depends on the mlx-lm version) has its header checked by kvstore in a mapping
    and is then read by MLX's own loader by path, which fills MLX memory straight from the
    file (no copy through kvstore can beat it); with ``verify`` the arrays MLX read are hashed
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
        if full_state_protocol(module) or not all(hasattr(module, c) for c in checked.classes):
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
