"""One driver: run a loaded system the way its spec says, for `pimc run` and `pimc sweep` alike.

The loop is chosen from the spec, never by the command: a mapping's `loop = NAME` selects a
registered run loop (`pimdsl/loops/`); a serving strategy runs the iteration-level serving loop
(`pimdsl/serving/`); anything else compiles and times the prefill and decode steps
(`loops/step_run.py`). Every result has `.report`, `.intervals` and `.pass_times_s`.
"""
from __future__ import annotations

import dataclasses

from . import loops
from .loops.step_run import run_system
from .loops import step
from .serving import neupims_serving
from .serving.neupims_serving import is_serving_strategy, simulate


def kind_of_run(system) -> str:
    """`loop:NAME`, `serving` or `steps`: which loop runs this system."""
    if loops.for_system(system) is not None:
        return f"loop:{system.mapping.loop}"
    return "serving" if is_serving_strategy(system) else "steps"


def loop_module(system, strategy: str | None = None):
    """The module of the loop that runs `system` (under `strategy`, default the mapping's): it
    declares what it reads of the spec (STRATEGIES, PARAMS, OP_CLASSES, LINKS; see unread.py)."""
    loop = loops.for_system(system)
    if loop is not None:
        return loop
    if strategy is not None and system.mapping is not None:
        system = dataclasses.replace(system, mapping=dataclasses.replace(system.mapping, strategy=strategy))
    return neupims_serving if is_serving_strategy(system) else step


def run_loaded(system, fast: bool = True, manager=None, progress=None, timeline: bool = False):
    """Run `system` through the loop its spec selects (see the module docstring)."""
    loop = loops.for_system(system)
    if loop is not None:
        return loop.run(system, timeline=timeline)
    if is_serving_strategy(system):
        return simulate(system, progress=progress, timeline=timeline)
    return run_system(system, fast=fast, manager=manager, progress=progress, timeline=timeline)
