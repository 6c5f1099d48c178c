#!/usr/bin/env python3
"""Wall time of whole `pimc run` processes on the bundled systems (issue 4's speed target).

    python benchmarks/run_speed.py [--runs 3] [--json OUT]

Each case is a fresh `pimc run ... --json` process (interpreter start-up,
imports, parsing, compiling every step, timing and the JSON included),
median of --runs. The issue's target: one prefill token and one decode token
of Llama-3.2-1B on the PIM-SHERPA phone under 10 s on this 2-core machine.
The NeuPIMs cases serve every request of the workload, iteration by iteration.
Also reported: the PIM commands each run accounts for and how many the fast
timer issued (the rest were skipped as periodic).
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PHONE = "specs/systems/pim_sherpa_llama3_2_1b.pim"
CASES = {
    "sherpa_1b_1_prefill_1_decode": [PHONE, "--set", "workload.input_len=1", "--set", "workload.output_len=1"],
    "sherpa_1b_default_128_128": [PHONE],
    "sherpa_3b_default_128_128": ["specs/systems/pim_sherpa_llama3_2_3b.pim"],
    "hbm_pim_gemv_4096x4096": ["specs/reference/hbm_pim_gemv.pim"],
    # NeuPIMs serving: 1024 requests through a batch of 256 (about 2,500 iterations, every layer)
    "neupims_7b_b256_sharegpt": ["specs/systems/neupims_gpt3_7b.pim"],
    "neupims_175b_b256_sharegpt": ["specs/systems/neupims_gpt3_175b.pim"],
    "neupims_7b_b512_npu_pim": ["specs/systems/neupims_gpt3_7b.pim", "--set", "workload.batch=512",
                                "--set", "mapping.strategy=npu_pim"],
}
TARGET_S = {"sherpa_1b_1_prefill_1_decode": 10.0}


def time_case(args: list[str], runs: int) -> tuple[float, dict]:
    times, report = [], {}
    for _ in range(runs):
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "pimdsl.cli.main", "run", *args, "--json"],
                              cwd=ROOT, capture_output=True, text=True, check=True)
        times.append(time.perf_counter() - start)
        report = json.loads(proc.stdout)
    return statistics.median(times), report


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "run_speed.json"))
    args = ap.parse_args()
    results = {}
    for name, case in CASES.items():
        seconds, report = time_case(case, args.runs)
        pim = report.get("pim", {})
        results[name] = {"wall_s_median": round(seconds, 3), "runs": args.runs,
                         "iterations": report.get("iterations"),
                         "pim_commands": pim.get("commands"), "pim_commands_issued": pim.get("commands_issued"),
                         "target_s": TARGET_S.get(name)}
        print(f"{name:<32} {seconds:7.2f} s" + (f"  (target < {TARGET_S[name]:.0f} s)" if name in TARGET_S else ""))
    out = {"machine": {"python": platform.python_version(), "processor": platform.processor() or platform.machine(),
                       "cpus": __import__("os").cpu_count()}, "cases": results}
    Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
