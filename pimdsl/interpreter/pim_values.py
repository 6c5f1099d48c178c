"""The interpreter's values: PIM command streams executed on numpy-backed banks.

Banks hold the allocated data in its real layout: (bank, row) -> a row of
`bursts x lanes` elements of the PIM unit's datatype (fp16, or bfloat16
through ml_dtypes), allocated when first touched. Executors run the typed
commands of one channel in stream order, with the unit's register files and
accumulation order, so that a result computed through the commands can be
compared with numpy: exactly when numpy follows the same order
(`*_reference`), within a datatype tolerance against float64.

Accumulation order of HBM-PIM (Aquabolt-XL), stated, as the hardware's is
not fully public: each MAC rounds the product to the unit's datatype, then
the sum (GRF_B += GRF_A x bank burst, lane by lane); the host adds the 16
lane partial sums of each output in float32, lane 0 first. Declared PIM
programs run in program_values.
"""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from ..ir.hardware import Memory
from ..lowering.hbm_pim_gemv import GemvTiling, drain_slot, weight_slot
from .command_stream import Command

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


# ---- Samsung HBM-PIM (Aquabolt-XL) -------------------------------------------------------------
def place_gemv_weights(memory: Memory, banks: Banks, w: np.ndarray) -> None:
    """Write one pCH's weights (out_per_pch x in) where gemv_stream's MAC reads find them:
    for tile (o, i), block p, burst 8k + j holds W[o*64 + p*8 + j, i*128 + k*16 : +16]."""
    out, n_in_elems = w.shape
    t = GemvTiling.of(memory, out, n_in_elems)
    lanes, blocks = banks.lanes, t.out_tile // 8
    padded = np.zeros((t.n_out * t.out_tile, t.n_in * t.in_tile), dtype=banks.dtype)
    padded[:out, :n_in_elems] = w
    for o in range(t.n_out):
        for i in range(t.n_in):
            for n in range(t.bursts_per_block):
                k, j = divmod(n, 8)
                pair_bank, row, col = weight_slot(memory, out, n_in_elems, o, i, n)
                cols = slice(i * t.in_tile + k * lanes, i * t.in_tile + (k + 1) * lanes)
                for p in range(blocks):
                    banks.row(2 * p + pair_bank, row)[col] = padded[o * t.out_tile + p * 8 + j, cols]


class HbmPimExecutor:
    """Runs gemv_stream's typed commands: GRF_A writes, MAC reads, drains, mode toggles."""

    def __init__(self, memory: Memory, banks: Banks):
        regs = {rf.name: rf.count for rf in memory.pim.register_files}
        self.banks, self.dt = banks, banks.dtype
        self.blocks = memory.organization.banks_per_rank // 2
        self.grf_a = np.zeros((regs.get("grf_a", 8), banks.lanes), dtype=self.dt)
        self.grf_b = np.zeros((self.blocks, regs.get("grf_b", 8), banks.lanes), dtype=self.dt)
        self.pim_mode = False
        self.macs = 0

    def execute(self, cmd: Command) -> None:
        kind = cmd.kind
        if kind == "ctrl":                      # enter / leave all-bank-PIM; entering clears GRF_B
            self.pim_mode = not self.pim_mode
            if self.pim_mode:
                self.grf_b[:] = 0
        elif kind == "grf_a" and cmd.name == "WR":
            self.grf_a[cmd.column] = np.asarray(cmd.data, dtype=self.dt)
            if cmd.column == 0:
                self.macs = 0                   # a new input tile: the CRF loop restarts
        elif kind == "mac" and cmd.name == "RD":
            k, j = divmod(self.macs % (8 * self.grf_a.shape[0]), 8)
            pair_bank = self.banks.flat_bank(cmd)
            for p in range(self.blocks):
                burst = self.banks.row(2 * p + pair_bank, cmd.row)[cmd.column]
                product = (self.grf_a[k] * burst).astype(self.dt)
                self.grf_b[p, j] = (self.grf_b[p, j] + product).astype(self.dt)
            self.macs += 1
        elif kind == "drain" and cmd.name == "WR":
            reg = cmd.column % 8
            for p in range(self.blocks):
                self.banks.row(2 * p + self.banks.flat_bank(cmd), cmd.row)[cmd.column] = self.grf_b[p, reg]


def read_gemv_result(memory: Memory, banks: Banks, out_per_pch: int, in_dim: int) -> np.ndarray:
    """The host's readback: each output's 16 lane partial sums, added in float32."""
    t = GemvTiling.of(memory, out_per_pch, in_dim)
    y = np.zeros(t.n_out * t.out_tile, dtype=np.float32)
    for o in range(t.n_out):
        row, col = drain_slot(memory, o)
        for p in range(t.out_tile // 8):
            for j in range(8):
                lanes = banks.row(2 * p, row)[col + j].astype(np.float32)
                acc = np.float32(0)
                for v in lanes:
                    acc = np.float32(acc + v)
                y[o * t.out_tile + p * 8 + j] = acc
    return y[:out_per_pch]


def hbm_pim_gemv_reference(w: np.ndarray, x: np.ndarray, dtype: str, lanes: int = 16) -> np.ndarray:
    """numpy in the executor's order: per output and lane, MACs over the input bursts in
    order, each product and sum rounded to `dtype`; then lanes added in float32."""
    dt = NUMPY_DTYPES[dtype]
    out, n = w.shape
    n_pad = math.ceil(n / 128) * 128
    wp = np.zeros((out, n_pad), dtype=dt)
    wp[:, :n] = w
    xp = np.zeros(n_pad, dtype=dt)
    xp[:n] = x
    acc = np.zeros((out, lanes), dtype=dt)
    for start in range(0, n_pad, lanes):
        acc = (acc + (wp[:, start:start + lanes] * xp[start:start + lanes]).astype(dt)).astype(dt)
    y = np.zeros(out, dtype=np.float32)
    for lane in range(lanes):
        y = (y + acc[:, lane].astype(np.float32)).astype(np.float32)
    return y
