"""kvstore's exceptions: one class per library status, following kvtool's exit codes.

=====================================  ===========  ==========================================
exception                              kvtool exit  raised for
=====================================  ===========  ==========================================
InvalidArgumentError (ValueError)      1            a bad argument or a cache state that breaks a rule
NotFoundError (FileNotFoundError)      2            a missing file
FileIOError (OSError)                  2            the operating system refused (open, write, fsync)
PermissionDeniedError                  2            Redis refused the login or an access (a PermissionError)
CorruptionError                        3            bytes that fail a structural or integrity check
NotSupportedError                      4            a valid request this class, layout or build cannot do
FailedPreconditionError                4            e.g. verifying a file that has no digests
=====================================  ===========  ==========================================

Every class derives from kvstore.Error, which carries ``exit_code`` (the kvtool exit
code) and ``code`` (the library's status name, e.g. "Corruption").
"""

import errno as _errno


class Error(Exception):
    """Base of every kvstore error."""

    exit_code = 2
    code = "Internal"


class InvalidArgumentError(Error, ValueError):
    """A bad argument, or a cache state that breaks its class's rules (kvtool exit 1)."""

    exit_code = 1
    code = "InvalidArgument"


class NotFoundError(Error, FileNotFoundError):
    """A missing file (a FileNotFoundError with errno ENOENT; kvtool exit 2)."""

    exit_code = 2
    code = "NotFound"

    def __init__(self, message=""):
        """The error for `message`, which str() returns as it is."""
        # errno.ENOENT makes it a proper FileNotFoundError; str() stays the message.
        super().__init__(_errno.ENOENT, message)

    def __str__(self):
        return self.strerror or ""


class FileIOError(Error, OSError):
    """The operating system refused (open, write, fsync, rename), or an output is not a
    regular file (kvtool exit 2)."""

    exit_code = 2
    code = "IOError"


class PermissionDeniedError(Error, PermissionError):
    """Redis refused the credentials (WRONGPASS, NOAUTH) or its ACL a command or key
    (NOPERM; kvtool exit 2)."""

    exit_code = 2
    code = "PermissionDenied"


class CorruptionError(Error):
    """Bytes that fail a structural or integrity check: a malformed file, a file that is
    not safetensors, a digest mismatch (kvtool exit 3)."""

    exit_code = 3
    code = "Corruption"


class NotSupportedError(Error):
    """A valid request this cache class, layout or build cannot do (kvtool exit 4)."""

    exit_code = 4
    code = "NotSupported"


class FailedPreconditionError(NotSupportedError):
    """A request the state of its input forbids, e.g. verifying a file that has no digests
    (kvtool exit 4)."""

    exit_code = 4
    code = "FailedPrecondition"


__all__ = [
    "Error",
    "InvalidArgumentError",
    "NotFoundError",
    "FileIOError",
    "PermissionDeniedError",
    "CorruptionError",
    "NotSupportedError",
    "FailedPreconditionError",
]
