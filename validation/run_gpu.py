#!/usr/bin/env python3
"""Regenerate validation/gpu.json, validation/gpu.md and the plots in validation/gpu/: the measured GPU
kernel and collective models against measured A100 / H100 times ([VIDUR] profiling data).

    python validation/run_gpu.py               (compare; about 20 s)
    python validation/run_gpu.py --fit         (also fit every calibration value of specs/hardware/gpus.pim
                                                and print them; the spec keeps what it states)
    PIMDSL_REFERENCE=DIR python validation/run_gpu.py --summarize
                                               (rebuild validation/reference/gpu/ from the raw CSVs in
                                                DIR/gpu_measured; they are not committed)
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pimdsl.validation import gpu as G               # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fit", action="store_true", help="fit the calibration values and print them")
    ap.add_argument("--summarize", action="store_true", help="rebuild the committed summary from $PIMDSL_REFERENCE")
    args = ap.parse_args()
    if args.summarize:
        raw = G.raw_root()
        if raw is None:
            print("run_gpu.py: set PIMDSL_REFERENCE to the folder that holds gpu_measured/", file=sys.stderr)
            return 1
        G.write_summary(*G.summarize(raw))
    data = G.collect(fit=args.fit)
    if args.fit:
        print(G.json_dumps(data["fits"]))
    G.plots(data, ROOT / "validation" / "gpu")
    slim = {k: v for k, v in data.items() if k not in ("kernels", "collectives")}
    slim["kernels"] = {g: {k: v for k, v in d.items() if k != "series"} for g, d in data["kernels"].items()}
    slim["collectives"] = {t: {**c, "rows": {k: {x: y for x, y in r.items() if x != "curve"} for k, r in c["rows"].items()}}
                           for t, c in data["collectives"].items()}
    slim["headline"] = G.headline(data)
    (ROOT / "validation" / "gpu.json").write_text(json.dumps(slim, indent=1) + "\n")
    (ROOT / "validation" / "gpu.md").write_text(G.markdown(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
