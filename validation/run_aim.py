#!/usr/bin/env python3
"""Regenerate validation/aim.json and validation/aim.md: GDDR6-AiM on the bundled specs beside the
published figures and the hand calculations (pimdsl/validation/aim.py).

    python validation/run_aim.py        (about 10 s)
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pimdsl.validation import aim as A                    # noqa: E402

OUT = ROOT / "validation" / "aim.json"


def main() -> int:
    data = A.collect()
    tmp = OUT.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(OUT)
    md = ROOT / "validation" / "aim.md"
    kept = ""                                  # the hand-written discussion below the marker survives
    if md.exists() and A.MARKER in md.read_text():
        kept = md.read_text()[md.read_text().index(A.MARKER) + len(A.MARKER) + 1:]
    tmp = md.with_suffix(".md.tmp")
    tmp.write_text(A.markdown(data) + kept)
    tmp.replace(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
