#!/usr/bin/env python3
"""Regenerate validation/aim.json and validation/aim.md: GDDR6-AiM on the bundled specs beside the
published figures and the hand calculations (pimdsl/validation/aim.py). The discussion written by
hand below the markdown's marker is kept.

    python validation/run_aim.py        (about 10 s)
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pimdsl.emit.atomic import atomic_file                # noqa: E402
from pimdsl.validation import aim as A                    # noqa: E402


def main() -> int:
    data = A.collect()
    md = ROOT / "validation" / "aim.md"
    old = md.read_text() if md.exists() else ""
    by_hand = old.partition(A.MARKER + "\n")[2]
    with atomic_file(ROOT / "validation" / "aim.json") as f:
        f.write(json.dumps(data, indent=1) + "\n")
    with atomic_file(md) as f:
        f.write(A.markdown(data) + by_hand)
    return 0


if __name__ == "__main__":
    sys.exit(main())
