"""Decode attention declared as PIM programs (specs/pim/neupims_pim.pim: attn_score, attn_context).

Values: keys, values, query and scores placed by the programs' layouts ([NEUPIMS] Sec. 6.3),
the programs' commands run by the generic values executor, the host's outputs equal numpy
exactly in the `dot` effect's stated order (adder tree and words in float32, each GEMV's result
rounded to fp16, chunks added in float32) and within fp16 tolerance of a float64 product.
Timing and counts: every stream times without a stream error and has [NEUPIMS] Algorithm 1's
tile and GWRITE counts; golden text pins where each command goes.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pimdsl.interpreter.dram.command_stream import CommandTimer
from pimdsl.interpreter.values.programs import adder_tree_dot, run
from pimdsl.lowering.pim_program import check, environment, expand
from pimdsl.lowering.stream import unroll
from pimdsl.loops.iteration_serving.pim_attention import attention_lets, attention_shape, attention_stream, vector_banks
from pimdsl.validation import neupims as N


@pytest.fixture(scope="module")
def memory():
    return N.neupims_memory()


def scores_through(memory, keys, q, first_row=0):
    """K.q (heads x seq, fp16) through program attn_score: what the host receives, in token order."""
    seq, heads, dim = keys.shape
    shape, lets = attention_shape(seq, heads, dim), attention_lets(memory, "attn_score", seq, heads, dim)
    per_head = lets["tiles"] * lets["units"]
    y = run(memory, memory.pim.program("attn_score"), shape, {"key": keys, "query": q}, heads * per_head,
            first_row=first_row, channels=1, params={"vectors": 1})
    return y.reshape(heads, per_head)[:, :seq].astype(np.float16)


def context_through(memory, values, scores, first_row=0):
    """s.V (heads x head_dim, fp16) through program attn_context: the host's sums of the chunks."""
    seq, heads, dim = values.shape
    shape, lets = attention_shape(seq, heads, dim), attention_lets(memory, "attn_context", seq, heads, dim)
    per_head = lets["dim_tiles"] * lets["units"]
    y = run(memory, memory.pim.program("attn_context"), shape, {"value": values, "scores": scores},
            heads * per_head, first_row=first_row, channels=1, params={"vectors": 1})
    return y.reshape(heads, per_head)[:, :dim].astype(np.float16)


def scores_reference(keys, q, lanes):
    """K.q in the `dot` effect's order, one fp16 result per head and token."""
    return adder_tree_dot(keys.astype(np.float32), q.astype(np.float32), lanes).astype(np.float16).T


def context_reference(values, scores, lanes, per_row):
    """s.V in the program's order: per chunk of `per_row` tokens one fp16 dot product over
    k x lanes elements (zero past seq), the chunks added in float32."""
    seq, heads, dim = values.shape
    span = -(-min(seq, per_row) // lanes) * lanes
    acc = np.zeros((heads, dim), dtype=np.float32)
    for start in range(0, seq, per_row):
        n = min(per_row, seq - start)
        v = np.zeros((heads, dim, span), dtype=np.float32)
        v[..., :n] = values[start:start + n].transpose(1, 2, 0)
        s = np.zeros((heads, 1, span), dtype=np.float32)
        s[:, 0, :n] = scores[:, start:start + n]
        acc = (acc + adder_tree_dot(v, s, lanes).astype(np.float16).astype(np.float32)).astype(np.float32)
    return acc.astype(np.float16)


# (a) values -------------------------------------------------------------------------------------
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seq=st.integers(1, 100), heads=st.integers(1, 9), head_dim=st.sampled_from([64, 80, 128]),
       first_row=st.integers(0, 50), seed=st.integers(0, 2**32 - 1))
def test_scores_equal_numpy(memory, seq, heads, head_dim, first_row, seed):
    rng = np.random.default_rng(seed)
    keys = rng.uniform(-1, 1, (seq, heads, head_dim)).astype(np.float16)
    q = rng.uniform(-1, 1, (heads, head_dim)).astype(np.float16)
    scores = scores_through(memory, keys, q, first_row)
    assert np.array_equal(scores, scores_reference(keys, q, memory.pim.lanes))
    exact = np.einsum("thd,hd->ht", keys.astype(np.float64), q.astype(np.float64))
    assert np.allclose(scores.astype(np.float64), exact, rtol=2e-3, atol=2e-3 * np.sqrt(head_dim))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seq=st.integers(1, 1100), heads=st.integers(1, 3), head_dim=st.sampled_from([32, 64, 80, 128]),
       first_row=st.integers(0, 50), seed=st.integers(0, 2**32 - 1))
def test_context_equals_numpy(memory, seq, heads, head_dim, first_row, seed):
    rng = np.random.default_rng(seed)
    values = rng.uniform(-1, 1, (seq, heads, head_dim)).astype(np.float16)
    scores = rng.uniform(0, 1, (heads, seq)).astype(np.float16)
    out = context_through(memory, values, scores, first_row)
    per_row = attention_lets(memory, "attn_context", seq, heads, head_dim)["per_row"]
    assert np.array_equal(out, context_reference(values, scores, memory.pim.lanes, per_row))
    v64, s64 = values.astype(np.float64), scores.astype(np.float64)
    exact = np.einsum("ht,thd->hd", s64, v64)
    assert np.all(np.abs(out - exact) <= 2e-3 * np.einsum("ht,thd->hd", s64, np.abs(v64)) + 1e-7)


def test_a_misplaced_key_is_caught(memory):
    """The layout is what the GEMVs read: keys of two tokens swapped give other scores."""
    rng = np.random.default_rng(3)
    keys = rng.uniform(-1, 1, (40, 2, 128)).astype(np.float16)
    q = rng.uniform(-1, 1, (2, 128)).astype(np.float16)
    swapped = keys[[1, 0] + list(range(2, 40))]
    assert not np.array_equal(scores_through(memory, swapped, q), scores_reference(keys, q, memory.pim.lanes))


def test_decode_attention_through_both_programs(memory):
    """K.q, softmax on the NPU (numpy), s.V: the values' rows after the keys' rows."""
    rng = np.random.default_rng(7)
    seq, heads, dim = 300, 2, 128
    keys = rng.uniform(-1, 1, (seq, heads, dim)).astype(np.float16)
    values = rng.uniform(-1, 1, (seq, heads, dim)).astype(np.float16)
    q = rng.uniform(-1, 1, (heads, dim)).astype(np.float16)
    logits = scores_through(memory, keys, q).astype(np.float32) / np.sqrt(dim)
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p = (p / p.sum(axis=1, keepdims=True)).astype(np.float16)
    key_rows = environment(memory, memory.pim.program("attn_score"), attention_shape(seq, heads, dim))
    out = context_through(memory, values, p, first_row=key_rows["head_sets"] * key_rows["tiles"])
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
    for i, c in enumerate(attention_stream(memory, "attn_context", seq, heads, head_dim, gwrite)):
        cycle = timer.issue(c, i)                  # a StreamError fails the test
        assert cycle >= last
        last = cycle
        counts[c.name] = counts.get(c.name, 0) + 1
    chunks, dim_tiles = -(-seq // 512), -(-head_dim // 32)      # 512 FP16 per 1 KB row, 32 banks
    tiles, vectors = heads * chunks * dim_tiles, heads * chunks
    expected = {"PIM_HEADER": tiles, "PIM_GEMV": tiles, "PIM_ACT": tiles * org.ranks * org.bank_groups,
                "PIM_PRECHARGE": tiles * org.ranks * org.banks_per_rank}
    if gwrite:
        expected |= {"ACT": vectors, "PIM_GWRITE": vectors, "PRE": vectors}   # each vector's row closes
    assert counts == expected


def test_tiling_is_the_papers_algorithm_1(memory):
    # Algorithm 1 lines 5-6: ((E / N_head) / B_chnl) x (seq_len / P_DRAM) x N_head tiles and
    # (seq_len / P_DRAM) x N_head GWRITEs; 32 banks, 512 FP16 per 1 KB page
    t = attention_lets(memory, "attn_context", 1024, 4, 128)
    assert (t["units"], t["per_row"], t["chunks"], t["dim_tiles"]) == (32, 512, 2, 4)
    assert t["rows"] == 32768
    program = memory.pim.program("attn_context")
    assert environment(memory, program, attention_shape(1024, 4, 128)) == t
    from pimdsl.ir.pim_program import evaluate
    assert evaluate(program.rows, t) == (128 // 32) * (1024 // 512) * 4


@pytest.mark.parametrize("seq,steps", [(40, [3]), (512, [32]), (700, [32, 12]), (1025, [32, 32, 1])])
def test_each_chunk_takes_the_steps_of_its_tokens(memory, seq, steps):
    # a full 512-token chunk is 32 COMP steps of 16 lanes; a short last chunk ceil(tokens / 16)
    # ([NEUPIMS_SIM] NeuPIMSAttend.cc, num_comps), for every dimension tile of every head
    items = expand(memory, memory.pim.program("attn_context"), attention_shape(seq, 2, 64), values=True)
    gemvs = [c.data["k"] for c in unroll(items) if c.name == "PIM_GEMV"]
    dim_tiles = 64 // 32
    assert gemvs == [k for _ in range(2) for k in steps for _ in range(dim_tiles)]


def test_a_tile_too_big_for_the_global_buffer_is_reported(memory):
    """A head of 1,024 elements needs 64 words of a 32-word global buffer: check() says so."""
    problems = check(memory, memory.pim.program("attn_score"), attention_shape(64, 1, 1024))
    assert problems and "global_buffer entry 63 is outside the declared 0..31" in problems[0].message
    assert check(memory, memory.pim.program("attn_score"), attention_shape(64, 8, 128)) == []


# (c) golden text --------------------------------------------------------------------------------
def text(commands):
    return "\n".join(f"{c.name} r{c.rank} bg{c.bank_group} b{c.bank} row{c.row} col{c.column} {c.kind}"
                     for c in commands)


def test_golden_first_commands(memory):
    cmds = list(attention_stream(memory, "attn_context", 40, 2, 64, gwrite=True))[:22]
    assert text(cmds) == """\
ACT r0 bg0 b1 row32767 col0 act
PIM_GWRITE r0 bg0 b1 row32767 col0 copy
PRE r0 bg0 b1 row0 col0 pre
PIM_HEADER r0 bg0 b0 row0 col1 pim_header
PIM_ACT r0 bg0 b0 row0 col0 pim_act
PIM_ACT r1 bg0 b0 row0 col0 pim_act
PIM_ACT r0 bg1 b0 row0 col0 pim_act
PIM_ACT r1 bg1 b0 row0 col0 pim_act
PIM_ACT r0 bg2 b0 row0 col0 pim_act
PIM_ACT r1 bg2 b0 row0 col0 pim_act
PIM_ACT r0 bg3 b0 row0 col0 pim_act
PIM_ACT r1 bg3 b0 row0 col0 pim_act
PIM_GEMV r0 bg0 b0 row0 col0 dot
PIM_PRECHARGE r0 bg0 b0 row0 col0 pim_precharge
PIM_PRECHARGE r0 bg0 b1 row0 col0 pim_precharge
PIM_PRECHARGE r0 bg0 b2 row0 col0 pim_precharge
PIM_PRECHARGE r0 bg0 b3 row0 col0 pim_precharge
PIM_PRECHARGE r0 bg1 b0 row0 col0 pim_precharge
PIM_PRECHARGE r0 bg1 b1 row0 col0 pim_precharge
PIM_PRECHARGE r0 bg1 b2 row0 col0 pim_precharge
PIM_PRECHARGE r0 bg1 b3 row0 col0 pim_precharge
PIM_PRECHARGE r0 bg2 b0 row0 col0 pim_precharge"""


def test_golden_tile_order(memory):
    """Two heads, two chunks (600 tokens), two dimension tiles: where every GWRITE and GEMV goes."""
    cmds = [c for c in attention_stream(memory, "attn_context", 600, 2, 64, gwrite=True, first_row=10)
            if c.name not in ("PIM_ACT", "PIM_PRECHARGE", "PIM_HEADER")]
    assert text(cmds) == """\
ACT r0 bg0 b1 row32767 col0 act
PIM_GWRITE r0 bg0 b1 row32767 col0 copy
PRE r0 bg0 b1 row0 col0 pre
PIM_GEMV r0 bg0 b0 row10 col0 dot
PIM_GEMV r0 bg0 b0 row11 col0 dot
ACT r0 bg0 b1 row32766 col0 act
PIM_GWRITE r0 bg0 b1 row32766 col0 copy
PRE r0 bg0 b1 row0 col0 pre
PIM_GEMV r0 bg0 b0 row12 col0 dot
PIM_GEMV r0 bg0 b0 row13 col0 dot
ACT r0 bg0 b1 row32765 col0 act
PIM_GWRITE r0 bg0 b1 row32765 col0 copy
PRE r0 bg0 b1 row0 col0 pre
PIM_GEMV r0 bg0 b0 row14 col0 dot
PIM_GEMV r0 bg0 b0 row15 col0 dot
ACT r0 bg0 b1 row32764 col0 act
PIM_GWRITE r0 bg0 b1 row32764 col0 copy
PRE r0 bg0 b1 row0 col0 pre
PIM_GEMV r0 bg0 b0 row16 col0 dot
PIM_GEMV r0 bg0 b0 row17 col0 dot"""


# (d) the constructs the attention programs added, checked generically -------------------------
COPY_DOT_UNIT = """
import "dram/lpddr4.pim";
pim_unit u {
  placement = bank; simd_width = 256 bit; dtype = fp16; global_buffer = 64 B;
  register_file ACC { count = 2; width = 256 bit; }
  command CP  { scope = bank; reads = [row]; writes = [ACC, global_buffer]; effect = copy; }
  command DOT { scope = channel; reads = [row, global_buffer]; writes = [result]; effect = dot; }
  program attn_score { for t[kv] { DOT(row = t, src = 0); } }
}
memory m { part = LPDDR4; address_map = [row, bank, column]; pim = u; }
"""


def test_copy_and_dot_declarations_are_checked(errors):
    text = "\n".join(errors(COPY_DOT_UNIT))
    assert "command CP has effect copy, which needs a command that reads [row] and writes one register" in text
    assert "command DOT (dot) names 'result', which the unit does not declare" in text
    assert "command DOT has effect dot, which needs a command that reads [row, <source>] and writes [host]" in text
    assert "DOT (dot) needs the argument(s) k, output, stride" in text


def test_only_a_programs_lets_are_its_parameters(memory):
    from pimdsl.ir.pim_program import ProgramError
    with pytest.raises(ProgramError, match="has no parameter gwrites"):
        list(attention_stream_with(memory, {"gwrites": 1}))
    assert vector_banks(memory) == 2            # the query in bank 0, the scores in bank 1 (layouts)


def attention_stream_with(memory, params):
    from pimdsl.lowering.pim_program import op_stream
    return op_stream(memory, "attn_score", attention_shape(32, 4, 128), params=params)


def test_a_kv_layout_that_does_not_cover_the_cache_is_reported(memory):
    """Layouts that say their `dims` are checked like a weight's: two tokens' keys in one place."""
    import dataclasses
    from types import SimpleNamespace

    from pimdsl.ir.pim_program import Num
    from pimdsl.passes.tiling import _problems
    program = memory.pim.program("attn_score")
    op = SimpleNamespace(shape=attention_shape(64, 8, 128), weight=None)
    assert _problems(memory, program, op, "L0.attn_score") == []
    key = program.layout("key")
    broken = dataclasses.replace(program, layouts=tuple(
        dataclasses.replace(l, place={**l.place, "bank": Num(0), "rank": Num(0)}) if l is key else l
        for l in program.layouts))
    problems = _problems(memory, broken, op, "L0.attn_score")
    assert len(problems) == 1 and "does not cover its 64 x 8 x 128 key" in problems[0].message
    assert "hold more than one element" in problems[0].message and problems[0].span == key.span


def test_the_compiled_trace_lists_no_loop_that_runs_nothing(tmp_path):
    """A compiled decode step's attention: the GWRITE loop (vectors = 0) is left out of the trace,
    the tiles are `repeat` loops with their header's estimate."""
    from pimdsl.emit.streams import structured_lines
    from pimdsl.lowering.pim_program import expand
    memory = N.neupims_memory()
    items = expand(memory, memory.pim.program("attn_score"), attention_shape(96, 4, 128), values=True)
    lines = [l.split() for l in structured_lines(memory, items, "attn")]
    commands = [l for l in lines if l[0] != "repeat"]
    names = [l[7] for l in commands]          # channel scope rank bank_group bank row column command
    assert "PIM_GWRITE" not in names and names[0] == "PIM_HEADER"
    assert [int(l[1]) for l in lines if l[0] == "repeat"] == [1, 3, 4]   # head sets, tiles, GEMVs
    assert "estimate=196" in commands[0]
