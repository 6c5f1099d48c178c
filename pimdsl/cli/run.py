"""`pimc run FILE [--set PATH=VALUE ...] [--json]`: compile every step of the workload and time it.

With `--json`, one JSON object on stdout (ARCHITECTURE.md contract);
otherwise a short table. `--exact` times every PIM command instead of
skipping periodic loop iterations (same numbers, slower). `--timeline FILE`
writes the schedule as a Chrome/Perfetto trace, one track per resource and,
for host kernels split over CPU threads (GEMM threads, SMC copy threads), one
per thread; `--timeline-layer N` keeps only decoder layer N of the prefill
step (one layer's copies and GEMMs side by side). The timeline has a power counter track (W) from
the declared power of each busy resource (interpreter/run_energy.py).
"""
from __future__ import annotations

import json
import sys

from ..emit.atomic import atomic_file
from ..ir.errors import CompileError
from .system import add_common, load_system, output_file, pass_manager, print_pass_times, report_compile_error


def add_parser(sub) -> None:
    p = sub.add_parser("run", help="compile and time a system's workload")
    add_common(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--exact", action="store_true", help="time every PIM command (no steady-state skipping)")
    p.add_argument("--timeline", metavar="FILE", type=output_file, help="write the schedule as a Chrome/Perfetto trace (JSON)")
    p.add_argument("--timeline-layer", metavar="N", type=int,
                   help="with --timeline: only decoder layer N of the prefill step")


def _progress(what: str = "decode steps"):
    """A progress bar on stderr over the decode steps (or served requests), when stderr is a terminal."""
    if not sys.stderr.isatty():
        return None, None
    from rich.progress import Progress
    bar = Progress(transient=True)
    task = bar.add_task(what, total=None)
    bar.start()
    return bar, lambda done, total: bar.update(task, completed=done, total=total)


def run(args) -> int:
    from ..driver import kind_of_run, loop_module, run_loaded      # here: `pimc --help` needs none of it
    from ..emit.timeline import chrome_trace, per_thread, power_counter
    from ..interpreter.run_energy import power_levels
    from ..serving.requests import RequestsError
    system, diags = load_system(args)
    if system is None:
        return 1
    try:
        kind = kind_of_run(system)               # the spec chooses the loop (pimdsl/driver.py)
    except CompileError as exc:
        return report_compile_error(exc, diags, args.file)
    serving = kind != "steps"
    bar, progress = _progress(getattr(loop_module(system), "PROGRESS", "decode steps"))
    try:
        result = run_loaded(system, fast=not args.exact, manager=pass_manager(args), progress=progress,
                            timeline=bool(args.timeline))
    except CompileError as exc:
        return report_compile_error(exc, diags, args.file)
    except RequestsError as exc:
        print(exc.render(), file=sys.stderr)
        return 1
    finally:
        if bar is not None:
            bar.stop()
    if args.time_passes and not serving:
        print_pass_times(result.pass_times_s)
    if args.timeline:
        intervals = result.intervals
        if args.timeline_layer is not None and not serving:
            intervals = [i for i in intervals if i.category == "prefill" and i.args.get("layer") == args.timeline_layer]
        counters = power_counter(intervals, *power_levels(system, result.report))
        try:
            _write_json(args.timeline, chrome_trace(per_thread(intervals), counters))
        except OSError as exc:
            print(f"pimc run: error: cannot write {args.timeline}: {exc.strerror or exc}", file=sys.stderr)
            return 1
    report = result.report
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    width = 16
    keys = ("system", "model", "strategy", *(k for k in ("tp", "pp", "batch", "dataset") if serving and k in report),
            "ttft_s", "ttft_p99_s", "tpot_s", "tpot_p99_s", "op_s", "tokens_per_s", "end_to_end_s", "makespan_s")
    for key in (k for k in keys if k in report):
        value = report[key]
        print(f"{key:<{width}} {value:.6g}" if isinstance(value, float) else f"{key:<{width}} {value}")
    print(f"{'memory_bytes':<{width}} " + ", ".join(f"{k} {v}" for k, v in report["memory_bytes"].items()
                                                   if not isinstance(v, dict)))
    print(f"{'utilization':<{width}} " + ", ".join(f"{k} {v:.1%}" for k, v in report["utilization"].items()))
    return 0


def _write_json(path: str, data) -> None:
    with atomic_file(path) as out:
        json.dump(data, out)
