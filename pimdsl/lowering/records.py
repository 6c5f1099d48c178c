"""What lowering hands the interpreter besides PIM command streams: host kernels and link transfers.

A `Kernel` is one op placed on a processor, reduced to what a timing model
needs (kind, FLOPs, DRAM bytes, shape). A `Transfer` is data moved between
two devices over a link. Both name the graph op they come from, so a
schedule and a trace can always point back at the model.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Callable, Iterator

# kernel kinds a host timing model knows
KERNEL_KINDS = ("gemm", "gemv", "attention", "softmax", "norm", "elementwise", "embedding", "copy")


@dataclass(frozen=True)
class Kernel:
    op: str                        # graph node name, e.g. L3.q_proj
    kind: str                      # one of KERNEL_KINDS
    device: str                    # processor name
    dtype: str
    flops: float
    bytes: float                   # DRAM traffic: weights + activations + KV cache
    shape: dict = field(default_factory=dict)   # gemm/gemv: m, k, n; attention: heads, q, kv, head_dim
    threads: int | None = None     # CPU threads it may use (None: every core)
    bandwidth: float | None = None  # bytes/s its DRAM traffic reaches, when not the processor's
                                    # memory_bandwidth (uncached reads, swizzled copies)

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Transfer:
    op: str                        # the op whose data moves
    link: str                      # link name
    src: str                       # device names
    dst: str
    bytes: float

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Absorbed:
    """An op on a PIM memory done by the program of the op before it (`covers = [...]`, LANGUAGE.md):
    no commands of its own, no time; it names the op whose commands did its work."""
    op: str
    memory: str
    by: str                        # the covering op

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class PimWork:
    """An op on a PIM memory: its structured command stream, per channel.

    Every channel runs the same stream on its own share of the data (the
    lowerings split outputs evenly), so timing one channel times the op.
    Ops with the same `key` have the same stream shape and time alike.
    `placed` gives the same commands, in order, as placed tuples
    (lowering/pim_program.PLACED): what a text trace of every command needs.
    """
    op: str
    memory: str
    family: str                    # program: the unit's declared program, expanded
    stream: Callable[..., list]    # channel (, values: commands carry their arguments) -> items (commands and loops)
    key: tuple
    placed: Callable[..., Iterator[list]]     # channel (, args: with the issues' arguments) -> placed commands, in lists

    def to_json(self) -> dict:
        return {"op": self.op, "memory": self.memory, "family": self.family, "key": list(self.key)}
