"""Hermes' decode attention as declared programs of the NDP core (specs/hardware/rtx4090_ndp.pim:
attn_score with the group_dot effect, attn_context as a GEMV over the dimension-major V cache), and
the `covers` construct that lets a score program absorb the softmax after it.

Values: K and V placed by the programs' layouts, the query (probabilities) as the input vector,
the commands run by the generic values executor: equal to numpy exactly in the effects' stated
order, and to a float64 attention within fp16 tolerance. Timing: the DRAM engine's time for a
layer's score or context on one DIMM, against the per-DIMM read rate the hot_cold_offload loop
charges for attention (all ranks in parallel).
"""
from __future__ import annotations

import numpy as np
import pytest

from pimdsl.frontend.pipeline import load_spec
from pimdsl.interpreter.op_timing import time_pim
from pimdsl.interpreter.values.programs import ProgramExecutor, adder_tree_dot, place
from pimdsl.lowering.pim_program import check, expand, layout_problem
from pimdsl.lowering.stream import unroll

from .conftest import ROOT

HARDWARE = ROOT / "specs" / "hardware" / "rtx4090_ndp.pim"
# (kv, heads, head_dim): one head set; two head sets of 64-dim heads (Falcon's); more than one V row
SHAPES = [(300, 3, 128), (40, 40, 64), (4200, 1, 32), (17, 17, 128)]


@pytest.fixture(scope="module")
def memory():
    spec, diags = load_spec(str(HARDWARE))
    assert not diags.errors
    return spec.memories["hermes_ndp_dimm"]


def shape(kv, heads, head_dim):
    return {"kv": kv, "heads": heads, "head_dim": head_dim, "requests": 1}


def run(memory, program, sh, tensor, data, x, outputs):
    ex = ProgramExecutor(memory, x.reshape(-1), outputs)
    place(ex, program, sh, tensor, data)
    for c in unroll(expand(memory, program, sh, 0, values=True)):
        ex.execute(c)
    return ex.y


@pytest.mark.parametrize("kv,heads,head_dim", SHAPES)
def test_scores_equal_numpy(memory, kv, heads, head_dim):
    """Each head's run of lanes summed by its own adder tree, rounded to fp16: per (head, token)."""
    program, sh = memory.pim.program("attn_score"), shape(kv, heads, head_dim)
    assert check(memory, program, sh) == []
    assert layout_problem(memory, program, sh, "key", (kv, heads, head_dim)) is None
    rng = np.random.default_rng(kv + heads)
    keys = rng.standard_normal((kv, heads, head_dim)).astype(np.float16)
    q = rng.standard_normal((heads, head_dim)).astype(np.float16)
    y = run(memory, program, sh, "key", keys, q, heads * kv).reshape(heads, kv)
    want = adder_tree_dot(keys.transpose(1, 0, 2), q[:, None, :], head_dim).astype(np.float16)
    assert np.array_equal(y, want.astype(np.float32))
    exact = np.einsum("thd,hd->ht", keys.astype(np.float64), q.astype(np.float64))
    assert np.allclose(y, exact, rtol=2e-3, atol=2e-2 * np.sqrt(head_dim))


@pytest.mark.parametrize("kv,heads,head_dim", SHAPES)
def test_context_equals_numpy(memory, kv, heads, head_dim):
    """Per (head, dimension): each SIMD word of 2,048 tokens dotted with the head's probabilities by
    the adder tree in float32, rounded to fp16; the words' results added in float32 in token order."""
    program, sh = memory.pim.program("attn_context"), shape(kv, heads, head_dim)
    assert check(memory, program, sh) == []
    assert layout_problem(memory, program, sh, "value", (kv, heads, head_dim)) is None
    rng = np.random.default_rng(kv * heads)
    values = rng.standard_normal((kv, heads, head_dim)).astype(np.float16)
    p = rng.random((heads, kv)).astype(np.float16)
    y = run(memory, program, sh, "value", values, p, heads * head_dim).reshape(heads, head_dim)
    lanes = memory.pim.lanes
    assert lanes == 2048
    want = np.zeros((heads, head_dim), np.float32)
    for start in range(0, kv, lanes):
        n = min(lanes, kv - start)
        v = np.zeros((heads, head_dim, lanes), np.float32)
        v[..., :n] = values[start:start + n].transpose(1, 2, 0)
        w = np.zeros((heads, 1, lanes), np.float32)
        w[..., :n] = p[:, None, start:start + n]
        want = (want + adder_tree_dot(v, w, lanes).astype(np.float16).astype(np.float32)).astype(np.float32)
    assert np.array_equal(y, want)
    exact = np.einsum("thd,ht->hd", values.astype(np.float64), p.astype(np.float64))
    assert np.allclose(y, exact, rtol=5e-3, atol=5e-3 * np.sqrt(kv))


def test_score_program_covers_softmax_and_ends_each_head_set_with_it(memory):
    program = memory.pim.program("attn_score")
    assert program.covers == ("softmax",) and "softmax" in memory.pim.operations
    assert memory.pim.program("attn_context").covers == ()
    sh = shape(100, 40, 128)                         # 3 head sets of 16 heads
    names = [c.name for c in unroll(expand(memory, program, sh, 0))]
    assert names.count("NDP_SOFTMAX") == 3
    assert names.count("NDP_DOTS") == 3 * 100         # one pass per token and head set
    assert names[-1] == "PRE" and "NDP_SOFTMAX" in names[-1 - 8:]


@pytest.mark.parametrize("which", ["attn_score", "attn_context"])
@pytest.mark.parametrize("tokens", [1024, pytest.param(2048, marks=pytest.mark.slow)])
def test_a_layer_on_one_dimm_reads_near_the_rate_the_loop_charges(memory, which, tokens):
    """OPT-13B's 40 heads over 1,024 and 2,048 tokens on one DIMM. The hot_cold_offload loop charges
    attention its KV bytes at the DIMM's 4 ranks x 25.6 GB/s (its MACs, at 128 GMAC/s, take less); the
    programs add each row's activation and precharge and refresh (74-76% at 2,048 tokens, 70-76% at 1,024;
    the score program reads only the bursts holding keys, so the third head set of 8 heads costs half a
    set): within 55-90%. (The context program's rate climbs with the context: 23% at 256 tokens.)"""
    dimm_rate = memory.peak_bandwidth_bytes_per_s * memory.organization.ranks      # as the loop's Setup
    assert dimm_rate == pytest.approx(4 * 25.6e9)
    sh = shape(tokens, 40, 128)
    t = time_pim(memory, expand(memory, memory.pim.program(which), sh, 0))
    rate = tokens * 40 * 128 * 2 / t.seconds
    assert 0.55 * dimm_rate < rate < 0.9 * dimm_rate


UNIT = """
import "dram/lpddr4.pim";
pim_unit u {
  placement = bank; simd_width = 256 bit; dtype = fp16; global_buffer = 64 B;
  operations = [%s];
  command LOAD { scope = channel; writes = [global_buffer]; effect = load; }
  program %s
}
memory m { part = LPDDR4; address_map = [row, bank, column]; pim = u; }
"""


@pytest.mark.parametrize("ops,program,message,hint", [
    ("dot_product", "gemv { covers = [softmax]; }", "program gemv cannot cover 'softmax'",
     "valid op kinds that directly follow gemv: activation, add, mul"),
    ("dot_product", "elementwise { covers = [softmax]; }", "program elementwise cannot cover 'softmax'",
     "no op kind directly follows elementwise"),
    ("softmax", "attn_score { covers = [sofmax]; }", "program attn_score cannot cover 'sofmax'",
     "did you mean 'softmax'?"),
    ("softmax", "attn_score { covers = softmax; }", "`covers` is a list of op kinds", "covers = [softmax];"),
    ("softmax", "attn_score { covers = [softmax, softmax]; }", "'softmax' is covered twice", None),
    ("dot_product", "attn_score { covers = [softmax]; }",
     "program attn_score covers softmax, but it issues no command of effect softmax and unit 'u' does not "
     "list softmax in its operations", "issue the unit's softmax command in the program (`effect = softmax;`)"),
])
def test_covers_mistakes_are_located_diagnostics(errors, ops, program, message, hint):
    found = errors(UNIT % (ops, program))
    line = next(e for e in found if message in e)
    assert line.startswith("spec.pim:6:")                        # the program's line (dedented)
    assert hint is None or hint in line


def test_a_unit_that_can_softmax_may_cover_it(elaborate):
    spec, diags = elaborate(UNIT % ("softmax", "attn_score { covers = [softmax]; }"))
    assert not diags.errors
    assert spec.memories["m"].pim.program("attn_score").covers == ("softmax",)
