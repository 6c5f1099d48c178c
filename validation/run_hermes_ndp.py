#!/usr/bin/env python3
"""Regenerate validation/hermes_ndp.json and validation/hermes_ndp.md: [HERMES_NDP]'s stated numbers
(targets E1-E12, A1-A4, B1-B5, S1-S5, N14) beside the hot/cold offload loop's.

    python validation/run_hermes_ndp.py       (every run: ~30 min on two shared cores)
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pimdsl.emit.atomic import atomic_file               # noqa: E402
from pimdsl.validation import hermes_ndp as V            # noqa: E402

OUT = ROOT / "validation" / "hermes_ndp.json"


def write(path: Path, text: str) -> None:
    with atomic_file(path) as out:
        out.write(text)


def main() -> int:
    start = time.perf_counter()

    def progress(k, r):
        print(f"{time.perf_counter() - start:7.1f} s  {k}: {r.get('tokens_per_s', r.get('error'))}", flush=True)

    runs = V.collect(progress)
    data = {"runs": runs, "rows": V.rows(runs)}
    write(OUT, json.dumps(data, indent=1) + "\n")
    md = ROOT / "validation" / "hermes_ndp.md"
    kept = ""                                      # the hand-written discussion below the marker survives
    if md.exists() and V.MARKER in md.read_text():
        kept = md.read_text()[md.read_text().index(V.MARKER):]
    write(md, V.markdown(data) + ("\n" + kept if kept else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
