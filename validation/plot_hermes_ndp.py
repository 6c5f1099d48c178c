#!/usr/bin/env python3
"""Plot [HERMES_NDP]'s Figs. 9-11 and 14-16 with `pimc sweep`: one sweep per figure and model, each writing
validation/hermes_ndp/<name>.csv (every metric of `pimc run --json` per point) and <name>.png.

    python validation/plot_hermes_ndp.py [-j N] [NAME ...]
                                (all: 39 min with -j 1 on two cores shared with five other jobs)

Exit 0 when every figure's points ran, or failed exactly where the figure expects it (`EXPECTED_FAILURES`:
Fig. 14's DIMM counts too small for the weights); 1 otherwise, saying which points differ.

The paper's bar labels are not in our copy of the text, so these are our numbers only, in the figures'
layout: tokens/s end to end, 128 + 128 tokens (Sec. V-A-4).
"""
from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pimdsl.cli.main import main as pimc                  # noqa: E402

OUT = ROOT / "validation" / "hermes_ndp"
OPT = ("opt_13b", "opt_30b", "opt_66b")
OTHERS = ("llama2_13b", "llama2_70b", "falcon_40b")
# Figs. 9 and 10 ([HERMES_NDP] Sec. V-B-1): every system they compare, batch 1; Deja Vu runs OPT only
SYSTEMS = "hermes,hermes_base,hermes_host,flexgen,accelerate"
# (name, model, grid axes, x, series)
FIGURES = [
    *((f"fig9_10_{m}", m, [("mapping.strategy", SYSTEMS + ",deja_vu")], "mapping.strategy", None) for m in OPT),
    *((f"fig10_{m}", m, [("mapping.strategy", SYSTEMS)], "mapping.strategy", None) for m in OTHERS),
    # Fig. 11 (Sec. V-B-2): batch 1-16; OPT-13B, the smallest of the models it shows
    ("fig11_opt_13b", "opt_13b", [("workload.batch", "1,2,4,8,16"),
                                  ("mapping.strategy", "hermes,hermes_base,hermes_host,flexgen,deja_vu")],
     "workload.batch", "mapping.strategy"),
    # Fig. 14 (Sec. V-E-1): NDP-DIMMs, batch 1; too few DIMMs for the weights is a failed point (S1)
    *((f"fig14_{m}", m, [("memory.hermes_ndp_dimm.count", "2,4,8,16")], "memory.hermes_ndp_dimm.count", None)
      for m in ("falcon_40b", "llama2_70b")),
    # Fig. 15 (Sec. V-E-2): the GPU beside the NDP-DIMMs, batch 1
    *((f"fig15_{m}", m, [("mapping.hermes_ndp_mapping.decode.fc_hot", "hermes_t4,hermes_rtx3090,hermes_rtx4090")],
       "mapping.hermes_ndp_mapping.decode.fc_hot", None) for m in ("opt_13b", "opt_30b")),
    # Fig. 16 (Sec. V-E-3): 32-512 multipliers of 128 bits in the GEMV unit, batch 1 and 16, OPT-13B
    ("fig16_opt_13b", "opt_13b", [("pim_unit.hermes_ndp_core.simd_width",
                                   ",".join(f"{n * 128} bit" for n in (32, 64, 128, 256, 512))),
                                  ("workload.batch", "1,16")],
     "pim_unit.hermes_ndp_core.simd_width", "workload.batch"),
]

# Points a figure expects to fail, by the value of its first grid axis: too few NDP-DIMMs for the
# weights and KV cache (S1 in validation/hermes_ndp.md)
EXPECTED_FAILURES = {"fig14_falcon_40b": {"2"}, "fig14_llama2_70b": {"2", "4"}}


def unexpected(name: str, axis: str, path: Path) -> str | None:
    """None when the points of `path` (a sweep's CSV) failed exactly where the figure expects; else
    what differs."""
    with path.open(newline="") as f:
        failed = {row[axis] for row in csv.DictReader(f) if row["ok"] != "true"}
    expected = EXPECTED_FAILURES.get(name, set())
    if failed == expected:
        return None
    return (f"{name}: {axis} = {', '.join(sorted(failed - expected)) or '-'} failed unexpectedly; "
            f"{', '.join(sorted(expected - failed)) or '-'} ran but should have failed")


def sweep(name: str, model: str, grid: list, x: str, series: str | None, jobs: int) -> int:
    args = ["sweep", str(ROOT / "specs" / "systems" / f"hermes_ndp_{model}.pim"), "-o", str(OUT / f"{name}.csv"),
            "--plot", str(OUT / f"{name}.png"), "--x", x, "--y", "tokens_per_s", "--logy", "-j", str(jobs)]
    for path, values in grid:
        args += ["--grid", f"{path}={values}"]
    if series:
        args += ["--series", series]
    return pimc(args)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help="figures to redo (default: all): " + ", ".join(f[0] for f in FIGURES))
    ap.add_argument("-j", "--jobs", type=int, default=2, help="worker processes per sweep")
    a = ap.parse_args()
    unknown = set(a.names) - {f[0] for f in FIGURES}
    if unknown:
        ap.error(f"no figure {', '.join(sorted(unknown))}")
    OUT.mkdir(exist_ok=True)
    status = 0
    for name, model, grid, x, series in FIGURES:
        if a.names and name not in a.names:
            continue
        start = time.perf_counter()
        ran = sweep(name, model, grid, x, series, a.jobs)    # 1: some point failed, judged below
        problem = f"{name}: the sweep did not run (exit {ran})" if ran not in (0, 1) else \
            unexpected(name, grid[0][0], OUT / f"{name}.csv")
        if problem:
            print(problem, file=sys.stderr)
            status = 1
        print(f"{name}: {time.perf_counter() - start:.0f} s" + (", failed as expected" if name in EXPECTED_FAILURES
                                                               and not problem else ""), flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
