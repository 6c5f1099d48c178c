"""NeuPIMs values: the attention streams of neupims_attention executed on numpy-backed banks.

The data sits in `Banks` (pim_values) in the layout the lowering reads, with
flat bank index rank x banks_per_rank + bank_group x banks_per_group + bank:
keys and values per section 6.3 of the paper (see neupims_attention), the
query and the softmax scores in the MEM rows PIM_GWRITE copies (query_row,
scores_row). `NeuPimsExecutor` runs either stream's commands in order;
`gather_*` put the per-bank results back in model order, and the
`*_reference` functions compute the same numbers with numpy, exactly.

Accumulation order (stated, as the hardware's is not fully public): each
COMP step forms `lanes` float32 products of fp16 operands and adds them
pairwise (the adder tree of section 5.1), steps accumulate in float32, and a
PIM_GEMV's result returns rounded to fp16. For s.V the NPU adds the fp16
partial sums of a dimension's chunks in float32, chunk by chunk, and rounds
to fp16 (the NeuPIMs simulator adds the chunks' results on the NPU; the
paper does not say in which precision).
"""
from __future__ import annotations

import numpy as np

from ..ir.hardware import Memory
from ..lowering.neupims_attention import SCORES_BANK, ContextTiling, ScoreTiling, query_row, scores_row
from .command_stream import Command
from .pim_values import Banks


def place_keys(memory: Memory, banks: Banks, keys: np.ndarray, first_row: int = 0) -> None:
    """Keys (seq_len x heads x head_dim) where score_stream's PIM_GEMVs find them: token t of
    tile t // banks in bank t % banks; a row holds heads_per_row heads of one head set."""
    seq, heads, dim = keys.shape
    t = ScoreTiling.of(memory, seq, heads, dim)
    for tok in range(seq):
        tile, bank = divmod(tok, t.tokens_per_tile)
        for hs in range(t.head_sets):
            row = banks.row(bank, t.row(hs, tile, first_row)).reshape(-1)
            chunk = keys[tok, hs * t.heads_per_row:(hs + 1) * t.heads_per_row].reshape(-1)
            row[:chunk.size] = chunk


def place_query(memory: Memory, banks: Banks, q: np.ndarray) -> None:
    """The query (heads x head_dim), one head set per MEM row of bank 0, as PIM_GWRITE reads it."""
    heads, dim = q.shape
    t = ScoreTiling.of(memory, 1, heads, dim)
    for hs in range(t.head_sets):
        chunk = q[hs * t.heads_per_row:(hs + 1) * t.heads_per_row].reshape(-1)
        banks.row(0, query_row(memory, hs)).reshape(-1)[:chunk.size] = chunk


def place_values(memory: Memory, banks: Banks, values: np.ndarray, first_row: int = 0) -> None:
    """Values (seq_len x heads x head_dim) where context_stream's PIM_GEMVs find them: dimension
    d of head h in bank d % banks, row ContextTiling.row(h, chunk, d // banks), token t of the
    chunk at element t % tokens_per_row (section 6.3: a head's embedding across the banks)."""
    seq, heads, dim = values.shape
    t = ContextTiling.of(memory, seq, heads, dim)
    for h in range(heads):
        for c in range(t.chunks):
            tokens = values[c * t.tokens_per_row:(c + 1) * t.tokens_per_row, h]
            for d in range(dim):
                dim_tile, bank = divmod(d, t.dims_per_tile)
                banks.row(bank, t.row(h, c, dim_tile, first_row)).reshape(-1)[:len(tokens)] = tokens[:, d]


def place_scores(memory: Memory, banks: Banks, scores: np.ndarray) -> None:
    """The softmax scores (heads x seq_len), one chunk of a head per MEM row of SCORES_BANK
    (scores_row), zero past seq_len, as the NPU leaves them for PIM_GWRITE."""
    heads, seq = scores.shape
    t = ContextTiling.of(memory, seq, heads, 1)
    for h in range(heads):
        for c in range(t.chunks):
            chunk = scores[h, c * t.tokens_per_row:(c + 1) * t.tokens_per_row]
            banks.row(SCORES_BANK, scores_row(memory, t, h, c)).reshape(-1)[:chunk.size] = chunk


class NeuPimsExecutor:
    """Runs score_stream's or context_stream's commands: GWRITE fills the global buffer, PIM_ACT
    opens PIM rows, PIM_GEMV (column j) dots elements [j x span, (j + 1) x span) of the open row
    with the same elements of the global buffer in every bank, PIM_PRECHARGE closes.

    `span` is what one PIM_GEMV covers: head_dim for K.q, comp_steps x lanes for s.V."""

    def __init__(self, memory: Memory, banks: Banks, span: int):
        org = memory.organization
        self.banks, self.span = banks, span
        self.lanes = memory.pim.lanes
        self.per_rank = org.banks_per_rank
        self.n_banks = org.ranks * org.banks_per_rank
        self.gbuf = None
        self.pim_row = [-1] * self.n_banks
        self.results: dict[tuple[int, int, int], np.float16] = {}    # (bank, row, column) -> result

    def _bank(self, cmd):
        return cmd.rank * self.per_rank + cmd.bank_group * self.banks.banks_per_group + cmd.bank

    def execute(self, cmd: Command) -> None:
        name = cmd.name
        if name == "PIM_GWRITE":
            self.gbuf = self.banks.row(self._bank(cmd), cmd.row).reshape(-1).astype(np.float32)
        elif name == "PIM_ACT":
            base = cmd.rank * self.per_rank + cmd.bank_group * self.banks.banks_per_group
            for b in range(base, base + self.banks.banks_per_group):
                self.pim_row[b] = cmd.row
        elif name == "PIM_PRECHARGE":
            self.pim_row[self._bank(cmd)] = -1
        elif name == "PIM_GEMV":
            part = slice(cmd.column * self.span, (cmd.column + 1) * self.span)
            rows = np.stack([self.banks.row(b, self.pim_row[b]).reshape(-1)[part] for b in range(self.n_banks)])
            dots = neupims_dot(rows.astype(np.float32), self.gbuf[part], self.lanes)   # every bank at once
            for b in range(self.n_banks):
                self.results[(b, self.pim_row[b], cmd.column)] = dots[b]


def neupims_dot(a: np.ndarray, b: np.ndarray, lanes: int) -> np.ndarray:
    """Dot products along the last axis (operands broadcast) in the PIM unit's order, as fp16."""
    acc = np.zeros(np.broadcast_shapes(a.shape, b.shape)[:-1], dtype=np.float32)
    for start in range(0, a.shape[-1], lanes):
        level = (a[..., start:start + lanes] * b[..., start:start + lanes]).astype(np.float32)
        while level.shape[-1] > 1:             # adder tree: pairwise sums
            if level.shape[-1] % 2:
                level = np.concatenate([level, np.zeros(level.shape[:-1] + (1,), np.float32)], axis=-1)
            level = (level[..., 0::2] + level[..., 1::2]).astype(np.float32)
        acc = (acc + level[..., 0]).astype(np.float32)
    return acc.astype(np.float16)


def gather_scores(memory: Memory, ex: NeuPimsExecutor, seq: int, heads: int, head_dim: int,
                  first_row: int = 0) -> np.ndarray:
    """Scores (heads x seq) from the executor's per-bank results, back in token order."""
    t = ScoreTiling.of(memory, seq, heads, head_dim)
    out = np.zeros((heads, seq), dtype=np.float16)
    for tok in range(seq):
        tile, bank = divmod(tok, t.tokens_per_tile)
        for h in range(heads):
            hs, local = divmod(h, t.heads_per_row)
            out[h, tok] = ex.results[(bank, t.row(hs, tile, first_row), local)]
    return out


def gather_context(memory: Memory, ex: NeuPimsExecutor, seq: int, heads: int, head_dim: int,
                   first_row: int = 0) -> np.ndarray:
    """Context (heads x head_dim): each dimension's per-chunk results added by the NPU."""
    t = ContextTiling.of(memory, seq, heads, head_dim)
    out = np.zeros((heads, head_dim), dtype=np.float16)
    for h in range(heads):
        for d in range(head_dim):
            dim_tile, bank = divmod(d, t.dims_per_tile)
            acc = np.float32(0)
            for c in range(t.chunks):
                acc = np.float32(acc + np.float32(ex.results[(bank, t.row(h, c, dim_tile, first_row), 0)]))
            out[h, d] = acc
    return out


def neupims_scores_reference(keys: np.ndarray, q: np.ndarray, lanes: int) -> np.ndarray:
    """K.q (heads x seq) in the executor's order."""
    return neupims_dot(keys.astype(np.float32), q.astype(np.float32), lanes).T


def neupims_context_reference(values: np.ndarray, scores: np.ndarray, lanes: int,
                              tokens_per_row: int) -> np.ndarray:
    """s.V (heads x head_dim) in the executor's order: per chunk of `tokens_per_row` tokens one
    fp16 dot product over k x lanes elements (zero past seq_len), chunks added in float32."""
    seq, heads, dim = values.shape
    span = -(-min(seq, tokens_per_row) // lanes) * lanes        # k x lanes, as ContextTiling
    acc = np.zeros((heads, dim), dtype=np.float32)
    for start in range(0, seq, tokens_per_row):
        n = min(tokens_per_row, seq - start)
        v = np.zeros((heads, dim, span), dtype=np.float32)
        v[..., :n] = values[start:start + n].transpose(1, 2, 0)
        s = np.zeros((heads, 1, span), dtype=np.float32)
        s[:, 0, :n] = scores[:, start:start + n]
        acc = (acc + neupims_dot(v, s, lanes).astype(np.float32)).astype(np.float32)
    return acc.astype(np.float16)
