#!/usr/bin/env python3
"""Regenerate validation/pipeload.json and validation/pipeload.md: [PIPELOAD] Tables II, III and the
Fig. 7 end points beside ours, predicted for the paper's machine and measured on this one.

    python validation/run_pipeload.py --measure 3   (re-measure here: ~15 min on two shared cores)
    python validation/run_pipeload.py               (re-predict; keeps the committed measurements)
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pimdsl.validation import pipeload as P              # noqa: E402

OUT = ROOT / "validation" / "pipeload.json"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--measure", type=int, metavar="REPEATS", help="run `pimc execute` REPEATS times per model")
    ap.add_argument("--cache", help="folder for the generated weight files")
    args = ap.parse_args()
    old = json.loads(OUT.read_text()) if OUT.exists() else {}
    measured = {m: P.measure(m, args.measure, args.cache) for m in P.MODELS} if args.measure else old.get("measured_here", {})
    data = P.collect(measured)
    tmp = OUT.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(OUT)
    md = ROOT / "validation" / "pipeload.md"
    kept = ""                                  # the hand-written discussion below the marker survives
    if md.exists() and P.MARKER in md.read_text():
        kept = md.read_text()[md.read_text().index(P.MARKER):]
    tmp = md.with_suffix(".md.tmp")
    tmp.write_text(P.markdown(data) + ("\n" + kept if kept else ""))
    tmp.replace(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
