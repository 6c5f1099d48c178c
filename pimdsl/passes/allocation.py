"""Allocation: every weight gets addresses in its region, so every element has a DRAM location.

Assumes layout (and tiling for PIM ops). Guarantees: every op that reads a
weight has `alloc`, an `Allocation` of that weight in its region (a weight
shared by ops, such as tied embeddings, is allocated once per region and
layout); PIM GEMV layouts carry their first weight row and result row; the
weight strategy's SMC buffers (strategy.py) are allocated in a cacheable
region that holds `buffers`, as `program.buffers`; `program.memory_bytes`
totals weights, buffers, KV cache and activations; a region too small is a
CompileError at the region's declaration.

Host-friendly weights take consecutive bytes; `decode_address` turns any
byte into (channel, pseudo-channel, rank, bank group, bank, row, column)
through the memory's address map. PIM-aware weights take whole row indices
(one row index spans every channel, rank and bank), so the address map must
put `row` above those fields.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ..ir.addresses import row_stride
from ..ir.hardware import Memory
from ..ir.workload import DTYPE_BYTES
from ..ir.pim_program import evaluate
from ..lowering.pim_program import environment
from .program import Program
from ..ir.errors import CompileError
from .strategy import strategy_of


@dataclass(frozen=True)
class Allocation:
    region: str | None
    tensor: str
    offset_bytes: int             # from the start of the memory
    size_bytes: int
    first_row: int | None = None  # PIM-aware: first row index (every bank)
    rows: int = 0                 # PIM-aware: row indices taken (weights + results)
    memory: str | None = None     # the memory that holds it




class _Region:
    def __init__(self, memory: Memory, name: str | None):
        region = next((r for r in memory.regions if r.name == name), None)
        self.memory, self.region = memory, region
        self.start = region.offset_bytes if region else 0
        # `memory m[n]`: the data is striped evenly over the n instances (each has the region)
        self.size = (region.size_bytes if region else memory.capacity_bytes) * memory.count
        self.used = 0

    def take(self, nbytes: int, align: int, what: str) -> int:
        offset = math.ceil((self.start + self.used) / align) * align
        self.used = offset + nbytes - self.start
        if self.used > self.size:
            name = self.region.name if self.region else f"memory '{self.memory.name}'"
            raise CompileError(f"{what} does not fit in {name}: {self.used / 2**30:.2f} GiB needed, "
                               f"{self.size / 2**30:.2f} GiB available",
                               self.region.span if self.region else self.memory.span,
                               "enlarge the region, or map fewer ops (or a smaller model) onto it" if self.region else
                               "give the memory more instances (`memory NAME[n]`), or put less data in it")
        return offset


def run(program: Program) -> Program:
    system = program.system
    memories = {m.name: m for m in system.memories}
    regions: dict[tuple, _Region] = {}
    done: dict[tuple, Allocation] = {}
    weights = 0
    for name, attrs in program.ops():
        op = attrs["op"]
        if "layout" not in attrs:
            continue
        memory = memories[attrs["memory"]]
        key = (memory.name, attrs["region"], attrs["layout"], op.weight)
        if key not in done:
            region = regions.setdefault((memory.name, attrs["region"]), _Region(memory, attrs["region"]))
            done[key] = replace(_allocate(memory, region, attrs, op), memory=memory.name)
            weights += done[key].size_bytes
        alloc = attrs["alloc"] = done[key]
        if attrs.get("family") == "program":
            attrs["first_row"] = alloc.first_row
    program.buffers = _buffers(program, program.home("weights"), regions)
    program.memory_bytes = {"weights": weights, "buffers": sum(b.size_bytes for b in program.buffers),
                            "kv_cache": kv_cache_bytes(program),
                            "activations": activation_bytes(program)}
    return program


def _allocate(memory: Memory, region: _Region, attrs: dict, op) -> Allocation:
    nbytes = int(math.ceil(op.weight_elements * DTYPE_BYTES[op.dtype]))
    what = f"weight {op.weight} ({nbytes / 2**20:.1f} MiB)"
    if attrs.get("family") == "program":
        return _rows(memory, region, attrs, op, declared_rows(memory, attrs["program"], attrs["tiling"]), what)
    return Allocation(attrs["region"], op.weight, region.take(nbytes, 64, what), nbytes)


def _rows(memory: Memory, region: _Region, attrs: dict, op, rows: int, what: str) -> Allocation:
    """Whole row indices (every channel and bank of the fields below `row` in the address map) for a
    PIM-aware weight. Fields above the row (a rank that does not compute) stay at their first value."""
    if "row" not in memory.address_map:
        raise CompileError(f"PIM-aware weights need a `row` field in memory '{memory.name}''s address map",
                           memory.span, "add row to address_map")
    stride = row_stride(memory)
    offset = region.take(rows * stride, stride, what)
    low, width = memory.address_bits["row"]
    if offset + rows * stride > 1 << (low + width):
        above = ", ".join(memory.address_map[:memory.address_map.index("row")])
        raise CompileError(f"{what} does not fit in the rows of memory '{memory.name}' below its first {above}",
                           memory.span, f"PIM-aware weights take row indices with {above} at 0: put row first in "
                           "address_map, or shrink the weights")
    return Allocation(attrs["region"], op.weight, offset, rows * stride, offset // stride, rows)


def declared_rows(memory: Memory, program, shape: dict) -> int:
    """The row indices a declared program says its op takes (its `rows`)."""
    if program.rows is None:
        raise CompileError(f"program {program.op_class} of PIM unit '{memory.pim.name}' lays out weights but does "
                           "not say how many rows they take", program.span, "add `rows = ...;` to the program")
    return int(evaluate(program.rows, environment(memory, program, shape)))


def _buffers(program: Program, memory: Memory, regions: dict) -> list[Allocation]:
    """The strategy's cacheable SMC buffers, each as large as the largest decoder-layer weight
    (the strategy's `buffers`: two for double buffering, one for online rearrangement; the
    strategy specs cite their source)."""
    count = strategy_of(program.system).buffers
    if not count or memory is None:
        return []
    size = max((int(math.ceil(a["op"].weight_elements * DTYPE_BYTES[a["op"].dtype])) for _, a in program.ops()
                if a["op"].layer is not None and a["op"].kind in ("gemm", "gemv") and a["op"].weight), default=0)
    holder = next((r for r in memory.regions if "buffers" in r.holds and r.cacheable), None)
    if holder is None:
        raise CompileError(f"weight strategy '{strategy_of(program.system).name}' needs a cacheable region "
                           f"that holds buffers in memory '{memory.name}'", memory.span,
                           "add e.g. `region smc_buffers { size = 128 MiB; cacheable = true; holds = [buffers]; }`")
    region = regions.setdefault((memory.name, holder.name), _Region(memory, holder.name))
    return [Allocation(holder.name, f"smc_buffer{i}", region.take(size, 64, f"SMC buffer {i}"), size, memory=memory.name)
            for i in range(count)]


def kv_cache_bytes(program: Program) -> int:
    m = program.system.model
    if m is None or m.architecture != "decoder":
        return 0
    tokens = program.context + program.tokens
    return int(2 * m.layers * m.kv_heads * m.head_dim * tokens * program.batch * DTYPE_BYTES[m.dtype])


def activation_bytes(program: Program) -> int:
    """The largest live activation: an op's inputs and outputs besides weights and KV cache."""
    return int(max((a["op"].write_bytes + a["op"].read_bytes for _, a in program.ops()
                    if a["op"].kind not in ("attn_score", "attn_context", "kv_append")), default=0))
