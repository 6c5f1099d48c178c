"""L3's decode attention as declared programs (specs/hardware/dgx_a100_pim.pim: attn_score, attn_context).

Values: K, V and the query placed by the programs' layouts ([L3] Sec. 4.2, Fig. 5(d)/(e)), the
commands run by the generic values executor: the scores the rank PU's adder tree leaves in its
buffer, the softmax unit's probabilities and the context the rank PU drains to the host equal numpy
exactly in the effects' stated order, and a float64 attention within fp16 tolerance.
Timing: the programs timed by the DRAM engine on the spec's DDR4-3200 against the per-token price
the sub-batch serving loop charges (dimm_pim_costs.bank_row_cycles).
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pimdsl.interpreter.values.programs import ProgramExecutor, adder_tree_dot, place
from pimdsl.ir.pim_program import evaluate
from pimdsl.loops.sub_batch_serving import attention_programs as ap
from pimdsl.loops.sub_batch_serving import dimm_pim_costs as dc
from pimdsl.lowering.pim_program import check, environment, expand, layout_problem
from pimdsl.lowering.stream import unroll
from pimdsl.validation import l3 as V


@pytest.fixture(scope="module")
def memory():
    system = V.system("gpt3_175b")
    return next(m for m in system.memories if m.pim is not None)


def through(memory, keys, values, q, softmax=True):
    """Score (with the query copied in), softmax, context: (rank buffer elements, host outputs)."""
    seq, heads, dim = keys.shape
    pim, sh = memory.pim, ap.shape(seq, dim, heads)
    score, context = pim.program("attn_score"), pim.program("attn_context")
    first = int(evaluate(score.rows, environment(memory, score, sh)))
    ex = ProgramExecutor(memory, None, heads * dim)
    place(ex, score, sh, "key", keys)
    place(ex, score, sh, "query", q)
    place(ex, context, sh, "value", values, first_row=first)
    for c in unroll(expand(memory, score, sh, 0, values=True, params={"vectors": 1})):
        if softmax or c.name != "RANK_SOFTMAX":
            ex.execute(c)
    buffer = ex.entries("rank_buffer", (0, 0, 0)).reshape(-1).copy()
    for c in unroll(expand(memory, context, sh, 0, first_row=first, values=True)):
        ex.execute(c)
    return buffer, ex.y.reshape(heads, dim)


def chip_order(x, chips=8, chip_lanes=4):
    """(..., dim) -> (..., words, lanes): the K mapping's bursts, chip c holding a contiguous share."""
    dim = x.shape[-1]
    per_chip = -(-dim // chips)
    steps = -(-per_chip // chip_lanes)
    out = np.zeros(x.shape[:-1] + (steps, chips * chip_lanes), x.dtype)
    for d in range(dim):
        out[..., (d % per_chip) // chip_lanes, d // per_chip * chip_lanes + d % chip_lanes] = x[..., d]
    return out


def scores_reference(keys, q):
    """Per token: the bank PU accumulates each lane over the token's bursts in fp16 (product, then sum
    rounded); the rank PU's adder tree sums the 32 lanes in float32, rounded to fp16. -> (heads, seq)"""
    k, qq = chip_order(keys), chip_order(q)                  # (seq, heads, steps, 32), (heads, steps, 32)
    acc = np.zeros(k.shape[:2] + (k.shape[-1],), np.float16)
    for j in range(k.shape[2]):
        acc = (acc + (k[:, :, j] * qq[None, :, j]).astype(np.float16)).astype(np.float16)
    return adder_tree_dot(acc.astype(np.float32), np.ones_like(acc, np.float32), 32).astype(np.float16).T


def softmax_reference(s):
    x = s.astype(np.float32)
    e = np.exp(x - x.max(axis=1, keepdims=True)).astype(np.float32)
    total = np.add.accumulate(e, axis=1, dtype=np.float32)[:, -1:]
    return (e / total).astype(np.float16)


def context_reference(values, p):
    """Per bank: fp16 accumulation of v x p over its group's tokens in order; the rank PU adds the
    groups' partials per dimension in float32. -> (heads, dim) float32"""
    seq, heads, dim = values.shape
    groups = 16 // -(-dim // 32)
    out = np.zeros((heads, dim), np.float32)
    for g in range(groups):
        acc = np.zeros((heads, dim), np.float16)
        for t in range(g, seq, groups):
            acc = (acc + (values[t] * p[:, t:t + 1]).astype(np.float16)).astype(np.float16)
        out = (out + acc.astype(np.float32)).astype(np.float32)
    return out


def data(seq, heads, dim, seed):
    rng = np.random.default_rng(seed)
    keys = rng.uniform(-1, 1, (seq, heads, dim)).astype(np.float16)
    values = rng.uniform(-1, 1, (seq, heads, dim)).astype(np.float16)
    q = (rng.uniform(-1, 1, (heads, dim)) / np.sqrt(dim)).astype(np.float16)   # the host's 1/sqrt(d)
    return keys, values, q


# (a) values -------------------------------------------------------------------------------------
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seq=st.integers(1, 1100), heads=st.integers(1, 3), dim=st.sampled_from([64, 128]),
       seed=st.integers(0, 2**32 - 1))
def test_score_and_context_through_the_commands_equal_numpy(memory, seq, heads, dim, seed):
    keys, values, q = data(seq, heads, dim, seed)
    span = -(-seq // 16) * 16
    raw, _ = through(memory, keys, values, q, softmax=False)
    s = scores_reference(keys, q)
    assert np.array_equal(raw[:heads * span].reshape(heads, span)[:, :seq], s)
    probs, out = through(memory, keys, values, q)
    p = softmax_reference(s)
    assert np.array_equal(probs[:heads * span].reshape(heads, span)[:, :seq], p)
    assert np.array_equal(out, context_reference(values, p))
    k64, v64, q64 = (a.astype(np.float64) for a in (keys, values, q))
    logits = np.einsum("thd,hd->ht", k64, q64)
    w = np.exp(logits - logits.max(axis=1, keepdims=True))
    exact = np.einsum("ht,thd->hd", w / w.sum(axis=1, keepdims=True), v64)
    assert np.allclose(out, exact, atol=2e-3)


def test_a_misplaced_value_is_caught(memory):
    """The V layout is what the outer products read: two tokens' values swapped change the context."""
    keys, values, q = data(40, 1, 128, 5)
    _, out = through(memory, keys, values, q)
    _, swapped = through(memory, keys, values[[1, 0] + list(range(2, 40))], q)
    assert not np.array_equal(out, swapped)


def test_layouts_cover_and_the_rank_buffer_bounds_the_pass(memory):
    pim = memory.pim
    sh = ap.shape(3000, 128, 3)
    for program, tensor in ((pim.program("attn_score"), "key"), (pim.program("attn_context"), "value")):
        assert layout_problem(memory, program, sh, tensor, (3000, 3, 128)) is None
        assert check(memory, program, sh) == []
    # 256 KB = 131,072 FP16 probabilities ([L3] Sec. 4.4): two heads of 70,000 tokens do not fit
    problems = check(memory, pim.program("attn_score"), ap.shape(70000, 128, 2))
    assert problems and "rank_buffer element" in problems[0].message


# (b) timing -------------------------------------------------------------------------------------
def test_program_period_is_the_loops_bank_row_period(memory):
    """A full row of K then of V per 512 tokens: the programs' steady state equals two rows at the
    period the loop charges (one bank streaming its rows, blocking refresh), within 1%."""
    cal = ap.calibrate(memory, 128, 512)
    assert cal.period_cycles == pytest.approx(2 * dc.bank_row_cycles(memory), rel=0.01)
    # the calibrated price against the programs timed whole
    for kv in (4096, 12684):
        assert cal.cycles(kv) == pytest.approx(ap.head_cycles(memory, kv, 128), rel=0.01)


def test_a_short_request_pays_its_partial_rows(memory):
    """100 tokens use 7 of 32 slots of a K row and 25 of 128 columns of a V row, but open and
    close both rows: more than the loop's per-token price, less than two whole rows."""
    cycles = ap.head_cycles(memory, 100, 128, refresh="none")
    per_token = 2 * 256 / (16 * 8192) * dc.bank_row_cycles(memory, refresh="none")
    assert 100 * per_token < cycles < 2 * dc.bank_row_cycles(memory, refresh="none")


# (c) diagnostics --------------------------------------------------------------------------------
RANK_UNIT = """
import "dram/lpddr4.pim";
pim_unit u {
  placement = bank; simd_width = 256 bit; dtype = fp16;
  register_file acc { count = 1; width = 256 bit; }
  register_file buf { count = 8; width = 256 bit; placement = rank; }
  register_file near { count = 8; width = 256 bit; }
  command SM   { scope = rank; reads = [near]; writes = [near]; effect = softmax; }
  command SC   { scope = all_banks; reads = [row, near]; writes = [acc]; effect = scale; }
  command RED  { scope = all_banks; reads = [acc]; writes = [buf]; effect = reduce; }
  program elementwise { RED(acc = 0, output = 0); }
}
memory m { part = LPDDR4; address_map = [row, bank, column]; pim = u; }
"""


def test_rank_effects_need_rank_state_and_their_arguments(errors):
    text = "\n".join(errors(RANK_UNIT))
    assert "command SM has effect softmax, which needs a command that reads and writes one register file " \
           "placed per rank" in text
    assert "command SC has effect scale, which needs a command that reads [row, <register file placed per rank>]" in text
    assert "RED (reduce) needs the argument(s) stride" in text
    assert "command RED" not in text                     # reduce into a rank file is well declared


# (d) the hbm_pim baseline through the NeuPIMs programs -------------------------------------------
def test_hbm_pim_baseline_prices_attention_by_the_neupims_programs():
    from pimdsl.loops import sub_batch_serving as loop
    system = V.system("gpt3_175b", ["workload.requests=1", "mapping.strategy=hbm_pim"])
    costs = loop.setup(system)[1]
    hbm = next(m for m in system.memories if m.name == "l3_hbm_pim")
    cal = costs.hw.hbm_pim
    # the calibrated price against the programs timed whole: 4 heads (one 1 KB K row each token), GWRITEs in
    whole = ap.head_cycles(hbm, 4096, 128, params={"vectors": 1}, heads=4) * hbm.part.tck_s / 4
    assert cal.head_seconds(4096) == pytest.approx(whole, rel=0.01)
    # 96 heads of each request over 8 GPUs x 64 channels, two requests
    t = costs.hbm_pim_attention(np.array([[4096, 1000]]))
    assert t[0] == pytest.approx(96 * (cal.head_seconds(4096) + cal.head_seconds(1000)) / (8 * 64))
    # below the internal peak ([L3] Table 2: 260.8 TB/s), the tiles' ACT/PRE and GWRITEs taking their share
    assert 0.2 * 260.8e12 < costs.hbm_pim_bandwidth() < 260.8e12


# (e) the traces as workload blocks ---------------------------------------------------------------
def test_workload_overrides_reach_the_systems_workload_among_several():
    """specs/mappings/l3.pim declares Table 4's four traces; `workload.X` still means the system's."""
    s = V.system("gpt3_175b", ["workload.requests=7"])
    assert (s.workload.name, s.workload.requests) == ("l3_openr1", 7)
    s = V.system("gpt_89b", ["l3_gpt_89b.workload=l3_longbench", "workload.requests=7"])
    assert (s.workload.name, s.workload.requests, s.workload.mean_input_len) == ("l3_longbench", 7, 7703.9)


def test_prefilled_requests_run_decode_only_batches():
    """`prefilled = 1` (Fig. 11's decode-only batches): a run's time between tokens is the loop's
    decode iteration at those contexts; the host memory's rows follow its capacity."""
    from pimdsl.loops import sub_batch_serving as loop
    sets = ["workload.distribution=fixed", "workload.input_len=6000", "workload.output_len=2",
            "workload.requests=32", "mapping.params.prefilled=1", "l3_host_mem.capacity=4TiB"]
    system = V.system("gpt_89b", sets)
    assert system.memories[0].organization.rows == 4 * 2**40 // (16 * 4 * 16 * 8192)
    tpot = loop.run(system).report["tpot_s"]
    probe = loop.decode_iteration_s(V.system("gpt_89b", ["workload.requests=1"]), [6001] * 16)   # 2 replicas
    assert tpot == pytest.approx(probe, rel=1e-9)
