"""Lowering a GEMV to a PIM unit that runs the mode protocol (mode commands, a CRF write, MAC reads).

The built-in lowering of a unit that declares such commands but no `program gemv` (the
LPDDR5X-PIM of the phone spec declares its program; this module stays the reference its
program is checked against, and the layout model of the swizzled copy, interpreter/values/smc.py).

The GEMV pseudo code the phone spec's program cites, with the outputs-split
weight placement it adopts: per output tile o
and input tile i, Write8 fills the input register file, Read32 issues one
MAC-triggering column read per weight burst of the tile's row; after the
input tiles of o, Read5 drains the SIMD pipeline with dummy reads and Write8
stores the output registers into the bank. The host finally reads the
stored partial sums back in single-bank mode and adds their lanes.

Roles come from the unit's command declarations, never from names:
  all-bank activate / precharge  opens / closes, scope all_banks
  input-register write           writes the register file the MAC reads
  MAC read                       reads [row, <input RF>], writes [<output RF>]
  drain read                     scope all_banks, reads and writes nothing
  output write                   reads [<output RF>], writes [row]
  CRF write                      writes [crf]
  mode changes                   writes [mode], four, in the protocol's order:
                                 enter all-bank, enter all-bank-PIM, leave
                                 all-bank-PIM, back to single-bank
  result read                    scope bank, reads [row]
and the single-bank ACT/PRE of the readback from the DRAM part.

Layout (`GemvLayout`): outputs are split over the PIM blocks of the memory
(every bank of every rank of every channel), a contiguous run per block;
block b holds its outputs' whole matrix rows (PIMnast). Within a block,
output tile o (one output register each) and input tile i (one input
register per burst) occupy row `first_row + o * n_in + i` of every bank; its
burst 8k + j holds the 16 weights of local output j for input burst k. The
partial sums of output tile o land in row `out_row + (8 o) // bursts_per_row`.

Assumes: weights and output rows allocated (`first_row`, `out_row`), every
bank idle and precharged at the start. Guarantees: program order; each loop
body starts and ends with every bank precharged, so bodies are pure functions
of the iteration (the `Loop` contract); ranks of a channel are interleaved
command by command so that they compute in parallel.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..ir.errors import PimdslError
from ..ir.commands import Command
from ..interpreter.dram.tables import find_roles
from ..ir.hardware import CommandDecl, Memory
from .stream import Item, Loop

DRAIN_READS = 5                    # Algorithm 1: Read5(DummyAddr)


class LoweringError(PimdslError):
    pass


@dataclass(frozen=True)
class Protocol:
    """Command names of each role, found from the declarations (see the module docstring)."""
    act_ab: str
    pre_ab: str
    grf_wr: str
    mac_rd: str
    drain_rd: str
    out_wr: str
    crf_wr: str
    mode_ab: str
    mode_abpim: str
    mode_exit: str
    mode_sb: str
    result_rd: str
    input_rf: str
    output_rf: str

    @classmethod
    def of(cls, memory: Memory) -> "Protocol":
        pim = memory.pim
        cmds: tuple[CommandDecl, ...] = pim.commands if pim else ()
        rfs = {rf.name for rf in pim.register_files} if pim else set()

        def one(what: str, test) -> CommandDecl:
            found = [c for c in cmds if test(c)]
            if not found:
                raise LoweringError(f"PIM unit '{pim.name if pim else '?'}' declares no command that {what}")
            return found[0]

        mac = one("reads [row, <register file>] and writes a register file (the MAC read)",
                  lambda c: "row" in c.reads and set(c.reads) & rfs and set(c.writes) & rfs)
        in_rf = sorted(set(mac.reads) & rfs)[0]
        out_rf = sorted(set(mac.writes) & rfs)[0]
        modes = [c for c in cmds if "mode" in c.writes]
        if len(modes) != 4:
            raise LoweringError(f"PIM unit '{pim.name}' needs four mode commands (writes = [mode]): enter "
                                f"all-bank, enter all-bank-PIM, leave all-bank-PIM, single-bank; it has {len(modes)}")
        return cls(
            act_ab=one("opens a row in all banks (opens = true, scope = all_banks)",
                       lambda c: c.opens and c.scope == "all_banks").name,
            pre_ab=one("closes all banks (closes = true, scope = all_banks)",
                       lambda c: c.closes and c.scope == "all_banks").name,
            grf_wr=one(f"writes the input registers (writes = [{in_rf}])", lambda c: c.writes == (in_rf,)).name,
            mac_rd=mac.name,
            drain_rd=one("drains the pipeline (scope = all_banks, no reads or writes)",
                         lambda c: c.scope == "all_banks" and not c.reads and not c.writes
                         and not c.opens and not c.closes).name,
            out_wr=one(f"stores the output registers (reads = [{out_rf}], writes = [row])",
                       lambda c: out_rf in c.reads and "row" in c.writes).name,
            crf_wr=one("programs the instruction registers (writes = [crf])", lambda c: "crf" in c.writes).name,
            mode_ab=modes[0].name, mode_abpim=modes[1].name, mode_exit=modes[2].name, mode_sb=modes[3].name,
            result_rd=one("reads results back (scope = bank, reads = [row])",
                          lambda c: c.scope == "bank" and c.reads == ("row",)).name,
            input_rf=in_rf, output_rf=out_rf)


@dataclass(frozen=True)
class GemvLayout:
    """Where an out x in GEMV lives: blocks, tiles and rows (see the module docstring)."""
    out_dim: int
    in_dim: int
    blocks: int                    # PIM blocks of the memory: channels x ranks x banks
    out_per_block: int
    in_regs: int                   # input registers: bursts of one input tile
    out_regs: int                  # output registers: outputs of one output tile
    lanes: int
    n_in: int
    n_out: int
    bursts_per_row: int
    first_row: int
    out_row: int

    @classmethod
    def of(cls, memory: Memory, out_dim: int, in_dim: int, first_row: int = 0, out_row: int | None = None):
        pim, org = memory.pim, memory.organization
        proto = Protocol.of(memory)
        regs = {rf.name: rf.count for rf in pim.register_files}
        in_regs, out_regs = regs[proto.input_rf], regs[proto.output_rf]
        if in_regs * out_regs > org.bursts_per_row:
            raise LoweringError(f"a tile of {in_regs} x {out_regs} bursts does not fit a row of "
                                f"{org.bursts_per_row} bursts")
        blocks = org.channels * org.pseudo_channels * org.ranks * org.banks_per_rank
        out_per_block = math.ceil(out_dim / blocks)
        n_in = math.ceil(in_dim / (in_regs * pim.lanes))
        n_out = math.ceil(out_per_block / out_regs)
        if out_row is None:
            out_row = first_row + n_in * n_out
        return cls(out_dim, in_dim, blocks, out_per_block, in_regs, out_regs, pim.lanes, n_in, n_out,
                   org.bursts_per_row, first_row, out_row)

    @property
    def weight_rows(self) -> int:
        return self.n_in * self.n_out

    @property
    def result_rows(self) -> int:
        return math.ceil(self.n_out * self.out_regs / self.bursts_per_row)

    def block_of(self, memory: Memory, block: int) -> tuple[int, int, int]:
        """(channel, rank, bank within the rank) of PIM block `block`."""
        org = memory.organization
        rank_all, bank = divmod(block, org.banks_per_rank)
        channel, rank = divmod(rank_all, org.ranks * org.pseudo_channels)
        return channel, rank, bank

    def weight_place(self, n: int, m: int) -> tuple[int, int, int, int, int, int]:
        """(block, row, burst column, lane) of weight element (output n, input m)... and (o, i)."""
        block, local = divmod(n, self.out_per_block)
        o, j = divmod(local, self.out_regs)
        in_tile = self.in_regs * self.lanes
        i, rest = divmod(m, in_tile)
        k, lane = divmod(rest, self.lanes)
        return block, self.first_row + o * self.n_in + i, k * self.out_regs + j, lane, o, i

    def result_place(self, o: int, j: int) -> tuple[int, int]:
        """(row, burst column) where output register j of output tile o is stored."""
        burst = o * self.out_regs + j
        return self.out_row + burst // self.bursts_per_row, burst % self.bursts_per_row


def gemv_program(memory: Memory, layout: GemvLayout, channel: int = 0, x=None, op: str = "") -> list[Item]:
    """The structured stream of one channel's share of the GEMV (every channel runs the same).
    With `x` (values mode), input-register writes carry their slice of the input vector."""
    proto = Protocol.of(memory)
    org = memory.organization
    roles = find_roles(memory.part.commands)
    act, pre = memory.part.commands[roles.act].name, memory.part.commands[roles.pre].name
    ranks = range(org.ranks * org.pseudo_channels)
    bpg = org.banks_per_group

    def cmd(name, rank, bank=0, row=0, column=0, kind="", data=None):
        pc, r = divmod(rank, org.ranks)
        bg, b = divmod(bank, bpg)
        return Command(name, channel, pc, r, bg, b, row, column, kind, data)

    def mode(name, kind):
        return [cmd(name, r, kind=kind) for r in ranks]

    def tile(o: int, i: int) -> list[Command]:
        row = layout.first_row + o * layout.n_in + i
        out = []
        for reg in range(layout.in_regs):          # Write8: the input tile into the input registers
            data = None
            if x is not None:
                start = i * layout.in_regs * layout.lanes + reg * layout.lanes
                data = x[start:start + layout.lanes]
            out += [cmd(proto.grf_wr, r, column=reg, kind="grf_in", data=data) for r in ranks]
        out += [cmd(proto.act_ab, r, row=row, kind="act") for r in ranks]
        for col in range(layout.in_regs * layout.out_regs):   # Read32: one MAC per weight burst
            out += [cmd(proto.mac_rd, r, row=row, column=col, kind="mac") for r in ranks]
        out += [cmd(proto.pre_ab, r, kind="pre") for r in ranks]
        return out

    def store(o: int) -> list[Command]:
        out = []
        for _ in range(DRAIN_READS):                       # Read5: drain the SIMD pipeline
            out += [cmd(proto.drain_rd, r, kind="drain") for r in ranks]
        row, col = layout.result_place(o, 0)
        out += [cmd(proto.act_ab, r, row=row, kind="act") for r in ranks]
        for j in range(layout.out_regs):                   # Write8: output registers -> bank
            out += [cmd(proto.out_wr, r, row=row, column=col + j, kind="out") for r in ranks]
        out += [cmd(proto.pre_ab, r, kind="pre") for r in ranks]
        return out

    def output_tile(o: int) -> list[Item]:
        return [Loop(layout.n_in, lambda i: tile(o, i), "input tile", op=op), *store(o)]

    def readback(res_row: int, bursts: int) -> list[Item]:
        """One result row of every bank, banks interleaved so that their ACTs and reads overlap."""
        row = layout.out_row + res_row
        places = [(r, b) for b in range(org.banks_per_rank) for r in ranks]
        reads = Loop(bursts, lambda c: [cmd(proto.result_rd, r, b, row=row, column=c, kind="readback")
                                        for r, b in places], "result burst", op=op)
        return [*(cmd(act, r, b, row=row, kind="readback") for r, b in places), reads,
                *(cmd(pre, r, b, kind="readback") for r, b in places)]

    results = layout.n_out * layout.out_regs
    full_rows, tail = divmod(results, layout.bursts_per_row)
    return [
        *mode(proto.mode_ab, "mode"),
        *[cmd(proto.crf_wr, r, kind="crf") for r in ranks],
        *mode(proto.mode_abpim, "mode"),
        Loop(layout.n_out, output_tile, "output tile", op=op),
        *mode(proto.mode_exit, "mode"),
        *mode(proto.mode_sb, "mode"),
        Loop(full_rows, lambda n: readback(n, layout.bursts_per_row), "result row", op=op),
        *(readback(full_rows, tail) if tail else []),
    ]
