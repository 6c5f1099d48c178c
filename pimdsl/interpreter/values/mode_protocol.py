"""Values of the mode-protocol GEMV (mode_protocol_gemv): GEMV through the commands on numpy banks.

`place_weights` writes a weight matrix where `GemvLayout` says each element
lives (channel, rank, bank, row, burst, lane); `ModeProtocolExecutor` runs one
channel's commands from `gemv_program` on those banks with the unit's
register files; `read_result` is the host's readback (lane partial sums
added in float32). Accumulation order, as the HBM-PIM executor's
(values/banks.py): each MAC rounds the product and then the sum to the unit's
datatype, lane by lane, input bursts in order. Storing an output register
clears it, as the CRF program's first MUL of the next output tile would.
"""
from __future__ import annotations

import numpy as np

from ...ir.hardware import Memory
from ...lowering.mode_protocol_gemv import GemvLayout, Protocol
from ...ir.commands import Command
from .banks import Banks


def channel_banks(memory: Memory) -> dict[tuple[int, int], Banks]:
    """Empty banks of every (channel, rank) of the memory, in the PIM unit's datatype."""
    org = memory.organization
    return {(c, r): Banks(memory, memory.pim.dtype)
            for c in range(org.channels) for r in range(org.ranks * org.pseudo_channels)}


def place_weights(memory: Memory, layout: GemvLayout, banks: dict, w: np.ndarray) -> None:
    """Write W (out x in) into the banks at the places `layout.weight_place` gives."""
    lanes = layout.lanes
    out_dim, in_dim = w.shape
    for n in range(out_dim):
        for start in range(0, in_dim, lanes):
            block, row, col, _, _, _ = layout.weight_place(n, start)
            channel, rank, bank = layout.block_of(memory, block)
            piece = w[n, start:start + lanes]
            banks[(channel, rank)].row(bank, row)[col, :len(piece)] = piece


class ModeProtocolExecutor:
    """One channel's PIM blocks: input and output register files per rank and bank."""

    def __init__(self, memory: Memory, layout: GemvLayout, banks: dict, channel: int):
        self.proto = Protocol.of(memory)
        self.layout, self.banks, self.channel = layout, banks, channel
        org = memory.organization
        self.banks_per_rank = org.banks_per_rank
        self.ranks = org.ranks
        dt = next(iter(banks.values())).dtype
        self.dt = dt
        ranks = org.ranks * org.pseudo_channels
        self.grf_in = np.zeros((ranks, layout.in_regs, layout.lanes), dtype=dt)
        self.grf_out = np.zeros((ranks, self.banks_per_rank, layout.out_regs, layout.lanes), dtype=dt)
        self.macs = [0] * ranks
        self.stores = [0] * ranks

    def execute(self, cmd: Command) -> None:
        p, r = self.proto, cmd.pseudo_channel * self.ranks + cmd.rank
        banks = self.banks[(self.channel, r)]
        if cmd.name == p.grf_wr:
            self.grf_in[r, cmd.column] = np.asarray(cmd.data, dtype=self.dt)
            if cmd.column == 0:
                self.macs[r] = 0                  # a new input tile: the CRF loop restarts
        elif cmd.name == p.mac_rd:
            k, j = divmod(self.macs[r] % (self.layout.in_regs * self.layout.out_regs), self.layout.out_regs)
            bursts = np.stack([banks.row(b, cmd.row)[cmd.column] for b in range(self.banks_per_rank)])
            product = (bursts * self.grf_in[r, k]).astype(self.dt)
            self.grf_out[r, :, j] = (self.grf_out[r, :, j] + product).astype(self.dt)
            self.macs[r] += 1
        elif cmd.name == p.out_wr:
            j = self.stores[r] % self.layout.out_regs
            for b in range(self.banks_per_rank):
                banks.row(b, cmd.row)[cmd.column] = self.grf_out[r, b, j]
            self.grf_out[r, :, j] = 0
            self.stores[r] += 1


def read_result(memory: Memory, layout: GemvLayout, banks: dict) -> np.ndarray:
    """The host's readback: every output's lane partial sums, added in float32, lane 0 first."""
    y = np.zeros(layout.blocks * layout.out_per_block, dtype=np.float32)
    for block in range(layout.blocks):
        channel, rank, bank = layout.block_of(memory, block)
        for local in range(layout.out_per_block):
            o, j = divmod(local, layout.out_regs)
            row, col = layout.result_place(o, j)
            acc = np.float32(0)
            for v in banks[(channel, rank)].row(bank, row)[col].astype(np.float32):
                acc = np.float32(acc + v)
            y[block * layout.out_per_block + local] = acc
    return y[:layout.out_dim]
