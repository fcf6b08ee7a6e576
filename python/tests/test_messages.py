"""The library's messages through Python, word for word as kvtool prints them: digest
mismatches, files without digests, files that are not safetensors."""

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


def corrupt_copy(tmp_path):
    """A copy of the F16 fixture with digests, its last tensor's byte flipped."""
    path = str(tmp_path / "bad.safetensors")
    kvstore.convert(str(F16), path, integrity=True)
    data = bytearray(open(path, "rb").read())
    data[-10] ^= 0xFF
    open(path, "wb").write(bytes(data))
    return path


def test_a_digest_mismatch_reads_the_same_everywhere(tmp_path):
    path = corrupt_copy(tmp_path)
    code, want = kvtool_message("verify", "-q", path)
    assert code == 3
    assert want.startswith(path + ": tensor '3.1': SHA-256 mismatch: expected "), want
    assert kvtool_message("inspect", "--verify", path) == (3, want)
    for call in (lambda: kvstore.verify(path), lambda: kvstore.inspect(path, verify=True),
                 lambda: kvstore.load(path, verify=True)):
        with pytest.raises(kvstore.CorruptionError) as e:
            call()
        assert str(e.value) == want
        assert e.value.exit_code == code


def test_inspect_verify_without_digests_raises_as_verify(tmp_path):
    path = str(F16)
    code, note = kvtool_message("inspect", "--verify", path)
    assert code == 4 and note.startswith(path + ": the file carries no digests to verify ("), note
    _, verify_note = kvtool_message("verify", path)
    assert verify_note.endswith(note)  # verify first reports the structure it checked
    for call in (lambda: kvstore.verify(path), lambda: kvstore.inspect(path, verify=True)):
        with pytest.raises(kvstore.FailedPreconditionError) as e:
            call()
        assert e.value.exit_code == code
        assert str(e.value) == path + ": the file carries no digests to verify (save it with integrity=True, " \
                                      "or convert(..., integrity=True) to add them)"
    with pytest.raises(kvstore.FailedPreconditionError) as e:
        kvstore.inspect(path, verify=True)
    assert e.value.info == kvstore.inspect(path)  # the info kvtool prints before it exits
    assert e.value.info["integrity"] is None


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
