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

try:
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
except ModuleNotFoundError as e:
    if e.name != __name__ + "._kvstore":
        raise
    import os as _os

    raise ImportError(
        "kvstore's compiled extension (_kvstore) is not next to " + _os.path.dirname(__file__) + ": "
        "this is kvstore's source tree, which Python found first, most likely because it runs in "
        "the repository's python/ folder (the current directory comes first on sys.path). Run it "
        "from another directory, with the built package on the path (PYTHONPATH=<build>/python, "
        "after 'bash scripts/build.sh build -DKVSTORE_PYTHON=ON') or installed ('pip install . "
        "--no-build-isolation' in the repository)",
        name=e.name,
    ) from None
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
