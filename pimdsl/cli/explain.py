"""`pimc explain FILE [--set ...] [--json]`: where one run's headline numbers come from.

For a system the step loop runs: each step's time, the resource that bounds it, and per resource
and op kind what bounds the ops and which spec values (file:line) their time is computed from
(`loops/step/step_explain.py`). Other loops are not taken apart yet: the command says so.
"""
from __future__ import annotations

import json
import sys

from .system import add_common, load_system


def add_parser(sub) -> None:
    p = sub.add_parser("explain", help="say where a run's TTFT and TPOT come from")
    add_common(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")


def run(args) -> int:
    from ..driver import loop_module                # here: `pimc --help` needs none of it
    from ..frontend.pipeline import spec_nodes
    from ..loops import step
    from ..loops.step.step_explain import explain, render
    system, _ = load_system(args, steps=2)
    if system is None:
        return 1
    if loop_module(system) is not step:
        print(f"pimc explain: system '{system.name}' runs on the {system.mapping.loop} loop; explain takes apart "
              "the step loop only (README, 'What the headline keys mean in each loop', says what it prints)",
              file=sys.stderr)
        return 1
    report = explain(system, spec_nodes(args.file, args.overrides))
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0
