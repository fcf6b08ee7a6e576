"""Drop-in replacements for mlx-lm's prompt-cache functions.

``save_prompt_cache`` / ``load_prompt_cache`` take and return real mlx-lm cache objects
(built with ``cls.from_state(state, meta_state)`` as mlx-lm does) and add verified
(SHA-256) and compressed files. ``TieredPromptCache`` replaces ``LRUPromptCache`` in
``mlx_lm.server`` with a memory tier that behaves like it plus a persistent disk tier.

MLX and mlx-lm are imported on first use; importing this module needs neither.
"""

import os

from . import _kvstore
from ._mlx_bridge import caches_from_layers, layers_from_caches, layout_for
from ._tiered import TieredPromptCache

__all__ = ["save_prompt_cache", "load_prompt_cache", "TieredPromptCache"]


def save_prompt_cache(file_name, cache, metadata={}, *, compress=None, codec="zstd", integrity=True):
    """Save a prompt cache (a list of mlx-lm cache objects) to a file.

    Without ``compress`` the file is one mlx-lm's own ``load_prompt_cache`` reads (for
    ArraysCache, in the layout of the mlx-lm that is imported). ``integrity`` adds
    SHA-256 digests as metadata mlx-lm ignores; ``compress`` (True or a zstd level) writes
    a seekable zstd container (``codec="byteplane"`` for a better ratio on 16-bit floats)
    that only kvstore reads. Like ``mx.save_safetensors``, ".safetensors" is appended to
    a name without it. The write is atomic (temp file, fsync, rename).
    """
    file_name = os.fspath(file_name)
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
    )


def load_prompt_cache(file_name, return_metadata=False, *, verify=False):
    """Load a prompt cache written by mlx-lm, mlx-swift-lm or kvstore (plain or compressed).

    Returns a list of mlx-lm cache objects, and the user metadata dict when
    ``return_metadata``. ``verify`` checks the file's SHA-256 digests first
    (CorruptionError naming the tensor on a mismatch).
    """
    loaded = _kvstore.load(os.fspath(file_name), verify=verify)
    cache = caches_from_layers(loaded.layers)
    if return_metadata:
        return cache, loaded.metadata
    return cache
