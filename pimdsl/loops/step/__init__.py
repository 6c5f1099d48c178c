"""The step loop, the default run loop: compile each step of the workload (prefill, then one decode
step per generated token) through the passes and time it (`loops/step/step_run.py`).

What it reads of a mapping is declared here, in one place, from the passes that read it
(`pimdsl/unread.py` warns about the rest): the weight strategies of `passes/strategy.py`, the
op classes `passes/placement.py` places, tensor and pipeline parallelism (`graph/parallel.py`) and
the copy and uncached-read rates of the weight strategies, the mapping's `data` block (which memory
holds what) and the links that data crosses between memories. A PIM memory with a count spreads
each PIM op over its instances (passes/lowering.py).
"""
from __future__ import annotations

from ...graph.parallel import PARAMS as PARALLEL_PARAMS
from ...passes.placement import OP_CLASSES as PLACED
from ...passes.strategy import PARAMS as STRATEGY_PARAMS, STRATEGIES as WEIGHT_STRATEGIES

# `default`: a mapping without a `strategies` list (host ops read a host-friendly copy, PIM ops a PIM-aware one)
STRATEGIES = ("default", *WEIGHT_STRATEGIES)
PARAMS = {**PARALLEL_PARAMS, **STRATEGY_PARAMS}
OP_CLASSES = PLACED
WORK_PER_REQUEST = True          # budget.run_estimate: each op's PIM stream is built per request of the batch


def links_read(system) -> int:
    """Every link of a system of several memories: data moving between them is an op on the link
    that joins them (passes/transfers.py); one memory moves nothing."""
    return len(system.links) if len(system.memories) > 1 else 0


def run(system, timeline: bool = False, **options):
    from .step_run import run_system
    return run_system(system, timeline=timeline, **options)
