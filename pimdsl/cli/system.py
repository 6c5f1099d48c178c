"""Shared by the `pimc` commands: their common options, loading a spec and picking its system within
the work limit (`--max-work`), and reporting compile errors."""
from __future__ import annotations

import argparse
import math
import os
import sys

from ..frontend.diagnostics import Diagnostics, did_you_mean
from ..budget import DEFAULT_MAX_WORK, Estimate, memory_limit, run_estimate
from ..passes.manager import PASS_NAMES, PassManager
from ..emit.atomic import refusal
from ..ir.errors import CompileError
from ..ir.files import is_input
from .loading import NothingToDo, add_allow_outside, load_reported


def add_common(p) -> None:
    p.add_argument("file", metavar="FILE", help="spec file with a system block")
    p.add_argument("--system", metavar="NAME", help="system to use when the file declares several")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="PATH=VALUE",
                   help="override a spec value by its dotted path, with units (repeatable)")
    p.add_argument("--print-after", action="append", default=[], metavar="PASS",
                   choices=[*PASS_NAMES, "all"], help="print the IR after this pass (repeatable, or all)")
    p.add_argument("--time-passes", action="store_true", help="print each pass's time on stderr")
    p.add_argument("--verify", action="store_true", help="check the IR after every pass")
    add_max_work(p)
    add_allow_outside(p)


def add_max_work(p) -> None:
    p.add_argument("--max-work", type=positive_number, default=DEFAULT_MAX_WORK, metavar="N",
                   help=f"refuse runs estimated past N units of work (default {DEFAULT_MAX_WORK:.0e})")


def positive_number(text: str) -> float:
    """An argparse type: a number above zero (`1e9` allowed); anything else is a usage error."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value > 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"'{text}' is not a positive number")
    return value


def output_file(text: str) -> str:
    """An argparse type: a file pimc may write (its folder exists; not a folder, device, FIFO or
    socket), checked before any work so that a typo costs no run (the write checks again, inputs too)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty file name")
    folder = os.path.dirname(os.path.abspath(text))
    if not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(f"{text}: folder {folder} does not exist")
    if os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text} is a folder; give a file name")
    why = refusal(text)
    if why:
        raise argparse.ArgumentTypeError(f"{text}: {why}")
    return text


OUTPUT_OPTIONS = ("timeline", "output", "plot", "profile_out", "command_trace")


def refuse_inputs_as_outputs(args, *names: str) -> bool:
    """False after saying so when an output option names one of the run's inputs (the spec, its
    imports, a trace: every file read so far); checked right after loading, before the work."""
    for name in names:
        path = getattr(args, name, None)
        if path and is_input(path):
            print(f"pimc {args.command}: error: cannot write {path}: it is an input of this run (the spec, "
                  "an imported file, a trace or a data file); give another name", file=sys.stderr)
            return False
    return True


def within_budget(estimate: Estimate, max_work: float, path: str) -> bool:
    """False after saying why, when the estimated work is past `--max-work`."""
    refusal = estimate.refusal(max_work)
    if refusal:
        raise_it = (f"or raise the limit with --max-work {max(estimate.work * 2, max_work):.2g}"
                    if estimate.work > max_work else "(no limit lets a run use more memory than the process has)")
        print(f"{path}: error: {refusal}\n  hint: lower {estimate.largest or 'the workload'} {raise_it}", file=sys.stderr)
    return refusal is None


def _estimate(system, steps):
    """The loop's own estimate when its module gives one (its work is not op graphs), else run_estimate."""
    from .. import loops
    from ..driver import loop_module
    try:
        loop = loops.for_system(system)
    except CompileError:
        loop = None
    if steps is None and hasattr(loop, "estimate"):
        return loop.estimate(system)
    return run_estimate(system, steps, getattr(loop_module(system), "WORK_PER_REQUEST", False))


def load_system(args, steps: int | None = None):
    """(system, diagnostics), or (None, _) after printing why there is none; `steps` is how many
    op graphs the command builds (default: the whole workload's), for the work estimate."""
    try:
        spec, diags = load_reported(args.file, args.overrides, getattr(args, "allow_outside", False))
    except NothingToDo:                           # a command that promises an output: an empty spec is an error
        print(f"{args.file}:1:1: error: the file declares nothing to run\n  hint: a spec to run declares a "
              "system block (`system NAME { memories = [...]; model = ...; }`), or imports one", file=sys.stderr)
        return None, Diagnostics()
    if spec is None or not refuse_inputs_as_outputs(args, *OUTPUT_OPTIONS):
        return None, diags
    systems = spec.systems
    if args.system:
        if args.system not in systems:
            print(f"{args.file}: error: no system named '{args.system}'\n  hint: "
                  + (did_you_mean(args.system, sorted(systems), "systems") or "this file declares no system"),
                  file=sys.stderr)
            return None, diags
        return systems[args.system], diags
    if len(systems) != 1:
        what = "declares no system block" if not systems else f"declares {len(systems)} systems ({', '.join(sorted(systems))})"
        print(f"{args.file}: error: the file {what}\n  hint: "
              + ("add `system NAME { memories = [...]; model = ...; }`" if not systems else "choose one with --system NAME"),
              file=sys.stderr)
        return None, diags
    system = next(iter(systems.values()))
    if system.model is None:
        print(f"{args.file}: error: system '{system.name}' has no model\n  hint: add `model = NAME;` to it",
              file=sys.stderr)
        return None, diags
    _warn_unread(system, diags)
    from .. import params
    wrong = params.problems(system)
    if wrong:
        said = Diagnostics(sources=diags.sources)
        for message, span, hint in wrong:
            said.error(message, span, hint)
        print(said.render_all(), file=sys.stderr)
        return None, diags
    if not within_budget(_estimate(system, steps), getattr(args, "max_work", DEFAULT_MAX_WORK), args.file):
        return None, diags
    return system, diags


def _warn_unread(system, diags: Diagnostics) -> None:
    """Say what in the spec no run loop reads (pimdsl/unread.py), as `pimc check` does."""
    from .. import unread
    said = Diagnostics(sources=diags.sources)
    try:
        unread.check(system, said)
    except CompileError:
        return                                    # an unknown loop: the run reports it
    if said.items:
        print(said.render_all(), file=sys.stderr)


def pass_manager(args) -> PassManager:
    return PassManager(print_after=set(args.print_after), verify=args.verify,
                       printer=lambda text: print(text, file=sys.stderr))


def report_compile_error(exc: CompileError, diags: Diagnostics, path: str) -> int:
    diags.items.clear()
    for one in exc.all():
        if one.span is not None:
            diags.error(one.message, one.span, one.hint)
        else:
            print(f"{path}: error: {one.message}" + (f"\n  hint: {one.hint}" if one.hint else ""), file=sys.stderr)
    if diags.items:
        print(diags.render_all(), file=sys.stderr)
    return 1


def print_pass_times(times: dict) -> None:
    total = sum(times.values())
    for name, seconds in times.items():
        print(f"pass {name:<12} {seconds * 1e3:9.2f} ms", file=sys.stderr)
    print(f"pass {'total':<12} {total * 1e3:9.2f} ms", file=sys.stderr)


def no_such_block(path: str, what: str, name: str, names, plural: str, none: str) -> int:
    """`path: error: no WHAT named 'NAME'` with a did-you-mean hint (or `none`); exit code 1."""
    print(f"{path}: error: no {what} named '{name}'\n  hint: "
          + (did_you_mean(name, sorted(names), plural) or none), file=sys.stderr)
    return 1


def print_fields(out: dict, digits: int | None = None) -> None:
    """A flat report as aligned `key  value` lines (a dict value as `k v, k v`; floats to `digits`)."""
    width = max(len(k) for k in out)
    for key, value in out.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k} {v}" for k, v in value.items())
        elif isinstance(value, float) and digits:
            value = f"{value:.{digits}g}"
        print(f"{key:<{width}}  {value}")
