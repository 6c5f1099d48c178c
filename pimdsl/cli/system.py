"""Shared by `pimc run` and `pimc compile`: load a spec, pick its system, report compile errors."""
from __future__ import annotations

import sys

from ..frontend.diagnostics import Diagnostics, did_you_mean
from ..frontend.pipeline import load_spec
from ..passes.manager import PASS_NAMES, PassManager
from ..passes.program import CompileError


def add_common(p) -> None:
    p.add_argument("file", metavar="FILE", help="spec file with a system block")
    p.add_argument("--system", metavar="NAME", help="system to use when the file declares several")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="PATH=VALUE",
                   help="override a spec value by its dotted path, with units (repeatable)")
    p.add_argument("--print-after", action="append", default=[], metavar="PASS",
                   choices=[*PASS_NAMES, "all"], help="print the IR after this pass (repeatable, or all)")
    p.add_argument("--time-passes", action="store_true", help="print each pass's time on stderr")
    p.add_argument("--verify", action="store_true", help="check the IR after every pass")


def load_system(args):
    """(system, diagnostics), or (None, _) after printing why there is none."""
    spec, diags = load_spec(args.file, list(args.overrides))
    if diags.items:
        print(diags.render_all(), file=sys.stderr)
    if spec is None:
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
    return system, diags


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
