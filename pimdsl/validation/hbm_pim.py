"""Validation of the HBM-PIM command family against Samsung's PIMSimulator ([REFDATA] pim README Sec. 1).

`pim_cycles` lowers one pCH's share of an out x in GEMV with
pimdsl.lowering.hbm_pim_gemv and times it with the ordered-stream timer and
blocking refresh, counted as the reference counts: from the start of the
park-in reads to the last park-out read, weights preloaded, no readback.
`baseline_cycles` streams the same weights through the memory's controller
with no compute (the reference's non-PIM baseline), bank groups interleaved.
"""
from __future__ import annotations

import math

from ..interpreter.command_stream import CommandTimer
from ..interpreter.memory_system import replay
from ..interpreter.traces import Trace
from ..ir.hardware import Memory
from ..lowering.hbm_pim_gemv import gemv_stream

# [REFDATA] pim README Sec. 1, "Numbers given here": per-pCH out -> {in: cycles}; 64 pCH 4096 x 4096 baseline
REFERENCE = {64: {128: 750, 256: 1138, 512: 1867, 1024: 3662, 2048: 6970, 4096: 13166},
             128: {128: 1169, 256: 1945, 512: 3767, 1024: 7037, 2048: 13218, 4096: 26337}}
REFERENCE_SYSTEM = {"out": 4096, "in": 4096, "pim": 13166, "baseline": 36082}


def pim_cycles(memory: Memory, out_per_pch: int, in_dim: int, refresh: str = "blocking") -> tuple[int, dict]:
    timer = CommandTimer(memory, refresh=refresh)
    end, kinds = 0, {}
    for n, cmd in enumerate(gemv_stream(memory, out_per_pch, in_dim)):
        cycle = timer.issue(cmd, n)
        if cmd.name == "RD":
            end = cycle + 1
        key = f"{cmd.kind}.{cmd.name}"
        kinds[key] = kinds.get(key, 0) + 1
    kinds["REF"] = timer.refreshes
    return end, kinds


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
