"""Shared pytest setup: where the repository, its fixtures and ../shared/mlx-ref are.

The package under test is the one on PYTHONPATH (ctest points it at <build>/python).
The real MLX + mlx-lm cache code is found at $KVSTORE_MLX_REF or, relative to the
repository, ../shared/mlx-ref; tests that need it skip, saying why, when it is absent.
With KVSTORE_TEST_MLX_LM=0.32 the mlx-lm imported is 0.32 (mlx-ref's
python-mlx-lm-0.32 first on sys.path), else mlx-ref's own (d78bf58, the 0.31 era).
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
sys.path.insert(0, str(REPO / "tests" / "mlx_interop"))  # mlx_lm_v031, mlx_lm_032: shared with the interop tests
from mlx_lm_032 import leaves as flatten  # noqa: E402,F401  (tree_flatten's names: [(name, leaf), ...])
MLX_REF_PYTHON = MLX_REF / "python"
MLX_LM_032 = os.environ.get("KVSTORE_TEST_MLX_LM") == "0.32"
# The folders the tests import MLX and mlx-lm from, first first.
MLX_PATHS = ([MLX_REF / "python-mlx-lm-0.32"] if MLX_LM_032 else []) + [MLX_REF_PYTHON]


def _import_mlx():
    """None when mlx-ref imports, else why not."""
    for path in MLX_PATHS:
        if not (path / "mlx_lm" / "models" / "cache.py").is_file():
            return f"no mlx-lm at {path} (set KVSTORE_MLX_REF to a copy of mlx-ref)"
    for path in reversed(MLX_PATHS):
        if str(path) in sys.path:
            sys.path.remove(str(path))
        sys.path.insert(0, str(path))
    try:
        import mlx.core  # noqa: F401
        import mlx_lm.models.cache as cache
    except Exception as e:  # wrong interpreter or missing libopenblas0-pthread/libgfortran5
        return f"mlx-ref at {MLX_REF} does not import with {sys.executable}: {e}"
    # Not a skip: the suite would test another mlx-lm than it says.
    assert pathlib.Path(cache.__file__).resolve().is_relative_to(MLX_PATHS[0].resolve()), (
        f"mlx_lm was imported from {cache.__file__}, not from {MLX_PATHS[0]}")
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
