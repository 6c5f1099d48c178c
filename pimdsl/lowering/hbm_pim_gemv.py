"""Lowering a GEMV to the Samsung HBM-PIM (Aquabolt-XL) command family, for one pseudo-channel.

The kernel of Samsung's PIMSimulator ([PIMSIMULATOR]) as [REFDATA] pim README
Sec. 1 describes it, and as the PIM-SHERPA paper's Algorithm 1 runs it
([PIM_SHERPA] Sec. 2.4): the host never sends a compute
command; mode changes, CRF programming, input-register writes, MAC triggers
and the drain are ordinary RD/WR commands to reserved or weight rows.

Assumes: one pCH of a memory whose part has ACT/PRE/PREA/RD/WR; weights
already placed (preload excluded) with, per (output tile, input tile), two
rows of one bank per PIM block, even input tiles in the even banks and odd
ones in the odd banks. Guarantees: the stream is in program order, every
column command finds its row open, and each command is typed by `kind`:
park (single-bank reads around the mode switches), mode, crf, grf_a (input
writes), mac (MAC-triggering reads, data discarded), drain (GRF_B stored to
the bank), ctrl (enter/leave all-bank-PIM). All-bank commands reach the 8
even (or odd) banks in lockstep and go to a representative bank: 0 or 1.

Tiles follow from the PIM unit: an input tile is the GRF_A registers times
the SIMD lanes (8 x 16 = 128 inputs), an output tile the GRF_B registers
times the PIM blocks per pCH (8 x 8 = 64 outputs). The stream is a generator:
it is never materialised, whatever the GEMV size.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from ..interpreter.command_stream import Command
from ..ir.hardware import Memory

RESERVED_ROW_FROM_TOP = 1          # the mode/CRF/GRF registers are mapped to the last row


@dataclass(frozen=True)
class GemvTiling:
    in_tile: int                   # inputs per input tile
    out_tile: int                  # outputs per output tile (one pCH)
    n_in: int
    n_out: int
    bursts_per_block: int          # weight bursts one block holds per tile pair

    @classmethod
    def of(cls, memory: Memory, out_per_pch: int, in_dim: int) -> "GemvTiling":
        pim = memory.pim
        regs = {rf.name: rf.count for rf in pim.register_files}
        grf_a, grf_b = regs.get("grf_a", 8), regs.get("grf_b", 8)
        org = memory.organization
        blocks = org.banks_per_rank // 2 if pim.placement == "bank_pair" else org.banks_per_rank
        in_tile, out_tile = grf_a * pim.lanes, grf_b * blocks
        return cls(in_tile, out_tile, math.ceil(in_dim / in_tile), math.ceil(out_per_pch / out_tile),
                   grf_b * grf_a)


class _Rows:
    """The rows the stream keeps open, so that it opens and closes rows only when needed."""

    def __init__(self, channel: int, org):
        self.channel, self.org, self.open = channel, org, {}

    def cmd(self, name, bank, row=0, column=0, kind="", data=None):
        bg, ba = divmod(bank, self.org.banks_per_group)
        return Command(name, self.channel, bank_group=bg, bank=ba, row=row, column=column, kind=kind, data=data)

    def ensure(self, bank, row, kind):
        if self.open.get(bank) == row:
            return
        if bank in self.open:
            yield self.cmd("PRE", bank, kind=kind)
        yield self.cmd("ACT", bank, row=row, kind=kind)
        self.open[bank] = row

    def close_all(self, kind):
        if self.open:
            yield self.cmd("PREA", 0, kind=kind)
            self.open.clear()


def weight_slot(memory: Memory, out_per_pch: int, in_dim: int, o: int, i: int, n: int) -> tuple[int, int, int]:
    """(bank of the pair: 0 even / 1 odd, row, column) of weight burst n (0..63) of tile (o, i):
    burst 8k + j holds the 16 weights of output j of the block for input burst k ([REFDATA] pim README Sec. 1)."""
    org = memory.organization
    tiling = GemvTiling.of(memory, out_per_pch, in_dim)
    first_row = 2 * (o * math.ceil(tiling.n_in / 2) + i // 2)
    return i % 2, first_row + n // org.bursts_per_row, n % org.bursts_per_row


def drain_slot(memory: Memory, o: int) -> tuple[int, int]:
    """(row, first column) in the even banks where output tile o's 8 GRF_B registers land."""
    org = memory.organization
    per_row = org.bursts_per_row // 8
    return org.rows - RESERVED_ROW_FROM_TOP - 1 - o // per_row, 8 * (o % per_row)


def gemv_stream(memory: Memory, out_per_pch: int, in_dim: int, channel: int = 0, x=None) -> Iterator[Command]:
    """The PIM commands of one pCH's share of an out x in GEMV (out counted on this pCH).
    With the input vector `x` (values mode), each GRF_A write carries its 16-element slice."""
    org = memory.organization
    tiling = GemvTiling.of(memory, out_per_pch, in_dim)
    reserved = org.rows - RESERVED_ROW_FROM_TOP
    rows = _Rows(channel, org)
    if x is not None:                     # the last input tile is padded with zeros
        padded = np.zeros(tiling.n_in * tiling.in_tile, dtype=np.asarray(x).dtype)
        padded[:len(x)] = x
        x = padded
    # bank order that alternates bank groups (tRRD_S, tCCD_S between neighbours)
    order = [g * org.banks_per_group + b for b in range(org.banks_per_group) for g in range(org.bank_groups)]

    def park(kind):
        for b in order:
            yield from rows.ensure(b, reserved, kind)
        for b in order:
            yield rows.cmd("RD", b, reserved, kind=kind)
        yield from rows.close_all(kind)

    def mode_switch(kind):
        # 4 ACT + WR to the reserved row (one per bank group) switch all-bank mode on or off
        for g in range(4):
            yield from rows.ensure(order[g], reserved, kind)
        for g in range(4):
            yield rows.cmd("WR", order[g], reserved, kind=kind)
        yield from rows.close_all(kind)

    yield from park("park")
    yield from mode_switch("mode")
    # all-bank mode: bank 0 stands for the even banks, bank 1 for the odd ones
    yield from rows.ensure(0, reserved, "crf")
    yield rows.cmd("WR", 0, reserved, kind="crf")
    for o in range(tiling.n_out):
        yield from rows.ensure(0, reserved, "ctrl")
        yield rows.cmd("WR", 0, reserved, kind="ctrl")                      # enter all-bank-PIM
        for i in range(tiling.n_in):
            bank = i % 2
            yield from rows.ensure(bank, reserved, "grf_a")
            for reg in range(8):
                data = None
                if x is not None:
                    lanes = tiling.in_tile // 8
                    start = i * tiling.in_tile + reg * lanes
                    data = x[start:start + lanes]
                yield rows.cmd("WR", bank, reserved, column=reg, kind="grf_a", data=data)
            for n in range(tiling.bursts_per_block):
                _, row, col = weight_slot(memory, out_per_pch, in_dim, o, i, n)
                yield from rows.ensure(bank, row, "mac")
                yield rows.cmd("RD", bank, row, column=col, kind="mac")
        # drain: NOP-triggered writes store GRF_B into the even banks' output rows, 8 bursts per
        # output tile: tile o at row out_row(o), columns 8 (o % 4) .. + 7
        row, col = drain_slot(memory, o)
        yield from rows.ensure(0, row, "drain")
        for reg in range(8):
            yield rows.cmd("WR", 0, row, column=col + reg, kind="drain")
        yield from rows.ensure(0, reserved, "ctrl")
        yield rows.cmd("WR", 0, reserved, kind="ctrl")                      # leave all-bank-PIM
    yield from rows.close_all("mode")
    yield from mode_switch("mode")
    yield from park("park")
