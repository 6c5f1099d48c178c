"""How much a run will cost, estimated before anything is built, so that `--set
workload.output_len=10^9` is refused in a second with the estimate instead of running for days.

Work is counted in units of about one graph op built and timed (a step's op graph has
`layers x OPS_PER_LAYER` ops and one context entry per request) or, for a DRAM trace, one request
or one stretch of IDLE_CYCLES_PER_UNIT idle cycles (the engine refreshes through idle time).
The memory estimate is pimc's own, not the simulated system's. Both are rough upper bounds that
only need to be right in order of magnitude; `--max-work` raises the limit.
"""
from __future__ import annotations

import math
import os
import resource
from dataclasses import dataclass

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .ir.workload import System

DEFAULT_MAX_WORK = 10**8       # the largest bundled run (L3 GPT-3 175B, 12684 decode steps) is ~3e7
OPS_PER_LAYER = 16             # norms, projections, attention, FFN, residuals of one decoder layer
BYTES_PER_OP = 4096            # an op node with its shape, lowering and timing
BYTES_PER_REQUEST = 256        # a request's context entry and serving state
BYTES_PER_TRACE_REQUEST = 200  # a decoded request in the trace's lists
IDLE_CYCLES_PER_UNIT = 16      # measured: 1e8 idle DDR4 cycles replay in about 1.5 s


@dataclass(frozen=True)
class Estimate:
    work: float
    memory_bytes: float
    what: str                  # how the work was counted, for the message
    subject: str = "this run"
    largest: str = ""          # the value that weighs most, to name in the hint

    def refusal(self, max_work: float) -> str | None:
        """Why the run is refused (with the estimate), or None when it fits its work limit and the
        memory this process may take."""
        if self.work <= max_work and self.memory_bytes <= memory_limit():
            return None
        past = (f"the limit of {_sci(max_work)}" if self.work > max_work
                else f"the {_bytes(memory_limit())} of memory this process may use")
        return (f"{self.subject} would take about {_sci(self.work)} units of work ({self.what}) and about "
                f"{_bytes(self.memory_bytes)} of memory, past {past}")


def memory_limit() -> float:
    """What this process may allocate: the machine's memory, or less under `ulimit -v`."""
    limit = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    return min(limit, soft) if soft != resource.RLIM_INFINITY else limit


def run_estimate(system: System, steps: int | None = None, per_request: bool = False) -> Estimate:
    """A system's run: `steps` op graphs (default: the prefill and every decode step, or the
    serving loop's iterations). `per_request`: each op is built and timed once per request of the
    batch (a PIM unit runs one request's GEMV at a time), so a step costs ops x batch."""
    model, work = system.model, system.workload
    batch = work.batch if work else 1
    if model.architecture == "graph":
        ops = len(model.ops) + 1
    else:
        ops = model.layers * OPS_PER_LAYER + 4
    if steps is None:
        output_len = (work.mean_output_len or work.output_len) if work else 1
        steps = 1 + (output_len if model.architecture == "decoder" else 0)
        if work is not None and work.requests > batch:        # the serving loop: batches of requests
            steps *= math.ceil(work.requests / batch)
    per_step = ops * batch if per_request else ops + batch
    largest = max((steps, "workload.output_len"), (ops, "model.layers"), (batch, "workload.batch"))[1]
    return Estimate(steps * per_step, ops * BYTES_PER_OP + max(batch, work.requests if work else 1) * BYTES_PER_REQUEST,
                    f"{_sci(steps)} step(s) of {_sci(ops)} ops and {_sci(batch)} request(s)", largest=largest)


CYCLE_CAP = 10**300            # arrival cycles count as at most this (past it, a float overflows)


def trace_work(requests: int, last_arrival: int) -> float:
    return requests + min(last_arrival, CYCLE_CAP) / IDLE_CYCLES_PER_UNIT


def trace_estimate(requests: int, last_arrival: int) -> Estimate:
    return Estimate(trace_work(requests, last_arrival), requests * BYTES_PER_TRACE_REQUEST,
                    f"{_sci(requests)} request(s) arriving over {_sci(min(last_arrival, CYCLE_CAP))} cycles",
                    "replaying the trace up to here")


def _sci(x: float) -> str:
    return f"{x:.3g}" if x < 1e6 else f"{x:.2e}"


def _bytes(n: float) -> str:
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} B"
