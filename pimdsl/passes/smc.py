"""SMC: the swizzled memory copies that bring PIM-aware weights to host GEMMs.

Assumes allocation. Guarantees: every host op with access `smc` has its
weights copied before it runs, by copy ops added to the graph: nodes
`smc:<op>` (and `smc:preload`) of kind `smc` with `device`, `resource`,
`smc_bytes` (DRAM traffic) and `smc_threads`. Other steps are unchanged.

Traffic of one copy: read the non-cacheable PIM-aware source,
read the host-friendly destination into the cache, write it back:
source + 2 x destination bytes. Its rate is `strategy.smc_bandwidth`.

DDB (DRAM double buffering). The weighted host ops, in program order, are
packed into buffer units: consecutive ops whose weights fit one buffer
together (Q, K, V and O of a Llama layer; then each FF layer alone). The
first unit is preloaded before the step. The next unit's copy is split
evenly over the ops of the current unit (FF0 in quarters over Q, K, V and O;
FF1 during FF0; FF2 during FF1; the next layer's Q-O during FF2) and runs on
the copy threads while its carrier op computes: a copy starts when its
carrier may start (never during attention or norms), and the next weighted
op waits for both, a per-layer synchronisation. A unit
larger than a buffer (the LM head) is copied whole during the op before it,
streamed through the two buffers; its GEMV on each chunk is short next to
the chunk's copy, so the chunks are not modelled one by one.

OWR (online weight rearrangement). Each op's weights are copied right before it on the
compute threads, and the next copy waits for the GEMM (one buffer).
"""
from __future__ import annotations

import math

from ..graph.build import Op
from ..interpreter.values.smc import smc_traffic_bytes
from ..ir.workload import DTYPE_BYTES
from ..lowering.pim_program import tensor_rows
from ..ir.addresses import row_stride
from .program import Program
from .strategy import copy_threads, strategy_of


def traffic_bytes(memory, attrs) -> int:
    """Source (PIM-aware weight rows, padding included) + 2 x destination (host-friendly weights)."""
    op = attrs["op"]
    dest = int(math.ceil(op.weight_elements * DTYPE_BYTES[op.dtype]))
    source = attrs["alloc"].size_bytes
    if attrs.get("family") == "program":      # the rows the declared layout spans, padding included
        rows = tensor_rows(memory, attrs["program"], attrs["tiling"], "weight")
        source = rows * row_stride(memory) if rows is not None else source
    return smc_traffic_bytes(source, dest)


def run(program: Program) -> Program:
    targets = [(n, a) for n, a in program.ops() if a.get("access") == "smc"]
    if not targets:
        return program
    system, g = program.system, program.graph
    via = strategy_of(system).via
    first = targets[0][1]
    host = next(p for p in system.processors if p.name == first["device"])
    threads = copy_threads(system, host, via)
    resource = f"{first['resource']}.copy" if via == "ddb" else first["resource"]
    memory = program.pim_memory or system.memories[0]
    traffic = {n: traffic_bytes(memory, a) for n, a in targets}
    names = [n for n, _ in targets]
    after = dict(zip(names, names[1:]))       # the next weighted host op

    def copy(name: str, nbytes: float, of: list[str], carrier: str, preds, succ: str | None):
        """A copy of the weights of ops `of`, running beside `carrier` (and labelled with its layer)."""
        c = g.nodes[carrier]["op"]
        op = Op(name, "smc", "copy", c.layer, c.dtype, {"bytes": nbytes})
        g.add_node(name, op=op, device=host.name, resource=resource, smc_bytes=nbytes, smc_threads=threads,
                   smc_of=tuple(of))
        # ordering edges only (start conditions and the per-layer synchronisation): no data moves
        g.add_edges_from((p, name, {"bytes": 0}) for p in preds)
        if succ is not None:
            g.add_edge(name, succ, bytes=0)

    if via == "owr":
        previous = None
        for n in names:
            copy(f"smc:{n}", traffic[n], [n], n, [*g.predecessors(n), *([previous] if previous else [])], n)
            previous = n
    else:
        units = _units(names, {n: int(math.ceil(a["op"].weight_elements * DTYPE_BYTES[a["op"].dtype]))
                               for n, a in targets}, program.buffers[0].size_bytes)
        copy("smc:preload", sum(traffic[n] for n in units[0]), units[0], units[0][0], [], units[0][0])
        previous = None
        for unit, nxt in zip(units, units[1:]):
            share = sum(traffic[n] for n in nxt) / len(unit)
            for n in unit:
                copy(f"smc:{n}", share, nxt, n, [*g.predecessors(n), *([previous] if previous else [])], after.get(n))
                previous = n
    g.graph.pop("order", None)
    return program


def _units(names: list[str], sizes: dict[str, int], capacity: int) -> list[list[str]]:
    """Consecutive ops packed greedily into units whose weights fit one buffer."""
    units: list[list[str]] = []
    used = capacity + 1
    for n in names:
        if used + sizes[n] > capacity:
            units.append([])
            used = 0
        units[-1].append(n)
        used += sizes[n]
    return units
