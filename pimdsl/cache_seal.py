"""Sealed cache entries: bytes are loaded from the cache only if they are what this user wrote.

An entry is `MAGIC + HMAC-SHA256(key, body) + body`; the key is 32 random bytes in `<cache>/key`,
created 0600 by the first run and refused unless it is a regular file of ours that no one else can
read or write. Checking the seal before unpickling means a file planted in the cache (or a damaged
or truncated one) is never handed to `pickle`; a JSON entry whose values were changed fails the
same check. Without a usable key nothing is cached.
"""
from __future__ import annotations

import functools
import hashlib
import hmac
import os
import stat
import tempfile
from pathlib import Path

from .cache_home import drop, root_folder, safe_folder, warn_once

MAGIC = b"pimdsl-sealed-1\n"
KEY_BYTES = 32


@functools.lru_cache(maxsize=4)
def _key(root: str) -> bytes | None:
    path = os.path.join(root, "key")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(os.urandom(KEY_BYTES))
    except FileExistsError:
        pass
    except OSError:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o077:
            warn_once(path, f"not using the cache: its key {path} must be a file of yours with mode 0600")
            return None
        key = f.read(KEY_BYTES + 1)
    return key if len(key) == KEY_BYTES else None


def key() -> bytes | None:
    root = safe_folder(root_folder())
    return _key(str(root)) if root is not None else None


def seal(body: bytes) -> bytes | None:
    k = key()
    return MAGIC + hmac.new(k, body, hashlib.sha256).digest() + body if k is not None else None


def unseal(blob: bytes) -> bytes | None:
    """The body of a sealed entry, or None if it is not one this user's pimdsl wrote, whole."""
    k = key()
    head = len(MAGIC) + hashlib.sha256().digest_size
    if k is None or len(blob) < head or not blob.startswith(MAGIC):
        return None
    mac, body = blob[len(MAGIC):head], blob[head:]
    return body if hmac.compare_digest(mac, hmac.new(k, body, hashlib.sha256).digest()) else None


def read_entry(path: Path) -> bytes | None:
    """The verified body of the entry at `path`; None when absent, or after dropping it when it is
    damaged, planted or not a file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        drop(path, exc.strerror or "unreadable")
        return None
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            with open(fd, "rb", closefd=False) as f:
                blob = f.read()
        else:
            blob = None                          # a folder, FIFO or device where an entry should be
    finally:
        os.close(fd)
    body = unseal(blob) if blob is not None else None
    if body is None:
        drop(path, "not a file pimdsl sealed" if blob is not None else "not a regular file")
    return body


def write_entry(path: Path, body: bytes) -> None:
    """Seal `body` into `path` whole (a temporary file, then a rename); a full or read-only disk, or
    no key, just leaves it uncached."""
    sealed = seal(body)
    if sealed is None:
        return
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(sealed)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        pass

