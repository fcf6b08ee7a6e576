"""mlx-lm 0.32's cache objects described in JSON, and compared, for the tests against the
real mlx-lm 0.32 (../shared/mlx-ref/python-mlx-lm-0.32) and for the generator of
fixtures/mlx-lm-0.32 (fixtures/mlx-lm-0.32/README.md describes the JSON).

Works with whichever mlx-lm is imported: the description of a cache is its 0.32 `state`
(raw buffers and scalars) when it has no `meta_state`, and the "old view" is the same
cache in the old protocol (state cut to the valid rows, plus meta_state), computed by the
old mlx-lm's classes (../shared/mlx-ref/python) on the object's attributes.
"""

import hashlib
import importlib
import importlib.util
import json
import os
import pathlib
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
SKIP = 77

ATTRS = ("offset", "keep", "max_size", "_idx", "chunk_size", "start_position", "group_size",
         "bits", "rotated", "_offset", "left_padding", "lengths")


def mlx_ref():
    return pathlib.Path(os.environ.get("KVSTORE_MLX_REF") or REPO.parent / "shared" / "mlx-ref")


def mlx_lm_032_dir():
    return mlx_ref() / "python-mlx-lm-0.32"


def why_no_mlx_lm_032():
    """None when ../shared/mlx-ref has mlx-lm 0.32 and the old mlx-lm beside it, else why not."""
    if not (mlx_lm_032_dir() / "mlx_lm" / "models" / "cache.py").is_file():
        return f"no mlx-lm 0.32 at {mlx_lm_032_dir()} (set KVSTORE_MLX_REF to a copy of mlx-ref)"
    if not (mlx_ref() / "python" / "mlx_lm" / "models" / "cache.py").is_file():
        return f"no mlx-ref python folder at {mlx_ref() / 'python'}"
    return None


def sha256(a):
    return hashlib.sha256(memoryview(a).tobytes()).hexdigest()


def dtype_name(a):
    return str(a.dtype).rsplit(".", 1)[-1]


def is_array(x):
    return type(x).__module__.startswith("mlx")


def leaves(tree, prefix=""):
    """mlx.utils.tree_flatten's names for a nested list/tuple, None leaves kept."""
    if isinstance(tree, (list, tuple)):
        out = []
        for i, item in enumerate(tree):
            out += leaves(item, f"{prefix}.{i}" if prefix else str(i))
        return out
    return [(prefix, tree)]


def leaf(key, value):
    """One leaf of a 0.32 `state` tree, as save_prompt_cache sees it."""
    if is_array(value):
        out = {"key": key, "kind": "array", "dtype": dtype_name(value), "shape": list(value.shape),
               "sha256": sha256(value)}
        if dtype_name(value) in ("int32", "int64") and value.size <= 16:
            out["values"] = value.tolist()
        return out
    if isinstance(value, bool):
        return {"key": key, "kind": "scalar", "type": "bool", "value": value}
    if isinstance(value, int):
        return {"key": key, "kind": "scalar", "type": "int", "value": value}
    if isinstance(value, str):
        return {"key": key, "kind": "string", "value": value}
    if value is None:
        return {"key": key, "kind": "none"}
    raise TypeError(f"{key}: {type(value).__name__}")


def describe(c):
    """Class, scalar attributes with their Python types, the flattened 0.32 state."""
    out = {"class": type(c).__name__}
    for name in ATTRS:
        if not hasattr(c, name):
            continue
        v = getattr(c, name)
        if is_array(v):
            out[name] = {"array": v.tolist(), "dtype": dtype_name(v)}
        elif isinstance(v, (bool, int)) or v is None:
            out[name] = v
            if v is not None:
                out[name + "_type"] = type(v).__name__
    out["state"] = [leaf(k, v) for k, v in leaves(c.state)]
    if type(c).__name__ == "CacheList":
        out["children"] = [describe(child) for child in c.caches]
    keys = getattr(c, "keys", None)
    if is_array(keys):
        out["buffer_keys_shape"] = list(keys.shape)
    return out


def cache_module_at(folder, alias):
    """FOLDER/mlx_lm's cache module, imported as package `alias` beside whichever
    mlx_lm is imported (MLX itself comes from sys.path)."""
    if alias not in sys.modules:
        root = pathlib.Path(folder) / "mlx_lm"
        spec = importlib.util.spec_from_file_location(alias, root / "__init__.py",
                                                      submodule_search_locations=[str(root)])
        pkg = importlib.util.module_from_spec(spec)
        sys.modules[alias] = pkg
        spec.loader.exec_module(pkg)
    return importlib.import_module(f"{alias}.models.cache")


def old_cache_module(old_python=None):
    """The old mlx-lm's cache module (mlx-ref/python), imported as mlx_lm_old."""
    return cache_module_at(old_python or mlx_ref() / "python", "mlx_lm_old")


def cache_module_032():
    """mlx-lm 0.32's cache module (mlx-ref/python-mlx-lm-0.32), imported as mlx_lm_v032."""
    return cache_module_at(mlx_lm_032_dir(), "mlx_lm_v032")


def to_old(c, old=None):
    """A 0.32 cache object's attributes in an instance of the old class of the same
    name (whose state and meta_state then give the old protocol); an old one as it is."""
    if hasattr(type(c), "meta_state"):
        return c
    old = old or old_cache_module()
    cls = getattr(old, type(c).__name__)
    o = cls.__new__(cls)
    o.__dict__.update(c.__dict__)
    if type(c).__name__ == "CacheList":
        o.caches = [to_old(child, old) for child in c.caches]
    return o


def old_view(cache, old=None):
    """Per layer: class, meta_state, offset and state digests in the old protocol;
    {"ok": False, "error"} where the old protocol cannot express the state."""
    old = old or old_cache_module()
    layers = []
    for c in cache:
        o = to_old(c, old)
        try:
            state, meta = o.state, o.meta_state
            entry = {"class": type(c).__name__, "meta_state": json.loads(json.dumps(meta))}
            if isinstance(getattr(c, "offset", None), int):
                entry["offset"] = c.offset
            entry["state"] = []
            for k, v in leaves(state):
                if v is None:
                    raise ValueError(f"state leaf {k} is None")
                entry["state"].append({"key": k, "shape": list(v.shape), "dtype": dtype_name(v),
                                       "sha256": sha256(v)})
            layers.append(entry)
        except Exception as e:  # noqa: BLE001 (any failure of the old protocol)
            return {"ok": False, "error": f"layer {len(layers)}: {type(e).__name__}: {e}"}
    return {"ok": True, "layers": layers}


def forgive_old_rotated_misread(view, want):
    """The old mlx-lm reads BatchRotatingKVCache's meta_state "False" as rotated True
    (bool() of a non-empty str), whoever wrote the file: `view` (an old_view) with that
    upstream misread undone where `want` says False, and whether there was one."""
    misread = False
    for have, expected in zip(view.get("layers", []), want.get("layers", [])):
        if (have["class"] == expected["class"] == "BatchRotatingKVCache" and expected["meta_state"][3] == "False"
                and have["meta_state"][3] == "True"):
            have["meta_state"][3], misread = "False", True
    return view, misread


def _scalars(desc):
    """The non-array leaves of a described layer, children included."""
    return [x for x in desc["state"] if x["kind"] != "array"]


def content_problems(got, want_layers, want_old_view, old=None, raw=False):
    """What differs between loaded 0.32 cache objects `got` and a sidecar's `layers` and
    `old_view`: classes, every non-array leaf (kind, Python type, value), array dtypes,
    and the content: the old view when the old protocol expresses it, else the raw
    arrays. Padding rows may differ, unless `raw` (then every array leaf's shape and
    bytes must be the same too). [] when they hold the same cache."""
    problems = []
    if [type(c).__name__ for c in got] != [w["class"] for w in want_layers]:
        return [f"classes {[type(c).__name__ for c in got]} != {[w['class'] for w in want_layers]}"]
    for i, (c, want) in enumerate(zip(got, want_layers)):
        have = describe(c)
        if _scalars(have) != _scalars(want):
            problems.append(f"layer {i}: scalars {_scalars(have)} != {_scalars(want)}")
        kinds = [(x["key"], x["kind"], x.get("dtype")) for x in have["state"]]
        want_kinds = [(x["key"], x["kind"], x.get("dtype")) for x in want["state"]]
        if kinds != want_kinds:
            problems.append(f"layer {i}: state leaves {kinds} != {want_kinds}")
    if raw:
        for i, (c, want) in enumerate(zip(got, want_layers)):
            arrays = [(x["key"], x.get("shape"), x.get("sha256")) for x in describe(c)["state"] if x["kind"] == "array"]
            if arrays != [(x["key"], x.get("shape"), x.get("sha256")) for x in want["state"] if x["kind"] == "array"]:
                problems.append(f"layer {i}: the raw buffers differ (shapes {[a[1] for a in arrays]})")
    if want_old_view["ok"]:
        view = old_view(got, old)
        if view != want_old_view:
            problems.append(f"old view {json.dumps(view)[:400]} != {json.dumps(want_old_view)[:400]}")
    else:
        for i, (c, want) in enumerate(zip(got, want_layers)):
            have = [(x["key"], x.get("shape"), x.get("sha256")) for x in describe(c)["state"]]
            if have != [(x["key"], x.get("shape"), x.get("sha256")) for x in want["state"]]:
                problems.append(f"layer {i}: arrays differ (the old protocol cannot express this state)")
    return problems


def old_layers_problems(got, want_layers, old=None):
    """What differs between loaded cache objects (either protocol) and an old-layout
    sidecar's `layers` (class, meta_state, state digests); [] when the same."""
    view = old_view(got, old)
    if not view["ok"]:
        return [view["error"]]
    problems = []
    if len(view["layers"]) != len(want_layers):
        return [f"{len(view['layers'])} layers, expected {len(want_layers)}"]
    for i, (have, want) in enumerate(zip(view["layers"], want_layers)):
        if have["class"] != want["class"] or have["meta_state"] != want["meta_state"]:
            problems.append(f"layer {i}: {have['class']} {have['meta_state']} != {want['class']} {want['meta_state']}")
        digests = [(t["key"], t["shape"], t["dtype"], t["sha256"]) for t in have["state"]]
        want_digests = [(t["key"], t["shape"], t["dtype"], t["sha256"]) for t in want["state"]]
        if digests != want_digests:
            problems.append(f"layer {i}: state {digests} != {want_digests}")
    return problems


def scalar_type_problems(cache):
    """Scalar attributes of the wrong Python type: `rotated` must be a bool, every other
    one (offsets, sizes, indices) an int, or an integer array for the batch classes."""
    problems = []

    def walk(desc, where):
        for name in ATTRS:
            if name not in desc or desc[name] is None:
                continue
            want = "bool" if name == "rotated" else "int"
            if isinstance(desc[name], dict):
                if name == "rotated" or desc[name]["dtype"] not in ("int32", "int64"):
                    problems.append(f"{where}: {name} is a {desc[name]['dtype']} array")
            elif desc.get(name + "_type") != want:
                problems.append(f"{where}: {name} is a {desc.get(name + '_type')}, not {want}")
        for i, child in enumerate(desc.get("children", [])):
            walk(child, f"{where} child {i}")

    for i, c in enumerate(cache):
        try:
            walk(describe(c), f"layer {i} ({type(c).__name__})")
        except TypeError as e:  # a leaf that is neither an array, int, bool, str nor None
            problems.append(f"layer {i}: {e}")
    return problems


def user_metadata(metadata):
    """The user metadata without kvstore's own keys."""
    return {k: v for k, v in (metadata or {}).items() if not k.startswith("kvstore_")}
