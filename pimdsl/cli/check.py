"""`pimc check FILE|DIR... [--strict] [--no-warnings]`: parse, check, and run the pipeline far enough
to find what the spec gets wrong, every problem of a file in one run. A folder stands for every
`.pim` file under it (recursively, in sorted order).

Beyond the front end's checks: what no run loop reads (`pimdsl/unread.py`), and, for systems the
step loop runs, every pass over the first prefill and decode steps (an op placed on a unit with no
program for it, a layout that does not cover a weight, weights that do not fit their memory, data
crossing memories with no link). `--strict` makes every
warning an error (CI runs it over the bundled specs). `--values [--shape n=N,k=K]` runs every declared
PIM program on random inputs against numpy, by the `result` it declares (check_values.py).
"""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from ..ir.errors import PimdslError
from .loading import add_allow_outside, declares_nothing


def add_parser(sub) -> None:
    p = sub.add_parser("check", help="parse and check spec files")
    p.add_argument("files", nargs="+", metavar="FILE|DIR", help="spec files, or folders of them (recursive)")
    p.add_argument("--no-warnings", action="store_true", help="print errors only")
    p.add_argument("--strict", action="store_true", help="treat every warning as an error")
    p.add_argument("--values", action="store_true",
                   help="run every declared PIM program on random inputs and compare with numpy")
    p.add_argument("--shape", action="append", default=[], metavar="n=N,k=K|kv=N,heads=H,head_dim=D",
                   help="with --values: a shape to run besides the small default ones (repeatable)")
    add_allow_outside(p)


def run(args) -> int:
    from .. import params, unread
    from ..frontend.loader import display_path
    from ..frontend.pipeline import load_spec
    status = 0
    shapes = ()
    if args.values or args.shape:
        # the values executor and ml_dtypes (half a second to import): only for a values check
        from .check_values import check_values, parse_shape
        try:
            shapes = tuple(parse_shape(s) for s in args.shape)
        except ValueError as exc:
            print(f"pimc check: error: {exc}", file=sys.stderr)
            return 2
    files = spec_files(args.files)
    if not files:
        return 1
    for path in files:
        spec, diags = load_spec(path, allow_outside=args.allow_outside)
        values = []
        if spec is not None and args.values and not diags.errors:
            values = check_values(spec, diags, shapes)
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
        for line in values:
            print(f"  {line}")
        for what, data in (spec.reads if spec is not None else ()):
            print(f"  reads {what} {display_path(Path(data))}")
    return status


def spec_files(paths) -> list[str]:
    """The files to check: each file as given, each folder as the `.pim` files under it, sorted."""
    files = []
    for path in paths:
        if Path(path).is_dir():
            found = sorted(str(f) for f in Path(path).rglob("*.pim") if f.is_file())
            files.extend(found)
            if not found:
                print(f"{path}: no .pim files under this folder", file=sys.stderr)
        else:
            files.append(path)
    return files


def check_steps(system, diags) -> None:
    """Every pass over the first prefill and decode steps of a system the step loop runs (see the
    module docstring): all problems, as diagnostics."""
    from ..driver import loop_module
    from ..loops import step
    from ..loops.step.step_run import step_program
    from ..passes.manager import PassManager
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
