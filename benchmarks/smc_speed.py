#!/usr/bin/env python3
"""Wall time of the functional swizzled memory copy of one Llama-3.2-1B FFN layer (2048 x 8192
BF16) on the phone's PIM memory: the PIM-aware bank placement back to the host-friendly matrix.

    python benchmarks/smc_speed.py [--runs 5]

Prints the median over --runs (a unit test checks the values; this measures the speed).
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np

from pimdsl.frontend.pipeline import load_spec
from pimdsl.interpreter.values.mode_protocol import channel_banks
from pimdsl.interpreter.values.smc import swizzled_copy
from pimdsl.lowering.mode_protocol_gemv import GemvLayout

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    spec, diags = load_spec(str(ROOT / "specs" / "hardware" / "galaxy_s24p.pim"))
    if spec is None:
        raise SystemExit(diags.render_all())
    phone = spec.memories["s24_lpddr5x"]
    layout = GemvLayout.of(phone, 2048, 8192)
    banks = channel_banks(phone)
    rng = np.random.default_rng(0)
    for b in banks.values():
        for bank in range(phone.organization.banks_per_rank):
            for row in range(layout.weight_rows):
                b.row(bank, row)[:] = rng.standard_normal((b.bursts, b.lanes))
    times = []
    for _ in range(args.runs):
        start = time.perf_counter()
        swizzled_copy(phone, layout, banks)
        times.append(time.perf_counter() - start)
    print(f"swizzled copy of a 2048 x 8192 BF16 layer: median {statistics.median(times):.3f} s over {args.runs} runs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
