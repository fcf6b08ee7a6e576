"""What each model's caches looked like when it last inserted, kept in the disk tier's
directory so that a restarted server serves its old prefixes from its first request.

mlx_lm.server passes only a model key to ``fetch_nearest_cache``; the structure of the
caches the model makes (classes, dtypes, heads, quantization, windows) is learned from
its inserts. Without this file a restarted process would know nothing until its first
insert, and every fetch before it would miss.

The file is a hint: a hostile or broken one is ignored (logged), and every entry the disk
tier serves is still checked against the fingerprint used. A process that knows better
(an insert of its own, or ``register_model``) overrides it.

Servers of one machine may share the directory: a model this process does not know is
looked up in the file again when it has changed (a stat per lookup until then), and a
write keeps what the file says of the models this process does not know.

No lock: the table is one dict (each get and set is atomic under the GIL), and each write
goes through a temp file of its own, so threads remembering at once each replace the file
with a complete snapshot of the table (a change made meanwhile reaches the file with the
next write, or is learned again from the next insert after a restart).
"""

import itertools
import json
import logging
import os

from . import _kvstore

log = logging.getLogger("kvstore")

FILE_NAME = "kvstore-models.json"
_VERSION = 1
_MAX_FILE_BYTES = 16 << 20


class StoredStructures:
    def __init__(self, directory):
        self._path = os.path.join(os.fspath(directory), FILE_NAME)
        self._writes = itertools.count()  # temp file names (next() is atomic under the GIL)
        self._seen = self._stamp()
        self._by_name = self._read()

    def get(self, name):
        """The last fingerprint stored for the model named ``name``, or None."""
        found = self._by_name.get(name)
        if found is None and self._stamp() != self._seen:  # another server wrote it since
            self._merge_file()
            found = self._by_name.get(name)
        return found

    def remember(self, name, fingerprint):
        """Record ``fingerprint`` as what ``name`` makes now; writes the file (atomically)
        only when that changes what it says."""
        current = self._by_name.get(name)
        if current is not None and current == fingerprint:
            return
        self._by_name[name] = fingerprint
        self._merge_file()  # the models other servers of this directory recorded
        try:
            self._write(dict(self._by_name))
        except OSError as e:
            log.warning("kvstore: cannot record the cache structure in %s: %s", self._path, e)

    def _stamp(self):
        try:
            st = os.stat(self._path)
            return (st.st_mtime_ns, st.st_size, st.st_ino)
        except OSError:
            return None

    def _merge_file(self):
        """Adds the models the file names that this process does not know."""
        self._seen = self._stamp()
        for name, fingerprint in self._read().items():
            self._by_name.setdefault(name, fingerprint)

    def _read(self):
        try:
            with open(self._path, "rb") as f:
                text = f.read(_MAX_FILE_BYTES + 1)
        except FileNotFoundError:
            return {}
        except OSError as e:
            log.warning("kvstore: ignoring %s: %s", self._path, e)
            return {}
        try:
            if len(text) > _MAX_FILE_BYTES:
                raise ValueError("larger than %d bytes" % _MAX_FILE_BYTES)
            doc = json.loads(text)
            if not isinstance(doc, dict) or doc.get("version") != _VERSION or not isinstance(doc.get("models"), dict):
                raise ValueError("not a version %d models file" % _VERSION)
            out = {}
            for name, fp_json in doc["models"].items():
                fingerprint = _kvstore.ModelFingerprint.from_json(fp_json)
                if fingerprint.model_id != name:
                    raise ValueError("the fingerprint stored for %r names %r" % (name, fingerprint.model_id))
                out[name] = fingerprint
            return out
        except Exception as e:  # a hint only: never fail the server over it
            log.warning("kvstore: ignoring %s: %s", self._path, e)
            return {}

    def _write(self, by_name):
        doc = {"version": _VERSION, "models": {name: fp.json for name, fp in sorted(by_name.items())}}
        tmp = "%s.kvtmp-%d-%d-models" % (self._path, os.getpid(), next(self._writes))
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(doc, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._path)
        fd = os.open(os.path.dirname(self._path), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
