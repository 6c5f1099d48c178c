#!/usr/bin/env python3
"""DRAM engine speed on the reference dataset's 200 000-request traces.

    python benchmarks/dram_speed.py [--runs 3] [--traces DIR] [--json OUT]

Times the replay loop (trace already parsed, as the reference's "loop" column)
and the whole `pimc dram` path (parse + replay), median of --runs, and prints
requests per second beside DRAMsim3's and Ramulator 2's own rates from the
reference's speed.csv (same kind of 2-core machine; [REFDATA] dram README Sec. 9).
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

from pimdsl.interpreter.memory_system import replay      # noqa: E402
from pimdsl.interpreter.traces import read_trace         # noqa: E402
from pimdsl.validation import dram_reference as V       # noqa: E402

CASES = [(c, t) for c in ("ddr4_3200", "hbm2", "lpddr4_2400", "lpddr5_6400") for t in ("seq_read", "random_read")]


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
    ap.add_argument("--traces", help="folder for the regenerated traces (default: temporary)")
    ap.add_argument("--json", help="also write the results as JSON here")
    args = ap.parse_args(argv)
    ref = V.reference_dir()
    trace_dir = Path(args.traces) if args.traces else Path(tempfile.mkdtemp(prefix="pimdsl-traces-"))
    paths = V.ensure_traces(ref, trace_dir, CASES)
    memories = V.load_reference_memories()
    rates = reference_rates(ref)
    rows = []
    print(f"{'config':12s} {'trace':12s} {'requests/s loop':>16s} {'incl. parse':>12s}   reference simulators (loop)")
    for config, trace in CASES:
        memory = memories[config]
        loop, total = [], []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            parsed = read_trace(str(paths[(config, trace)]), memory, "dramsim3")
            t1 = time.perf_counter()
            replay(memory, parsed)
            t2 = time.perf_counter()
            loop.append(t2 - t1)
            total.append(t2 - t0)
        n = len(parsed)
        row = {"config": config, "trace": trace, "requests": n,
               "loop_s": round(statistics.median(loop), 3),
               "requests_per_s": round(n / statistics.median(loop)),
               "requests_per_s_incl_parse": round(n / statistics.median(total)),
               "reference_requests_per_s": rates.get((config, trace), {})}
        rows.append(row)
        refs = ", ".join(f"{k} {v:,.0f}" for k, v in row["reference_requests_per_s"].items())
        print(f"{config:12s} {trace:12s} {row['requests_per_s']:>16,} {row['requests_per_s_incl_parse']:>12,}   {refs}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
