"""Data layout: which region, in which layout, holds the weights each op reads, and how it reads them.

Assumes placement. Guarantees: every op that reads a weight has `region` (a
region name, or None for a memory without regions), `layout` and `access`.

Layouts: `pim_aware` is the PIMnast placement (whole matrix rows per bank,
column-major at burst granularity, PIM-SHERPA section 2.2-2.3);
`host_friendly` is sequential addresses interleaved over channels and banks
by the address map. Ops on PIM always read a PIM-aware copy, which must sit
in a non-cacheable region (section 2.4: a cached weight never reaches the
controller, so the MAC never happens): a cacheable one is a CompileError.
Host ops read a host-friendly copy when the weight strategy keeps one (wd,
c_gemm), else the single PIM-aware copy (strategy.py).

`access` says how a host op gets its weights, which is what its time depends
on: `cacheable` (read once, reused from cache), `oracle` (FACIL-O: the
PIM-aware copy seen as cacheable host-friendly), `smc` (swizzled into a
cacheable buffer first, by the smc pass), or `noncacheable` (uncached: every
token rereads the weights, NC-GEMM). PIM ops have access `pim`. Cacheability is
a CPU attribute: an NPU or GPU stages weights in its own on-chip buffers by DMA
and reuses them across a kernel's rows whatever the region says (an NPU beside
PIM banks reads weights through the MEM row buffers of non-cacheable PIM
memory, dual row buffers), so their access is `cacheable`.
"""
from __future__ import annotations

from ..ir.hardware import Memory, Region
from .program import CompileError, Program
from .strategy import strategy_of


def weight_region(memory: Memory, layout: str) -> Region | None:
    """The region that holds weights in `layout`, else any that holds weights, else None."""
    holders = [r for r in memory.regions if "weights" in r.holds]
    return next((r for r in holders if r.layout == layout), holders[0] if holders else None)


def run(program: Program) -> Program:
    system = program.system
    memory = program.pim_memory or (system.memories[0] if system.memories else None)
    strategy = strategy_of(system)
    kinds = {p.name: p.kind for p in system.processors}
    for name, attrs in program.ops():
        op = attrs["op"]
        if not op.weight or memory is None:
            continue
        on_pim = attrs["device"].startswith("pim:")
        layout = "host_friendly" if strategy.host_copy and not on_pim else "pim_aware"
        region = weight_region(memory, layout)
        if on_pim and region is not None and region.cacheable:
            raise CompileError(f"op {name} runs on PIM, but its weights would sit in region '{region.name}', "
                               "which is cacheable: PIM operands must be non-cacheable (a cached read never "
                               "reaches the DRAM, so the PIM unit never computes)", region.span,
                               f"set `cacheable = false;` in region {region.name}, or give the PIM-aware "
                               "weights a non-cacheable region of their own")
        attrs["layout"] = layout
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
