"""The library's messages through Python, word for word as kvtool prints them: files that
are not safetensors."""

import gzip
import os
import shutil
import subprocess

import pytest

import kvstore
from conftest import FIXTURES, REPO

F16 = FIXTURES / "kvcache_f16_4l.safetensors"
SLOT = REPO / "fixtures" / "llama.cpp" / "llama_f32_d16" / "seq_fa1.ggsq"


def kvtool(*args):
    """(exit code, stdout, stderr) of kvtool."""
    path = os.environ.get("KVSTORE_KVTOOL") or shutil.which("kvtool")
    if not path:
        pytest.skip("kvtool not found (ctest sets KVSTORE_KVTOOL)")
    run = subprocess.run([path, *args], capture_output=True, text=True)
    return run.returncode, run.stdout, run.stderr


def kvtool_message(*args):
    """(exit code, kvtool's error lines without the "kvtool: " prefix)."""
    code, _, err = kvtool(*args)
    lines = err.splitlines()
    assert lines and all(line.startswith("kvtool: ") for line in lines), err
    return code, "\n".join(line[len("kvtool: "):] for line in lines)


def test_files_that_are_not_safetensors_are_named(tmp_path):
    gz = tmp_path / "f16.safetensors.gz"
    gz.write_bytes(gzip.compress(F16.read_bytes()))
    config = REPO / "fixtures" / "llama.cpp" / "llama_f32_d16" / "model" / "config.json"
    cases = [
        (str(gz), kvstore.CorruptionError, "gzip-compressed data; decompress it with `gzip -d %s` first" % gz),
        (str(config), kvstore.CorruptionError, "JSON text, not a cache"),
        (str(SLOT), kvstore.NotSupportedError, "a llama.cpp sequence-state (slot) file"),
    ]
    for path, exc, looks in cases:
        code, want = kvtool_message("verify", path)
        assert want.startswith(path + ": not a safetensors file: it looks like " + looks), want
        for call in (lambda: kvstore.load(path), lambda: kvstore.inspect(path), lambda: kvstore.verify(path)):
            with pytest.raises(exc) as e:
                call()
            assert str(e.value) == want
            assert e.value.exit_code == code
