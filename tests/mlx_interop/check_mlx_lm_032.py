"""kvtool against the real mlx-lm 0.32, both directions (ctest mlx_lm_032_interop).

    check_mlx_lm_032.py KVTOOL

- Reading: every file of fixtures/mlx-lm-0.32 (written by mlx-lm 0.32) passes
  `kvtool inspect` (exit 0; --json names the layout, its classes and user metadata) and
  `kvtool verify` ("N layers well formed"; exit 4, an mlx-lm file has no digests).
- Writing: what kvtool writes for 0.32 loads in the real 0.32 with the same classes,
  scalars (exact Python types), content and user metadata: `convert` of each 0.32 file
  (keeping its layout, and with each digest option), and `convert --to mlx-lm-0.32` of
  every old-layout file of fixtures/mlx-lm (top level and the v0.31.3 release's).
- Back: `convert --to mlx-lm` of each 0.32 file the old protocol can express loads in
  the old mlx-lm (../shared/mlx-ref/python) with the content the sidecar's old_view says.

Exits 77 (ctest: skipped), saying why, without ../shared/mlx-ref (or $KVSTORE_MLX_REF).
Prints one line per failure and ends with "N passed, M failed".
"""

import json
import os
import pathlib
import subprocess
import sys
import tempfile

import mlx_lm_032 as ref

FIXTURES_032 = ref.REPO / "fixtures" / "mlx-lm-0.32"
FIXTURES_OLD = ref.REPO / "fixtures" / "mlx-lm"
# What the repository ships; a loop over fewer files would prove less than it says.
SHIPPED_032, SHIPPED_OLD, SHIPPED_RELEASE = 27, 19, 3
LAYOUT_032, LAYOUT_OLD = "mlx-lm-0.32", "mlx-lm"
DIGEST_OPTIONS = [[], ["--integrity"], ["--integrity=xxh3"], ["--no-integrity"]]


def reexec_with_mlx_lm_032():
    """Runs this script again with mlx-lm 0.32 first on PYTHONPATH (once)."""
    paths = [str(ref.mlx_lm_032_dir()), str(ref.mlx_ref() / "python")]
    if os.environ.get("PYTHONPATH", "").split(os.pathsep)[:2] == paths:
        return
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths), PYTHONDONTWRITEBYTECODE="1")
    os.execve(sys.executable, [sys.executable, *sys.argv], env)


def kvtool(*args):
    return subprocess.run([KVTOOL, *map(str, args)], capture_output=True, text=True)


def sidecar(path):
    return json.loads(path.with_suffix(".json").read_text())


class Checks:
    def __init__(self):
        self.passed = self.failed = 0

    def check(self, what, problems):
        if problems:
            self.failed += 1
            print(f"FAIL {what}: " + "; ".join(problems)[:2000])
        else:
            self.passed += 1


def read_problems(path, side):
    problems = []
    r = kvtool("inspect", path)
    if r.returncode != 0:
        problems.append(f"inspect exit {r.returncode}: {r.stderr.strip()}")
    r = kvtool("inspect", path, "--json")
    if r.returncode != 0:
        return problems + [f"inspect --json exit {r.returncode}: {r.stderr.strip()}"]
    info = json.loads(r.stdout)
    if info.get("layout") != LAYOUT_032:
        problems.append(f"inspect --json layout {info.get('layout')!r}, expected {LAYOUT_032!r}")
    if [layer["class"] for layer in info.get("layers", [])] != side["classes"]:
        problems.append(f"inspect --json classes {[layer['class'] for layer in info.get('layers', [])]}")
    if info.get("metadata") != side["user_metadata"]:
        problems.append(f"inspect --json metadata {info.get('metadata')}")
    if info.get("valid") is not True:
        problems.append("inspect --json valid is not true")
    r = kvtool("verify", path)
    want = f"{side['num_layers']} layers well formed"
    if r.returncode != 4 or want not in r.stdout:
        problems.append(f"verify exit {r.returncode} (want 4: no digests), stdout {r.stdout.strip()!r} "
                        f"lacks {want!r}; {r.stderr.strip()}")
    return problems


class ConvertError(Exception):
    pass


def convert_and_load(module, path, out, *args):
    """kvtool convert PATH -o OUT ARGS, kvtool inspect OUT (kvstore reads what it wrote),
    then `module`'s own load_prompt_cache of OUT: (caches, user metadata without
    kvstore's keys); ConvertError saying what failed."""
    r = kvtool("convert", path, "-o", out, "-q", *args)
    if r.returncode != 0:
        raise ConvertError(f"exit {r.returncode}: {r.stderr.strip()}")
    r = kvtool("inspect", out)
    if r.returncode != 0:
        raise ConvertError(f"kvtool inspect of the output: exit {r.returncode}: {r.stderr.strip()}")
    try:
        cache, metadata = module.load_prompt_cache(str(out), return_metadata=True)
    except Exception as e:  # noqa: BLE001 (whatever mlx-lm raises)
        raise ConvertError(f"load_prompt_cache: {type(e).__name__}: {e}") from None
    return cache, ref.user_metadata(metadata)


def main():
    global KVTOOL
    KVTOOL = str(pathlib.Path(sys.argv[1]).resolve())
    why = ref.why_no_mlx_lm_032()
    if why:
        print(f"SKIP: {why}")
        return ref.SKIP
    reexec_with_mlx_lm_032()
    try:
        import mlx_lm.models.cache as C

        old = ref.old_cache_module()
    except Exception as e:  # wrong interpreter or missing libopenblas0-pthread/libgfortran5
        print(f"SKIP: mlx-ref does not import with {sys.executable}: {e}")
        return ref.SKIP
    if not pathlib.Path(C.__file__).resolve().is_relative_to(ref.mlx_lm_032_dir().resolve()):
        print(f"FAIL: mlx_lm is {C.__file__}, not mlx-lm 0.32")
        return 1

    checks = Checks()
    files_032 = sorted(FIXTURES_032.glob("*.safetensors"))
    files_old = sorted(FIXTURES_OLD.glob("*.safetensors"))
    files_release = sorted((FIXTURES_OLD / "mlx-lm-v0.31.3").glob("*.safetensors"))
    for what, files, n in [("fixtures/mlx-lm-0.32", files_032, SHIPPED_032),
                           ("fixtures/mlx-lm", files_old, SHIPPED_OLD),
                           ("fixtures/mlx-lm/mlx-lm-v0.31.3", files_release, SHIPPED_RELEASE)]:
        checks.check(f"{what} holds {len(files)} files", [] if len(files) >= n else [f"expected at least {n}"])

    raw_same = [0, 0]  # conversions of 0.32 files that changed / kept the raw buffers (padding)
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "out.safetensors"
        for path in files_032:
            side = sidecar(path)
            checks.check(f"read {path.name}", read_problems(path, side))
            conversions = [(C, to + option) for option in DIGEST_OPTIONS for to in ([], ["--to", LAYOUT_032])]
            if side["old_view"]["ok"]:
                conversions.append((old, ["--to", LAYOUT_OLD]))
            for module, args in conversions:
                what = f"convert {path.name} {' '.join(args)} -> {'old mlx-lm' if module is old else 'mlx-lm 0.32'}"
                try:
                    cache, user = convert_and_load(module, path, out, *args)
                except ConvertError as e:
                    checks.check(what, [str(e)])
                    continue
                problems = [] if user == side["user_metadata"] else [f"user metadata {user}"]
                if module is old:
                    view, misread = ref.forgive_old_rotated_misread(ref.old_view(cache, old), side["old_view"])
                    problems += [] if view == side["old_view"] else [f"old view {json.dumps(view)[:600]}"]
                    if misread:
                        print(f"NOTE {what}: the old mlx-lm loads rotated False as True (its meta_state "
                              "setter takes bool() of the string), from any file")
                else:
                    problems += ref.content_problems(cache, side["layers"], side["old_view"], old)
                    raw_same[not ref.content_problems(cache, side["layers"], side["old_view"], old, raw=True)] += 1
                checks.check(what, problems)

        for path in files_old + files_release:
            side = sidecar(FIXTURES_OLD / path.name)  # a release file holds the same cache as its twin
            if not side["reload"]["ok"]:
                continue
            what = f"convert {path.relative_to(FIXTURES_OLD)} --to {LAYOUT_032}"
            try:
                cache, user = convert_and_load(C, path, out, "--to", LAYOUT_032)
            except ConvertError as e:
                checks.check(what, [str(e)])
                continue
            problems = ref.old_layers_problems(cache, side["layers"], old) + ref.scalar_type_problems(cache)
            if user != side["user_metadata"]:
                problems.append(f"user metadata {user}")
            checks.check(what, problems)

    print(f"the raw buffers (spare rows included) kept by {raw_same[1]} of {sum(raw_same)} conversions of 0.32 files")
    print(f"{checks.passed} passed, {checks.failed} failed")
    return 1 if checks.failed else 0


if __name__ == "__main__":
    sys.exit(main())
