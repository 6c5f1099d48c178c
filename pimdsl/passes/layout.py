"""Data layout: which region, in which layout, holds the weights each op reads.

Assumes placement. Guarantees: every op that reads a weight has `region`
(a region name, or None for a memory without regions) and `layout`:
`pim_aware` for ops on PIM (the PIMnast placement: whole matrix rows per
bank, column-major at burst granularity, PIM-SHERPA section 2.2-2.3), and
`host_friendly` for ops on a processor (sequential addresses interleaved
over channels and banks by the address map). A weight read by both kinds of
device therefore has two copies, as weight duplication does (PIM-SHERPA
section 3.1); a region that holds the wrong layout is never chosen while one
with the right layout exists.
"""
from __future__ import annotations

from ..ir.hardware import Memory, Region
from .program import Program


def weight_region(memory: Memory, layout: str) -> Region | None:
    """The region that holds weights in `layout`, else any that holds weights, else None."""
    holders = [r for r in memory.regions if "weights" in r.holds]
    return next((r for r in holders if r.layout == layout), holders[0] if holders else None)


def run(program: Program) -> Program:
    system = program.system
    memory = program.pim_memory or (system.memories[0] if system.memories else None)
    for _, attrs in program.ops():
        op = attrs["op"]
        if not op.weight or memory is None:
            continue
        layout = "pim_aware" if attrs["device"].startswith("pim:") else "host_friendly"
        region = weight_region(memory, layout)
        attrs["layout"] = layout
        attrs["region"] = region.name if region else None
    return program
