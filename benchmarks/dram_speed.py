#!/usr/bin/env python3
"""DRAM engine speed on every trace of the reference dataset, beside the reference simulators.

    python benchmarks/dram_speed.py [--runs 3] [--engine compiled|python] [--only CONFIG:TRACE ...]
                                    [--traces DIR] [--json OUT]
    python benchmarks/dram_speed.py --streams [--runs 3] [--json OUT]
    python benchmarks/dram_speed.py --side-by-side [--dramsim3 PATH] [--ramulator2 PATH] [--runs 3]
                                    [--sizes 200000,1000000] [--only LABEL ...] [--traces DIR] [--json OUT]

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

With --side-by-side: whole processes, pimdsl beside the reference simulators built locally (never
part of this repository), on the traces of validation/reference/dram/gen_traces.py at each of
--sizes requests: `pimc dram` (start-up, spec, trace reading and replay; its caches warm, as on any
later run, Python's byte code written), DRAMsim3's stock runner (`--dramsim3 PATH`:
`dramsim3main.out`, run on the reference configuration, [REFDATA] dram README Sec. 3, with the changes
configs.json records, for the cycles pimc reports: the stock runner stops at a fixed cycle, see
Sec. 2.1) and a Ramulator 2 runner
(`--ramulator2 PATH`, called `PATH MEMORY TRACE.ldst`: Ramulator 2.1 ships no trace runner, so this
is the harness that drives its library, as Sec. 2 describes). Each round runs every simulator once,
interleaved, so that a busy machine slows all alike; the table gives median wall seconds of --runs
and the ratio reference / pimdsl (above 1: pimdsl is faster), with the machine's description, as
Markdown beside the JSON (default benchmarks/results/dram_side_by_side.{json,md}).
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from pimdsl.emit.atomic import atomic_file                                      # noqa: E402
from run_speed import measure                                                    # noqa: E402
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
    ap.add_argument("--side-by-side", action="store_true", help="whole processes beside the reference simulators")
    ap.add_argument("--dramsim3", metavar="PATH", help="DRAMsim3's dramsim3main.out (its configs/ folder beside it)")
    ap.add_argument("--ramulator2", metavar="PATH", help="a Ramulator 2 trace runner: PATH MEMORY TRACE.ldst")
    ap.add_argument("--sizes", default="200000,1000000", help="--side-by-side: requests per trace")
    args = ap.parse_args(argv)
    if args.streams:
        return streams(args)
    if args.side_by_side:
        return side_by_side(args)
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


# issue 35's table: (row, configuration, generator pattern); a simulator without the configuration
# (DRAMsim3 has no LPDDR5, Ramulator 2 no LPDDR4) leaves its cell empty
SIDE_BY_SIDE = [
    ("ddr4 seq", "ddr4_3200", "seq_read"),
    ("ddr4 random", "ddr4_3200", "random_read"),
    ("ddr4 mixed 2r:1w", "ddr4_3200", "mixed_random_2r1w"),
    ("hbm2 seq", "hbm2", "seq_read"),
    ("hbm2 random", "hbm2", "random_read"),
    ("lpddr5 random", "lpddr5_6400", "random_read"),
    ("ddr4 same-bank conflicts", "ddr4_3200", "same_bank_conflict"),
]


def side_by_side(args) -> int:
    ref = V.reference_dir()
    configs = json.loads((ref / "configs.json").read_text())
    work = Path(args.traces) if args.traces else Path(tempfile.mkdtemp(prefix="pimdsl-side-"))
    # (the results name each simulator's program, not its path: a path names the machine)
    sims = {name: Path(path).resolve() for name, path in (("DRAMsim3", args.dramsim3), ("Ramulator2", args.ramulator2))
            if path}
    cases = [c for c in SIDE_BY_SIDE if not args.only or c[0] in args.only]
    json_path = Path(args.json or ROOT / "benchmarks" / "results" / "dram_side_by_side.json")
    # rows of earlier runs that this one does not measure are kept (a long run can be done in parts)
    rows = json.loads(json_path.read_text())["rows"] if json_path.exists() else []
    for label, config, pattern in cases:
        for n in (int(x) for x in args.sizes.split(",")):
            trace = _generated(ref, work, config, pattern, n, "dramsim3")
            if trace is None:
                continue
            commands = {"pimdsl": [sys.executable, "-m", "pimdsl.cli.main", "dram", str(ROOT / "specs/reference/dram.pim"),
                                   "--memory", config, "--trace", str(trace), "--trace-format", "dramsim3", "--json"]}
            # warms the caches, Python's byte code included (as an installed package has it; this machine's
            # environment may say PYTHONDONTWRITEBYTECODE); its cycles bound DRAMsim3's run
            first = _checked(commands["pimdsl"], {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"})
            cycles = json.loads(first.stdout)["cycles"]
            if "DRAMsim3" in sims and config in configs["dramsim3"]:
                ini = _dramsim3_ini(sims["DRAMsim3"].parent / "configs", configs["dramsim3"][config], work)
                out = work / "dramsim3-out"
                out.mkdir(exist_ok=True)
                commands["DRAMsim3"] = [str(sims["DRAMsim3"]), str(ini), "-c", str(cycles), "-t", str(trace), "-o", str(out)]
            if "Ramulator2" in sims and config in configs["ramulator2"]:
                commands["Ramulator2"] = [str(sims["Ramulator2"]), config, str(_generated(ref, work, config, pattern, n, "ldst"))]
            runs = {name: [] for name in commands}
            for _ in range(args.runs):                           # interleaved rounds
                for name, cmd in commands.items():
                    runs[name].append(_checked(cmd))
            row = {"case": label, "config": config, "trace": pattern, "requests": n, "cycles": cycles}
            for what in ("wall_s", "cpu_s", "max_rss_mb"):
                row[what] = {name: [round(getattr(r, what), 3) for r in rs] for name, rs in runs.items()}
                row[f"{what}_median"] = {name: statistics.median(v) for name, v in row[what].items()}
            for what in ("wall_s", "cpu_s"):
                median = row[f"{what}_median"]
                row[f"ratio_{what}"] = {k: round(v / median["pimdsl"], 2) for k, v in median.items() if k != "pimdsl"}
            rows = [r for r in rows if (r["case"], r["requests"]) != (label, n)] + [row]
            _write_side_by_side(json_path, {"machine": machine(), "runs": args.runs,
                                             "simulators": {k: v.name for k, v in sims.items()}, "rows": rows})
            print(f"{label:26s} {n:>9,}  " + "  ".join(f"{k} {v:.2f} s ({row['cpu_s_median'][k]:.2f} s CPU)"
                                                       for k, v in row["wall_s_median"].items())
                  + "  ratios " + ", ".join(f"{k} {v:.2f} ({row['ratio_cpu_s'][k]:.2f} CPU)"
                                            for k, v in row["ratio_wall_s"].items()))
    return 0


def _write_side_by_side(json_path: Path, out: dict) -> None:
    """The JSON and its Markdown table, after every row (an interrupted run keeps what it measured)."""
    order = {label: i for i, (label, _, _) in enumerate(SIDE_BY_SIDE)}
    out["rows"].sort(key=lambda r: (order.get(r["case"], len(order)), r["requests"]))
    with atomic_file(json_path) as f:
        f.write(json.dumps(out, indent=1) + "\n")
    with atomic_file(json_path.with_suffix(".md")) as f:
        f.write(side_by_side_table(out))


def _checked(cmd: list[str], env: dict | None = None):
    run = measure(cmd, env)
    if run.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}: exit {run.returncode}\n{run.stderr[-2000:]}")
    return run


def _generated(ref: Path, work: Path, config: str, pattern: str, n: int, fmt: str) -> Path | None:
    """The generator's trace of `pattern` on `config` with n requests (made once in `work`), or None
    (said on stderr) when the pattern has no trace that long (same-bank conflicts: one request per row)."""
    folder = work / f"{fmt}-{n}"
    path = folder / f"{config}__{pattern}.{'trace' if fmt == 'dramsim3' else fmt}"
    if not path.exists():
        made = subprocess.run([sys.executable, str(ref / "gen_traces.py"), "--out", str(folder), "--config", config,
                               "--trace", pattern, "-n", str(n), "--format", fmt], capture_output=True, text=True)
        if made.returncode:
            path.unlink(missing_ok=True)             # the generator opens its output before it refuses
            reason = (made.stderr.strip().splitlines() or ["the generator failed"])[-1]
            print(f"skipped {config} {pattern} at {n:,} requests: {reason}", file=sys.stderr)
            return None
    return path


def _dramsim3_ini(stock: Path, config: dict, work: Path) -> Path:
    """The stock .ini the reference used, with the changes configs.json records (`key: [stock, used]`)."""
    text = (stock / config["source_ini"]).read_text()
    for key, (old, new) in config.get("changes_vs_stock_ini", {}).items():
        text, count = re.subn(rf"^(\s*{re.escape(key)}\s*=\s*){re.escape(str(old))}\s*$", rf"\g<1>{new}", text, flags=re.M)
        if count != 1:
            raise SystemExit(f"{stock / config['source_ini']}: expected `{key} = {old}` once (the reference's stock .ini)")
    path = work / f"dramsim3-{config['source_ini']}"
    path.write_text(text)
    return path


def machine() -> dict:
    """What the numbers were measured on (a shared machine: the load average says how shared)."""
    cpu = next((line.split(":", 1)[1].strip() for line in _lines("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor() or platform.machine())
    memory = next((line.split(":", 1)[1].strip() for line in _lines("/proc/meminfo") if line.startswith("MemTotal")), "")
    return {"cpu": cpu, "cpus": os.cpu_count(), "memory": memory, "os": platform.platform(),
            "python": platform.python_version(), "load_average": os.getloadavg()}


def _lines(path: str) -> list[str]:
    try:
        return Path(path).read_text().splitlines()
    except OSError:
        return []


def side_by_side_table(out: dict) -> str:
    """Markdown: one row per trace, a ratio column per simulator and size (reference seconds / ours),
    by wall time and, in brackets, by CPU time (what a shared machine disturbs least)."""
    sims = sorted({k for r in out["rows"] for k in r["ratio_wall_s"]})
    sizes = sorted({r["requests"] for r in out["rows"]})
    head = [f"{n:,} requests: / {s}" for n in sizes for s in sims]
    cells = {}
    for r in out["rows"]:
        cells.setdefault(r["case"], {})[r["requests"]] = r

    def cell(r, sim):
        if r is None or sim not in r["ratio_wall_s"]:
            return "–"
        return f"{r['ratio_wall_s'][sim]:.2f} ({r['ratio_cpu_s'][sim]:.2f})"

    lines = ["# `pimc dram` beside the reference simulators, whole process", "",
             f"Ratio: the reference's median seconds over pimdsl's, wall (CPU in brackets), {out['runs']} interleaved "
             "runs; above 1, pimdsl is faster. pimdsl s: its median wall seconds (CPU seconds) by size. "
             "Machine: " + ", ".join(f"{k} {v}" for k, v in out["machine"].items()) + ".", "",
             "| memory / trace | " + " | ".join(head) + " | pimdsl s |", "|---|" + "---:|" * (len(head) + 1)]
    for case, by_size in cells.items():
        ours = ", ".join(f"{by_size[n]['wall_s_median']['pimdsl']:.2f} ({by_size[n]['cpu_s_median']['pimdsl']:.2f})"
                         for n in sizes if n in by_size)
        lines.append(f"| {case} | " + " | ".join(cell(by_size.get(n), s) for n in sizes for s in sims) + f" | {ours} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
