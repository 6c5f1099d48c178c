#!/usr/bin/env python3
"""Regenerate validation/l3.json and validation/l3.md: [L3]'s stated numbers beside the sub-batch
serving loop's (about 10 minutes on two shared cores: 3 models x 4 traces x 5 systems of 1,000 requests).

    python validation/run_l3.py
    python validation/run_l3.py --markdown-only    (the table again from validation/l3.json)
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pimdsl.emit.atomic import atomic_file       # noqa: E402
from pimdsl.validation import l3 as V              # noqa: E402

OUT = ROOT / "validation" / "l3.json"


def write(path: Path, text: str) -> None:
    with atomic_file(path) as out:
        out.write(text)


def main() -> int:
    if "--markdown-only" not in sys.argv:          # else: rewrite the table from the committed JSON
        data = V.collect(progress=lambda what: print(what, file=sys.stderr, flush=True))
        write(OUT, json.dumps(data, indent=1) + "\n")
    md = ROOT / "validation" / "l3.md"
    kept = ""                                  # the hand-written discussion below the marker survives
    if md.exists() and V.MARKER in md.read_text():
        kept = md.read_text()[md.read_text().index(V.MARKER):]
    write(md, V.markdown(json.loads(OUT.read_text())) + ("\n" + kept if kept else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
