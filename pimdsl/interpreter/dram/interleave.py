"""PIM work and ordinary accesses on one channel at once: the NeuPIMs memory controller (section 5.3).

With dual row buffers (section 5.1) a bank's PIM row buffer serves PIM commands while its MEM row
buffer serves the NPU's reads and writes, so the controller interleaves the two command streams
on the channel's command buses; it "prioritize[s] PIM commands over memory read/write commands"
(section 5.3). `time_interleaved` issues both streams, each in its own program order, on one
`CommandTimer`: in every step the PIM stream's next command issues unless the ordinary stream's
next command could issue strictly earlier (it fills cycles PIM cannot use). With a single row
buffer (blocked PIM) the two cannot share the banks, so the ordinary stream waits for the PIM
stream to finish. Everything the spec's rules say (shared buses, bank timing, refresh) applies
to both streams alike.

`contention` measures what one stream costs the other on the bundled memory: the PIM stream's
slowdown and the ordinary stream's bandwidth with and without PIM beside it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator

from ...ir.hardware import Memory
from .command_stream import CommandTimer
from ...ir.commands import Command


def timer_for(memory: Memory, refresh: str = "none") -> CommandTimer:
    pim = memory.pim
    return CommandTimer(memory, pim.commands, pim.rules, pim.windows, refresh=refresh)


def time_interleaved(memory: Memory, pim: Iterable[Command], ordinary: Iterable[Command],
                     refresh: str = "none") -> tuple[list[int], list[int]]:
    """Issue cycles of both streams (same channel) run together, PIM first (section 5.3)."""
    timer = timer_for(memory, refresh)
    if memory.pim.row_buffers == "single":          # blocked: one after the other
        first = timer.run(pim)
        return first, timer.run(ordinary)
    cycles: tuple[list[int], list[int]] = ([], [])
    streams = (iter(pim), iter(ordinary))
    heads = [next(streams[0], None), next(streams[1], None)]
    last = [0, 0]
    position = 0
    while heads[0] is not None or heads[1] is not None:
        pick = 0 if heads[1] is None else 1 if heads[0] is None else None
        if pick is None:
            at = [timer.earliest(heads[i], last[i]) for i in (0, 1)]
            pick = 1 if at[1] < at[0] else 0
        c = heads[pick]
        timer.last[c.channel] = last[pick]
        last[pick] = timer.issue(c, position)
        cycles[pick].append(last[pick])
        heads[pick] = next(streams[pick], None)
        position += 1
    return cycles


def sequential_reads(memory: Memory, rows: int, channel: int = 0, first_row: int = 0,
                     skip_banks: int = 0) -> Iterator[Command]:
    """An NPU weight stream: whole rows read in turn across the channel's banks (all but the
    first `skip_banks` flat banks), the next bank's row activated before the current one's reads
    so activation overlaps reading."""
    org = memory.organization
    banks = [(r, g, b) for r in range(org.ranks) for g in range(org.bank_groups)
             for b in range(org.banks_per_group)][skip_banks:]
    order = [(banks[i % len(banks)], first_row + i // len(banks)) for i in range(rows)]
    place = lambda i: dict(rank=order[i][0][0], bank_group=order[i][0][1], bank=order[i][0][2])
    if rows:
        yield Command("ACT", channel, row=order[0][1], kind="npu", **place(0))
    for i in range(rows):
        if i + 1 < rows:
            yield Command("ACT", channel, row=order[i + 1][1], kind="npu", **place(i + 1))
        for column in range(org.columns):
            yield Command("RD", channel, row=order[i][1], column=column, kind="npu", **place(i))
        yield Command("PRE", channel, kind="npu", **place(i))


@dataclass(frozen=True)
class Contention:
    pim_alone_cycles: int
    pim_shared_cycles: int
    reads_alone_cycles: int
    reads_shared_cycles: int          # until the last read, with PIM running from cycle 0

    @property
    def pim_slowdown(self) -> float:
        """PIM time beside ordinary traffic over PIM time alone (>= 1)."""
        return self.pim_shared_cycles / self.pim_alone_cycles

    @property
    def read_share(self) -> float:
        """The fraction of its lone bandwidth the ordinary stream keeps while PIM works (<= 1)."""
        return self.reads_alone_cycles / self.reads_shared_cycles


def contention(memory: Memory, pim: list[Command], read_rows: int, skip_banks: int = 0) -> Contention:
    """Run `pim` alone, `read_rows` sequential row reads alone, then both together. The reads
    keep off banks 0 .. skip_banks - 1, whose MEM rows hold the vectors the PIM stream copies in
    (as its program's layouts say), as the vectors are the PIM stream's own."""
    pim_alone = timer_for(memory).run(pim)
    reads = list(sequential_reads(memory, read_rows, skip_banks=skip_banks))
    reads_alone = timer_for(memory).run(reads)
    pim_shared, reads_shared = time_interleaved(memory, pim, reads)
    return Contention(max(pim_alone), max(pim_shared), max(reads_alone), max(reads_shared))
