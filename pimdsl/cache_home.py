"""Where pimdsl keeps what it computes once for every later run: `$PIMDSL_CACHE`, else
`~/.cache/pimdsl`, one folder per kind (compiled kernels, op timings, parsed specs, generated
weights); what names an entry (`code_digest`: this pimdsl's source) and how one is written (`keep`)."""
from __future__ import annotations

import functools
import hashlib
import os
import tempfile
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent


def cache_folder(kind: str) -> Path:
    return Path(os.environ.get("PIMDSL_CACHE") or Path.home() / ".cache" / "pimdsl") / kind


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """A digest of every source file of the installed pimdsl package."""
    h = hashlib.sha256()
    for path in sorted(PACKAGE.rglob("*")):
        if path.suffix in (".py", ".lark", ".j2") and "__pycache__" not in path.parts:
            h.update(path.relative_to(PACKAGE).as_posix().encode())
            h.update(path.read_bytes())
    return h.hexdigest()


def keep(path: Path, data: bytes) -> None:
    """Write a cache entry whole (a temporary file, then a rename: a reader never sees half of it);
    an unwritable or full disk just keeps nothing."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError:
        pass
