"""mlx-lm's own recorded LRUPromptCache traces (fixtures/traces/lru_*), replayed against
TieredPromptCache: the same caches, remaining tokens, len, nbytes and stats_by_type."""

import json

from conftest import REPO, flatten, sha256
from kvstore.mlx_lm import TieredPromptCache


def describe_fetch(cache, rest):
    """A fetch result in the terms of the recorded traces (fixtures/traces/FORMAT.md)."""
    if cache is None:
        return {"cache": None, "remaining": list(rest)}
    layers = []
    for c in cache:
        try:
            leaves = [{"shape": list(x.shape), "dtype": str(x.dtype).rsplit(".", 1)[-1], "sha256": sha256(x)}
                      for _, x in flatten(c.state)]
        except Exception as e:  # e.g. the state of an empty KVCache
            leaves = {"raises": f"{type(e).__name__}: {e}"}
        layers.append({"class": type(c).__name__, "offset": c.offset, "meta_state": json.loads(json.dumps(c.meta_state)),
                       "state": leaves, "nbytes": c.nbytes})
    return {"cache": layers, "remaining": list(rest)}


def expected_fetch(recorded):
    if recorded["cache"] is None:
        return recorded
    dtypes = {"F16": "float16", "BF16": "bfloat16", "F32": "float32"}
    return {"cache": [{"class": c["class"], "offset": c["offset"], "meta_state": c["meta_state"],
                       "state": c["state"] if "raises" in c["state"] else
                       [dict(x, dtype=dtypes.get(x["dtype"], x["dtype"])) for x in c["state"]],
                       "nbytes": c["nbytes"]} for c in recorded["cache"]],
            "remaining": recorded["remaining"]}


def test_recorded_lru_traces_replay_identically(mlx_cache, mx):
    """The LRUPromptCache traces mlx-lm itself recorded, replayed against TieredPromptCache."""
    traces = sorted((REPO / "fixtures" / "traces").glob("lru_*/trace.json"))
    assert len(traces) >= 3
    checked = 0
    for path in traces:
        trace = json.loads(path.read_text())
        inputs = mx.load(str(path.parent / trace["inputs_file"])) if trace.get("inputs") else {}
        objects = {}
        for spec in trace["caches"]:
            cls = TieredPromptCache if spec["class"] == "LRUPromptCache" else getattr(mlx_cache, spec["class"])
            objects[spec["name"]] = cls(**spec["args"])
        for op in trace["ops"]:
            where = f"{path.parent.name} op {op['i']} {op['method']}"
            target, args, expect = objects[op["target"]], dict(op["args"]), op["expect"]
            if op["method"] == "update_and_fetch":
                target.update_and_fetch(inputs[args["keys"]["input"]], inputs[args["values"]["input"]])
                continue
            if "prompt_cache" in args:
                args["prompt_cache"] = [objects[c["cache"]] for c in args["prompt_cache"]]
            try:
                if op["method"] in ("len", "nbytes"):
                    got = len(target) if op["method"] == "len" else target.nbytes
                elif op["method"] == "fetch_nearest_cache":
                    cache, rest = target.fetch_nearest_cache(**args)
                    got = describe_fetch(cache, rest)
                    for name, layer in zip(op.get("result", []), cache or []):
                        objects[name] = layer  # later ops use the fetched copy
                else:
                    got = getattr(target, op["method"])(**args)
            except Exception as e:
                assert "raises" in expect and expect["raises"].startswith(type(e).__name__), (where, e)
                if expect.get("mutated_before_raise"):
                    continue  # mlx-lm counts the bytes before raising; we raise first (docs/python.md)
            else:
                assert "raises" not in expect, where
                want = expect["returns"]
                assert got == (expected_fetch(want) if op["method"] == "fetch_nearest_cache" else want), where
            after = op.get("after")
            if after and after.get("class") == "LRUPromptCache":
                assert (len(target), target.nbytes, target.stats_by_type()) == (
                    after["len"], after["nbytes"], after["stats_by_type"]), where
            checked += 1
    assert checked > 30
