"""Between mlx-lm cache objects and kvstore layers (imports MLX on first use).

mlx-lm has two cache protocols. Up to 0.31 a cache gives ``state`` (the arrays, cut to
their valid rows) and ``meta_state`` (its scalars as strings) and is rebuilt with
``cls.from_state(state, meta_state)``. Since 0.32 ``state`` holds the whole buffers and
the scalars (int, bool, str, None), there is no ``meta_state``, and
``cls.from_state(state)`` takes it alone. The library maps one onto the other
(``kvstore.Layer.full_state``, ``Layer.from_full_state``); this module only picks the
protocol: each cache object's own going out, the imported mlx-lm's coming in.

Going out (save): each cache's state with every ``mx.array`` wrapped as a zero-copy
``kvstore.Tensor`` (MLX's buffer protocol, BF16 included). Coming in (load): the
imported mlx-lm's ``from_state`` with arrays copied into MLX memory (``mx.array`` over
DLPack keeps BF16 as bfloat16), exactly as that mlx-lm's ``load_prompt_cache`` builds
caches.

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


@functools.lru_cache(maxsize=None)
def _full_state_protocol(module):
    return not hasattr(module.KVCache, "meta_state")


def full_state_protocol(module=None):
    """True when the imported mlx-lm (0.32 or later) has caches without meta_state."""
    return _full_state_protocol(module or cache_module())


def _to_tensors(state):
    # 0.32's scalars (a bool is an int), passed on for the library to check.
    if state is None or isinstance(state, (int, float, str)):
        return state
    if isinstance(state, (list, tuple)):
        return [_to_tensors(s) for s in state]
    return _kvstore.Tensor(state)


def _to_mx(state):
    if state is None or isinstance(state, (int, str)):
        return state
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


def _protocol_of(c):
    """"meta" for a cache of mlx-lm up to 0.31 (state and meta_state), "full" for 0.32's
    (state alone), None for an object that is no cache."""
    cls = type(c)
    if not hasattr(cls, "state"):
        return None
    return "meta" if hasattr(cls, "meta_state") else "full"


def layers_from_caches(caches, module=None):
    """One layer per cache object of either protocol, arrays as zero-copy Tensors:
    (class_name, state, meta_state) for a cache with meta_state, a kvstore.Layer built
    from 0.32's state otherwise."""
    try:
        caches = list(caches)
    except TypeError:
        raise InvalidArgumentError(f"cache must be a list of mlx-lm cache objects, got {type(caches).__name__}") from None
    protocols = [_protocol_of(c) for c in caches]
    for i, (c, protocol) in enumerate(zip(caches, protocols)):
        if protocol is None:
            raise InvalidArgumentError(f"cache[{i}] is not an mlx-lm cache object (a {type(c).__name__})")
    form = arrays_state_form(module) if "meta" in protocols else ARRAYS_TRIPLE
    layers = []
    for c, protocol in zip(caches, protocols):
        name = type(c).__name__
        if protocol == "full":
            layers.append(_kvstore.Layer.from_full_state(name, _to_tensors(c.state)))
            continue
        meta = c.meta_state
        state = _library_state(name, _to_tensors(c.state), meta, form)
        layers.append((name, state, meta))
    return layers


def _name_and_meta(layer):
    if isinstance(layer, tuple):
        return layer[0], layer[2]
    return layer.class_name, layer.meta_state


def layout_for(layers, module=None):
    """The file layout the imported mlx-lm reads without misreading `layers`."""
    if full_state_protocol(module):
        return "mlx-lm-0.32"
    if not any(_has_arrays(*_name_and_meta(layer)) for layer in layers):
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
    """Real cache objects of the imported mlx-lm, built with its own cls.from_state as its
    load_prompt_cache does: from_state(full_state) for 0.32, else from_state(state, meta_state)."""
    module = module or cache_module()
    if full_state_protocol(module):
        return [_class_for(module, layer.class_name).from_state(_to_mx(layer.full_state)) for layer in layers]
    form = arrays_state_form(module)
    caches = []
    for layer in layers:
        name, meta = layer.class_name, layer.meta_state
        state = _module_state(name, _to_mx(layer.state), meta, form)
        caches.append(_class_for(module, name).from_state(state, meta))
    return caches
