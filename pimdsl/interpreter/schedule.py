"""The event-driven schedule of one step: ops on resources, respecting the graph's dependencies.

Each op occupies its resource (a processor, a PIM memory, a link) for its
time; an op spread over the instances of a PIM memory (`memory d[4]`)
occupies every instance's resource `pim:d[i]` at once. An op starts when its inputs are done and its resource is free; ops
of one resource run one at a time, in program order (the graph's
topological order). Ops of different resources overlap, so the overlap
between host and PIM work comes out of the schedule, never out of a
formula. The step ends with its last op.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from ..ir.intervals import Interval
from ..passes.program import Program


@dataclass(frozen=True)
class StepSchedule:
    seconds: float
    intervals: tuple[Interval, ...]
    busy_s: dict                  # resource -> busy seconds

    def shifted(self, start_s: float, phase: str) -> list[Interval]:
        return [Interval(i.resource, i.name, i.start_s + start_s, i.end_s + start_s, phase, i.args)
                for i in self.intervals]


def schedule(program: Program, seconds_of) -> StepSchedule:
    """`seconds_of(attrs)` gives an op's time (see `step_seconds`); returns the step's intervals."""
    g = program.graph
    end: dict[str, float] = {}
    free: dict[str, float] = defaultdict(float)
    busy: dict[str, float] = defaultdict(float)
    intervals = []
    ops = list(program.ops())
    for (name, attrs), duration in zip(ops, step_seconds(seconds_of, [attrs for _, attrs in ops])):
        resources = resources_of(attrs)
        start = max([*(free[r] for r in resources), *(end[p] for p in g.predecessors(name))])
        end[name] = start + duration
        for resource in resources:
            free[resource] = end[name]
            busy[resource] += duration
            intervals.append(Interval(resource, name, start, end[name], program.phase, _args(attrs)))
    return StepSchedule(max(end.values(), default=0.0), tuple(intervals), dict(busy))


def step_seconds(seconds_of, attrs_list: list[dict], seconds: list[float] | None = None) -> list[float]:
    """The ops' seconds in program order (`seconds`: already op by op), through `seconds_of.carry`
    where it carries state from op to op of a step (op_timing.OpTimer: the refresh phase)."""
    seconds = [seconds_of(a) for a in attrs_list] if seconds is None else seconds
    carry = getattr(seconds_of, "carry", None)
    return carry(attrs_list, seconds) if carry is not None else seconds


def resources_of(attrs: dict) -> tuple[str, ...]:
    """The resources an op occupies together: its own, or each instance of a PIM memory with a count."""
    return attrs.get("resources") or (attrs["resource"],)


def _args(attrs: dict) -> dict:
    """What a trace shows of an op: its kind, decoder layer and (host kernels) threads."""
    op, lowered = attrs["op"], attrs.get("lowered")
    args = {"op": op.kind}
    if op.layer is not None:
        args["layer"] = op.layer
    if getattr(lowered, "threads", None):
        args["threads"] = lowered.threads
    return args
