#!/usr/bin/env python3
"""DRAM engine speed on every trace of the reference dataset, beside the reference simulators.

    python benchmarks/dram_speed.py [--runs 3] [--engine compiled|python] [--only CONFIG:TRACE ...]
                                    [--traces DIR] [--json OUT]

Times the replay loop (trace already parsed, as the reference's "loop" column) and
the whole `pimc dram` path (parse + replay), median of --runs, for every trace of
validation/reference/dram (main and extra), and prints requests per second with,
where the reference's speed.csv has the same trace ([REFDATA] dram README Sec. 9, same kind
of 2-core machine), DRAMsim3's and Ramulator 2's rates and our ratio to each.
The first replay of a run, which loads (or compiles) the compiled core, is
reported apart as `first_s`.
"""
from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pimdsl.interpreter.dram.memory_system import default_engine, replay      # noqa: E402
from pimdsl.interpreter.dram.traces import read_trace                          # noqa: E402
from pimdsl.validation import dram_reference as V                        # noqa: E402


def reference_rates(ref: Path) -> dict:
    out = {}
    with open(ref / "speed.csv") as f:
        for row in csv.DictReader(f):
            label = row["simulator"] if row["simulator"] == "DRAMsim3" else f"Ramulator2 {row['scheduler']}"
            out.setdefault((row["config"], row["trace"]), {})[label] = float(row["requests_per_s_median"])
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--engine", choices=("compiled", "python"), default=None,
                    help="DRAM engine (default: compiled when numba is installed)")
    ap.add_argument("--only", nargs="*", help="CONFIG:TRACE cases (default: every trace of the dataset)")
    ap.add_argument("--traces", help="folder for the regenerated traces (default: temporary)")
    ap.add_argument("--json", help="also write the results as JSON here")
    args = ap.parse_args(argv)
    engine = args.engine or default_engine()
    ref = V.reference_dir()
    cases = [tuple(c.split(":")) for c in args.only] if args.only else V.all_cases(ref)
    trace_dir = Path(args.traces) if args.traces else Path(tempfile.mkdtemp(prefix="pimdsl-traces-"))
    paths = V.ensure_traces(ref, trace_dir, cases)
    memories = V.load_reference_memories()
    rates = reference_rates(ref)
    rows = []
    t0 = time.perf_counter()
    first = paths[cases[0]]
    replay(memories[cases[0][0]], read_trace(str(first), memories[cases[0][0]], "dramsim3"), engine=engine)
    first_s = time.perf_counter() - t0
    print(f"engine {engine}; first replay (loads the compiled core) {first_s:.2f} s")
    print(f"{'config':12s} {'trace':24s} {'requests/s loop':>16s} {'incl. parse':>12s}  "
          "ratio to the reference simulators (their requests/s)")
    for config, trace in cases:
        memory = memories[config]
        loop, total = [], []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            parsed = read_trace(str(paths[(config, trace)]), memory, "dramsim3")
            t1 = time.perf_counter()
            replay(memory, parsed, engine=engine)
            t2 = time.perf_counter()
            loop.append(t2 - t1)
            total.append(t2 - t0)
        n = len(parsed)
        per_s = n / statistics.median(loop)
        refs = rates.get((config, trace), {})
        row = {"config": config, "trace": trace, "requests": n, "engine": engine,
               "loop_s": round(statistics.median(loop), 4),
               "requests_per_s": round(per_s),
               "requests_per_s_incl_parse": round(n / statistics.median(total)),
               "reference_requests_per_s": refs,
               "ratio": {k: round(per_s / v, 2) for k, v in refs.items()}}
        rows.append(row)
        ratios = ", ".join(f"{k} {row['ratio'][k]:.2f}x ({v:,.0f})" for k, v in refs.items())
        print(f"{config:12s} {trace:24s} {row['requests_per_s']:>16,} {row['requests_per_s_incl_parse']:>12,}  {ratios}")
    if args.json:
        Path(args.json).write_text(json.dumps({"engine": engine, "first_replay_s": round(first_s, 3),
                                               "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
