"""The time of each lowered op on its device: PIM streams through the DRAM engine, kernels by models.

A PIM op is timed at command level on one channel (`PimWork`: every
channel runs the same stream) from an idle, precharged device, with the
memory's refresh as a blocking policy when its controller refreshes; in
fast mode loops are skipped once periodic (stream_timer). Ops with the same
key share one timing, so a model step times each distinct GEMV once, and the
timing is kept on disk for later runs (timing_cache).

What a PIM time covers: every command of the op, from its first (mode
change, or the first park-in read) to one past its last (`cycles`); the
input-vector writes, the drain and the result readback are in it; weight
preload is not (weights are resident). `read_cycles` ends at the last
column read, the end point of Samsung's PIMSimulator (reference/pim
section 1). Host reduction of lane partial sums is not modelled.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass

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


def refresh_policy(memory: Memory) -> str:
    return "none" if memory.controller.refresh == "none" else "blocking"


def time_pim(memory: Memory, items, fast: bool = True, on_issue=None) -> PimTime:
    pim = memory.pim
    timer = make_timer(memory, pim.commands, pim.rules, pim.windows, refresh=refresh_policy(memory))
    st = StreamTimer(timer, fast=fast, on_issue=on_issue)
    st.run(items)
    counts = Counter({f"{kind or 'cmd'}.{name}": n for (name, kind), n in st.counts.items()})
    total = sum(counts.values())
    return PimTime(st.end * memory.part.tck_s, st.end, st.read_end, total, total - st.skipped,
                   timer.refreshes, dict(sorted(counts.items())))


class OpTimer:
    """Times lowered ops of one system, caching PIM ops by key and kernels by value."""

    def __init__(self, system: System, fast: bool = True):
        self.memories = {m.name: m for m in system.memories}
        self.processors = {p.name: p for p in system.processors}
        self.links = {l.name: l for l in system.links}
        self.fast = fast
        self._pim: dict[tuple, PimTime] = {}
        self._kernels: dict[tuple, KernelTime] = {}

    def pim(self, work: PimWork) -> PimTime:
        hit = self._pim.get(work.key)
        if hit is None:
            memory = self.memories[work.memory]
            name = timing_cache.entry_key(memory, work.key, "fast" if self.fast else "exact")
            stored = timing_cache.load(name)
            hit = PimTime(**stored) if stored else time_pim(memory, work.stream(0), self.fast)
            if not stored:
                timing_cache.store(name, asdict(hit))
            self._pim[work.key] = hit
        return hit

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
