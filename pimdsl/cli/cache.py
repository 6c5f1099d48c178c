"""`pimc cache info|clear`: show and empty pimdsl's cache (cache_home.py).

`info` prints the folder, whether it is used, and the entries and bytes of each kind; `clear`
removes the kinds' folders and the seal key, never anything else a user keeps under
`$PIMDSL_CACHE` (it may point at a folder of theirs).
"""
from __future__ import annotations

import json
import os
import shutil
import sys

from ..cache_home import KINDS, root_folder, unsafe


def add_parser(sub) -> None:
    p = sub.add_parser("cache", help="show (info) or empty (clear) pimdsl's cache")
    p.add_argument("action", choices=("info", "clear"))
    p.add_argument("--json", action="store_true", help="info: print one JSON object")


def _usage(path) -> tuple[int, int]:
    files = size = 0
    for folder, _, names in os.walk(path):
        for name in names:
            try:
                size += os.lstat(os.path.join(folder, name)).st_size
                files += 1
            except OSError:
                pass
    return files, size


def run(args) -> int:
    root = root_folder()
    if args.action == "clear":
        if root.is_dir() and not unsafe(root):
            for kind in KINDS:
                shutil.rmtree(root / kind, ignore_errors=True)
            (root / "key").unlink(missing_ok=True)
        elif root.exists():
            print(f"pimc cache: error: not clearing {root}: it {unsafe(root) or 'is not a folder'}", file=sys.stderr)
            return 1
        print(f"cleared {root}")
        return 0
    why = unsafe(root) if root.exists() else None
    kinds = {kind: dict(zip(("entries", "bytes"), _usage(root / kind))) for kind in KINDS}
    info = {"folder": str(root), "exists": root.exists(), "usable": why is None,
            "refused_because": why, "kinds": kinds,
            "total_bytes": sum(k["bytes"] for k in kinds.values())}
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    state = "not used: it " + why if why else ("in use" if root.exists() else "empty (created on first use)")
    print(f"cache folder {root}: {state}")
    for kind, k in kinds.items():
        print(f"  {kind:<8} {k['entries']:>6} file(s) {k['bytes'] / 1e6:>10.1f} MB")
    print(f"  {'total':<8} {'':>14} {info['total_bytes'] / 1e6:>10.1f} MB")
    return 0
