"""Decode steps that differ only in their KV length, compiled once.

Decode step s of a run is step 0's op graph with a KV cache s tokens longer.
The graph builder makes every shape, FLOP and byte count of an op affine in
the context, and the passes place, lay out, allocate and lower an op alike
whatever its KV length, so long as nothing but those counts changes. Rather
than trusting that, `fit` checks it on three consecutive compiled steps:
the same graph, every attribute equal but its numbers, every number with a
zero second difference, every PIM stream the same (a PIM op's key holds its
shape, so a stream that depends on the KV length refuses the fit). `verify`
then checks the line against steps compiled further on (the last one, and
one in the middle), which catches a count that is only piecewise affine
(a tile count rounding up, a block size). A fitted run schedules every other
step from the first step's structure with its numbers moved along their
lines, without building or compiling a graph, and computes exactly what
`schedule.schedule` computes on the compiled step.
"""
from __future__ import annotations

import copy
import dataclasses
import functools
import math
from collections import defaultdict

import numpy as np

from ...ir.intervals import Interval
from ...lowering.records import PimWork
from ...passes.program import Program
from ...interpreter.schedule import StepSchedule, _args, resources_of, step_seconds


def _leaves(value, out: list) -> object:
    """The value's skeleton (numbers replaced by None), appending its numbers to `out`."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        out.append(value)
        return None
    if isinstance(value, PimWork):                  # a stream compares by its key
        return ("pim", value.op, value.memory, value.family, value.key)
    if isinstance(value, dict):
        return ("dict", tuple((k, _leaves(v, out)) for k, v in value.items()))
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, tuple(_leaves(v, out) for v in value))
    if dataclasses.is_dataclass(value) and type(value).__name__ in _NUMERIC_RECORDS:
        return (type(value), tuple((f.name, _leaves(getattr(value, f.name), out))
                                   for f in dataclasses.fields(value)))
    return ("same", value)                          # anything else must be equal as it is


# records whose numbers may follow the context (graph ops, host kernels); any other record
# (an allocation, a declared program, a tiling) must stay equal from step to step
_NUMERIC_RECORDS = {"Op", "Kernel"}


def _builder(value, slope: list, position: list):
    """A function of the numbers that rebuilds `value` with its moving numbers replaced (the
    parts without one are shared, not copied), or None if none of its numbers move."""
    if isinstance(value, bool) or value is None or isinstance(value, str) or isinstance(value, PimWork):
        return None
    if isinstance(value, (int, float)):
        position[0] += 1
        i = position[0] - 1
        return (lambda numbers: numbers[i]) if slope[i] else None
    if isinstance(value, dict):
        parts = [(k, b) for k, v in value.items() if (b := _builder(v, slope, position)) is not None]
        if not parts:
            return None
        return lambda numbers: {**value, **{k: b(numbers) for k, b in parts}}
    if isinstance(value, (tuple, list)):
        parts = [_builder(v, slope, position) for v in value]
        if not any(parts):
            return None
        return lambda numbers: type(value)(v if b is None else b(numbers) for v, b in zip(value, parts))
    if dataclasses.is_dataclass(value) and type(value).__name__ in _NUMERIC_RECORDS:
        parts = [(f.name, b) for f in dataclasses.fields(value)
                 if (b := _builder(getattr(value, f.name), slope, position)) is not None]
        if not parts:
            return None

        cls, fields = type(value), getattr(value, "__dict__", None)

        def record(numbers):
            if fields is None:                   # a slotted record: the generic copy
                out = copy.copy(value)
            else:                                # a shallow copy without copy's reduce protocol
                out = object.__new__(cls)
                out.__dict__.update(fields)
            for name, b in parts:
                object.__setattr__(out, name, b(numbers))
            return out
        return record
    return None


@dataclasses.dataclass
class _Line:
    """One attribute of one op whose numbers follow the context: value = base + slope * (c - c0)."""
    op: int                       # index in program order
    attr: str
    template: object              # the attribute in the first step
    base: list
    slope: list

    def __post_init__(self):
        self._build = _builder(self.template, self.slope, [0])

    def at(self, steps: int):
        return self._build([b + s * steps if s else b for b, s in zip(self.base, self.slope)])


class AffineSteps:
    """A decode step's structure with the lines its numbers follow; see the module docstring."""

    def __init__(self, first: Program, lines: list[_Line]):
        self.first, self.context = first, first.context
        g = first.graph
        self.names = first.order()
        index = {n: i for i, n in enumerate(self.names)}
        self.attrs = [g.nodes[n] for n in self.names]
        self.preds = [[index[p] for p in g.predecessors(n)] for n in self.names]
        self.resources = [resources_of(a) for a in self.attrs]
        self.lines = lines
        self.varying = sorted({line.op for line in lines if line.attr == "lowered"})
        self._durations: list[float] | None = None

    # ---- fitting -----------------------------------------------------------------------------
    @classmethod
    def fit(cls, steps: list[Program]) -> "AffineSteps | None":
        """The lines through three compiled steps of consecutive contexts, or None if they are not
        one structure with affine numbers."""
        a, b, c = steps
        if not (b.context == a.context + 1 and c.context == b.context + 1):
            return None
        if not all(_same_graph(a, p) for p in (b, c)):
            return None
        lines = []
        for i, name in enumerate(a.order()):
            attrs = [p.graph.nodes[name] for p in steps]
            if any(set(x) != set(attrs[0]) for x in attrs):
                return None
            for key, v0 in attrs[0].items():
                n0, n1, n2 = [], [], []
                skeletons = (_leaves(v0, n0), _leaves(attrs[1][key], n1), _leaves(attrs[2][key], n2))
                if not (skeletons[0] == skeletons[1] == skeletons[2]) or not (len(n0) == len(n1) == len(n2)):
                    return None
                if n0 == n1 == n2:
                    continue
                slope = [y - x for x, y in zip(n0, n1)]
                if any(z - y != s for y, z, s in zip(n1, n2, slope)):
                    return None
                lines.append(_Line(i, key, v0, n0, slope))
        for category in a.memory_bytes:
            values = [p.memory_bytes.get(category) for p in steps]
            if values[1] - values[0] != values[2] - values[1]:
                return None
        return cls(a, lines)

    def verify(self, compiled: Program) -> bool:
        """Whether a step compiled at another context is what the lines predict for it."""
        if not _same_graph(self.first, compiled):
            return False
        steps = compiled.context - self.context
        predicted = {(line.op, line.attr): line.at(steps) for line in self.lines}
        for i, name in enumerate(self.names):
            attrs = compiled.graph.nodes[name]
            if set(attrs) != set(self.attrs[i]):
                return False
            for key, value in attrs.items():
                expected = predicted.get((i, key), self.attrs[i][key])
                got, want = [], []
                if _leaves(value, got) != _leaves(expected, want):
                    return False
                if len(got) != len(want) or not all(math.isclose(x, y, rel_tol=1e-12, abs_tol=1e-300)
                                                    for x, y in zip(got, want)):
                    return False
        return True

    # ---- scheduling ----------------------------------------------------------------------------
    def _durations_at(self, steps: int, seconds_of) -> list[float]:
        if self._durations is None:
            self._durations = [seconds_of(a) for a in self.attrs]
        durations, attrs = list(self._durations), list(self.attrs)
        for line in self.lines:
            if line.attr == "lowered":
                attrs[line.op] = {**self.attrs[line.op], "lowered": line.at(steps)}
                durations[line.op] = seconds_of(attrs[line.op])
        return step_seconds(seconds_of, attrs, durations)       # the refresh phase, op to op

    def schedule_many(self, contexts, seconds_of) -> dict[int, StepSchedule]:
        """The steps at `contexts` (without intervals), computed together: the recurrence of
        `schedule` run once with a vector of steps in place of each number. Max and add act on
        each step's element alone, in the same order, so every step's numbers are the ones
        `schedule` gives, bit for bit; only the Python loop over ops is paid once, not per step."""
        contexts = list(contexts)
        if not contexts:
            return {}
        columns = np.array([self._durations_at(c - self.context, seconds_of) for c in contexts]).T
        zero = np.zeros(len(contexts))
        end: list[np.ndarray] = []
        free: dict[str, np.ndarray] = {}
        busy: dict[str, np.ndarray] = {}
        for i, resources in enumerate(self.resources):
            start = functools.reduce(np.maximum, [free.get(r, zero) for r in resources]
                                     + [end[p] for p in self.preds[i]])
            end.append(start + columns[i])
            for resource in resources:
                free[resource] = end[i]
                busy[resource] = busy.get(resource, zero) + columns[i]
        seconds = functools.reduce(np.maximum, end, zero)
        names = list(busy)
        table = np.array([busy[r] for r in names]).T.tolist()
        return {c: StepSchedule(t, (), dict(zip(names, row)))
                for c, t, row in zip(contexts, seconds.tolist(), table)}

    def schedule(self, context: int, seconds_of, timeline: bool = False) -> StepSchedule:
        """The step at `context`, as `schedule.schedule` would give it for the compiled step."""
        durations = self._durations_at(context - self.context, seconds_of)
        end = [0.0] * len(self.names)
        free: dict[str, float] = defaultdict(float)
        busy: dict[str, float] = defaultdict(float)
        intervals = []
        preds = self.preds
        for i, resources in enumerate(self.resources):
            start = max([free[r] for r in resources] + [end[p] for p in preds[i]])
            duration = durations[i]
            end[i] = start + duration
            for resource in resources:
                free[resource] = end[i]
                busy[resource] += duration
                if timeline:
                    intervals.append(Interval(resource, self.names[i], start, end[i], self.first.phase,
                                              _args(self.attrs[i])))
        return StepSchedule(max(end, default=0.0), tuple(intervals), dict(busy))


def _same_graph(a: Program, b: Program) -> bool:
    return a.order() == b.order() and set(a.graph.edges) == set(b.graph.edges)
