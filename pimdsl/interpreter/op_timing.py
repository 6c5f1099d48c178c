"""The time of each lowered op on its device: PIM streams through the DRAM engine, kernels by models.

A PIM op is timed at command level on one channel (`PimWork`: every
channel runs the same stream) from an idle, precharged device, with the
memory's refresh as a blocking policy when its controller refreshes; in
fast mode loops are skipped once periodic (stream_timer). Ops with the same
key share one timing, so a model step times each distinct GEMV once, and the
timing is kept on disk for later runs (timing_cache).

Refresh across ops: within a step, a PIM memory's refresh units keep falling
due every tREFI of the PIM work before, so an op shorter than tREFI pays its
share rather than never refreshing (`OpTimer.pim_step`, `OpTimer.carry`,
`RefreshPhase`). Each op's timing also holds its time without refresh
(`no_refresh_cycles`), the cycles one refresh of a unit adds to it
(`refresh_cost_cycles`: from its own refreshes, or for an op too short to
have any, from one run with every unit due halfway through it) and the
refresh units its commands reach (`refresh_units`; the others refresh beside
it at no cost). The op's time at the phase it starts in is then its
no-refresh time plus that cost for each refresh of its units falling due
within it. At the idle device's phase (a step's first PIM op) that is the op's exact
timing itself. The phase carries from op to op, not across steps nor over
the memory's idle time between its ops (a refresh then costs PIM nothing).

What a PIM time covers: every command of the op, from its first (mode
change, or the first park-in read) to one past its last (`cycles`); the
input-vector writes, the drain and the result readback are in it; weight
preload is not (weights are resident). `read_cycles` ends at the last
column read, the end point of Samsung's PIMSimulator (reference/pim
section 1). Host reduction of lane partial sums is not modelled.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass, replace

from ..ir.hardware import Memory
from ..ir.workload import System
from ..lowering.records import Absorbed, Kernel, PimWork, Transfer
from . import timing_cache
from .dram.compiled_timer import make_timer
from .host.models import KernelTime, kernel_time, transfer_time
from .dram.stream_timer import StreamTimer


@dataclass(frozen=True)
class PimTime:
    seconds: float
    cycles: int
    read_cycles: int
    commands: int
    issued: int                   # commands the timer issued (the rest were skipped by fast mode)
    refreshes: int
    counts: dict                  # "kind.COMMAND" -> commands
    no_refresh_cycles: int = 0    # `cycles` with refresh off
    refresh_cost_cycles: float = 0.0   # cycles one refresh of a unit adds (module docstring)
    refresh_units: tuple = ()     # the refresh units its commands reach (the others refresh beside it)


def refresh_policy(memory: Memory) -> str:
    return "none" if memory.controller.refresh == "none" else "blocking"


def time_pim(memory: Memory, items, fast: bool = True, on_issue=None, refresh: str | None = None,
             first_due: int | None = None) -> PimTime:
    """One op's stream (channel 0) timed from an idle device; `refresh` overrides the memory's
    policy, `first_due` makes every refresh unit first fall due at that cycle."""
    pim = memory.pim
    timer = make_timer(memory, pim.commands, pim.rules, pim.windows, refresh=refresh or refresh_policy(memory),
                       record_refreshes=True)
    if first_due is not None:
        timer.refresh_due[0] = [first_due] * len(timer.dues(0))
    st = StreamTimer(timer, fast=fast, on_issue=on_issue)
    st.run(items)
    counts = Counter({f"{kind or 'cmd'}.{name}": n for (name, kind), n in st.counts.items()})
    total = sum(counts.values())
    return PimTime(st.end * memory.part.tck_s, st.end, st.read_end, total, total - st.skipped,
                   timer.refreshes, dict(sorted(counts.items())), st.end,
                   refresh_units=tuple(sorted({unit for _, unit, _ in timer.refresh_log})))


def time_pim_op(memory: Memory, stream, fast: bool = True) -> PimTime:
    """`time_pim` from the idle device, with what the refresh phase needs (module docstring)."""
    idle = time_pim(memory, stream(), fast)
    if refresh_policy(memory) == "none":
        return idle
    bare = time_pim(memory, stream(), fast, refresh="none").cycles
    cost, taken, units = idle.cycles - bare, idle.refreshes, idle.refresh_units
    if any(due >= idle.cycles for due in RefreshPhase.of(memory).idle) and bare > 1:
        # a unit fell due not within it: which units it reaches (and, none refreshed, what a
        # refresh costs it) from a run with every unit due halfway through it
        forced = time_pim(memory, stream(), fast, first_due=bare // 2)
        units = forced.refresh_units
        if not taken:
            cost, taken = forced.cycles - bare, forced.refreshes
    return replace(idle, no_refresh_cycles=bare, refresh_cost_cycles=cost / taken if taken else 0.0,
                   refresh_units=units)


def _from_json(stored: dict) -> PimTime:
    return PimTime(**{**stored, "refresh_units": tuple(stored.get("refresh_units", ()))})


class RefreshPhase:
    """One PIM memory's refresh units within a step: when each next falls due, in cycles of the
    PIM work since the step began (`clock`), as the command-stream timer would carry them."""

    def __init__(self, tREFI: int, idle: list[int], tck_s: float):
        self.tREFI, self.idle, self.tck = tREFI, idle, tck_s        # idle: the dues of an idle device
        self.due, self.clock = list(idle), 0.0

    @classmethod
    def of(cls, memory: Memory) -> "RefreshPhase":
        probe = make_timer(memory, memory.pim.commands, memory.pim.rules, memory.pim.windows,
                           refresh="blocking", engine="python")
        return cls(probe.tREFI, list(probe.dues(0)), memory.part.tck_s)

    def fresh(self) -> "RefreshPhase":
        return RefreshPhase(self.tREFI, self.idle, self.tck)

    def run(self, t: PimTime) -> PimTime:
        """The op `t` (timed from the idle device) run from this phase; the phase moves past it."""
        cycles, taken = self._advance(t)
        # `replace(t, seconds=..., cycles=..., read_cycles=..., refreshes=...)`, field by field (a
        # long decode runs this for every PIM op of every step; a test holds the other fields)
        return PimTime(cycles * self.tck, cycles, max(0, t.read_cycles + cycles - t.cycles), t.commands, t.issued,
                       taken, t.counts, t.no_refresh_cycles, t.refresh_cost_cycles, t.refresh_units)

    def seconds(self, t: PimTime) -> float:
        """`run(t).seconds`, without the record."""
        return self._advance(t)[0] * self.tck

    def _advance(self, t: PimTime) -> tuple[int, int]:
        """The op's cycles and refreshes from this phase; the phase moves past it."""
        start, dues, tREFI = self.clock, self.due, self.tREFI
        if [d - start for d in dues] == self.idle:      # the idle device's phase: the timing itself
            end, taken = start + t.cycles, t.refreshes
        else:
            # refreshes due before the op's end, which each one moves later: the least k with
            # k = due_before(start + bare + k cost), as refreshing one due unit at a time finds it
            bare, cost, units = start + t.no_refresh_cycles, t.refresh_cost_cycles, t.refresh_units
            taken = self._due_before(bare, units)
            while (more := self._due_before(bare + taken * cost, units)) > taken:
                taken = more
            end = bare + taken * cost
        for u, due in enumerate(dues):         # the units it does not reach refresh beside it
            if due < end:
                dues[u] = due + tREFI * math.ceil((end - due) / tREFI)
        self.clock = end
        return round(end - start), taken

    def _due_before(self, end: float, units) -> int:
        """Refreshes of `units` falling due before cycle `end`."""
        dues, tREFI, n = self.due, self.tREFI, 0
        for u in units:                        # a loop, not sum() over a generator: a few units each time
            if dues[u] < end:
                n += math.ceil((end - dues[u]) / tREFI)
        return n


class OpTimer:
    """Times lowered ops of one system, caching PIM ops by key and kernels by value."""

    def __init__(self, system: System, fast: bool = True):
        self.memories = {m.name: m for m in system.memories}
        self.processors = {p.name: p for p in system.processors}
        self.links = {l.name: l for l in system.links}
        self.fast = fast
        self._pim: dict[tuple, PimTime] = {}
        self._kernels: dict[tuple, KernelTime] = {}
        self._phases: dict[str, RefreshPhase] = {}     # memory -> its idle refresh phase

    def __call__(self, attrs: dict) -> float:
        """An op's seconds alone (the schedule's `seconds_of`; `carry` then gives a step's PIM ops their phase)."""
        return self.seconds(attrs["lowered"])

    def pim(self, work: PimWork) -> PimTime:
        hit = self._pim.get(work.key)
        if hit is None:
            memory = self.memories[work.memory]
            name = timing_cache.entry_key(memory, work.key, "fast" if self.fast else "exact")
            stored = timing_cache.load(name)
            hit = _from_json(stored) if stored else time_pim_op(memory, lambda: work.stream(0), self.fast)
            if not stored:
                timing_cache.store(name, asdict(hit))
            self._pim[work.key] = hit
        return hit

    def pim_step(self, works) -> list[PimTime]:
        """The PIM ops of one step in program order, each from the refresh phase the ops before it
        on its memory leave (module docstring)."""
        return [phase.run(t) if phase is not None else t for t, phase in self._phased(works)]

    def _phased(self, works):
        """Each op's timing from the idle device and the step's refresh phase of its memory (None
        without refresh), in program order: the phase is to be run op by op."""
        phases: dict[str, RefreshPhase] = {}
        for work in works:
            phase = phases.get(work.memory)
            if phase is None:
                memory = self.memories[work.memory]
                if refresh_policy(memory) != "none":
                    if work.memory not in self._phases:
                        self._phases[work.memory] = RefreshPhase.of(memory)
                    phase = phases[work.memory] = self._phases[work.memory].fresh()
            yield self.pim(work), phase

    def carry(self, attrs_list, seconds: list[float]) -> list[float]:
        """One step's op seconds (`seconds`, op by op, in program order) with each PIM op's from the
        refresh phase the PIM ops before it leave (`pim_step`'s seconds)."""
        at = [i for i, a in enumerate(attrs_list) if isinstance(a["lowered"], PimWork)]
        out = list(seconds)
        for i, (t, phase) in zip(at, self._phased([attrs_list[i]["lowered"] for i in at])):
            out[i] = phase.seconds(t) if phase is not None else t.seconds
        return out

    def kernel(self, kernel: Kernel) -> KernelTime:
        key = (kernel.kind, kernel.device, kernel.dtype, kernel.flops, kernel.bytes,
               tuple(sorted(kernel.shape.items())), kernel.threads)
        hit = self._kernels.get(key)
        if hit is None:
            hit = self._kernels[key] = kernel_time(self.processors[kernel.device], kernel)
        return hit

    def seconds(self, lowered) -> float:
        if isinstance(lowered, Absorbed):      # done by the covering op's commands, timed with them
            return 0.0
        if isinstance(lowered, Transfer):
            return transfer_time(self.links[lowered.link], lowered.bytes)
        return self.pim(lowered).seconds if isinstance(lowered, PimWork) else self.kernel(lowered).seconds
