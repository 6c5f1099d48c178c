"""One driver: run a loaded system the way its spec says, for `pimc run` and `pimc sweep` alike.

The loop is chosen from the spec, never by the command: a mapping's `loop = NAME` selects a
registered run loop (`pimdsl/loops/`); without one the step loop compiles and times the prefill
and decode steps (`loops/step/step_run.py`). Every result has `.report` and `.intervals`; the driver adds
the run's energy to every report.
"""
from __future__ import annotations

from . import loops
from .interpreter.run_energy import run_energy
from .ir.errors import PimdslError


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
    try:
        if loop is None:
            result = run_system(system, fast=fast, manager=manager, progress=progress, timeline=timeline)
        elif getattr(loop, "PROGRESS", None):
            result = loop.run(system, timeline=timeline, progress=progress)
        else:
            result = loop.run(system, timeline=timeline)
    except PimdslError as exc:
        exc.others += tuple(_at_sets(exc, system))
        raise
    # every loop's energy, from its busy times and the declared power (interpreter/run_energy.py)
    result.report.update(run_energy(system, result.report))
    return result


def _at_sets(exc: PimdslError, system):
    """A memory or region that proved too small while running, also reported at each `--set` that
    changed its room (a memory's channels or ranks, its part's organization, a region's size)."""
    errors = {one.span: one for one in exc.all() if one.span is not None}
    for memory in system.memories:
        for holder, label in ((memory, f"memory '{memory.name}'"),
                              *((r, f"region '{r.name}' of memory '{memory.name}'") for r in memory.regions)):
            one = errors.get(holder.span)
            for where in (holder.set_by if one is not None else ()):
                yield PimdslError(f"this --set changed the room of {label}: {one.message} ({one.span})", where,
                                  "undo or soften this --set, or --set the sizes it leaves too small")
