"""NeuPIMs attention context (s.V): values through the commands, timing, command counts, golden text.

The layout is neupims_attention's (paper section 6.3: a head's embedding across the banks, a
chunk of tokens along a row); the numbers are exact against numpy in neupims_values' order.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pimdsl.interpreter import neupims_values as NV
from pimdsl.interpreter.command_stream import CommandTimer
from pimdsl.interpreter.pim_values import Banks
from pimdsl.lowering.neupims_attention import (ContextTiling, ScoreTiling, context_stream, context_tile,
                                               score_stream, score_tile)
from pimdsl.lowering.stream import shape_of
from pimdsl.validation import neupims as N


@pytest.fixture(scope="module")
def memory():
    return N.neupims_memory()


def run_context(memory, banks, seq, heads, head_dim, first_row=0):
    """The context stream through the executor, on banks that hold the values and scores."""
    t = ContextTiling.of(memory, seq, heads, head_dim)
    ex = NV.NeuPimsExecutor(memory, banks, t.comp_steps * memory.pim.lanes)
    for cmd in context_stream(memory, seq, heads, head_dim, gwrite=True, first_row=first_row):
        ex.execute(cmd)
    return NV.gather_context(memory, ex, seq, heads, head_dim, first_row)


def context(memory, values, scores, first_row=0, banks=None):
    banks = Banks(memory, "fp16") if banks is None else banks
    NV.place_values(memory, banks, values, first_row)
    NV.place_scores(memory, banks, scores)
    return run_context(memory, banks, *values.shape, first_row)


# (a) values -------------------------------------------------------------------------------------
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seq=st.integers(1, 1100), heads=st.integers(1, 3), head_dim=st.sampled_from([32, 64, 80, 128]),
       first_row=st.integers(0, 50), seed=st.integers(0, 2**32 - 1))
def test_context_equals_numpy(memory, seq, heads, head_dim, first_row, seed):
    rng = np.random.default_rng(seed)
    values = rng.uniform(-1, 1, (seq, heads, head_dim)).astype(np.float16)
    scores = rng.uniform(0, 1, (heads, seq)).astype(np.float16)
    out = context(memory, values, scores, first_row)
    t = ContextTiling.of(memory, seq, heads, head_dim)
    assert np.array_equal(out, NV.neupims_context_reference(values, scores, memory.pim.lanes, t.tokens_per_row))
    v64, s64 = values.astype(np.float64), scores.astype(np.float64)
    exact = np.einsum("ht,thd->hd", s64, v64)
    assert np.all(np.abs(out - exact) <= 2e-3 * np.einsum("ht,thd->hd", s64, np.abs(v64)) + 1e-7)


def test_a_misplaced_value_is_caught(memory):
    rng = np.random.default_rng(3)
    values = rng.uniform(-1, 1, (40, 1, 64)).astype(np.float16)
    scores = rng.uniform(0, 1, (1, 40)).astype(np.float16)
    banks = Banks(memory, "fp16")
    NV.place_values(memory, banks, values)
    NV.place_scores(memory, banks, scores)
    row = banks.rows[(5, 0)].reshape(-1)                   # dimension 5 of head 0, tokens 0..39
    row[[0, 1]] = row[[1, 0]]
    out = run_context(memory, banks, 40, 1, 64)
    per_row = ContextTiling.of(memory, 40, 1, 64).tokens_per_row
    assert not np.array_equal(out, NV.neupims_context_reference(values, scores, memory.pim.lanes, per_row))


def test_decode_attention_through_both_streams(memory):
    """K.q, softmax on the NPU (numpy), s.V: keys and values in the same banks, one after the other."""
    rng = np.random.default_rng(7)
    seq, heads, dim = 300, 2, 128
    keys = rng.uniform(-1, 1, (seq, heads, dim)).astype(np.float16)
    values = rng.uniform(-1, 1, (seq, heads, dim)).astype(np.float16)
    q = rng.uniform(-1, 1, (heads, dim)).astype(np.float16)
    banks = Banks(memory, "fp16")
    NV.place_keys(memory, banks, keys)
    NV.place_query(memory, banks, q)
    ex = NV.NeuPimsExecutor(memory, banks, dim)
    for cmd in score_stream(memory, seq, heads, dim, gwrite=True):
        ex.execute(cmd)
    logits = NV.gather_scores(memory, ex, seq, heads, dim).astype(np.float32) / np.sqrt(dim)
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p = (p / p.sum(axis=1, keepdims=True)).astype(np.float16)
    kq = ScoreTiling.of(memory, seq, heads, dim)
    out = context(memory, values, p, first_row=kq.head_sets * kq.tiles, banks=banks)
    k64, v64, q64 = (a.astype(np.float64) for a in (keys, values, q))
    s = np.einsum("thd,hd->ht", k64, q64) / np.sqrt(dim)
    w = np.exp(s - s.max(axis=1, keepdims=True))
    assert np.allclose(out, np.einsum("ht,thd->hd", w / w.sum(axis=1, keepdims=True), v64), atol=3e-3)


# (b) timing and command counts ------------------------------------------------------------------
@pytest.mark.parametrize("seq,heads,head_dim", [(1, 1, 32), (100, 3, 128), (512, 2, 64), (1100, 2, 80)])
@pytest.mark.parametrize("gwrite", [False, True])
def test_context_stream_times_and_counts(memory, seq, heads, head_dim, gwrite):
    pim, org = memory.pim, memory.organization
    timer = CommandTimer(memory, pim.commands, pim.rules, pim.windows)
    counts: dict[str, int] = {}
    last = 0
    for i, c in enumerate(context_stream(memory, seq, heads, head_dim, gwrite=gwrite)):
        cycle = timer.issue(c, i)                  # a StreamError fails the test
        assert cycle >= last
        last = cycle
        counts[c.name] = counts.get(c.name, 0) + 1
    t = ContextTiling.of(memory, seq, heads, head_dim)
    tiles, vectors = heads * t.chunks * t.dim_tiles, heads * t.chunks
    expected = {"PIM_HEADER": tiles, "PIM_GEMV": tiles, "PIM_ACT": tiles * org.ranks * org.bank_groups,
                "PIM_PRECHARGE": tiles * org.ranks * org.banks_per_rank}
    if gwrite:
        expected |= {"ACT": vectors, "PIM_GWRITE": vectors, "PRE": vectors}   # each vector's row closes
    assert counts == expected and t.tiles == tiles


def test_tiling_is_the_papers_algorithm_1(memory):
    # Algorithm 1 lines 5-6: ((E / N_head) / B_chnl) x (seq_len / P_DRAM) x N_head tiles and
    # (seq_len / P_DRAM) x N_head GWRITEs; 32 banks, 512 FP16 per 1 KB page
    t = ContextTiling.of(memory, seq_len=1024, heads=4, head_dim=128)
    assert (t.dims_per_tile, t.tokens_per_row, t.comp_steps, t.chunks, t.dim_tiles) == (32, 512, 32, 2, 4)
    assert t.tiles == (128 // 32) * (1024 // 512) * 4 and t.heads * t.chunks == (1024 // 512) * 4
    assert ContextTiling.of(memory, 40, 1, 64).comp_steps == 3          # ceil(40 / 16) COMP steps


def test_tiles_have_one_shape(memory):
    """What a Loop over tiles needs: only rows and columns change from tile to tile."""
    t = ContextTiling.of(memory, 1100, 2, 80)
    shapes = {shape_of(context_tile(memory, t, h, c, d)) for h in range(2) for c in range(t.chunks)
              for d in range(t.dim_tiles)}
    assert len(shapes) == 1
    s = ScoreTiling.of(memory, 100, 6, 128)
    assert len({shape_of(score_tile(memory, s, hs, i, 4)) for hs in range(2) for i in range(s.tiles)}) == 1


# (c) golden text --------------------------------------------------------------------------------
def text(commands):
    return "\n".join(f"{c.name} r{c.rank} bg{c.bank_group} b{c.bank} row{c.row} col{c.column} {c.kind}"
                     for c in commands)


def test_golden_first_commands(memory):
    cmds = list(context_stream(memory, seq_len=40, heads=2, head_dim=64, gwrite=True))[:30]
    assert text(cmds) == """\
ACT r0 bg0 b1 row32767 col0 gwrite
PIM_GWRITE r0 bg0 b1 row32767 col0 gwrite
PRE r0 bg0 b1 row0 col0 gwrite
PIM_HEADER r0 bg0 b0 row0 col1 header
PIM_ACT r0 bg0 b0 row0 col0 act
PIM_ACT r1 bg0 b0 row0 col0 act
PIM_ACT r0 bg1 b0 row0 col0 act
PIM_ACT r1 bg1 b0 row0 col0 act
PIM_ACT r0 bg2 b0 row0 col0 act
PIM_ACT r1 bg2 b0 row0 col0 act
PIM_ACT r0 bg3 b0 row0 col0 act
PIM_ACT r1 bg3 b0 row0 col0 act
PIM_GEMV r0 bg0 b0 row0 col0 gemv_k3
PIM_PRECHARGE r0 bg0 b0 row0 col0 precharge
PIM_PRECHARGE r0 bg0 b1 row0 col0 precharge
PIM_PRECHARGE r0 bg0 b2 row0 col0 precharge
PIM_PRECHARGE r0 bg0 b3 row0 col0 precharge
PIM_PRECHARGE r0 bg1 b0 row0 col0 precharge
PIM_PRECHARGE r0 bg1 b1 row0 col0 precharge
PIM_PRECHARGE r0 bg1 b2 row0 col0 precharge
PIM_PRECHARGE r0 bg1 b3 row0 col0 precharge
PIM_PRECHARGE r0 bg2 b0 row0 col0 precharge
PIM_PRECHARGE r0 bg2 b1 row0 col0 precharge
PIM_PRECHARGE r0 bg2 b2 row0 col0 precharge
PIM_PRECHARGE r0 bg2 b3 row0 col0 precharge
PIM_PRECHARGE r0 bg3 b0 row0 col0 precharge
PIM_PRECHARGE r0 bg3 b1 row0 col0 precharge
PIM_PRECHARGE r0 bg3 b2 row0 col0 precharge
PIM_PRECHARGE r0 bg3 b3 row0 col0 precharge
PIM_PRECHARGE r1 bg0 b0 row0 col0 precharge"""


def test_golden_tile_order(memory):
    """Two heads, two chunks (600 tokens), two dimension tiles: where every GWRITE and GEMV goes."""
    cmds = [c for c in context_stream(memory, seq_len=600, heads=2, head_dim=64, gwrite=True, first_row=10)
            if c.name not in ("PIM_ACT", "PIM_PRECHARGE", "PIM_HEADER")]
    assert text(cmds) == """\
ACT r0 bg0 b1 row32767 col0 gwrite
PIM_GWRITE r0 bg0 b1 row32767 col0 gwrite
PRE r0 bg0 b1 row0 col0 gwrite
PIM_GEMV r0 bg0 b0 row10 col0 gemv_k32
PIM_GEMV r0 bg0 b0 row11 col0 gemv_k32
ACT r0 bg0 b1 row32766 col0 gwrite
PIM_GWRITE r0 bg0 b1 row32766 col0 gwrite
PRE r0 bg0 b1 row0 col0 gwrite
PIM_GEMV r0 bg0 b0 row12 col0 gemv_k32
PIM_GEMV r0 bg0 b0 row13 col0 gemv_k32
ACT r0 bg0 b1 row32765 col0 gwrite
PIM_GWRITE r0 bg0 b1 row32765 col0 gwrite
PRE r0 bg0 b1 row0 col0 gwrite
PIM_GEMV r0 bg0 b0 row14 col0 gemv_k32
PIM_GEMV r0 bg0 b0 row15 col0 gemv_k32
ACT r0 bg0 b1 row32764 col0 gwrite
PIM_GWRITE r0 bg0 b1 row32764 col0 gwrite
PRE r0 bg0 b1 row0 col0 gwrite
PIM_GEMV r0 bg0 b0 row16 col0 gemv_k32
PIM_GEMV r0 bg0 b0 row17 col0 gemv_k32"""
