#!/usr/bin/env python3
"""Regenerate validation/pim_sherpa.json: PIM-SHERPA's reported numbers beside ours.

    python validation/run_pim_sherpa.py          (about two minutes on two cores)

The explanations in validation/pim_sherpa.md are written by hand from this file.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pimdsl.validation import pim_sherpa as P            # noqa: E402


def main() -> int:
    start = time.perf_counter()
    ttft, table2 = P.ttft_rows()
    grid = P.fig12()
    rows = [*P.capacity_rows(), *P.smc_rows(), *ttft, *P.fig12_rows(grid), *P.nc_gemm_rows(), *P.decode_rows()]
    out = {"rows": rows, "table2": table2, "fig12_speedups": grid}
    (ROOT / "validation" / "pim_sherpa.json").write_text(json.dumps(out, indent=1) + "\n")
    for r in rows:
        err = f"{100 * r['error']:+.1f}%" if r["error"] is not None else "-"
        paper = r["paper"] if r["paper"] is not None else "-"
        print(f"{r['figure']:9} {r['quantity'][:70]:70} {paper!s:>8} {r['ours']:10.4g} {r['unit']:9} {err:>8} {r['kind']}")
    for t in table2:
        print(t)
    print(P.counts(rows))                          # the count sentence of validation/pim_sherpa.md
    print(f"{time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
