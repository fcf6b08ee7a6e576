"""Between mlx-lm cache objects and kvstore layers (imports MLX on first use).

Going out (save): each cache's ``state`` / ``meta_state`` / class name, with every
``mx.array`` wrapped as a zero-copy ``kvstore.Tensor`` (MLX's buffer protocol, BF16
included). Coming in (load): ``cls.from_state(state, meta_state)`` with arrays copied
into MLX memory (``mx.array`` over DLPack keeps BF16 as bfloat16), exactly as mlx-lm's
``load_prompt_cache`` builds caches.

ArraysCache has two state shapes: mlx-lm up to v0.31 keeps a flat slot list, later
versions ``(slots, left_padding, lengths)``. The library always holds the latter; the
imported mlx-lm decides which shape its caches get and give (``arrays_state_form``).
"""

import functools
import importlib

from . import _kvstore
from .errors import InvalidArgumentError, NotSupportedError

# The two forms of ArraysCache.state.
ARRAYS_TRIPLE = "triple"  # (slots, left_padding, lengths): mlx-lm after v0.31
ARRAYS_FLAT = "flat"  # [slot, ...]: mlx-lm v0.31 and earlier


def cache_module():
    """mlx_lm.models.cache, imported on first use."""
    return importlib.import_module("mlx_lm.models.cache")


def mx():
    return importlib.import_module("mlx.core")


@functools.lru_cache(maxsize=None)
def _arrays_form_of(module):
    state = module.ArraysCache(1).state
    if isinstance(state, tuple) and len(state) == 3 and isinstance(state[0], list):
        return ARRAYS_TRIPLE
    return ARRAYS_FLAT


def arrays_state_form(module=None):
    """The ArraysCache state form of the imported mlx-lm."""
    return _arrays_form_of(module or cache_module())


def _is_mx_array(x):
    return type(x).__module__.startswith("mlx")


def _to_tensors(state):
    if state is None:
        return None
    if isinstance(state, (list, tuple)):
        return [_to_tensors(s) for s in state]
    return _kvstore.Tensor(state)


def _to_mx(state):
    if state is None:
        return None
    if isinstance(state, list):
        return [_to_mx(s) for s in state]
    if state.dtype.startswith("F8"):
        return mx().array(memoryview(state))  # no MLX dtype: raw bytes as uint8
    return mx().array(_MlxImport(state))  # DLPack: a copy in MLX memory, BF16 stays bfloat16


class _MlxImport:
    """A Tensor as mx.array imports it: mx.array copies what it imports, so it may read
    the read-only storage through a zero-copy legacy capsule (kvstore.Tensor.__dlpack__
    would copy for a legacy consumer, to protect consumers that write)."""

    __slots__ = ("_tensor",)

    def __init__(self, tensor):
        self._tensor = tensor

    def __dlpack__(self, *args, **kwargs):
        return self._tensor._dlpack_view()

    def __dlpack_device__(self):
        return self._tensor.__dlpack_device__()


def _empty_f32():
    return _kvstore.Tensor(memoryview(b"").cast("f"))


def _library_state(class_name, state, meta_state, form):
    """A cache's state as the library holds it (ArraysCache as a triple)."""
    if class_name == "ArraysCache" and form == ARRAYS_FLAT:
        return [list(state), _empty_f32(), _empty_f32()]
    if class_name == "CacheList":
        classes, metas = meta_state
        return [_library_state(c, s, m, form) for c, s, m in zip(classes, state, metas)]
    return state


def _module_state(class_name, state, meta_state, form):
    """A library state in the form the imported mlx-lm's from_state expects."""
    if class_name in ("ArraysCache", "MambaCache") and form == ARRAYS_FLAT:
        return state[0]
    if class_name == "CacheList":
        classes, metas = meta_state
        return [_module_state(c, s, m, form) for c, s, m in zip(classes, state, metas)]
    return state


def _has_arrays(class_name, meta_state):
    if class_name in ("ArraysCache", "MambaCache"):
        return True
    if class_name == "CacheList":
        return any(_has_arrays(c, m) for c, m in zip(*meta_state))
    return False


def layers_from_caches(caches, module=None):
    """(class_name, state, meta_state) per cache, arrays as zero-copy Tensors."""
    try:
        caches = list(caches)
    except TypeError:
        raise InvalidArgumentError(f"cache must be a list of mlx-lm cache objects, got {type(caches).__name__}") from None
    for i, c in enumerate(caches):
        if not (hasattr(type(c), "state") and hasattr(type(c), "meta_state")):
            raise InvalidArgumentError(f"cache[{i}] is not an mlx-lm cache object (a {type(c).__name__})")
    form = arrays_state_form(module) if caches else ARRAYS_TRIPLE
    layers = []
    for c in caches:
        name = type(c).__name__
        meta = c.meta_state
        state = _library_state(name, _to_tensors(c.state), meta, form)
        layers.append((name, state, meta))
    return layers


def layout_for(layers, module=None):
    """The file layout the imported mlx-lm reads without misreading `layers`."""
    if not any(_has_arrays(name, meta) for name, _, meta in layers):
        return "mlx-lm"  # the two layouts differ only for ArraysCache
    if arrays_state_form(module) == ARRAYS_TRIPLE:
        return "mlx-lm"
    if "mlx-lm-0.31" in getattr(_kvstore, "LAYOUTS", ()):
        return "mlx-lm-0.31"
    raise NotSupportedError(
        "the imported mlx-lm (v0.31 or earlier) reads ArraysCache only in its flat-slot "
        "layout, which this build of kvstore cannot write yet; a file in the current layout "
        "would be misread by it"
    )


def _class_for(module, name):
    cls = getattr(module, name, None)
    if cls is None and name == "MambaCache":
        cls = module.ArraysCache  # current mlx-lm has no MambaCache: a 2-slot ArraysCache
    if cls is None:
        raise NotSupportedError(f"the imported mlx-lm has no cache class {name!r}")
    return cls


def caches_from_layers(layers, module=None):
    """Real mlx-lm cache objects, built with cls.from_state as load_prompt_cache does."""
    module = module or cache_module()
    form = arrays_state_form(module)
    caches = []
    for layer in layers:
        name, meta = layer.class_name, layer.meta_state
        state = _module_state(name, _to_mx(layer.state), meta, form)
        caches.append(_class_for(module, name).from_state(state, meta))
    return caches
