"""The interpreter's values: numpy-backed banks, and numpy in the PIM executors' order.

Banks hold the allocated data in its real layout: (bank, row) -> a row of
`bursts x lanes` elements of the PIM unit's datatype (fp16, or bfloat16
through ml_dtypes), allocated when first touched. Executors (values/programs.py
for declared programs, values/mode_protocol.py) run the typed commands
of one channel in stream order, with the unit's register files and
accumulation order, so that a result computed through the commands can be
compared with numpy: exactly when numpy follows the same order
(`hbm_pim_gemv_reference`), within a datatype tolerance against float64.

Accumulation order of a lane-wise MAC unit (HBM-PIM, LPDDR5X-PIM), stated, as
the hardware's is not fully public: each MAC rounds the product to the unit's
datatype, then the sum (acc += input x bank burst, lane by lane); the host
adds the 16 lane partial sums of each output in float32, lane 0 first.
"""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from ...ir.hardware import Memory
from ...ir.commands import Command

NUMPY_DTYPES = {"fp16": np.dtype(np.float16), "bf16": np.dtype(ml_dtypes.bfloat16), "fp32": np.dtype(np.float32)}


class Banks:
    """One channel's banks: rows of `bursts x lanes` elements, allocated lazily (zeros)."""

    def __init__(self, memory: Memory, dtype: str):
        org = memory.organization
        self.dtype = NUMPY_DTYPES[dtype]
        self.bursts = org.bursts_per_row
        self.lanes = org.access_bytes // self.dtype.itemsize
        self.banks_per_group = org.banks_per_group
        self.rows: dict[tuple[int, int], np.ndarray] = {}

    def row(self, bank: int, row: int) -> np.ndarray:
        key = (bank, row)
        if key not in self.rows:
            self.rows[key] = np.zeros((self.bursts, self.lanes), dtype=self.dtype)
        return self.rows[key]

    def flat_bank(self, cmd: Command) -> int:
        return cmd.bank_group * self.banks_per_group + cmd.bank


def hbm_pim_gemv_reference(w: np.ndarray, x: np.ndarray, dtype: str, lanes: int = 16,
                           even_tiles_first: int = 0) -> np.ndarray:
    """numpy in the executor's order: per output and lane, MACs over the input bursts in
    order, each product and sum rounded to `dtype`; then lanes added in float32. With
    `even_tiles_first` (an input tile size), the even input tiles run before the odd ones, as the
    HBM-PIM kernel runs them ([REFDATA] pim README Sec. 3)."""
    dt = NUMPY_DTYPES[dtype]
    out, n = w.shape
    n_pad = math.ceil(n / 128) * 128
    wp = np.zeros((out, n_pad), dtype=dt)
    wp[:, :n] = w
    xp = np.zeros(n_pad, dtype=dt)
    xp[:n] = x
    starts = list(range(0, n_pad, lanes))
    if even_tiles_first:
        tile = lambda s: s // even_tiles_first
        starts = [s for s in starts if tile(s) % 2 == 0] + [s for s in starts if tile(s) % 2 == 1]
    acc = np.zeros((out, lanes), dtype=dt)
    for start in starts:
        acc = (acc + (wp[:, start:start + lanes] * xp[start:start + lanes]).astype(dt)).astype(dt)
    y = np.zeros(out, dtype=np.float32)
    for lane in range(lanes):
        y = (y + acc[:, lane].astype(np.float32)).astype(np.float32)
    return y
