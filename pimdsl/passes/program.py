"""The IR the passes work on: one model step of one system, as an annotated op graph.

A `Program` holds the system, the step (phase, batch, new tokens, KV
context) and its NetworkX op graph. Each pass adds node attributes:

  placement   device      processor name, or `pim:<memory>`
  tiling      tiling      the op's shape, for its declared PIM program (PIM ops only)
              family      `program`: the op runs the unit's declared program; `covered`: the
                          previous op's program does it (`covers`), it runs nothing itself
              program     the unit's declared PimProgram for the op (family `program`)
              covered_by  the op whose program covers it (family `covered`)
  layout      region      the region that holds the op's weights
              layout      host_friendly or pim_aware
              access      how a host op reads its weights (cacheable, oracle, smc, ...)
  allocation  alloc       an `Allocation`: where the weights live
  smc         smc_*       copy ops added before host GEMMs that read swizzled weights
  lowering    lowered     a `PimWork` (structured command stream), an `Absorbed` (family
                          `covered`) or a `Kernel`

`CompileError` is a problem of the spec (a weight that does not fit, an op
no PIM lowering handles), reported as a diagnostic at `span`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..ir.errors import CompileError
from ..ir.hardware import Memory
from ..ir.workload import System

if TYPE_CHECKING:              # imported where the order is needed: a loop that builds no graph does not pay it
    import networkx as nx




@dataclass
class Program:
    system: System
    phase: str                    # prefill, decode
    batch: int
    tokens: int                   # new tokens per request
    context: int                  # KV-cache length before the step
    graph: nx.DiGraph
    memory_bytes: dict = field(default_factory=dict)    # filled by allocation: category -> bytes
    buffers: list = field(default_factory=list)         # allocation: the strategy's SMC buffers

    @property
    def pim_memory(self) -> Memory | None:
        return next((m for m in self.system.memories if m.pim is not None), None)

    def home(self, kind: str) -> Memory | None:
        """The memory that holds `kind` of data (ir.workload.DATA_KINDS): the one the mapping's
        `data` block names, else the PIM memory, else the system's first memory."""
        mapping, system = self.system.mapping, self.system
        name = mapping.data.get(kind) if mapping is not None else None
        if name is None:
            return self.pim_memory or (system.memories[0] if system.memories else None)
        memory = next((m for m in system.memories if m.name == name), None)
        if memory is None:
            raise CompileError(f"the mapping puts {kind} in memory '{name}', which system '{system.name}' does not "
                               "have", mapping.data_spans.get(kind, mapping.span),
                               "add it to the system's memories: " + ", ".join(m.name for m in system.memories))
        return memory

    def ops(self):
        """(name, attributes) of every op, in program order."""
        return ((n, self.graph.nodes[n]) for n in self.order())

    def order(self) -> list[str]:
        g = self.graph
        if "order" not in g.graph:
            import networkx as nx
            index = {n: i for i, n in enumerate(g.nodes)}
            g.graph["order"] = list(nx.lexicographical_topological_sort(g, key=index.__getitem__))
        return g.graph["order"]

    def dump(self) -> str:
        """The IR as text: one op per line with every attribute the passes added."""
        from ..emit.templates import render
        rows = []
        for name, attrs in self.ops():
            extra = {k: v for k, v in attrs.items() if k != "op"}
            rows.append((name, attrs["op"], extra))
        return render("ir.txt.j2", program=self, rows=rows)
