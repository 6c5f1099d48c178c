"""Where pimdsl keeps what it computes once for every later run: `$PIMDSL_CACHE`, else
`~/.cache/pimdsl`, one folder per kind (compiled kernels, op timings, parser tables, parsed specs, generated weights), and
what names an entry (`code_digest`: this pimdsl's source).

A cache entry is read back by a later run, so whoever can write the folder could make pimc load what
they wrote; some entries (numba's kernels, the parser tables) are pickles, which run code when loaded.
So, as ssh and pip do with their folders, the cache is used only when it is safe: the root is created
0700, and a root or kind folder owned by another user or writable by group or others is refused with
one warning and the run goes on without a cache. Every entry is also sealed (`cache_seal.py`): an
entry is loaded only after its HMAC under a per-user key checks out.

An entry that fails to load is dropped (`drop`) and rebuilt, with one warning per run.
"""
from __future__ import annotations

import functools
import hashlib
import os
import stat
import sys
from pathlib import Path

KINDS = ("lark", "numba", "parsed", "timing", "weights")
PACKAGE = Path(__file__).resolve().parent
_warned: set[str] = set()


def root_folder() -> Path:
    return Path(os.environ.get("PIMDSL_CACHE") or Path.home() / ".cache" / "pimdsl")


def warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        print(f"pimc: warning: {message}", file=sys.stderr)


def unsafe(path: Path) -> str | None:
    """Why the folder `path` may not hold a cache (None: it is ours and only we can write it)."""
    info = os.stat(path)
    if not stat.S_ISDIR(info.st_mode):
        return "is not a folder"
    if info.st_uid != os.geteuid():
        return "is owned by another user"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return "is writable by other users"
    return None


def safe_folder(path: Path, create: bool = True) -> Path | None:
    """`path`, created 0700 if missing, or None when it cannot be used safely (warned once)."""
    try:
        if create:
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
        why = unsafe(path)
    except OSError:
        return None                        # unwritable or absent: run without the cache, as before
    if why:
        warn_once(str(path), f"not using the cache folder {path}: it {why}; "
                             f"fix with `chmod 700 {path}` (as its owner) or set PIMDSL_CACHE to a folder of yours")
        return None
    return path


def cache_folder(kind: str) -> Path | None:
    """The folder of one kind of entry, or None when the cache may not be used."""
    root = safe_folder(root_folder())
    return safe_folder(root / kind) if root is not None else None


def drop(path: Path, why: str) -> None:
    """Remove a damaged entry (it is rebuilt) and say so once per run."""
    try:
        if path.is_dir() and not path.is_symlink():
            import shutil
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    except OSError:
        pass
    warn_once("dropped", f"dropped a damaged cache entry ({why}): {path}; it is rebuilt")


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """A digest of every source file of the installed pimdsl package."""
    h = hashlib.sha256()
    for path in sorted(PACKAGE.rglob("*")):
        if path.suffix in (".py", ".lark", ".j2") and "__pycache__" not in path.parts:
            h.update(path.relative_to(PACKAGE).as_posix().encode())
            h.update(path.read_bytes())
    return h.hexdigest()
