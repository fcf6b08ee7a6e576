"""Stable names for mlx_lm.server's model keys, for the persistent tiers.

mlx_lm.server keys caches by a tuple such as (model_path, adapter_path,
draft_model_path). The persistent tiers need a name that is the same in every process
and changes when the model does: keys made of str, int, float, bool, None and tuples or
lists of them are written as compact JSON, and every local path in the key (model or
adapter directory, or file) adds the size and modification time of its weight and config
files, so new weights at the same path get a new name. Any other hashable has no stable
name and is served from memory only.

The name is only half of what the tiers check: TieredPromptCache pairs it with the
structure of the caches the model produces (a kvstore ModelFingerprint).
"""

import hashlib
import json
import os

MODEL_ID_PREFIX = "kvstore-model/2:"
_WEIGHT_SUFFIXES = (".safetensors", ".json", ".npz", ".gguf", ".bin")


def _plain(x):
    if x is None or isinstance(x, (str, int, float, bool)):
        return x
    if isinstance(x, (tuple, list)):
        return [_plain(v) for v in x]
    raise TypeError


def _strings(x):
    if isinstance(x, str):
        yield x
    elif isinstance(x, list):
        for v in x:
            yield from _strings(v)


def _stat_entries(path):
    """(name, size, mtime_ns) of the weight and config files at a local path, or []."""
    try:
        if os.path.isfile(path):
            st = os.stat(path)
            return [(os.path.basename(path), st.st_size, st.st_mtime_ns)]
        if os.path.isdir(path):
            out = []
            with os.scandir(path) as it:
                for e in it:
                    if e.name.endswith(_WEIGHT_SUFFIXES) and e.is_file():
                        st = e.stat()
                        out.append((e.name, st.st_size, st.st_mtime_ns))
            return sorted(out)
    except OSError:
        pass
    return []


def model_id(model):
    """The persistent name of a model key, or None when it has no stable one."""
    try:
        plain = _plain(model)
        name = json.dumps(plain, separators=(",", ":"))
    except (TypeError, ValueError):
        return None
    files = [[s, _stat_entries(s)] for s in _strings(plain) if s]
    files = [f for f in files if f[1]]
    if files:
        digest = hashlib.sha256(json.dumps(files, separators=(",", ":")).encode()).hexdigest()
        name += "@weights:" + digest[:16]
    return MODEL_ID_PREFIX + name
