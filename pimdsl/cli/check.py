"""`pimc check FILE... [--strict] [--no-warnings]`: parse, check, and run the pipeline far enough to
find what the spec gets wrong, every problem of a file in one run.

Beyond the front end's checks: what no run loop reads (`pimdsl/unread.py`), and, for systems the
step loop runs, every pass over the first prefill and decode steps (an op placed on a unit with no
program for it, a layout that does not cover a weight, weights that do not fit their memory, data
crossing memories with no link). `--strict` makes every
warning an error (CI runs it over the bundled specs).
"""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from .. import params, unread
from ..driver import loop_module
from ..frontend.loader import display_path
from ..frontend.pipeline import load_spec
from ..loops.step_run import step_program
from ..loops import step
from ..passes.manager import PassManager
from ..ir.errors import PimdslError
from .loading import add_allow_outside, declares_nothing


def add_parser(sub) -> None:
    p = sub.add_parser("check", help="parse and check spec files")
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument("--no-warnings", action="store_true", help="print errors only")
    p.add_argument("--strict", action="store_true", help="treat every warning as an error")
    add_allow_outside(p)


def run(args) -> int:
    status = 0
    for path in args.files:
        spec, diags = load_spec(path, allow_outside=args.allow_outside)
        if spec is not None:
            for system in spec.systems.values():
                try:
                    unread.check(system, diags)
                    params.check(system, diags)
                    check_steps(system, diags)
                except PimdslError as exc:           # e.g. an unknown `loop = NAME`
                    _report(exc, system, diags)
        if args.strict:
            diags.items[:] = [dataclasses.replace(d, severity="error") for d in diags.items]
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
        for what, data in (spec.reads if spec is not None else ()):
            print(f"  reads {what} {display_path(Path(data))}")
    return status


def check_steps(system, diags) -> None:
    """Every pass over the first prefill and decode steps of a system the step loop runs (see the
    module docstring): all problems, as diagnostics."""
    if system.model is None or system.workload is None or loop_module(system) is not step:
        return
    work, seen = system.workload, set()
    phases = [("prefill", work.input_len, 0)]
    if system.model.architecture == "decoder":
        phases.append(("decode", 1, work.input_len))
    for phase, tokens, context in phases:
        try:
            PassManager().run(step_program(system, phase, work.batch, tokens, context))
        except PimdslError as exc:
            _report(exc, system, diags, f"{phase} step: ", seen)


def _report(exc: PimdslError, system, diags, prefix: str = "", seen: set | None = None) -> None:
    seen = set() if seen is None else seen
    for one in exc.all():
        if one.message not in seen:
            seen.add(one.message)
            diags.error(prefix + one.message, one.span or system.span, one.hint)
