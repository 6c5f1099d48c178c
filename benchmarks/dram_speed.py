#!/usr/bin/env python3
"""DRAM engine speed on every trace of the reference dataset, beside the reference simulators.

    python benchmarks/dram_speed.py [--runs 3] [--engine compiled|python] [--only CONFIG:TRACE ...]
                                    [--traces DIR] [--json OUT]
    python benchmarks/dram_speed.py --streams [--runs 3] [--json OUT]

Times the replay loop (trace already parsed, as the reference's "loop" column) and
the whole `pimc dram` path (parse + replay), median of --runs, for every trace of
validation/reference/dram (main and extra), and prints requests per second with,
where the reference's speed.csv has the same trace ([REFDATA] dram README Sec. 9, same kind
of 2-core machine), DRAMsim3's and Ramulator 2's rates and our ratio to each.
The first replay of a run, which loads (or compiles) the compiled core, is
reported apart as `first_s`.

With --streams: ordered command streams instead (the bundled PIM programs, as `pimc run`
times an op: one channel, the memory's refresh policy), commands per CPU second of the
reference timer (`python`) and of the compiled stream core, exact (every command issued)
and fast (steady-state loops skipped), each counting the program's own expansion into
commands; plus the timer alone on the unrolled list, and the compiled core's load in a
fresh process on a warm and on a cold numba cache.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pimdsl.emit.atomic import atomic_file                                      # noqa: E402
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
    ap.add_argument("--streams", action="store_true", help="time ordered PIM command streams instead")
    args = ap.parse_args(argv)
    if args.streams:
        return streams(args)
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
        with atomic_file(args.json) as f:
            f.write(json.dumps({"engine": engine, "first_replay_s": round(first_s, 3), "rows": rows}, indent=1) + "\n")
    return 0


# (spec, memory, program, shape): the HBM-PIM GEMV of `pimc run specs/reference/hbm_pim_gemv.pim`, the
# phone's GEMV (Llama-3.2-1B's MLP up-projection), the NDP-DIMM GEMV, a NeuPIMs attention head
STREAM_CASES = [
    ("specs/reference/hbm_pim_gemv.pim", "aquabolt_xl", "gemv", {"n": 4096, "k": 4096, "m": 1}),
    ("specs/hardware/galaxy_s24p.pim", "s24_lpddr5x", "gemv", {"n": 8192, "k": 2048, "m": 1}),
    ("specs/hardware/rtx4090_ndp.pim", "hermes_ndp_dimm", "gemv", {"n": 4096, "k": 4096, "m": 1}),
    ("specs/hardware/neupims.pim", "neupims_hbm", "attn_score",
     {"kv": 2048, "heads": 4, "head_dim": 128, "requests": 1}),
]
LOAD = ("import time; t = time.process_time(); from pimdsl.frontend.pipeline import load_spec; "
        "from pimdsl.interpreter.dram.compiled_timer import make_timer; "
        "m = load_spec('specs/reference/hbm_pim_gemv.pim')[0].memories['aquabolt_xl']; "
        "t = time.process_time(); make_timer(m, m.pim.commands, m.pim.rules, m.pim.windows, engine='compiled').run([]); "
        "print(time.process_time() - t)")


def streams(args) -> int:
    from pimdsl.frontend.pipeline import load_spec
    from pimdsl.interpreter.dram.compiled_timer import make_timer
    from pimdsl.interpreter.dram.stream_timer import StreamTimer
    from pimdsl.interpreter.op_timing import refresh_policy
    from pimdsl.lowering.pim_program import expand
    from pimdsl.lowering.stream import unroll

    def cpu(f) -> float:
        runs = []
        for _ in range(args.runs):
            t0 = time.process_time()
            f()
            runs.append(time.process_time() - t0)
        return statistics.median(runs)

    load = {}
    for cache in ("warm", "cold"):
        env = dict(os.environ, **({"NUMBA_CACHE_DIR": tempfile.mkdtemp(prefix="pimdsl-numba-")} if cache == "cold" else {}))
        out = subprocess.run([sys.executable, "-c", LOAD], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
        load[cache] = round(float(out.stdout.split()[-1]), 3)
    print(f"compiled stream core: load {load['warm']:.2f} s CPU on a warm numba cache, {load['cold']:.2f} s cold")
    rows = []
    for path, name, op_class, shape in STREAM_CASES:
        memory = load_spec(str(ROOT / path))[0].memories[name]
        pim = memory.pim
        items = expand(memory, pim.program(op_class), shape)
        commands = list(unroll(items))
        refresh = refresh_policy(memory)
        timer = lambda engine: make_timer(memory, pim.commands, pim.rules, pim.windows, refresh=refresh, engine=engine)
        timer("compiled").run(commands[:10])              # loaded before timing
        row = {"memory": name, "program": op_class, "shape": shape, "commands": len(commands), "refresh": refresh}
        for engine in ("python", "compiled"):
            ends = set()
            for mode in ("exact", "fast"):
                st = StreamTimer(timer(engine), fast=mode == "fast")
                ends.add(st.run(items))
                row[f"{engine}_{mode}_issued"] = len(commands) - st.skipped
                row[f"{engine}_{mode}_commands_per_s"] = round(
                    len(commands) / cpu(lambda: StreamTimer(timer(engine), fast=mode == "fast").run(items)))
            row[f"{engine}_timer_only_commands_per_s"] = round(len(commands) / cpu(lambda: timer(engine).run(commands)))
            row[f"{engine}_end_cycle"] = ends.pop() if len(ends) == 1 else sorted(ends)
        for mode in ("exact", "fast", "timer_only"):
            key = f"{mode}_commands_per_s"
            row[f"speedup_{mode}"] = round(row[f"compiled_{key}"] / row[f"python_{key}"], 2)
        rows.append(row)
        print(f"{name:16s} {op_class:10s} {len(commands):>9,} commands  "
              + "  ".join(f"{mode} {row[f'python_{mode}_commands_per_s']:>9,} -> {row[f'compiled_{mode}_commands_per_s']:>9,}/s"
                          f" ({row[f'speedup_{mode}']}x)" for mode in ("exact", "fast", "timer_only")))
    if args.json:
        with atomic_file(args.json) as f:
            f.write(json.dumps({"cpu_s_to_load_compiled_core": load, "runs": args.runs, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
