"""Reading a file a user names (a spec, an import, a trace, a data file): its kind and size are checked
first, and it is remembered as an input, which no output may replace.

A FIFO, a device such as /dev/zero or a file of gigabytes would make a plain read block or
exhaust memory, so every reader of user-given files goes through `read_input`: it opens without
blocking, refuses anything but a regular file, and never reads past `limit` bytes.
"""
from __future__ import annotations

import os
import stat

from .errors import PimdslError

# Every file read through `read_input` in this process, by (device, inode): an output must never
# replace one of the run's inputs (emit/atomic.py asks `is_input`).
_READ: set[tuple[int, int]] = set()

SPEC_LIMIT_BYTES = 8 << 20          # the largest bundled spec is a few tens of kB
TRACE_LIMIT_BYTES = 128 << 20       # ~10 million requests; the reference traces are a few hundred kB


class InputFileError(PimdslError):
    """Why a file cannot be read (the message names no path: the caller shows where)."""

    def __init__(self, message: str, hint: str = ""):
        super().__init__(message, None, hint)


def read_input(path, what: str, limit: int) -> bytes:
    """The bytes of `path`, a regular file of at most `limit` bytes (`what` names it in errors)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)       # O_NONBLOCK: a FIFO does not wait for a writer
    except IsADirectoryError:
        raise InputFileError(f"this is a directory, not a {what}") from None
    except OSError as exc:
        raise InputFileError(f"cannot read this {what}: {exc.strerror or exc}", "check the path") from None
    info = os.fstat(fd)                                         # before fdopen, which refuses a directory
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        if stat.S_ISDIR(info.st_mode):
            raise InputFileError(f"this is a directory, not a {what}")
        raise InputFileError(f"this is not a regular file (a device, FIFO or socket), not a {what}",
                             f"save the {what} to a regular file first")
    _READ.add((info.st_dev, info.st_ino))
    with os.fdopen(fd, "rb") as f:
        data = f.read(limit + 1)                                # the file may grow after fstat
    if len(data) > limit:
        raise InputFileError(f"this file is larger than {f'{limit >> 20} MiB' if limit >= 1 << 20 else f'{limit} B'}, too large for a {what}",
                             "is this the right file?")
    return data


def forget_inputs() -> None:
    """A new command starts (`pimc` called again in one process): its inputs are its own, and a
    deleted file's inode may come back as a new output."""
    _READ.clear()


def note_input(path) -> None:
    """Remember `path` as an input (read by a reader that does not go through `read_input`)."""
    try:
        info = os.stat(path)
    except OSError:
        return
    _READ.add((info.st_dev, info.st_ino))


def is_input(path) -> bool:
    """Whether `path` (symbolic links followed) is a file this process has read as an input."""
    try:
        info = os.stat(path)
    except OSError:
        return False
    return (info.st_dev, info.st_ino) in _READ
