"""`pimc execute FILE`: perform a system's run for real on this machine, beside what `pimc run` predicts.

Only a run loop that can execute (pimdsl.loops: `execute`) supports it; the system's mapping picks
the loop. Prints one row per configuration: measured and predicted latency and peak memory, the
error, and whether the output equals a plain (non-pipelined) forward of the same weights.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from ..ir.errors import CompileError
from .loading import add_allow_outside
from .system import load_system, output_file, report_compile_error


def add_parser(sub) -> None:
    p = sub.add_parser("execute", help="run a system for real on this machine, beside the prediction")
    p.add_argument("file", metavar="FILE", help="spec file with a system block")
    p.add_argument("--system", metavar="NAME", help="system to use when the file declares several")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="PATH=VALUE",
                   help="override a spec value by its dotted path, with units (repeatable)")
    p.add_argument("--strategy", dest="strategies", action="append", metavar="NAME",
                   help="strategy to run (repeatable; default: every strategy the mapping lists)")
    p.add_argument("--agents", type=_counts, metavar="N[,N...]",
                   help="loading-agent counts to run (default: the mapping's)")
    p.add_argument("--cold", action="store_true", help="drop the weight files from the page cache before each run")
    p.add_argument("--profile-out", metavar="FILE", type=output_file, help="where to write the measured layer profile")
    p.add_argument("--cache", metavar="DIR", help="folder for the generated weight files (default ~/.cache/pimdsl)")
    p.add_argument("--seed", type=int, default=0, help="seed of the synthetic weights and inputs")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    add_allow_outside(p)


def _counts(text: str) -> list[int]:
    import argparse
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a comma-separated list of whole numbers") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError("agent counts are at least 1")
    return values


def _cache_problem(folder: str) -> str | None:
    """Why `--cache FOLDER` cannot hold the weight files (None: it can; its weights/ is created)."""
    path = Path(folder)
    if (path.exists() or path.is_symlink()) and not path.is_dir():
        return "it is not a folder"
    try:
        (path / "weights").mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return exc.strerror or str(exc)
    if not os.access(path / "weights", os.W_OK | os.X_OK):
        return f"{path / 'weights'} is not writable"
    return None


def run(args) -> int:
    if args.cache is not None:
        why = _cache_problem(args.cache) if args.cache.strip() else "an empty folder name"
        if why:
            print(f"pimc execute: error: --cache {args.cache}: {why}\n  hint: give a folder of yours "
                  "for the generated weight files", file=sys.stderr)
            return 1
    from .. import loops
    system, diags = load_system(args)
    if system is None:
        return 1
    try:
        loop = loops.for_system(system)
        if loop is None or not hasattr(loop, "execute"):
            name = system.mapping.loop if system.mapping else "step"
            raise CompileError(f"system '{system.name}' runs the '{name}' loop, which cannot be executed for real",
                               system.mapping.span if system.mapping else system.span,
                               "loops that execute: " + ", ".join(n for n in loops.names()
                                                                  if hasattr(loops.get(n), "execute")))
        args.strategies = args.strategies or list(system.mapping.strategies) or [system.mapping.strategy]
        args.agents = args.agents or [None]
        result = loop.execute(system, args)
    except CompileError as exc:
        return report_compile_error(exc, diags, args.file)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{result['system']}: {result['model']} on {result['cores']} core(s), "
          f"{'cold' if result['cold'] else 'warm'} page cache; profile {result['profile']}")
    head = f"{'strategy':<11}{'m':>3}  {'latency measured':>16} {'predicted':>10} {'error':>7}  " \
           f"{'peak MB measured':>16} {'predicted':>10} {'error':>7}  output"
    print(head)
    for r in result["runs"]:
        mem_error = f"{r['memory_error']:>+7.1%}" if r["memory_error"] is not None else f"{'-':>7}"
        print(f"{r['strategy']:<11}{r['loading_agents']:>3}  {r['measured_latency_s']:>15.3f}s "
              f"{r['predicted_latency_s']:>9.3f}s {r['latency_error']:>+7.1%}  "
              f"{r['measured_peak_rss_growth_bytes'] / 1e6:>16.1f} {r['predicted_memory_bytes'] / 1e6:>10.1f} "
              f"{mem_error}  {'= plain forward' if r['output_equals_plain_forward'] else 'DIFFERS'}")
    return 0 if all(r["output_equals_plain_forward"] for r in result["runs"]) else 1
