"""kvstore: verified, compressed, crash-safe prompt-cache files for mlx-lm users.

Core API (no MLX needed; numpy optional)::

    f = kvstore.load("prompt.safetensors", verify=True)   # O(header): tensors view the file
    f.layers[0].class_name, f.layers[0].meta_state, f.layers[0].state
    f.metadata, f.info                                     # info == `kvtool inspect --json`
    kvstore.save("out.safetensors", f.layers, f.metadata, compress=True)
    kvstore.verify(path); kvstore.inspect(path); kvstore.convert(src, dst, ...); kvstore.trim(src, dst, n)

mlx-lm drop-ins live in ``kvstore.mlx_lm`` (imports MLX only when used).
See docs/python.md for the full reference, BF16 handling and thread safety.
"""

from . import errors
from ._kvstore import (
    DEFAULT_LAYOUT,
    CacheFile,
    Layer,
    Tensor,
    convert,
    inspect,
    load,
    save,
    trim,
    verify,
)
from .errors import *  # noqa: F401,F403  (the exception classes)

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_LAYOUT",
    "CacheFile",
    "Layer",
    "Tensor",
    "load",
    "save",
    "inspect",
    "verify",
    "convert",
    "trim",
    "errors",
] + errors.__all__
