"""Shared pytest setup: where the repository, its fixtures and ../shared/mlx-ref are.

The package under test is the one on PYTHONPATH (ctest points it at <build>/python).
The real MLX + mlx-lm cache code is found at $KVSTORE_MLX_REF or, relative to the
repository, ../shared/mlx-ref; tests that need it skip, saying why, when it is absent.
"""

import hashlib
import os
import pathlib
import sys
import threading

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
FIXTURES = REPO / "fixtures" / "mlx-lm"


def _mlx_ref_dir():
    env = os.environ.get("KVSTORE_MLX_REF")
    return pathlib.Path(env) if env else REPO.parent / "shared" / "mlx-ref"


MLX_REF = _mlx_ref_dir()
sys.path.insert(0, str(REPO / "tests" / "mlx_interop"))  # mlx_lm_v031, shared with the C++ interop test
MLX_REF_PYTHON = MLX_REF / "python"


def _import_mlx():
    """None when mlx-ref imports, else why not."""
    if not (MLX_REF_PYTHON / "mlx_lm" / "models" / "cache.py").is_file():
        return f"mlx-ref not found at {MLX_REF} (set KVSTORE_MLX_REF to its folder)"
    if str(MLX_REF_PYTHON) not in sys.path:
        sys.path.insert(0, str(MLX_REF_PYTHON))
    try:
        import mlx.core  # noqa: F401
        import mlx_lm.models.cache  # noqa: F401
    except Exception as e:  # wrong interpreter or missing libopenblas0-pthread/libgfortran5
        return f"mlx-ref at {MLX_REF} does not import with {sys.executable}: {e}"
    return None


@pytest.fixture(scope="session")
def mlx_cache():
    """mlx_lm.models.cache from mlx-ref (the real classes and save/load functions)."""
    why = _import_mlx()
    if why:
        pytest.skip(why)
    import mlx_lm.models.cache as cache

    return cache


@pytest.fixture(scope="session")
def mx(mlx_cache):
    import mlx.core

    return mlx.core


def fixture_files():
    """The top-level mlx-lm fixtures (written by mlx-lm HEAD), asserted non-empty by callers."""
    return sorted(FIXTURES.glob("*.safetensors"))


def sha256(buf):
    return hashlib.sha256(memoryview(buf).tobytes()).hexdigest()  # also for zero-size views


def flatten(tree, prefix=""):
    """mlx.utils.tree_flatten's names for a nested list: [(name, leaf), ...]."""
    if isinstance(tree, (list, tuple)):
        out = []
        for i, item in enumerate(tree):
            out += flatten(item, f"{prefix}.{i}" if prefix else str(i))
        return out
    return [(prefix, tree)]


def run_in_threads(work, n=4):
    """Runs work(i) on n threads at once; returns the exceptions they raised."""
    errors = []

    def guarded(i):
        try:
            work(i)
        except Exception as e:  # returned to the test
            errors.append(e)

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def apply_documented_server_diff(root):
    """Applies docs/python.md's diff for mlx_lm.server to root/mlx_lm/server.py with
    ``patch -p1 --fuzz=0`` (the diff must apply as written); returns patch's CompletedProcess."""
    import subprocess

    doc = (REPO / "docs" / "python.md").read_text()
    section = doc[doc.index("### Using it in `mlx_lm.server`"):]
    start = section.index("```diff\n") + len("```diff\n")
    diff = section[start:section.index("\n```", start)] + "\n"
    return subprocess.run(["patch", "-p1", "--fuzz=0", "--forward", "--no-backup-if-mismatch"], input=diff,
                          cwd=root, capture_output=True, text=True)
