"""One driver: run a loaded system the way its spec says, for `pimc run` and `pimc sweep` alike.

The loop is chosen from the spec, never by the command: a mapping's `loop = NAME` selects a
registered run loop (`pimdsl/loops/`); without one the step loop compiles and times the prefill
and decode steps (`loops/step/step_run.py`). Every result has `.report` and `.intervals`.
"""
from __future__ import annotations

from . import loops


def kind_of_run(system) -> str:
    """`loop:NAME` or `steps`: which loop runs this system."""
    if loops.for_system(system) is not None:
        return f"loop:{system.mapping.loop}"
    return "steps"


def loop_module(system):
    """The module of the loop that runs `system`: it declares what it reads of the spec
    (STRATEGIES, PARAMS, OP_CLASSES, LINKS; see unread.py). The mapping selects the loop,
    whatever its strategy, so every strategy of a sweep runs on the same loop."""
    from .loops import step
    return loops.for_system(system) or step


def run_system(system, **options):
    """The step loop (`loops/step/step_run.py`), imported on first use: a system on a registered loop does
    not load the step compiler (networkx, the passes; a few tenths of a second)."""
    from .loops.step.step_run import run_system as run
    return run(system, **options)


def run_loaded(system, fast: bool = True, manager=None, progress=None, timeline: bool = False):
    """Run `system` through the loop its spec selects (see the module docstring); `progress` goes
    to a loop that reports it (`PROGRESS` names what it counts)."""
    loop = loops.for_system(system)
    if loop is None:
        return run_system(system, fast=fast, manager=manager, progress=progress, timeline=timeline)
    if getattr(loop, "PROGRESS", None):
        return loop.run(system, timeline=timeline, progress=progress)
    return loop.run(system, timeline=timeline)
