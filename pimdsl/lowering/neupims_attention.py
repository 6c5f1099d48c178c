"""Lowering decode attention (K.q scores, then the s.V context) to the NeuPIMs commands, per channel.

The NeuPIMs paper's command interface ([NEUPIMS] Sec. 5.2
and Table 1) as the NeuPIMs simulator issues it ([NEUPIMS_SIM];
[REFDATA] pim README Sec. 2): per tile, PIM_HEADER (the GEMV's dimensions, so the
controller can fit it before a refresh; its column says how many PIM_GEMVs
follow, and its `estimate` the tile's cycles, see tile_estimate), one
grouped PIM_ACT per bank group and rank (each opens the PIM row
buffer of the group's banks), PIM_GEMVs on the row (each "perform[s] k
dot-products and read[s] the results", Table 1: one k-COMP dot product per
bank against the global buffer, one result per bank), and a PIM_PRECHARGE
per bank. A PIM_GWRITE (after an ACT of the MEM row that holds the vector)
first fills the channel's global buffer, unless the buffer is taken as
already filled.

Section 6.3 gives the KV layout: "the vector for GEMV is shared across the
banks, the matrix for GEMV is interleaved row-wise to each banks".

K.q (logit): "key caches at the same row and column share the same layer and
head index, with differing sequence indices", so each bank holds the keys of
one token per tile; a tile is one token per bank at the same row index, and
a row holds `row_bytes / (head_dim * dtype)` heads (4 x 128 FP16 in a 1 KB
page). One PIM_GEMV(k) per head computes that head's score in every bank
with k = head_dim / lanes COMP steps (128 / 16 = 8).

s.V (attend): "value caches at the same row and column share the same layer,
head, and sequence index, interleaving each head embedding into banks". The
GEMV's vector is one head's softmax scores, its matrix rows are the head's
embedding dimensions: dimension d of head h lives in bank d % banks, and a
row of that bank holds d's values for a chunk of `row_bytes / dtype`
consecutive tokens (512 FP16), token t at element t % 512. A tile is one
row index across the banks: `banks` dimensions (every bank busy whenever
banks divides head_dim) of one head over one chunk, reduced by a single
PIM_GEMV(k) of k = tokens / lanes COMP steps (32 for a full 1 KB row). The
NPU adds the chunks' partial sums. This is the count of the paper's
Algorithm 1, lines 5-7: (head_dim / banks) x (seq_len / page) x heads tiles
and (seq_len / page) x heads GWRITEs, and the loop order (head, chunk, then
dimension tile, one GWRITE per head and chunk) of the NeuPIMs simulator's
attend (github casys-kaist/NeuPIMs, src/operations/NeuPIMSAttend.cc).

Assumes the memory's PIM unit declares PIM_HEADER, PIM_ACT, PIM_GEMV,
PIM_PRECHARGE and PIM_GWRITE and the channel has at least two banks.
Guarantees: program order, rows open before use, typed commands; generators,
never materialised. A tile's command shape (names, rank, bank group, bank,
kind) does not depend on the tile's index, only its rows and columns do.
"""
from __future__ import annotations

import math
import weakref
from dataclasses import dataclass
from typing import Iterator, Sequence

from ..interpreter.command_stream import Command, CommandTimer
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

    def row(self, head_set: int, tile: int, first_row: int = 0) -> int:
        """The row (in every bank) of one tile's keys."""
        return first_row + head_set * self.tiles + tile


@dataclass(frozen=True)
class ContextTiling:
    dims_per_tile: int            # one embedding dimension per bank of the channel
    tokens_per_row: int           # a chunk: the tokens of one row (512 FP16 in a 1 KB page)
    comp_steps: int               # k of PIM_GEMV: ceil(min(seq_len, tokens_per_row) / lanes)
    chunks: int                   # ceil(seq_len / tokens_per_row), one GWRITE each per head
    dim_tiles: int                # ceil(head_dim / dims_per_tile)
    heads: int

    @classmethod
    def of(cls, memory: Memory, seq_len: int, heads: int, head_dim: int) -> "ContextTiling":
        org, pim = memory.organization, memory.pim
        banks = org.ranks * org.banks_per_rank
        per_row = org.row_bytes // DTYPE_BYTES[pim.dtype]
        # every tile runs the same k, so that tiles share one shape: the last chunk's row and
        # scores are zero past seq_len, and the extra COMP steps add exact zeros
        return cls(banks, per_row, math.ceil(min(seq_len, per_row) / pim.lanes),
                   math.ceil(seq_len / per_row), math.ceil(head_dim / banks), heads)

    @property
    def tiles(self) -> int:
        return self.heads * self.chunks * self.dim_tiles

    def row(self, head: int, chunk: int, dim_tile: int, first_row: int = 0) -> int:
        """The row (in every bank) of one tile's values, in the stream's order."""
        return first_row + (head * self.chunks + chunk) * self.dim_tiles + dim_tile


def query_row(memory: Memory, head_set: int) -> int:
    """The MEM row of bank 0 that holds the query of one head set (what PIM_GWRITE copies)."""
    return memory.organization.rows - 1 - head_set


# The scores live in another bank than the queries (bank 0), so the two GWRITE sources never
# share a row and a K.q stream's open query row needs no precharge before the s.V GWRITEs.
SCORES_BANK = 1


def scores_row(memory: Memory, tiling: ContextTiling, head: int, chunk: int) -> int:
    """The MEM row of bank SCORES_BANK that holds one head's scores for one chunk of tokens.

    The K.q PIM_GEMVs return the scores to the NPU (Table 1), whose vector units run the
    softmax (section 6.1, Figure 10) and write the result, one chunk of tokens per 1 KB row and
    zero past seq_len, through the MEM row buffer while PIM keeps working (section 5.1, dual
    row buffers); PIM_GWRITE then copies that row into the global buffer. The rows are counted
    down from the top of the bank, like query_row."""
    return memory.organization.rows - 1 - (head * tiling.chunks + chunk)


def _bank_place(memory: Memory, flat: int) -> dict:
    org = memory.organization
    rank, rest = divmod(flat, org.banks_per_rank)
    bank_group, bank = divmod(rest, org.banks_per_group)
    return {"rank": rank, "bank_group": bank_group, "bank": bank}


def _gwrite(memory: Memory, channel: int, row: int, place: dict) -> Iterator[Command]:
    """One vector into the global buffer: the MEM row's ACT, PIM_GWRITE, and the row's PRE
    (section 5.2). The copy is all the row is opened for, so it is closed once the copy is done
    (the spec's PIM_GWRITE -> PRE rule): with dual row buffers (section 5.1) that precharge runs
    beside PIM work in the PIM row buffers, with a single row buffer the next grouped PIM_ACT
    waits for it."""
    yield Command("ACT", channel, row=row, kind="gwrite", **place)
    yield Command("PIM_GWRITE", channel, row=row, kind="gwrite", **place)
    yield Command("PRE", channel, kind="gwrite", **place)


def _tile(memory: Memory, channel: int, row: int, gemv_columns: Sequence[int], comp_steps: int,
          estimate: int) -> Iterator[Command]:
    """One row index across the channel's banks: header, grouped activations, GEMVs, precharges."""
    org = memory.organization
    kind = f"gemv_k{comp_steps}"
    yield Command("PIM_HEADER", channel, column=len(gemv_columns), kind="header", estimate=estimate)
    for bg in range(org.bank_groups):
        for rank in range(org.ranks):
            yield Command("PIM_ACT", channel, rank=rank, bank_group=bg, row=row, kind="act")
    for column in gemv_columns:
        yield Command("PIM_GEMV", channel, row=row, column=column, kind=kind)
    for rank in range(org.ranks):
        for bg in range(org.bank_groups):
            for bank in range(org.banks_per_group):
                yield Command("PIM_PRECHARGE", channel, rank=rank, bank_group=bg, bank=bank, kind="precharge")


_ESTIMATES: dict[int, tuple[weakref.ref, dict[tuple[int, int], int]]] = {}   # id(memory) -> (memory, cache)


def tile_estimate(memory: Memory, gemvs: int, comp_steps: int) -> int:
    """What a tile's PIM_HEADER announces (section 5.2: the controller estimates the GEMV's
    end-to-end latency from its dimensions): the cycles from the header to the tile's last
    command, as the spec's rules time one tile of this shape alone (fresh timer, no refresh).
    Computed once per memory and shape (number of GEMVs, their COMP steps)."""
    entry = _ESTIMATES.get(id(memory))
    if entry is None or entry[0]() is not memory:
        entry = _ESTIMATES[id(memory)] = (weakref.ref(memory), {})
    cycles = entry[1].get((gemvs, comp_steps))
    if cycles is None:
        pim = memory.pim
        issued = CommandTimer(memory, pim.commands, pim.rules, pim.windows).run(
            _tile(memory, 0, 0, range(gemvs), comp_steps, 0))
        cycles = entry[1][(gemvs, comp_steps)] = issued[-1] - issued[0]
    return cycles


def score_tile(memory: Memory, tiling: ScoreTiling, head_set: int, tile: int, heads_here: int,
               channel: int = 0, first_row: int = 0, estimate: int | None = None) -> Iterator[Command]:
    """K.q of one tile: `heads_here` PIM_GEMVs (column = the head within the row) on one row.
    `estimate` is tile_estimate's, if the caller has it."""
    k = tiling.comp_steps
    estimate = tile_estimate(memory, heads_here, k) if estimate is None else estimate
    yield from _tile(memory, channel, tiling.row(head_set, tile, first_row), range(heads_here), k, estimate)


def score_stream(memory: Memory, seq_len: int, heads: int, head_dim: int, channel: int = 0,
                 gwrite: bool = False, first_row: int = 0) -> Iterator[Command]:
    """K.q of `heads` heads against `seq_len` cached keys held by this channel."""
    t = ScoreTiling.of(memory, seq_len, heads, head_dim)
    for head_set in range(t.head_sets):
        heads_here = min(t.heads_per_row, heads - head_set * t.heads_per_row)
        if gwrite:                        # this head set's query into the global buffer (a MEM row)
            yield from _gwrite(memory, channel, query_row(memory, head_set), _bank_place(memory, 0))
        estimate = tile_estimate(memory, heads_here, t.comp_steps)
        for tile in range(t.tiles):
            yield from score_tile(memory, t, head_set, tile, heads_here, channel, first_row, estimate)


def context_tile(memory: Memory, tiling: ContextTiling, head: int, chunk: int, dim_tile: int,
                 channel: int = 0, first_row: int = 0, estimate: int | None = None) -> Iterator[Command]:
    """s.V of one tile: one PIM_GEMV(k) gives, in bank b, dimension dim_tile x banks + b of the
    head's context summed over the chunk's tokens. `estimate` as in score_tile."""
    k = tiling.comp_steps
    estimate = tile_estimate(memory, 1, k) if estimate is None else estimate
    yield from _tile(memory, channel, tiling.row(head, chunk, dim_tile, first_row), range(1), k, estimate)


def context_stream(memory: Memory, seq_len: int, heads: int, head_dim: int, channel: int = 0,
                   gwrite: bool = False, first_row: int = 0) -> Iterator[Command]:
    """s.V of `heads` heads over `seq_len` cached values held by this channel: per head and chunk
    of tokens, the scores' GWRITE (scores_row), then one tile per dimension tile."""
    t = ContextTiling.of(memory, seq_len, heads, head_dim)
    place = _bank_place(memory, SCORES_BANK)
    estimate = tile_estimate(memory, 1, t.comp_steps)
    for head in range(heads):
        for chunk in range(t.chunks):
            if gwrite:
                yield from _gwrite(memory, channel, scores_row(memory, t, head, chunk), place)
            for dim_tile in range(t.dim_tiles):
                yield from context_tile(memory, t, head, chunk, dim_tile, channel, first_row, estimate)


def scores_writeback(memory: Memory, seq_len: int, heads: int, head_dim: int,
                     channel: int = 0) -> Iterator[Command]:
    """The NPU's ordinary writes of the softmax scores that s.V's GWRITEs then read: per head and
    chunk of tokens one whole scores_row, opened, written column by column and closed (the
    authors' simulator MOVOUTs each head's scores between K.q and s.V: [NEUPIMS_SIM]
    src/operations/NeuPIMSLogitSoftmax.cc). With dual row buffers these run through the MEM row
    buffers beside PIM work; a channel-blocked controller runs them between the two GEMVs."""
    t = ContextTiling.of(memory, seq_len, heads, head_dim)
    place = _bank_place(memory, SCORES_BANK)
    for head in range(heads):
        for chunk in range(t.chunks):
            row = scores_row(memory, t, head, chunk)
            yield Command("ACT", channel, row=row, kind="npu", **place)
            for column in range(memory.organization.columns):
                yield Command("WR", channel, row=row, column=column, kind="npu", **place)
            yield Command("PRE", channel, kind="npu", **place)
