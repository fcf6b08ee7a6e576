"""What save, convert, trim and save_prompt_cache replace: only a regular file (or the one
a symbolic link names). A device, FIFO, socket, directory, a link to one or a dangling
link is refused with FileIOError (kvtool's exit 2) before anything is written, and left
as it was. Device nodes are the test's own (mknod): the machine's /dev/null is never risked.
"""

import os
import socket
import stat

import numpy as np
import pytest

import kvstore
from conftest import FIXTURES

F16 = str(FIXTURES / "kvcache_f16_4l.safetensors")


def layers():
    k = np.zeros((1, 2, 3, 8), dtype=np.float16)
    return [("KVCache", [k, k], "")]


def identity(path):
    st = os.lstat(path)
    return (st.st_dev, st.st_ino, stat.S_IFMT(st.st_mode), st.st_rdev)


def special_nodes(tmp_path):
    """(path, what the message says) for every kind of node we can make here."""
    fifo, sock, directory = tmp_path / "fifo", tmp_path / "sock", tmp_path / "dir"
    os.mkfifo(fifo)
    socket.socket(socket.AF_UNIX).bind(str(sock))
    directory.mkdir()
    nodes = [(fifo, "(FIFO)"), (sock, "(socket)"), (directory, "(directory)")]
    try:
        os.mknod(tmp_path / "null", stat.S_IFCHR | 0o666, os.makedev(1, 3))
        nodes.append((tmp_path / "null", "(character device)"))
    except PermissionError:
        pass  # needs CAP_MKNOD; the other kinds cover the check
    os.symlink("fifo", tmp_path / "to-fifo")
    nodes.append((tmp_path / "to-fifo", "(a symbolic link): not a regular file (FIFO)"))
    os.symlink("missing", tmp_path / "dangling")
    nodes.append((tmp_path / "dangling", "a symbolic link to a missing file"))
    return nodes


def writers():
    return {
        "save": lambda out: kvstore.save(out, layers()),
        "save compressed": lambda out: kvstore.save(out, layers(), compress=True),
        "convert": lambda out: kvstore.convert(F16, out, compress=True),
        "trim": lambda out: kvstore.trim(F16, out, 1),
    }


@pytest.mark.parametrize("writer", sorted(writers()))
def test_only_regular_files_are_replaced(tmp_path, writer):
    for path, what in special_nodes(tmp_path):
        before = identity(path)
        with pytest.raises(kvstore.errors.FileIOError) as e:
            writers()[writer](str(path))
        assert str(e.value).startswith(str(path)) and what in str(e.value), str(e.value)
        assert e.value.exit_code == 2
        assert identity(path) == before, path
    assert not [p for p in os.listdir(tmp_path) if ".kvtmp-" in p]
    assert not (tmp_path / "missing").exists()


def test_a_link_to_a_regular_file_is_followed(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "out.safetensors").write_bytes(b"old")
    link = tmp_path / "out.safetensors"
    os.symlink("real/out.safetensors", link)
    kvstore.save(str(link), layers())
    assert os.path.islink(link) and os.readlink(link) == "real/out.safetensors"
    assert kvstore.load(str(tmp_path / "real" / "out.safetensors")).layers[0].class_name == "KVCache"
    assert sorted(os.listdir(tmp_path)) == ["out.safetensors", "real"]
    assert os.listdir(tmp_path / "real") == ["out.safetensors"]


def test_save_prompt_cache_refuses_a_fifo(mlx_cache, mx, tmp_path):
    from kvstore.mlx_lm import save_prompt_cache

    cache = mlx_cache.KVCache()
    cache.update_and_fetch(mx.zeros((1, 2, 3, 8)), mx.zeros((1, 2, 3, 8)))
    fifo = tmp_path / "fifo.safetensors"  # save_prompt_cache appends the suffix to a name without it
    os.mkfifo(fifo)
    with pytest.raises(kvstore.errors.FileIOError, match="not a regular file \\(FIFO\\)"):
        save_prompt_cache(str(fifo), [cache])
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
