"""`pimc`: the command-line driver (contract in ARCHITECTURE.md).

Exit codes: 0 success, 1 diagnostics (bad input), 2 usage errors. Bad input
never shows a Python traceback; an internal error says so and exits 3.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading

from ..frontend.pipeline import load_spec
from ..interpreter.run import step_program
from ..passes import layout, placement, tiling
from ..passes.program import CompileError
from ..emit.templates import render
from . import compile as compile_cmd, dram, execute, run as run_cmd, sweep
from .loading import NothingToDo, declares_nothing, load_reported
from .show import spec_to_json


def _add_set(p: argparse.ArgumentParser) -> None:
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="PATH=VALUE",
                   help="override a spec value by its dotted path, with units (repeatable)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pimc", description="pimdsl: describe, compile and time PIM systems")
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="parse and check spec files")
    check.add_argument("files", nargs="+", metavar="FILE")
    check.add_argument("--no-warnings", action="store_true", help="print errors only")
    show = sub.add_parser("show", help="print the elaborated IR of a spec")
    show.add_argument("file", metavar="FILE")
    show.add_argument("--json", action="store_true", help="print the IR as JSON")
    _add_set(show)
    dram.add_parser(sub)
    run_cmd.add_parser(sub)
    compile_cmd.add_parser(sub)
    sweep.add_parser(sub)
    execute.add_parser(sub)
    return parser


def cmd_check(args) -> int:
    status = 0
    for path in args.files:
        spec, diags = load_spec(path)
        if spec is not None:
            check_pim_programs(spec, diags)
        shown = [d for d in diags.items if d.severity == "error" or not args.no_warnings]
        if shown:
            print("\n".join(diags.render(d) for d in sorted(shown, key=lambda d: (d.span.path, d.span.line, d.span.col))),
                  file=sys.stderr)
        if diags.errors:
            status = 1
            print(f"{path}: {len(diags.errors)} error(s), {len(diags.warnings)} warning(s)", file=sys.stderr)
        elif declares_nothing(spec):
            print(f"{path}: ok (nothing to check: the file declares nothing)")
        else:
            print(f"{path}: ok" + (f" ({len(diags.warnings)} warning(s))" if diags.warnings else ""))
    return status


def check_pim_programs(spec, diags) -> None:
    """What the systems' ops need of declared PIM programs (a program for each op class placed on
    the unit, layouts covering the weights, tiles inside the declared state), for the first
    prefill and decode steps of each system's workload: all problems, as diagnostics."""
    for system in spec.systems.values():
        memory = next((m for m in system.memories if m.pim is not None), None)
        if memory is None or not memory.pim.programs or system.model is None or system.workload is None:
            continue
        work, seen = system.workload, set()
        steps = (("prefill", work.input_len, 0), ("decode", 1, work.input_len))
        # a graph model runs one step, placed by the prefill block
        for phase, tokens, context in steps[:1] if system.model.architecture == "graph" else steps:
            program = step_program(system, phase, work.batch, tokens, context)
            try:
                for run in (placement.run, layout.run, tiling.run):
                    program = run(program)
            except CompileError as exc:
                for one in exc.all():
                    if one.message not in seen:
                        seen.add(one.message)
                        diags.error(f"{phase} step: {one.message}", one.span or system.span, one.hint)


def cmd_show(args) -> int:
    spec, _ = load_reported(args.file, args.overrides)
    if spec is None:
        return 1
    if args.json:
        print(json.dumps(spec_to_json(spec), indent=2))
    else:
        print(render("show.txt.j2", spec=spec).rstrip("\n"))
    return 0


COMMANDS = {"check": cmd_check, "show": cmd_show, "dram": dram.run, "run": run_cmd.run,
            "compile": compile_cmd.run, "sweep": sweep.run, "execute": execute.run}


def _terminated(signum, frame):
    raise KeyboardInterrupt        # unwind as Ctrl-C does, so that temporary outputs are removed


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    previous = signal.signal(signal.SIGTERM, _terminated) if threading.current_thread() is threading.main_thread() else None
    try:
        return COMMANDS[args.command](args)
    except NothingToDo as exc:
        print(exc, file=sys.stderr)
        return 0
    except KeyboardInterrupt:
        print("pimc: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:                       # `pimc run ... | head`: the reader left; stay quiet
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except Exception as exc:                      # a bug in pimc, not in the spec
        if os.environ.get("PIMDSL_DEBUG"):
            raise
        print(f"pimc: internal error: {type(exc).__name__}: {exc}\n"
              "  this is a bug in pimc; set PIMDSL_DEBUG=1 for the traceback and report it", file=sys.stderr)
        return 3
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
