"""Data layout: which region, in which layout, holds the weights each op reads, and how it reads them.

Assumes placement. Guarantees: every op that reads a weight has `memory` (a PIM
op's PIM memory; for a host op the memory the mapping's `data { weights = M; }`
names, by default the PIM memory), `region` (a region of that memory, or None
for a memory without regions), `layout` and `access`.

Layouts: `pim_aware` is the PIMnast placement (whole matrix rows per bank,
column-major at burst granularity); `host_friendly` is sequential addresses
interleaved over channels and banks by the address map. Ops on PIM always
read a PIM-aware copy, which must sit in a non-cacheable region (a cached
weight never reaches the controller, so the MAC never happens): a cacheable
one is a CompileError.
Host ops read a host-friendly copy when the weight strategy keeps one (wd,
c_gemm), else the single PIM-aware copy (strategy.py).

`access` says how a host op gets its weights, which is what its time depends
on: `cacheable` (read once, reused from cache), `oracle` (the PIM-aware copy
seen as cacheable host-friendly), `smc` (swizzled into a cacheable buffer
first, by the smc pass), or `noncacheable` (uncached: every token rereads the
weights). PIM ops have access `pim`. Cacheability is a CPU attribute: an NPU
or GPU stages weights in its own on-chip buffers by DMA and reuses them across
a kernel's rows whatever the region says (an NPU beside PIM reads its weights
through the memory-side row buffers of non-cacheable PIM memory), so their
access is `cacheable`.
"""
from __future__ import annotations

from ..ir.hardware import Memory, Region
from .program import Program
from ..ir.errors import CompileError
from .strategy import strategy_of


def weight_region(memory: Memory, layout: str) -> Region | None:
    """The region that holds weights in `layout`, else any that holds weights, else None."""
    holders = [r for r in memory.regions if "weights" in r.holds]
    return next((r for r in holders if r.layout == layout), holders[0] if holders else None)


def run(program: Program) -> Program:
    system = program.system
    pim_memory, host_memory = program.pim_memory, program.home("weights")
    strategy = strategy_of(system)
    kinds = {p.name: p.kind for p in system.processors}
    for name, attrs in program.ops():
        op = attrs["op"]
        on_pim = attrs["device"].startswith("pim:")
        memory = pim_memory if on_pim else host_memory
        if not op.weight or memory is None:
            continue
        layout = "host_friendly" if strategy.host_copy and not on_pim else "pim_aware"
        region = weight_region(memory, layout)
        if on_pim and region is not None and region.cacheable:
            raise CompileError(f"op {name} runs on PIM, but its weights would sit in region '{region.name}', "
                               "which is cacheable: PIM operands must be non-cacheable (a cached read never "
                               "reaches the DRAM, so the PIM unit never computes)", region.span,
                               f"set `cacheable = false;` in region {region.name}, or give the PIM-aware "
                               "weights a non-cacheable region of their own")
        attrs["layout"] = layout
        attrs["memory"] = memory.name
        attrs["region"] = region.name if region else None
        if on_pim:
            attrs["access"] = "pim"
        elif kinds.get(attrs["device"], "cpu") != "cpu":
            attrs["access"] = "cacheable"
        else:
            attrs["access"] = _host_access(strategy, region, op)
    return program


def _host_access(strategy, region: Region | None, op) -> str:
    if region is None or strategy.host_copy:
        return "cacheable" if region is None or region.cacheable else "noncacheable"
    if strategy.via == "oracle":
        return "oracle"
    if strategy.via in ("ddb", "owr") and op.kind in ("gemm", "gemv"):
        return "smc"
    return "cacheable" if region.cacheable else "noncacheable"
