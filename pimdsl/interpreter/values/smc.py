"""Swizzled memory copy (SMC): PIM-aware weights back into the host's layout, on numpy banks.

PIM-SHERPA ([PIM_SHERPA]) keeps each LLM weight once, PIM-aware
in the non-cacheable region: every bank holds complete matrix rows, column-
major at 256-bit burst granularity (16 BF16 elements; the PIMnast placement,
Sec. 2.2-2.3, Fig. 3(c)); `GemvLayout` says where each burst lives. Before a
prefill GEMM on the CPU, SMC (Sec. 4.2, Fig. 6) takes every element
coordinate (row, column) of the weight matrix, locates the DRAM (bank, row,
column) holding it through the layout and the address map, and copies it
to the element's host-friendly position in a cacheable buffer, so the
unmodified GEMM kernel runs on it (the paper's option 2).

`swizzled_copy` is that copy on the interpreter's banks: the exact inverse
of `place_weights`, derived from `GemvLayout.weight_place` / `block_of`.
Guarantee: bit-exact (no rounding, no reordering of a value's bits), so a
GEMM on the copy equals a GEMM on the original weights bit for bit.
`pim_aware_address` is the Fig. 6 source offset; `smc_traffic_bytes` is the
DRAM traffic of one copy as Sec. 3.3 models it. Not modelled here: the
copy's time and its schedule (copy threads, bandwidth, DDB/OWR): the SMC
pass (passes/smc.py) and the host timing models own those.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ...ir.hardware import Memory
from ...lowering.mode_protocol_gemv import GemvLayout
from ...ir.addresses import row_stride

if TYPE_CHECKING:     # the smc pass of every compile loads this module; banks loads ml_dtypes (0.5 s)
    from .banks import Banks

CHUNK_ELEMENTS = 1 << 16           # elements per step: the index arrays stay in cache (4x faster than 2M)


def swizzled_copy(memory: Memory, layout: GemvLayout, banks_by_channel: dict[tuple[int, int], Banks]) -> np.ndarray:
    """W (out x in, the banks' datatype: bfloat16 on LPDDR5X-PIM) read back from its PIM-aware place.

    The result is row-major out x in, each output's `in` weights contiguous:
    the order of the checkpoint (a Linear layer's [out_features,
    in_features]) and of the CPU GEMM Y = X W^T, whose dot products then
    stream consecutive addresses (Fig. 3(b): column-major in the in x out
    view). Rows never written read as zeros; the banks are not modified."""
    org = memory.organization
    ranks = org.ranks * org.pseudo_channels
    some = next(iter(banks_by_channel.values()))
    if some.lanes != layout.lanes:
        raise ValueError(f"banks hold {some.lanes} elements per burst, the layout {layout.lanes}")
    # The weight rows of every bank as one array: DRAM as the copy sees it.
    rows = layout.weight_rows
    source = np.zeros((org.channels, ranks, org.banks_per_rank, rows, some.bursts, some.lanes), some.dtype)
    for (channel, rank), banks in banks_by_channel.items():
        for (bank, row), data in banks.rows.items():
            if layout.first_row <= row < layout.first_row + rows:
                source[channel, rank, bank, row - layout.first_row] = data
    flat = source.reshape(-1)

    out = np.empty((layout.out_dim, layout.in_dim), some.dtype)
    m = np.arange(layout.in_dim)[None, :]
    step = max(1, CHUNK_ELEMENTS // max(layout.in_dim, 1))
    for start in range(0, layout.out_dim, step):
        n = np.arange(start, min(start + step, layout.out_dim))[:, None]
        block, row, col, lane, _, _ = layout.weight_place(n, m)      # element coordinates -> DRAM
        channel, rank, bank = layout.block_of(memory, block)
        bank_index = (channel * ranks + rank) * org.banks_per_rank + bank
        out[start:start + len(n)] = flat[((bank_index * rows + row - layout.first_row) * some.bursts + col)
                                         * some.lanes + lane]
    return out


def pim_aware_address(memory: Memory, layout: GemvLayout, n, m):
    """The byte address of weight element (output n, input m) in the PIM-aware layout (Fig. 6's source
    offset): its DRAM coordinates put through the memory's address map. Works on numpy arrays."""
    org = memory.organization
    block, row, col, lane, _, _ = layout.weight_place(n, m)
    channel, rank_all, bank_all = layout.block_of(memory, block)
    pseudo_channel, rank = np.divmod(rank_all, org.ranks)
    bank_group, bank = np.divmod(bank_all, org.banks_per_group)
    fields = {"channel": channel, "pseudo_channel": pseudo_channel, "rank": rank,
              "bank_group": bank_group, "bank": bank, "row": row, "column": col}
    address = np.asarray(lane) * (org.access_bytes // layout.lanes)
    for name, (low, _) in memory.address_bits.items():
        address = address + (np.asarray(fields[name], dtype=np.int64) << low)
    return address


def pim_aware_bytes(memory: Memory, layout: GemvLayout) -> int:
    """Bytes of the layout's weight rows in every bank (padding included, result rows excluded)."""
    return layout.weight_rows * row_stride(memory)


def smc_traffic_bytes(source_bytes: int, dest_bytes: int) -> int:
    """DRAM traffic of one SMC (Sec. 3.3, three transactions per weight): read the non-cacheable
    PIM-aware source, read the destination into the cache (write-allocate) and write it back."""
    return source_bytes + 2 * dest_bytes
