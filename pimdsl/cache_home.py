"""Where pimdsl keeps what it computes once for every later run: `$PIMDSL_CACHE`, else
`~/.cache/pimdsl`, one folder per kind (compiled kernels, op timings, generated weights)."""
from __future__ import annotations

import os
from pathlib import Path


def cache_folder(kind: str) -> Path:
    return Path(os.environ.get("PIMDSL_CACHE") or Path.home() / ".cache" / "pimdsl") / kind
