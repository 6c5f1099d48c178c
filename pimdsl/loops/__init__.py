"""Run loops, found by the name a spec's mapping gives (`loop = NAME;`).

A loop module provides `run(system, timeline=False) -> result with .report, .intervals,
.pass_times_s`, declares what it reads of a spec (`STRATEGIES`, `PARAMS`, `OP_CLASSES`, `LINKS`;
`pimdsl/unread.py` warns about the rest), and may provide `execute(system, options) -> int` to
perform the run for real on this machine (`pimc execute`). `step` (the default) is the
step-compilation loop of `loops/step_run.py`, declared in `loops/step.py`; the driver calls it
directly.
"""
from __future__ import annotations

import importlib

LOOPS = {"pipelined_loading": "pimdsl.loops.pipelined_loading",
         "sub_batch_serving": "pimdsl.loops.sub_batch_serving",
         "hot_cold_offload": "pimdsl.loops.hot_cold_offload",
         "iteration_serving": "pimdsl.loops.iteration_serving"}


def names() -> tuple[str, ...]:
    return ("step", *LOOPS)


def for_system(system):
    """The loop a system's mapping selects (None: the step loop); a located error for an unknown name."""
    from ..ir.errors import CompileError
    from ..frontend.diagnostics import did_you_mean
    mapping = system.mapping
    name = mapping.loop if mapping is not None else "step"
    try:
        return get(name)
    except KeyError:
        raise CompileError(f"'{name}' is not a run loop", mapping.span,
                           did_you_mean(name, names(), "run loops") or "run loops: " + ", ".join(names())) from None


def get(name: str):
    """The loop module registered as `name`, or None for the built-in step loop."""
    if name == "step":
        return None
    if name not in LOOPS:
        raise KeyError(name)
    return importlib.import_module(LOOPS[name])
