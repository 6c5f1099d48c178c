"""Validation of the declared HBM-PIM GEMV program against Samsung's PIMSimulator ([REFDATA] pim README Sec. 1, 3).

`pim_cycles` expands one pCH's share of an out x in GEMV from the memory's
PIM unit's `program gemv` (specs/pim/hbm_pim.pim) and times it command by
command with the ordered-stream timer and the memory's refresh, counted as
the reference counts: from the first command (cycle 1) until the data of the
last read before the result readback returns (weights preloaded; the
readback and the host reduction are excluded, README Sec. 1 and 3).
`baseline_cycles` streams the same weights through the memory's controller
with no compute (the reference's non-PIM baseline), bank groups interleaved.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from ..interpreter.dram.command_stream import CommandTimer
from ..interpreter.dram.memory_system import replay
from ..interpreter.op_timing import refresh_policy
from ..interpreter.dram.traces import Trace
from ..ir.hardware import Memory
from ..lowering.pim_program import expand
from ..lowering.stream import unroll

_REFERENCE_DIR = Path(__file__).resolve().parents[2] / "validation" / "reference" / "pim"

# [REFDATA] pim README Sec. 1, "Numbers given here": per-pCH out -> {in: cycles}; 64 pCH 4096 x 4096 baseline
REFERENCE = {64: {128: 750, 256: 1138, 512: 1867, 1024: 3662, 2048: 6970, 4096: 13166},
             128: {128: 1169, 256: 1945, 512: 3767, 1024: 7037, 2048: 13218, 4096: 26337}}
REFERENCE_SYSTEM = {"out": 4096, "in": 4096, "pim": 13166, "baseline": 36082}


def extra_rows() -> list[dict]:
    """[REFDATA] pim extra.json: 27 more sizes of the same kernel (64 pCH, per-pCH out = out / 64)."""
    return json.loads((_REFERENCE_DIR / "extra.json").read_text())["rows"]


def gemv_commands(memory: Memory, out_per_pch: int, in_dim: int, channel: int = 0):
    """One pCH's commands of the unit's declared GEMV program, in program order."""
    shape = {"n": out_per_pch * memory.organization.channels, "k": in_dim, "m": 1}
    return unroll(expand(memory, memory.pim.program("gemv"), shape, channel))


def pim_cycles(memory: Memory, out_per_pch: int, in_dim: int, refresh: str | None = None) -> tuple[int, dict]:
    """Cycles of one pCH's kernel as the reference counts them, and the commands by `kind.NAME`."""
    pim = memory.pim
    timer = CommandTimer(memory, pim.commands, pim.rules, pim.windows,
                         refresh=refresh or refresh_policy(memory))
    data_return = memory.part.read_latency_cycles
    end, kinds, refreshes = 0, {}, 0
    for n, cmd in enumerate(gemv_commands(memory, out_per_pch, in_dim)):
        if cmd.kind == "readback":          # the result readback is not in the reference's count
            break
        cycle = timer.issue(cmd, n)
        if cmd.name == "RD":
            end, refreshes = cycle + data_return, timer.refreshes
        key = f"{cmd.kind}.{cmd.name}"
        kinds[key] = kinds.get(key, 0) + 1
    kinds["REF"] = refreshes                # refreshes before the last counted read
    return end + 1, kinds                   # the first command issues at the count's cycle 1


def stream_cycles(memory: Memory, out_per_pch: int, in_dim: int) -> int:
    """The whole declared stream, readback included, timed exactly: what `pimc run` reports as pim_cycles."""
    pim = memory.pim
    timer = CommandTimer(memory, pim.commands, pim.rules, pim.windows, refresh=refresh_policy(memory))
    return max(timer.issue(c, n) for n, c in enumerate(gemv_commands(memory, out_per_pch, in_dim))) + 1


def system_pim_cycles(memory: Memory, out: int, in_dim: int) -> int:
    """The whole memory: its pCHs are independent and identical, so one pCH's time."""
    return pim_cycles(memory, math.ceil(out / memory.organization.channels), in_dim)[0]


def baseline_cycles(memory: Memory, out: int, in_dim: int, dtype_bytes: int = 2) -> int:
    org = memory.organization
    channels = org.channels
    per_channel = math.ceil(out * in_dim * dtype_bytes / org.access_bytes / channels)
    groups, banks, bursts = org.bank_groups, org.banks_per_group, org.bursts_per_row
    bank, row, col = [], [], []
    for k in range(per_channel):
        bank.append((k % groups) * banks + (k // groups) % banks)
        col.append((k // (groups * banks)) % bursts)
        row.append(k // (groups * banks * bursts))
    # every pCH streams its share in lockstep (replay simulates one and counts it `channels` times)
    n = per_channel * channels
    rep = lambda xs: [x for x in xs for _ in range(channels)]
    trace = Trace([0] * n, [False] * n, [c for _ in range(per_channel) for c in range(channels)],
                  rep(bank), rep(row), rep(col))
    return replay(memory, trace).cycles
