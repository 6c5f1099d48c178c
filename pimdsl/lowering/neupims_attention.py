"""Lowering attention scores (K.q) to the NeuPIMs command family, for one channel.

The NeuPIMs paper's command interface (004_f517316e854733a9.txt, section 5.2
and Table 1) as the NeuPIMs simulator issues it (../shared/reference/pim/
README.md section 2): per tile, PIM_HEADER (the GEMV's dimensions, so the
controller can fit it before a refresh), one grouped PIM_ACT per bank group
and rank (each opens the PIM row buffer of the group's banks), one
PIM_GEMV(k) per head on the row, and a PIM_PRECHARGE per bank. A PIM_GWRITE
(after an ACT of the row that holds the query) first fills the channel's
global buffer, unless the buffer is taken as already filled.

Layout (section 6.3): each bank holds the keys of one token per tile; a tile
is one token per bank at the same row index, and a row holds
`row_bytes / (head_dim * dtype)` heads (4 x 128 FP16 in a 1 KB page). A
PIM_GEMV(k) computes one head's dot product in every bank with k COMP steps
of `lanes` elements (128 / 16 = 8).

Assumes the memory's PIM unit declares PIM_HEADER, PIM_ACT, PIM_GEMV,
PIM_PRECHARGE and PIM_GWRITE. Guarantees: program order, rows open before
use, typed commands; a generator, never materialised.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator

from ..interpreter.command_stream import Command
from ..ir.hardware import Memory
from ..ir.workload import DTYPE_BYTES


@dataclass(frozen=True)
class ScoreTiling:
    tokens_per_tile: int          # one per bank of the channel
    heads_per_row: int
    comp_steps: int               # k of PIM_GEMV: head_dim / lanes
    tiles: int                    # per row index of the head set
    head_sets: int                # rows of heads per token: ceil(heads / heads_per_row)

    @classmethod
    def of(cls, memory: Memory, seq_len: int, heads: int, head_dim: int) -> "ScoreTiling":
        org, pim = memory.organization, memory.pim
        banks = org.ranks * org.banks_per_rank
        per_row = max(1, org.row_bytes // (head_dim * DTYPE_BYTES[pim.dtype]))
        return cls(banks, per_row, math.ceil(head_dim / pim.lanes), math.ceil(seq_len / banks),
                   math.ceil(heads / per_row))


def query_row(memory: Memory, head_set: int) -> int:
    """The MEM row of bank 0 that holds the query of one head set (what PIM_GWRITE copies)."""
    return memory.organization.rows - 1 - head_set


def score_stream(memory: Memory, seq_len: int, heads: int, head_dim: int, channel: int = 0,
                 gwrite: bool = False, first_row: int = 0) -> Iterator[Command]:
    """K.q of `heads` heads against `seq_len` cached keys held by this channel."""
    org = memory.organization
    t = ScoreTiling.of(memory, seq_len, heads, head_dim)

    def cmd(name, rank=0, bg=0, bank=0, row=0, column=0, kind=""):
        return Command(name, channel, rank=rank, bank_group=bg, bank=bank, row=row, column=column, kind=kind)

    for head_set in range(t.head_sets):
        heads_here = min(t.heads_per_row, heads - head_set * t.heads_per_row)
        if gwrite:                        # this head set's query into the global buffer (a MEM row)
            if head_set:
                yield cmd("PRE", kind="gwrite")
            yield cmd("ACT", row=query_row(memory, head_set), kind="gwrite")
            # the MEM row may stay open: PIM work uses the PIM row buffers (dual buffers)
            yield cmd("PIM_GWRITE", row=query_row(memory, head_set), kind="gwrite")
        for tile in range(t.tiles):
            row = first_row + head_set * t.tiles + tile
            yield cmd("PIM_HEADER", column=heads_here, kind="header")
            for bg in range(org.bank_groups):
                for rank in range(org.ranks):
                    yield cmd("PIM_ACT", rank=rank, bg=bg, row=row, kind="act")
            for head in range(heads_here):
                yield cmd("PIM_GEMV", row=row, column=head, kind=f"gemv_k{t.comp_steps}")
            for rank in range(org.ranks):
                for bg in range(org.bank_groups):
                    for bank in range(org.banks_per_group):
                        yield cmd("PIM_PRECHARGE", rank=rank, bg=bg, bank=bank, kind="precharge")
