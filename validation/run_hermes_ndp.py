#!/usr/bin/env python3
"""Regenerate validation/hermes_ndp.json and validation/hermes_ndp.md: [HERMES_NDP]'s stated numbers
(targets E1-E12, A1-A4, B1-B5, S1-S5, N14) beside the hot/cold offload loop's.

    python validation/run_hermes_ndp.py             (every run: ~30 min on two shared cores)
    python validation/run_hermes_ndp.py --missing   (only the runs hermes_ndp.json lacks; keeps the others)
    python validation/run_hermes_ndp.py --missing --redo hermes,hermes_base -j 2
                                                    (also redo these strategies' runs, in 2 processes)

The plots of Figs. 9-11 and 14-16 are validation/plot_hermes_ndp.py's.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
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


def _run(args: tuple) -> tuple[str, dict]:
    return V.key(*args), V.run(*args)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--missing", action="store_true", help="run only the plan's runs absent from hermes_ndp.json")
    ap.add_argument("--redo", default="", help="with --missing: strategies whose runs are redone all the same")
    ap.add_argument("-j", "--jobs", type=int, default=1, help="runs at once (processes)")
    a = ap.parse_args()
    start = time.perf_counter()
    redo = set(filter(None, a.redo.split(",")))
    kept = json.loads(OUT.read_text())["runs"] if a.missing and OUT.exists() else {}
    kept = {k: v for k, v in kept.items() if k.split("|")[1] not in redo}
    todo = [args for args in V.plan() if V.key(*args) not in kept]
    runs = dict(kept)
    with multiprocessing.Pool(a.jobs) as pool:
        for k, r in pool.imap_unordered(_run, todo):
            runs[k] = r
            print(f"{time.perf_counter() - start:7.1f} s  {k}: {r.get('tokens_per_s', r.get('error'))}", flush=True)
    runs = {V.key(*args): runs[V.key(*args)] for args in V.plan()}     # the plan's order, nothing stale
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
